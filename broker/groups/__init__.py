"""The classic group coordinator: consumer groups and their committed offsets.

``records`` (the ``__consumer_offsets`` record formats), ``group`` (one
group's members and state) and ``coordinator`` (every operation, driven by
explicit ``now_ms`` arguments) are pure; ``service`` is the asyncio shell that
owns the timers, the ``__consumer_offsets`` partitions and the futures of
requests that wait for a rebalance.
"""

"""The classic group coordinator: consumer groups and their committed offsets.

``group`` (one group's members and state) and ``coordinator`` (every
operation, driven by explicit ``now_ms`` arguments) are pure; ``service`` is
the asyncio shell that owns the timers, the ``__consumer_offsets`` partitions
and the futures of requests that wait for a rebalance. The record formats of
``__consumer_offsets`` live in ``protocol.consumer_offsets``, where
``pybroker dump-log`` (storage) can read them too.
"""

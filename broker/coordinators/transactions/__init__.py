"""The transaction coordinator: transactional ids, their epochs and transactions.

``coordinator`` is pure (every operation takes ``now_ms`` and returns the
effects the IO side must carry out: store a record in ``__transaction_state``,
write markers, allocate a producer id); ``service`` is the asyncio shell that
owns the internal topic, follows its leadership, carries out the effects and
reaches other brokers. The record formats live in ``protocol.transaction_state``.
"""

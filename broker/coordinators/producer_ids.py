"""Producer ids for InitProducerId: blocks the active controller reserves durably in
the metadata log (AllocateProducerIds), handed out one by one, so none is ever
reused. One allocator per broker, shared by idempotent producers (the
InitProducerId handler) and the transaction coordinator."""

from __future__ import annotations

import asyncio

# Ids reserved per AllocateProducerIds call, as Kafka's ProducerIdManager does.
PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdAllocator:
    """Hands out ids from blocks the active controller reserves; one reservation at a time."""

    def __init__(self, controller, broker_id: int):
        self._controller = controller
        self._broker_id = broker_id
        self._block = iter(())
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            for producer_id in self._block:
                return producer_id
            block = await self._controller.allocate_producer_ids(self._broker_id, -1, PRODUCER_ID_BLOCK_SIZE)
            self._block = iter(block)
            return next(self._block)

"""InitProducerId (key 22), versions 0-5.

Idempotent producers (no transactional id) get a fresh producer id at epoch 0
on every call, as Kafka does for them (a producer that asks again with its old
id and epoch, v3+, also gets a new id: without a transactional id there is no
state to bump). Ids come from blocks reserved durably in the metadata log, so
none is ever reused. Transactional ids need a transaction coordinator, which
is not implemented yet: they are answered COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio

from broker.quorum_controller import NotControllerError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[22]
R = struct_classes(API.response)
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


def register(dispatcher, broker) -> None:
    allocator = ProducerIdAllocator(broker.controller, broker.node_id)

    async def handle(ctx, request):
        if request.transactional_id is not None:
            return R.InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1)
        try:
            producer_id = await allocator.next_id()
        except NotControllerError:
            # Kafka answers a failed block allocation with this retriable error.
            return R.InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, producer_id=-1, producer_epoch=-1)
        return R.InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)

    dispatcher.register(API.key, 0, 5, handle)

"""InitProducerId (key 22), versions 0-5.

Idempotent producers (no transactional id) get a fresh producer id at epoch 0
on every call, as Kafka does for them (a producer that asks again with its old
id and epoch, v3+, also gets a new id: without a transactional id there is no
state to bump). Ids come from blocks reserved durably in the metadata log, so
none is ever reused. Transactional ids need a transaction coordinator, which
is not implemented yet: they are answered COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[22]
R = struct_classes(API.response)
PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, controller, broker_id: int):
        self._controller = controller
        self._broker_id = broker_id
        self._block = iter(())

    def next_id(self) -> int:
        for producer_id in self._block:
            return producer_id
        self._block = iter(self._controller.allocate_producer_ids(self._broker_id, PRODUCER_ID_BLOCK_SIZE))
        return next(self._block)


def register(dispatcher, broker) -> None:
    allocator = ProducerIdAllocator(broker.controller, broker.node_id)

    def handle(ctx, request):
        if request.transactional_id is not None:
            return R.InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1)
        return R.InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=allocator.next_id(), producer_epoch=0)

    dispatcher.register(API.key, 0, 5, handle)

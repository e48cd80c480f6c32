"""InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary (keys 83-87), version 0:
the share coordinator's side of KIP-932's share-partition state.

A share-partition's leader asks the leader of its ``__share_group_state``
partition (broker/coordinators/share_groups/service.py). Read answers the
start offset and state batches (UNKNOWN_TOPIC_OR_PARTITION for a
share-partition without state); Write lays the batches and the start offset
over what is held and stores the result as one ShareSnapshot, acks=all,
before it answers. Both fence a topic partition leader epoch older than one
seen (FENCED_LEADER_EPOCH); Write also a state epoch older than the held one
(FENCED_STATE_EPOCH), and Read answers, beside UNKNOWN_TOPIC_OR_PARTITION, the
state epoch the share-partition's next state must have.

The group coordinator asks the others for the share group offset admin APIs
(broker/coordinators/share_groups/offsets.py): ReadShareGroupStateSummary
answers the state epoch, the leader epoch that last wrote and the start offset
(UNKNOWN_TOPIC_OR_PARTITION without state); InitializeShareGroupState sets
the state anew at a start offset with nothing in flight, at a higher state
epoch (FENCED_STATE_EPOCH otherwise); DeleteShareGroupState tombstones it.
Every one answers NOT_COORDINATOR on another broker and
COORDINATOR_LOAD_IN_PROGRESS while the partition loads. Served only while
``share.version`` >= 1 is finalized (UNSUPPORTED_VERSION before), with
CLUSTER_ACTION on the cluster, as Kafka's inter-broker APIs.
"""

from __future__ import annotations

from broker.coordinators.share_groups.service import share_groups_enabled
from broker.security.authorization import cluster_allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

READ = APIS_BY_NAME["ReadShareGroupState"]
WRITE = APIS_BY_NAME["WriteShareGroupState"]
INITIALIZE = APIS_BY_NAME["InitializeShareGroupState"]
DELETE = APIS_BY_NAME["DeleteShareGroupState"]
SUMMARY = APIS_BY_NAME["ReadShareGroupStateSummary"]
RR = struct_classes(READ.response)
WR = struct_classes(WRITE.response)
IR = struct_classes(INITIALIZE.response)
DR = struct_classes(DELETE.response)
SR = struct_classes(SUMMARY.response)


def register(dispatcher, broker) -> None:
    service = broker.shares

    def refusal(ctx) -> ErrorCode | None:
        if not share_groups_enabled(broker):
            return ErrorCode.UNSUPPORTED_VERSION
        if not cluster_allowed(broker, ctx, AclOperation.CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return None

    async def each_partition(request, answer, topic_result) -> list:
        """``topic_result`` per topic of the request, of ``answer(key, partition)``
        per partition, in the request's order."""
        results = []
        for t in request.topics:
            partitions = [await answer((request.group_id, t.topic_id, p.partition), p) for p in t.partitions]
            results.append(topic_result(topic_id=t.topic_id, partitions=partitions))
        return results

    async def read(ctx, request):
        refused = refusal(ctx)

        async def answer(key, p):
            error, durable = (refused, None) if refused else await service.read_state(key, p.leader_epoch)
            state_epoch = durable.state_epoch if durable else (service.next_state_epoch(key) if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else 0)
            return RR.PartitionResult(
                partition=p.partition, error_code=error, error_message=None, state_epoch=state_epoch,
                start_offset=durable.start_offset if durable else -1,
                state_batches=[RR.StateBatch(first_offset=f, last_offset=l, delivery_state=s, delivery_count=c)
                               for f, l, s, c in (durable.batches() if durable else ())],
            )

        return RR.ReadShareGroupStateResponse(results=await each_partition(request, answer, RR.ReadStateResult))

    async def write(ctx, request):
        refused = refusal(ctx)

        async def answer(key, p):
            batches = tuple((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches)
            error = refused or await service.write_state(key, p.leader_epoch, p.start_offset, batches, p.state_epoch)
            return WR.PartitionResult(partition=p.partition, error_code=error, error_message=None)

        return WR.WriteShareGroupStateResponse(results=await each_partition(request, answer, WR.WriteStateResult))

    async def initialize(ctx, request):
        refused = refusal(ctx)

        async def answer(key, p):
            error = refused or await service.initialize_state(key, p.state_epoch, p.start_offset)
            return IR.PartitionResult(partition=p.partition, error_code=error, error_message=None)

        return IR.InitializeShareGroupStateResponse(results=await each_partition(request, answer, IR.InitializeStateResult))

    async def delete(ctx, request):
        refused = refusal(ctx)

        async def answer(key, p):
            error = refused or await service.delete_state(key)
            return DR.PartitionResult(partition=p.partition, error_code=error, error_message=None)

        return DR.DeleteShareGroupStateResponse(results=await each_partition(request, answer, DR.DeleteStateResult))

    async def summary(ctx, request):
        refused = refusal(ctx)

        async def answer(key, p):
            error, state_epoch, leader_epoch, start_offset = (refused, 0, -1, -1) if refused else await service.read_summary(key)
            return SR.PartitionResult(partition=p.partition, error_code=error, error_message=None, state_epoch=state_epoch,
                                      leader_epoch=leader_epoch, start_offset=start_offset)

        return SR.ReadShareGroupStateSummaryResponse(results=await each_partition(request, answer, SR.ReadStateSummaryResult))

    dispatcher.register(INITIALIZE.key, 0, 0, initialize)
    dispatcher.register(READ.key, 0, 0, read)
    dispatcher.register(WRITE.key, 0, 0, write)
    dispatcher.register(DELETE.key, 0, 0, delete)
    dispatcher.register(SUMMARY.key, 0, 0, summary)

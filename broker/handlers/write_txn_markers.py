"""WriteTxnMarkers (key 27), versions 0-1.

Sent by a transaction coordinator to the leaders of the partitions a
transaction wrote to: each marker (producer id and epoch, COMMIT or ABORT,
the coordinator's epoch) is appended as a control batch to every listed
partition this broker leads and answered once the in-sync replicas hold it
(see broker.replica.txn_markers). Errors per partition: UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
REQUEST_TIMED_OUT, TRANSACTION_COORDINATOR_FENCED (a coordinator older than
the one that last wrote a marker for this producer),
INVALID_PRODUCER_EPOCH (an epoch older than the producer's), each leaving the
partition unchanged when the marker was refused. The markers of one request
are appended in request order and wait for replication together.

With an authorizer: ALTER or CLUSTER_ACTION on the cluster (transaction
coordinators, which are brokers), else every partition answers
CLUSTER_AUTHORIZATION_FAILED and nothing is written.

Leadership: only the partition's leader appends a marker (broker.replica.txn_markers
asks the replica manager); a follower, or a broker that does not host the
partition, answers NOT_LEADER_OR_FOLLOWER and changes nothing.
"""

from __future__ import annotations

import asyncio

from broker.replica.txn_markers import TxnMarker, write_markers_here
from broker.security.authorization import cluster_allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["WriteTxnMarkers"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        markers = [
            TxnMarker(
                producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                commit=m.transaction_result,
                coordinator_epoch=m.coordinator_epoch,
                partitions=tuple((t.name, p) for t in m.topics for p in t.partition_indexes),
            )
            for m in request.markers
        ]
        if cluster_allowed(broker, ctx, AclOperation.ALTER) or cluster_allowed(broker, ctx, AclOperation.CLUSTER_ACTION):
            # Tasks start in list order and append before their first await, so the
            # markers land in request order.
            outcomes = await asyncio.gather(*(write_markers_here(broker, m) for m in markers))
        else:
            outcomes = [dict.fromkeys(m.partitions, ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for m in markers]
        results = []
        for marker, request_marker, outcome in zip(markers, request.markers, outcomes):
            results.append(
                R.WritableTxnMarkerResult(
                    producer_id=marker.producer_id,
                    topics=[
                        R.WritableTxnMarkerTopicResult(
                            name=t.name,
                            partitions=[
                                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=outcome[(t.name, p)])
                                for p in t.partition_indexes
                            ],
                        )
                        for t in request_marker.topics
                    ],
                )
            )
        return R.WriteTxnMarkersResponse(markers=results)

    dispatcher.register(API.key, 0, 1, handle)

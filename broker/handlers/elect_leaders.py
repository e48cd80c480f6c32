"""ElectLeaders (key 43), versions 0-2.

On a single node this broker leads every partition, always with its first
(preferred) replica, so no election is ever needed. As Kafka's controller
answers (ReplicationControlManager.electLeaders), a named partition gets
ELECTION_NOT_NEEDED for a preferred election (type 0) when its leader is its
preferred replica and for an unclean election (type 1) when it has a leader;
unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION. A partition
without its preferred replica as leader would answer PREFERRED_LEADER_NOT_AVAILABLE
(that replica is no live broker here) and one without a leader
ELIGIBLE_LEADERS_NOT_AVAILABLE; neither occurs on a single node.

``topic_partitions`` null asks about every partition, and then, like Kafka,
only partitions where something other than ELECTION_NOT_NEEDED happened are
answered: here the result list is empty. v0 has no ``election_type`` and asks
for preferred elections. An unknown election type answers INVALID_REQUEST
for the request (v1+ top-level code) and for every named partition.
``timeout_ms`` is not waited on: nothing is pending after the answer.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[43]
R = struct_classes(API.response)

PREFERRED = 0
UNCLEAN = 1
_ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


def register(dispatcher, broker) -> None:
    def elect(image, topic_name: str, partition_id: int, election_type: int) -> tuple[ErrorCode, str | None]:
        topic = image.topics.get(topic_name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
        partition = topic.partitions.get(partition_id)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition_id}"
        if election_type == PREFERRED:
            if partition.replicas and partition.leader == partition.replicas[0]:
                return ErrorCode.ELECTION_NOT_NEEDED, _ELECTION_NOT_NEEDED_MESSAGE
            strategy = "PreferredReplicaPartitionLeaderElectionStrategy"
            return (
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"Failed to elect leader for partition {topic_name}-{partition_id} under strategy {strategy}",
            )
        if partition.leader >= 0:
            return ErrorCode.ELECTION_NOT_NEEDED, _ELECTION_NOT_NEEDED_MESSAGE
        strategy = "UncleanLeaderElectionStrategy"
        return (
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"Failed to elect leader for partition {topic_name}-{partition_id} under strategy {strategy}",
        )

    def handle(ctx, request):
        election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
        image = broker.image
        if election_type not in (PREFERRED, UNCLEAN):
            message = f"Unknown election type {election_type}"
            results = [
                R.ReplicaElectionResult(
                    topic=t.topic,
                    partition_result=[
                        R.PartitionResult(partition_id=p, error_code=ErrorCode.INVALID_REQUEST, error_message=message)
                        for p in t.partitions
                    ],
                )
                for t in request.topic_partitions or []
            ]
            return R.ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, replica_election_results=results)
        results = []
        if request.topic_partitions is None:
            for topic in image.topics.values():
                acted = []
                for partition_id in sorted(topic.partitions):
                    error, message = elect(image, topic.name, partition_id, election_type)
                    if error != ErrorCode.ELECTION_NOT_NEEDED:
                        acted.append(R.PartitionResult(partition_id=partition_id, error_code=error, error_message=message))
                if acted:
                    results.append(R.ReplicaElectionResult(topic=topic.name, partition_result=acted))
        else:
            for t in request.topic_partitions:
                partition_results = []
                for partition_id in t.partitions:
                    error, message = elect(image, t.topic, partition_id, election_type)
                    partition_results.append(R.PartitionResult(partition_id=partition_id, error_code=error, error_message=message))
                results.append(R.ReplicaElectionResult(topic=t.topic, partition_result=partition_results))
        return R.ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=results)

    dispatcher.register(API.key, 0, 2, handle)

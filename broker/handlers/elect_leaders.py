"""ElectLeaders (key 43), versions 0-2.

The elections are the active controller's (controller/leader_election.py,
Kafka's ReplicationControlManager.electLeaders): a broker forwards the request
there (broker/controller_node/forwarding.py), and the answer comes once the leader changes are
committed to the metadata log. PREFERRED (0) makes a partition's first replica
its leader again when it is in the ISR and usable (ELECTION_NOT_NEEDED when it
already leads, PREFERRED_LEADER_NOT_AVAILABLE when it cannot); UNCLEAN (1)
gives a leaderless partition a leader, out of the ISR if need be
(ELECTION_NOT_NEEDED when it has one, ELIGIBLE_LEADERS_NOT_AVAILABLE when no
replica is usable). Unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION.

``topic_partitions`` null asks about every partition, and then, like Kafka,
only partitions where something other than ELECTION_NOT_NEEDED happened are
answered. v0 has no ``election_type`` and asks for preferred elections. An
unknown election type answers INVALID_REQUEST for the request (v1+ top-level
code) and for every named partition. Where no active controller can be
reached, every partition answers NOT_CONTROLLER (and the v1+ top-level code
too), which clients retry. ``timeout_ms`` is not waited on beyond the commit.

Authorization (with an authorizer): ALTER on the cluster, decided by the broker
the client asked before anything is forwarded; without it the top-level code
(v1+) and every named partition answer CLUSTER_AUTHORIZATION_FAILED.

Leadership: no broker acts on its own replicas here; the controller decides,
and replicas change roles only from the committed metadata.
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.errors import NotControllerError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ElectLeaders"]
R = struct_classes(API.response)

PREFERRED = 0
UNCLEAN = 1


def register(dispatcher, broker) -> None:
    def everyone(request, error: ErrorCode, message: str):
        return [
            R.ReplicaElectionResult(
                topic=t.topic,
                partition_result=[R.PartitionResult(partition_id=p, error_code=error, error_message=message) for p in t.partitions],
            )
            for t in request.topic_partitions or []
        ]

    def authorize(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.ALTER)
        if message is None:
            return None
        error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return refuse_whole(
            lambda: R.ElectLeadersResponse(
                throttle_time_ms=0, error_code=error, replica_election_results=everyone(request, error, message)
            )
        )

    async def handle(ctx, request):
        election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
        if election_type not in (PREFERRED, UNCLEAN):
            message = f"Unknown election type {election_type}"
            return R.ElectLeadersResponse(
                throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, replica_election_results=everyone(request, ErrorCode.INVALID_REQUEST, message)
            )
        targets = None
        if request.topic_partitions is not None:
            targets = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        try:
            outcome = await broker.controller.elect_leaders(election_type, targets)
        except NotControllerError as exc:
            return R.ElectLeadersResponse(
                throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, replica_election_results=everyone(request, ErrorCode.NOT_CONTROLLER, str(exc))
            )
        results = []
        if request.topic_partitions is None:
            by_topic: dict[str, list] = {}
            for (topic, partition_id), (error, message) in outcome.items():
                by_topic.setdefault(topic, []).append(R.PartitionResult(partition_id=partition_id, error_code=error, error_message=message))
            results = [R.ReplicaElectionResult(topic=topic, partition_result=parts) for topic, parts in by_topic.items()]
        else:
            for t in request.topic_partitions:
                parts = []
                for partition_id in t.partitions:
                    error, message = outcome[(t.topic, partition_id)]
                    parts.append(R.PartitionResult(partition_id=partition_id, error_code=error, error_message=message))
                results.append(R.ReplicaElectionResult(topic=t.topic, partition_result=parts))
        return R.ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=results)

    dispatcher.register(API.key, 0, 2, handle, authorize=authorize)

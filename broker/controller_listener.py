"""The controller listener: the APIs controllers serve to each other and to brokers.

Kafka keeps controller traffic on its own listener (``controller.listener.names``):
Raft's Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot of the
``__cluster_metadata`` partition, and DescribeQuorum. Fetch here is the Raft
fetch of the metadata log, not a client fetch, which is why this listener has
a dispatcher of its own.
"""

from __future__ import annotations

from broker.dispatch import Dispatcher
from broker.handlers import api_versions
from controller.raft import wire
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY

DESCRIBE_QUORUM_KEY = 55


def _declared_range(api_key: int) -> tuple[int, int]:
    versions = APIS_BY_KEY[api_key].versions
    return min(versions), max(versions)


def build_controller_dispatcher(broker) -> Dispatcher:
    dispatcher = Dispatcher()

    # The same ApiVersions as the client listener's, listing this dispatcher's handlers.
    api_versions.register(dispatcher, broker)

    def raft_handler(api_key: int):
        async def handle(ctx, request):
            return await broker.raft.handle_request(api_key, ctx.api_version, request, ctx.peer)

        return handle

    for api_key, (low, high) in wire.SERVED_VERSIONS.items():
        dispatcher.register(api_key, low, high, raft_handler(api_key))

    def describe_quorum(ctx, request):
        return describe_quorum_response(broker, ctx.api_version, request)

    low, high = _declared_range(DESCRIBE_QUORUM_KEY)
    dispatcher.register(DESCRIBE_QUORUM_KEY, low, high, describe_quorum)
    return dispatcher


def describe_quorum_response(broker, api_version: int, request):
    """Only the leader knows every replica's progress, so only it answers (as Kafka)."""
    topics = request.topics
    asked_metadata = (
        len(topics) == 1
        and topics[0].topic_name == wire.METADATA_TOPIC
        and [p.partition_index for p in topics[0].partitions] == [wire.METADATA_PARTITION]
    )
    if not asked_metadata:
        return wire.describe_quorum_error(api_version, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, request)
    if not broker.raft.is_leader:
        return wire.describe_quorum_error(api_version, ErrorCode.NOT_LEADER_OR_FOLLOWER, request)
    return wire.describe_quorum_response(broker.raft.describe_quorum(), api_version)

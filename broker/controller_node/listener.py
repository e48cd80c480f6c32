"""The controller listener: the APIs controllers serve to each other and to brokers.

Kafka keeps controller traffic on its own listener (``controller.listener.names``):
Raft's Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot of the
``__cluster_metadata`` partition, DescribeQuorum, the brokers'
BrokerRegistration, BrokerHeartbeat, AllocateProducerIds and AlterPartition
(partition leaders' ISR changes; only this listener serves it), and the admin
requests brokers forward (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments,
AlterUserScramCredentials, AlterClientQuotas, UpdateFeatures, the balancer's DescribeBalancerStatus and
AlterBrokerPlacements, and CreateAcls/DeleteAcls, which brokers check
before sending them on: broker/handlers/acls.py), the cluster link admin APIs and the
brokers' mirror reports MirrorPartitionsStopped and UpdateMirrorTopic
(broker/handlers/cluster_links.py). Fetch here is the Raft
fetch of the metadata log, not a client fetch, which is why this listener has
a dispatcher of its own.
"""

from __future__ import annotations

from broker.coordinators.producer_ids import PRODUCER_ID_BLOCK_SIZE
from broker.handlers import (
    acls,
    alter_broker_placements,
    alter_configs,
    alter_partition_reassignments,
    api_versions,
    client_quotas,
    cluster_links,
    create_partitions,
    create_topics,
    delete_topics,
    describe_balancer,
    elect_leaders,
    incremental_alter_configs,
    list_partition_reassignments,
    scram_credentials,
    update_features,
)
from broker.handlers.describe_quorum import describe_quorum_response
from broker.net.dispatch import Dispatcher
from broker.security.authorization import cluster_allowed, refuse_whole
from controller.authorizer import AclOperation
from controller.errors import NotControllerError
from controller.raft import wire
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY, APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE_QUORUM_KEY = APIS_BY_NAME["DescribeQuorum"].key
BROKER_REGISTRATION_KEY = APIS_BY_NAME["BrokerRegistration"].key
BROKER_HEARTBEAT_KEY = APIS_BY_NAME["BrokerHeartbeat"].key
ALLOCATE_PRODUCER_IDS_KEY = APIS_BY_NAME["AllocateProducerIds"].key
ALTER_PARTITION_KEY = APIS_BY_NAME["AlterPartition"].key
_APID = struct_classes(APIS_BY_KEY[ALLOCATE_PRODUCER_IDS_KEY].response)
_REG = struct_classes(APIS_BY_KEY[BROKER_REGISTRATION_KEY].response)
_HB = struct_classes(APIS_BY_KEY[BROKER_HEARTBEAT_KEY].response)
_AP = struct_classes(APIS_BY_KEY[ALTER_PARTITION_KEY].response)
ASSIGN_REPLICAS_TO_DIRS_KEY = APIS_BY_NAME["AssignReplicasToDirs"].key
_ARD = struct_classes(APIS_BY_KEY[ASSIGN_REPLICAS_TO_DIRS_KEY].response)
_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def build_controller_dispatcher(broker) -> Dispatcher:
    dispatcher = Dispatcher()

    # The same ApiVersions as the client listener's, listing this dispatcher's handlers.
    api_versions.register(dispatcher, broker)

    def needs(operation: int, refused):
        """The pre-authorization hook of a request that needs ``operation`` on the cluster;
        ``refused(ctx)`` is its answer without it."""

        def authorize(ctx, request):
            if cluster_allowed(broker, ctx, operation):
                return None
            return refuse_whole(lambda: refused(ctx))

        return authorize

    def raft_handler(api_key: int):
        async def handle(ctx, request):
            return await broker.raft.handle_request(api_key, ctx.api_version, request, ctx.peer)

        return handle

    for api_key, (low, high) in wire.SERVED_VERSIONS.items():
        dispatcher.register(
            api_key, low, high, raft_handler(api_key),
            authorize=needs(AclOperation.CLUSTER_ACTION, lambda ctx, key=api_key: wire.error_response(key, _DENIED)),
        )

    def describe_quorum(ctx, request):
        return describe_quorum_response(broker, ctx.api_version, request)

    dispatcher.register(
        DESCRIBE_QUORUM_KEY, 0, 2, describe_quorum,
        authorize=needs(AclOperation.DESCRIBE, lambda ctx: wire.describe_quorum_error(ctx.api_version, _DENIED)),
    )

    async def broker_registration(ctx, request):
        return await broker_registration_response(broker, request)

    async def broker_heartbeat(ctx, request):
        return await broker_heartbeat_response(broker, request)

    dispatcher.register(
        BROKER_REGISTRATION_KEY, 0, 4, broker_registration,
        authorize=needs(
            AclOperation.CLUSTER_ACTION,
            lambda ctx: _REG.BrokerRegistrationResponse(throttle_time_ms=0, error_code=_DENIED, broker_epoch=-1),
        ),
    )
    dispatcher.register(
        BROKER_HEARTBEAT_KEY, 0, 1, broker_heartbeat,
        authorize=needs(
            AclOperation.CLUSTER_ACTION,
            lambda ctx: _HB.BrokerHeartbeatResponse(
                throttle_time_ms=0, error_code=_DENIED, is_caught_up=False, is_fenced=True, should_shut_down=False
            ),
        ),
    )

    # The admin requests brokers forward, served by the same handlers as on a
    # broker's client listener (on the active controller they act locally).
    create_topics.register(dispatcher, broker, allow_internal=True)
    alter_configs.register(dispatcher, broker, forwarded=True)
    incremental_alter_configs.register(dispatcher, broker, forwarded=True)
    scram_credentials.register(dispatcher, broker, forwarded=True)
    acls.register(dispatcher, broker, forwarded=True)
    client_quotas.register(dispatcher, broker, forwarded=True)
    cluster_links.register(dispatcher, broker, forwarded=True)
    for module in (
        delete_topics,
        create_partitions,
        elect_leaders,
        alter_partition_reassignments,
        list_partition_reassignments,
        describe_balancer,
        alter_broker_placements,
        update_features,
    ):
        module.register(dispatcher, broker)

    async def allocate_producer_ids(ctx, request):
        try:
            block = await broker.controller.allocate_producer_ids(request.broker_id, request.broker_epoch, PRODUCER_ID_BLOCK_SIZE)
        except NotControllerError:
            return _APID.AllocateProducerIdsResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, producer_id_start=-1, producer_id_len=0)
        return _APID.AllocateProducerIdsResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id_start=block.start, producer_id_len=len(block)
        )

    dispatcher.register(
        ALLOCATE_PRODUCER_IDS_KEY, 0, 0, allocate_producer_ids,
        authorize=needs(
            AclOperation.CLUSTER_ACTION,
            lambda ctx: _APID.AllocateProducerIdsResponse(
                throttle_time_ms=0, error_code=_DENIED, producer_id_start=-1, producer_id_len=0
            ),
        ),
    )

    async def alter_partition(ctx, request):
        # The controller answers NOT_CONTROLLER itself when it is not the active one.
        return await broker.controller.alter_partition(request, ctx.api_version)

    versions = APIS_BY_KEY[ALTER_PARTITION_KEY].versions
    dispatcher.register(
        ALTER_PARTITION_KEY, versions.low, versions.high, alter_partition,
        authorize=needs(AclOperation.CLUSTER_ACTION, lambda ctx: _AP.AlterPartitionResponse(throttle_time_ms=0, error_code=_DENIED, topics=[])),
    )

    async def assign_replicas_to_dirs(ctx, request):
        return await assign_replicas_to_dirs_response(broker, request)

    dispatcher.register(
        ASSIGN_REPLICAS_TO_DIRS_KEY, 0, 0, assign_replicas_to_dirs,
        authorize=needs(
            AclOperation.CLUSTER_ACTION,
            lambda ctx: _ARD.AssignReplicasToDirsResponse(throttle_time_ms=0, error_code=_DENIED, directories=[]),
        ),
    )
    return dispatcher


async def assign_replicas_to_dirs_response(broker, request):
    """AssignReplicasToDirs (KIP-858), answered by the active controller once committed."""
    errors = await broker.controller.assign_replicas_to_dirs(request)
    if None in errors:
        return _ARD.AssignReplicasToDirsResponse(throttle_time_ms=0, error_code=errors[None], directories=[])
    by_dir: dict = {}
    for (directory_id, topic_id, partition), error in errors.items():
        by_dir.setdefault(directory_id, {}).setdefault(topic_id, []).append(
            _ARD.PartitionData(partition_index=partition, error_code=error)
        )
    return _ARD.AssignReplicasToDirsResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        directories=[
            _ARD.DirectoryData(
                id=directory_id,
                topics=[_ARD.TopicData(topic_id=topic_id, partitions=parts) for topic_id, parts in topics.items()],
            )
            for directory_id, topics in by_dir.items()
        ],
    )


async def broker_registration_response(broker, request):
    """BrokerRegistration, answered by the active controller (NOT_CONTROLLER elsewhere)."""
    result = await broker.controller.register_broker(request)
    return _REG.BrokerRegistrationResponse(throttle_time_ms=0, error_code=result.error, broker_epoch=result.broker_epoch)


async def broker_heartbeat_response(broker, request):
    result = await broker.controller.broker_heartbeat(request)
    return _HB.BrokerHeartbeatResponse(
        throttle_time_ms=0,
        error_code=result.error,
        is_caught_up=result.is_caught_up,
        is_fenced=result.is_fenced,
        should_shut_down=result.should_shut_down,
    )

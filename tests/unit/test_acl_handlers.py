"""broker/handlers/acls.py, the authorization config keys, and the principal in RequestContext.

Without an authorizer every ACL API answers SECURITY_DISABLED (Kafka's answer);
with one, the caller needs ALTER (create, delete) or DESCRIBE (describe) on the
cluster; allowed create/delete go to the active controller (sent on by a broker
that is not it, acted on locally otherwise), and the controller listener serves
only those two. ``authorizer.class.name`` accepts only Kafka's StandardAuthorizer,
and a node of a cluster of several needs User:ANONYMOUS among ``super.users``;
``super.users`` must hold principals.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from broker.config import STANDARD_AUTHORIZER, ConfigError, load_config
from broker.handlers import acls
from broker.net.dispatch import Dispatcher, RequestContext
from controller.acl_commands import plan_create_acls, plan_delete_acls
from controller.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAuthorizer
from controller.metadata.delta import apply_records
from controller.metadata.image import AclBinding, MetadataImage
from controller.metadata.records import record_api_key
from protocol.codec import decode_struct, encode_struct
from protocol.errors import ErrorCode
from protocol.framing import encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CREATE, DELETE, DESCRIBE = (APIS_BY_NAME[n] for n in ("CreateAcls", "DeleteAcls", "DescribeAcls"))
CQ, DQ, SQ = (struct_classes(api.request) for api in (CREATE, DELETE, DESCRIBE))
ALICE, BOB, ADMIN = "User:alice", "User:bob", "User:admin"
CLUSTER_ALTER_BOB = AclBinding(
    ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, BOB, "*", AclOperation.ALTER, AclPermissionType.ALLOW
)
TOPIC_READ_ALICE = AclBinding(
    ResourceType.TOPIC, "t", PatternType.LITERAL, ALICE, "*", AclOperation.READ, AclPermissionType.ALLOW
)


def creation(name="t", principal=ALICE):
    return CQ.AclCreation(
        resource_type=ResourceType.TOPIC, resource_name=name, resource_pattern_type=PatternType.LITERAL,
        principal=principal, host="*", operation=AclOperation.READ, permission_type=AclPermissionType.ALLOW,
    )


def delete_filter():
    return DQ.DeleteAclsFilter(
        resource_type_filter=ResourceType.ANY, resource_name_filter=None, pattern_type_filter=PatternType.ANY,
        principal_filter=None, host_filter=None, operation=AclOperation.ANY, permission_type=AclPermissionType.ANY,
    )


def describe_request():
    return SQ.DescribeAclsRequest(
        resource_type_filter=ResourceType.ANY, resource_name_filter=None, pattern_type_filter=PatternType.ANY,
        principal_filter=None, host_filter=None, operation=AclOperation.ANY, permission_type=AclPermissionType.ANY,
    )


class FakeController:
    """The active controller: plans with controller/acl_commands.py and applies at once."""

    def __init__(self, owner):
        self.owner = owner
        self.calls = []

    async def _apply(self, plan, request):
        self.calls.append(request)
        response, records = plan(self.owner.image, request)
        self.owner.image = apply_records(self.owner.image, [(record_api_key(r), r) for r in records], 1)
        if self.owner.authorizer is not None:
            self.owner.authorizer = self.owner.authorizer.with_acls(self.owner.image.acls)
        return response

    async def create_acls(self, request):
        return await self._apply(plan_create_acls, request)

    async def delete_acls(self, request):
        return await self._apply(plan_delete_acls, request)


def make_broker(authorizer, acls_by_id=None):
    broker = SimpleNamespace(authorizer=None, image=MetadataImage(acls=acls_by_id or {}))
    if authorizer is not None:
        broker.authorizer = authorizer.with_acls(broker.image.acls)
    broker.controller = FakeController(broker)
    return broker


def handlers(broker, *, forwarded=False, forwarder=None):
    dispatcher = Dispatcher()
    dispatcher.forwarder = forwarder
    acls.register(dispatcher, broker, forwarded=forwarded)
    return dispatcher


def call(dispatcher, api, request, principal=ALICE, version=None):
    spec = dispatcher.handlers[api.key]
    version = spec.max_version if version is None else version
    ctx = RequestContext(api.key, version, 1, "test", "127.0.0.1:1", None, principal, "127.0.0.1")
    response = spec.handle(ctx, request)
    if asyncio.iscoroutine(response):
        response = asyncio.run(response)
    for v in range(spec.min_version, spec.max_version + 1):  # a valid wire value at every version
        flexible = v in api.flexible
        decoded, _ = decode_struct(api.response, v, flexible, encode_struct(api.response, v, flexible, response))
        assert decoded == response, v
    return response


def test_without_an_authorizer_every_acl_api_answers_security_disabled():
    broker = make_broker(None)
    dispatcher = handlers(broker)
    described = call(dispatcher, DESCRIBE, describe_request())
    assert described.error_code == ErrorCode.SECURITY_DISABLED and described.resources == []
    created = call(dispatcher, CREATE, CQ.CreateAclsRequest(creations=[creation(), creation("u")]))
    assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED] * 2
    deleted = call(dispatcher, DELETE, DQ.DeleteAclsRequest(filters=[delete_filter()]))
    assert [r.error_code for r in deleted.filter_results] == [ErrorCode.SECURITY_DISABLED]
    assert broker.controller.calls == []


def test_without_cluster_permission_the_answers_are_cluster_authorization_failed():
    broker = make_broker(StandardAuthorizer(), {uuid.UUID(int=1): TOPIC_READ_ALICE})
    dispatcher = handlers(broker)
    described = call(dispatcher, DESCRIBE, describe_request(), principal=ALICE)
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    created = call(dispatcher, CREATE, CQ.CreateAclsRequest(creations=[creation()]), principal=ALICE)
    assert [r.error_code for r in created.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    deleted = call(dispatcher, DELETE, DQ.DeleteAclsRequest(filters=[delete_filter(), delete_filter()]), principal=ALICE)
    assert [r.error_code for r in deleted.filter_results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
    assert broker.controller.calls == []
    assert broker.image.acls == {uuid.UUID(int=1): TOPIC_READ_ALICE}


def test_cluster_alter_allows_create_delete_and_describe_and_the_authorizer_follows():
    broker = make_broker(StandardAuthorizer(), {uuid.UUID(int=1): CLUSTER_ALTER_BOB})
    dispatcher = handlers(broker)
    assert not broker.authorizer.authorize(ALICE, "127.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")
    created = call(dispatcher, CREATE, CQ.CreateAclsRequest(creations=[creation()]), principal=BOB)
    assert [r.error_code for r in created.results] == [ErrorCode.NONE]
    assert TOPIC_READ_ALICE in broker.image.acls.values()
    assert broker.authorizer.authorize(ALICE, "127.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")
    # ALTER on the cluster implies DESCRIBE (Kafka's implied operations).
    described = call(dispatcher, DESCRIBE, describe_request(), principal=BOB)
    assert described.error_code == ErrorCode.NONE
    assert {(r.resource_type, r.resource_name) for r in described.resources} == {
        (ResourceType.CLUSTER, "kafka-cluster"), (ResourceType.TOPIC, "t")
    }
    deleted = call(dispatcher, DELETE, DQ.DeleteAclsRequest(filters=[delete_filter()]), principal=BOB)
    assert deleted.filter_results[0].error_code == ErrorCode.NONE
    assert len(deleted.filter_results[0].matching_acls) == 2
    assert broker.image.acls == {}
    # Bob's own ALLOW went with the rest: now he is refused too.
    again = call(dispatcher, DESCRIBE, describe_request(), principal=BOB)
    assert again.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_super_users_and_allow_everyone_pass_the_cluster_check():
    superuser = make_broker(StandardAuthorizer(super_users={ADMIN}))
    assert call(handlers(superuser), DESCRIBE, describe_request(), principal=ADMIN).error_code == ErrorCode.NONE
    assert call(handlers(superuser), DESCRIBE, describe_request(), principal=ALICE).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    everyone = make_broker(StandardAuthorizer(allow_everyone_if_no_acl_found=True))
    assert call(handlers(everyone), DESCRIBE, describe_request(), principal=ALICE).error_code == ErrorCode.NONE


class FakeChannel:
    def __init__(self, answer):
        self.answer = answer
        self.sent = []

    async def send_to_leader(self, api, api_version, body):
        self.sent.append((api.name, api_version))
        return self.answer


def test_a_broker_sends_allowed_changes_to_the_active_controller_after_checking():
    broker = make_broker(StandardAuthorizer(super_users={ADMIN}))
    relayed = acls.create_refused(CQ.CreateAclsRequest(creations=[creation()]), ErrorCode.NONE, None)
    channel = FakeChannel(relayed)
    dispatcher = handlers(broker, forwarder=channel)
    assert call(dispatcher, CREATE, CQ.CreateAclsRequest(creations=[creation()]), principal=ALICE).results[0].error_code == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    assert channel.sent == []
    assert call(dispatcher, CREATE, CQ.CreateAclsRequest(creations=[creation()]), principal=ADMIN, version=2) is relayed
    assert channel.sent == [("CreateAcls", 2)] and broker.controller.calls == []
    # This node became the active controller meanwhile (None): it acts itself.
    channel.answer = None
    deleted = call(dispatcher, DELETE, DQ.DeleteAclsRequest(filters=[delete_filter()]), principal=ADMIN)
    assert deleted.filter_results[0].error_code == ErrorCode.NONE and len(broker.controller.calls) == 1


def test_the_controller_listener_serves_create_and_delete_only():
    dispatcher = handlers(make_broker(None), forwarded=True)
    assert set(dispatcher.handlers) == {CREATE.key, DELETE.key}
    created = call(dispatcher, CREATE, CQ.CreateAclsRequest(creations=[creation()]))
    assert created.results[0].error_code == ErrorCode.SECURITY_DISABLED
    broker = make_broker(StandardAuthorizer())
    created = call(handlers(broker, forwarded=True), CREATE, CQ.CreateAclsRequest(creations=[creation()]), principal="User:ANONYMOUS")
    assert created.results[0].error_code == ErrorCode.NONE and len(broker.controller.calls) == 1


def test_the_quorum_controller_commits_created_and_deleted_acls(tmp_path):
    from controller.topic_commands import ClusterDefaults
    from tests.quorum_harness import SingleVoterController

    c = SingleVoterController(tmp_path, ClusterDefaults(broker_ids=(1,), num_partitions=1, replication_factor=1))
    try:
        seen = []
        c.subscribe(lambda old, new: seen.append(dict(new.acls)))
        created = c.run(c.controller.create_acls(CQ.CreateAclsRequest(creations=[creation(), creation("u")])))
        assert [r.error_code for r in created.results] == [ErrorCode.NONE] * 2
        assert sorted(a.resource_name for a in c.image.acls.values()) == ["t", "u"]
        assert len(seen) == 1 and seen[0] == dict(c.image.acls)  # committed once, then in the image
        deleted = c.run(c.controller.delete_acls(DQ.DeleteAclsRequest(filters=[delete_filter()])))
        assert len(deleted.filter_results[0].matching_acls) == 2 and dict(c.image.acls) == {}
    finally:
        c.close()


def test_list_offsets_refuses_topics_the_caller_may_not_describe():
    from broker.handlers import list_offsets

    api = APIS_BY_NAME["ListOffsets"]
    Q = struct_classes(api.request)
    from broker.replica.manager import LocalReplica

    broker = make_broker(StandardAuthorizer(), {uuid.UUID(int=1): TOPIC_READ_ALICE})
    # Neither topic is in the image: the replica checks answer what the replica manager would.
    broker.replicas = SimpleNamespace(local_replica=lambda *_, **__: LocalReplica(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    dispatcher = Dispatcher()
    list_offsets.register(dispatcher, broker)
    request = Q.ListOffsetsRequest(
        replica_id=-1, isolation_level=0,
        topics=[Q.ListOffsetsTopic(name=n, partitions=[Q.ListOffsetsPartition(partition_index=0, timestamp=-1)]) for n in ("t", "u")],
    )
    codes = lambda principal: [
        t.partitions[0].error_code for t in call(dispatcher, api, request, principal=principal, version=7).topics
    ]
    # Neither topic exists: READ on "t" implies DESCRIBE, so only the existence is answered there.
    assert codes(ALICE) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert codes(BOB) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2


# ----------------------------------------------------------------------------- config


def test_only_the_standard_authorizer_is_accepted():
    config = load_config({"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}, warn=lambda _: None)
    assert config["authorizer.class.name"] == STANDARD_AUTHORIZER
    for other in ("kafka.security.authorizer.AclAuthorizer", "com.example.MyAuthorizer"):
        with pytest.raises(ConfigError, match="is not supported"):
            load_config({"authorizer.class.name": other}, warn=lambda _: None)
    config = load_config({"authorizer.class.name": "", "super.users": "User:a; User:b", "allow.everyone.if.no.acl.found": "true"}, warn=lambda _: None)
    assert config["authorizer.class.name"] is None
    assert config["allow.everyone.if.no.acl.found"] is True and config["super.users"] == "User:a; User:b"
    with pytest.raises(ConfigError, match="super.users"):
        load_config({"super.users": "alice"}, warn=lambda _: None)


def _node(node_id: int, roles: str, voters: str, **extra) -> dict:
    listeners = {
        "broker,controller": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{9300 + node_id}",
        "controller": f"CONTROLLER://127.0.0.1:{9300 + node_id}",
        "broker": "PLAINTEXT://127.0.0.1:0",
    }[roles]
    return {
        "node.id": str(node_id), "process.roles": roles, "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER", "listeners": listeners,
        "authorizer.class.name": STANDARD_AUTHORIZER, **extra,
    }


@pytest.mark.parametrize(
    "raw",
    [
        _node(1, "broker,controller", "1@127.0.0.1:9301,2@127.0.0.1:9302,3@127.0.0.1:9303"),
        _node(1, "controller", "1@127.0.0.1:9301"),
        _node(2, "broker", "1@127.0.0.1:9301"),
        _node(2, "broker", "1@127.0.0.1:9301", **{"super.users": "User:admin"}),
    ],
    ids=["combined-of-three", "controller-only", "broker-only", "super-users-without-anonymous"],
)
def test_a_node_of_several_needs_anonymous_among_super_users(raw):
    """Nodes reach each other as User:ANONYMOUS: without it among super.users their
    CLUSTER_ACTION requests would be refused, so such a config does not start."""
    with pytest.raises(ConfigError, match="super.users: must include User:ANONYMOUS"):
        load_config(raw, warn=lambda _: None)
    fixed = dict(raw, **{"super.users": "User:admin;User:ANONYMOUS"})
    assert load_config(fixed, warn=lambda _: None)["authorizer.class.name"] == STANDARD_AUTHORIZER


def test_a_node_alone_needs_no_anonymous_super_user():
    # The in-process quorum of one, and a combined node that is its quorum's only voter.
    load_config({"authorizer.class.name": STANDARD_AUTHORIZER}, warn=lambda _: None)
    load_config(_node(1, "broker,controller", "1@127.0.0.1:9301"), warn=lambda _: None)


# ----------------------------------------------------------------------------- the request context


def test_the_request_context_carries_the_connections_principal_and_host():
    seen = []
    dispatcher = Dispatcher()
    dispatcher.register(CREATE.key, 0, 3, lambda ctx, request: seen.append(ctx) or acls.create_refused(request, 0, None))
    frame = encode_request(CREATE, 1, 9, "cli", CQ.CreateAclsRequest(creations=[]))[4:]

    class Connection:
        peer = "10.0.0.1:5000"
        listener_name = "SASL"
        principal = BOB
        peer_host = "10.0.0.1"

    class Plain:
        peer = "x"

    asyncio.run(dispatcher.handle_frame(frame, Connection()))
    asyncio.run(dispatcher.handle_frame(frame, Plain()))
    assert (seen[0].principal, seen[0].host, seen[0].listener) == (BOB, "10.0.0.1", "SASL")
    assert (seen[1].principal, seen[1].host) == ("User:ANONYMOUS", "")

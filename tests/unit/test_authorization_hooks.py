"""The dispatcher's pre-authorization hooks (broker/net/dispatch.py, broker/security/authorization.py).

A hook runs before a request is forwarded to the active controller or handled
here: only the part the caller may do goes on (nothing, and no handler runs,
when nothing is allowed), and the client's answer has the refused entries back
in the request's order. Checked with the real hooks of CreatePartitions,
CreateTopics and ElectLeaders over a fake broker whose authorizer holds ACLs,
on both paths (forwarded, and handled locally, synchronously or with
AnswerLater).
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from broker.handlers import create_partitions, create_topics, elect_leaders
from broker.net.dispatch import AnswerLater, Dispatcher
from broker.security.authorization import Partial, refill, split_entries
from controller.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAuthorizer
from controller.metadata.image import AclBinding
from protocol.errors import ErrorCode
from protocol.framing import decode_response, encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CP = APIS_BY_NAME["CreatePartitions"]
CT = APIS_BY_NAME["CreateTopics"]
EL = APIS_BY_NAME["ElectLeaders"]
CPQ, CPR = struct_classes(CP.request), struct_classes(CP.response)
CTQ, CTR = struct_classes(CT.request), struct_classes(CT.response)
ELQ = struct_classes(EL.request)
ALICE = "User:alice"


def acl(resource_type, name, operation, principal=ALICE):
    return AclBinding(resource_type, name, PatternType.LITERAL, principal, "*", operation, AclPermissionType.ALLOW)


def fake_broker(*bindings, authorizer=True):
    authorizer_ = StandardAuthorizer(super_users={"User:admin"}).with_acls({uuid.uuid4(): b for b in bindings})
    return SimpleNamespace(authorizer=authorizer_ if authorizer else None, image=SimpleNamespace(topics={}))


class Connection:
    peer = "127.0.0.1:1"
    listener_name = "SASL_PLAINTEXT"
    peer_host = "127.0.0.1"

    def __init__(self, principal):
        self.principal = principal


class Forwarder:
    """Records what would go to the active controller and answers for it (None: act locally)."""

    def __init__(self, answer):
        self.answer = answer
        self.sent = []

    async def forward(self, api, api_version, body):
        self.sent.append(body)
        return self.answer(body) if self.answer is not None else None


def run(dispatcher, api, version, request, principal=ALICE):
    frame = encode_request(api, version, 7, "test", request)[4:]
    out = asyncio.run(dispatcher.handle_frame(frame, Connection(principal)))
    assert not isinstance(out, asyncio.Task), "not pipelined here"
    correlation_id, response = decode_response(api, version, bytes(out)[4:])
    assert correlation_id == 7
    return response


def partitions_request(*names):
    return CPQ.CreatePartitionsRequest(
        topics=[CPQ.CreatePartitionsTopic(name=n, count=3, assignments=None) for n in names], timeout_ms=1000, validate_only=False
    )


def answered_ok(request):
    return CPR.CreatePartitionsResponse(
        throttle_time_ms=0,
        results=[CPR.CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.NONE, error_message=None) for t in request.topics],
    )


def partitions_dispatcher(broker, handle, forwarder=None):
    dispatcher = Dispatcher()
    dispatcher.register(CP.key, 0, 3, handle, authorize=lambda ctx, request: create_partitions.authorize(broker, ctx, request))
    if forwarder is not None:
        dispatcher.forwarder = forwarder
        dispatcher.forwarded_keys = frozenset({CP.key})
    return dispatcher


def test_only_the_allowed_part_is_forwarded_and_the_refusals_come_back_in_order():
    broker = fake_broker(acl(ResourceType.TOPIC, "b", AclOperation.ALTER), acl(ResourceType.TOPIC, "d", AclOperation.ALTER))
    forwarder = Forwarder(answered_ok)
    handled = []
    dispatcher = partitions_dispatcher(broker, lambda ctx, request: handled.append(request), forwarder)
    response = run(dispatcher, CP, 3, partitions_request("a", "b", "c", "d"))
    assert [t.name for t in forwarder.sent[0].topics] == ["b", "d"]
    assert not handled, "the controller answered: no local handler"
    assert [(r.name, r.error_code) for r in response.results] == [
        ("a", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("b", ErrorCode.NONE),
        ("c", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("d", ErrorCode.NONE),
    ]


def test_nothing_allowed_sends_nothing_and_runs_no_handler():
    forwarder = Forwarder(answered_ok)
    handled = []
    dispatcher = partitions_dispatcher(fake_broker(), lambda ctx, request: handled.append(request), forwarder)
    response = run(dispatcher, CP, 3, partitions_request("a", "b"))
    assert forwarder.sent == [] and handled == []
    assert [(r.name, r.error_code) for r in response.results] == [("a", ErrorCode.TOPIC_AUTHORIZATION_FAILED)] * 1 + [
        ("b", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]
    # A super user, or no authorizer at all, changes nothing: the whole request goes on.
    forwarder = Forwarder(answered_ok)
    response = run(partitions_dispatcher(fake_broker(), None, forwarder), CP, 3, partitions_request("a", "b"), principal="User:admin")
    assert [t.name for t in forwarder.sent[0].topics] == ["a", "b"]
    forwarder = Forwarder(answered_ok)
    run(partitions_dispatcher(fake_broker(authorizer=False), None, forwarder), CP, 3, partitions_request("a", "b"))
    assert [t.name for t in forwarder.sent[0].topics] == ["a", "b"]


def test_the_local_handler_gets_the_allowed_part_sync_async_and_answer_later():
    broker = fake_broker(acl(ResourceType.TOPIC, "b", AclOperation.ALTER))
    seen = []

    def sync(ctx, request):
        seen.append([t.name for t in request.topics])
        return answered_ok(request)

    async def later_answer(request):
        return answered_ok(request)

    def later(ctx, request):
        seen.append([t.name for t in request.topics])
        return AnswerLater(later_answer(request))

    async def asynchronous(ctx, request):
        return sync(ctx, request)

    for handle in (sync, later, asynchronous):
        # The forwarder declines (this node is the controller): the handler acts.
        response = run(partitions_dispatcher(broker, handle, Forwarder(None)), CP, 3, partitions_request("a", "b", "c"))
        assert [(r.name, r.error_code) for r in response.results] == [
            ("a", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("b", ErrorCode.NONE), ("c", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ], handle.__name__
    assert seen == [["b"], ["b"], ["b"]]


def test_create_topics_needs_create_and_hides_configs_without_describe_configs():
    broker = fake_broker(
        acl(ResourceType.TOPIC, "seen", AclOperation.CREATE),
        acl(ResourceType.TOPIC, "seen", AclOperation.DESCRIBE_CONFIGS),
        acl(ResourceType.TOPIC, "blind", AclOperation.CREATE),
    )

    def created(request):
        return CTR.CreateTopicsResponse(
            throttle_time_ms=0,
            topics=[
                CTR.CreatableTopicResult(
                    name=t.name, topic_id=uuid.uuid4(), error_code=ErrorCode.NONE, error_message=None, num_partitions=1,
                    replication_factor=1, configs=[CTR.CreatableTopicConfigs(name="cleanup.policy", value="delete", read_only=False, config_source=5, is_sensitive=False)],
                )
                for t in request.topics
            ],
        )

    forwarder = Forwarder(created)
    dispatcher = Dispatcher()
    dispatcher.register(CT.key, 2, 7, None, authorize=lambda ctx, request: create_topics.authorize(broker, ctx, request))
    dispatcher.forwarder, dispatcher.forwarded_keys = forwarder, frozenset({CT.key})
    request = CTQ.CreateTopicsRequest(
        topics=[CTQ.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[]) for n in ("no", "seen", "blind")],
        timeout_ms=1000, validate_only=False,
    )
    response = run(dispatcher, CT, 7, request)
    assert [t.name for t in forwarder.sent[0].topics] == ["seen", "blind"]
    by_name = {t.name: t for t in response.topics}
    assert [t.name for t in response.topics] == ["no", "seen", "blind"]
    assert (by_name["no"].error_code, by_name["no"].error_message) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
    assert (by_name["seen"].topic_config_error_code, by_name["seen"].num_partitions, len(by_name["seen"].configs)) == (0, 1, 1)
    blind = by_name["blind"]
    assert (blind.error_code, blind.topic_config_error_code, blind.num_partitions, blind.replication_factor, blind.configs) == (
        ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, []
    )
    # CREATE on the cluster allows every topic.
    broker.authorizer = broker.authorizer.with_acls({uuid.uuid4(): acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CREATE)})
    forwarder.sent.clear()
    run(dispatcher, CT, 7, request)
    assert [t.name for t in forwarder.sent[0].topics] == ["no", "seen", "blind"]


def test_a_cluster_refusal_answers_every_partition_without_forwarding():
    broker = fake_broker()
    forwarder = Forwarder(lambda body: (_ for _ in ()).throw(AssertionError("forwarded")))
    dispatcher = Dispatcher()
    elect_leaders.register(dispatcher, broker)
    dispatcher.forwarder, dispatcher.forwarded_keys = forwarder, frozenset({EL.key})
    request = ELQ.ElectLeadersRequest(
        election_type=0, topic_partitions=[ELQ.TopicPartitions(topic="t", partitions=[0, 1])], timeout_ms=1000
    )
    response = run(dispatcher, EL, 2, request)
    assert forwarder.sent == []
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [(p.partition_id, p.error_code) for r in response.replica_election_results for p in r.partition_result] == [
        (0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), (1, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    ]


@given(st.lists(st.booleans(), max_size=20), st.integers(min_value=-3, max_value=3))
def test_refill_keeps_every_entry_and_the_refusals_places(kept, surplus):
    refused = [("refused", i) for i, keep in enumerate(kept) if not keep]
    n_answered = max(0, sum(kept) + surplus)
    answered = [("answered", i) for i in range(n_answered)]
    out = refill(kept, refused, answered)
    assert sorted(out) == sorted(refused + answered)
    assert [e for e in out if e[0] == "answered"] == answered  # their own order kept
    if n_answered >= sum(kept):
        # Every slot filled: a refused entry sits exactly where its request entry was.
        for position, entry in enumerate(out[: len(kept)]):
            assert (entry[0] == "refused") == (not kept[position])


def test_split_entries_without_refusals_or_finish_changes_nothing():
    request = partitions_request("a")
    assert split_entries(request, "topics", lambda t: None, "results", lambda: None) is None
    partial = split_entries(request, "topics", lambda t: None, "results", lambda: None, finish=lambda r: r)
    assert isinstance(partial, Partial) and partial.request == request and partial.request is not request

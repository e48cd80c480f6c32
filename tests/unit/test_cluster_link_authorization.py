"""Who may use the cluster link APIs (broker/handlers/cluster_links.py), decided by the
broker a client asked before anything is forwarded: ALTER on the cluster for the link
APIs (DESCRIBE to describe), CREATE on the cluster or the topic for a mirror, ALTER on
the topic to pause, resume, promote or fail it over, CLUSTER_ACTION for the brokers'
reports on the controller listener. Real hooks and dispatcher, a fake broker."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from broker.handlers import cluster_links
from broker.net.dispatch import Dispatcher
from controller.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAuthorizer
from controller.metadata.image import AclBinding, MetadataImage
from protocol.errors import ErrorCode
from protocol.framing import decode_response, encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

ALICE = "User:alice"
CL, DE, AM, CM, ST = (APIS_BY_NAME[n] for n in (
    "CreateClusterLinks", "DescribeClusterLinks", "AlterMirrors", "CreateMirrorTopics", "MirrorPartitionsStopped"))
_CL, _AM, _CM, _ST = (struct_classes(api.request) for api in (CL, AM, CM, ST))
_AMR, _CMR = struct_classes(AM.response), struct_classes(CM.response)


def acl(resource_type, name, operation):
    return AclBinding(resource_type, name, PatternType.LITERAL, ALICE, "*", operation, AclPermissionType.ALLOW)


class Connection:
    peer = "127.0.0.1:1"
    listener_name = "SASL_PLAINTEXT"
    peer_host = "127.0.0.1"
    principal = ALICE


class Forwarder:
    def __init__(self, answer):
        self.answer = answer
        self.sent = []

    async def forward(self, api, api_version, body):
        self.sent.append(body)
        return self.answer(body)


def dispatcher_for(*bindings, forwarded=False, answer=None):
    authorizer = StandardAuthorizer(super_users={"User:admin"}).with_acls({uuid.uuid4(): b for b in bindings})
    broker = SimpleNamespace(authorizer=authorizer, image=MetadataImage(), controller=SimpleNamespace(), node_id=1)
    dispatcher = Dispatcher()
    cluster_links.register(dispatcher, broker, forwarded=forwarded)
    forwarder = Forwarder(answer or (lambda body: None))
    dispatcher.forwarder = forwarder
    dispatcher.forwarded_keys = cluster_links.FORWARDED_LINK_API_KEYS
    return dispatcher, forwarder


def run(dispatcher, api, request):
    frame = encode_request(api, 0, 7, "test", request)[4:]
    out = asyncio.run(dispatcher.handle_frame(frame, Connection()))
    return decode_response(api, 0, bytes(out)[4:])[1]


def create_link_request():
    return _CL.CreateClusterLinksRequest(links=[_CL.CreatableLink(link_name="east", configs=[])], validate_only=False, timeout_ms=1)


def test_link_admin_needs_alter_on_the_cluster():
    dispatcher, forwarder = dispatcher_for()
    response = run(dispatcher, CL, create_link_request())
    assert response.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and forwarder.sent == []
    answered = struct_classes(CL.response).CreateClusterLinksResponse(throttle_time_ms=0, results=[])
    dispatcher, forwarder = dispatcher_for(acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER),
                                           answer=lambda body: answered)
    run(dispatcher, CL, create_link_request())
    assert len(forwarder.sent) == 1


def test_describing_links_needs_describe_on_the_cluster():
    dispatcher, _ = dispatcher_for()
    response = run(dispatcher, DE, struct_classes(DE.request).DescribeClusterLinksRequest(link_names=None))
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    dispatcher, _ = dispatcher_for(acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.DESCRIBE))
    response = run(dispatcher, DE, struct_classes(DE.request).DescribeClusterLinksRequest(link_names=None))
    assert response.error_code == ErrorCode.NONE and response.results == []


def test_mirror_operations_need_alter_on_each_topic():
    def answer(body):
        return _AMR.AlterMirrorsResponse(throttle_time_ms=0, results=[
            _AMR.AlterMirrorResult(mirror_topic=t, error_code=ErrorCode.NONE, error_message=None) for t in body.topics
        ])

    dispatcher, forwarder = dispatcher_for(acl(ResourceType.TOPIC, "b", AclOperation.ALTER), answer=answer)
    response = run(dispatcher, AM, _AM.AlterMirrorsRequest(operation=2, topics=["a", "b"], validate_only=False))
    assert forwarder.sent[0].topics == ["b"]
    assert [(r.mirror_topic, r.error_code) for r in response.results] == [
        ("a", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("b", ErrorCode.NONE),
    ]


def test_mirror_creation_needs_create_on_the_topic_or_the_cluster():
    def answer(body):
        return _CMR.CreateMirrorTopicsResponse(throttle_time_ms=0, results=[
            _CMR.CreatableMirrorResult(mirror_topic=t.mirror_topic, topic_id=uuid.UUID(int=1), num_partitions=1,
                                       error_code=ErrorCode.NONE, error_message=None) for t in body.topics
        ])

    def request():
        return _CM.CreateMirrorTopicsRequest(topics=[
            _CM.CreatableMirror(mirror_topic=t, link_name="east", source_topic=None, replication_factor=-1, configs=[])
            for t in ("m", "n")
        ], validate_only=False, timeout_ms=1)

    dispatcher, forwarder = dispatcher_for(acl(ResourceType.TOPIC, "n", AclOperation.CREATE), answer=answer)
    response = run(dispatcher, CM, request())
    assert [t.mirror_topic for t in forwarder.sent[0].topics] == ["n"]
    assert [r.error_code for r in response.results] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.NONE]
    dispatcher, forwarder = dispatcher_for(acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CREATE), answer=answer)
    run(dispatcher, CM, request())
    assert [t.mirror_topic for t in forwarder.sent[0].topics] == ["m", "n"]


def test_stop_reports_need_cluster_action_on_the_controller_listener():
    dispatcher, _ = dispatcher_for(acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER), forwarded=True)
    response = run(dispatcher, ST, _ST.MirrorPartitionsStoppedRequest(broker_id=1, broker_epoch=1, topics=[]))
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

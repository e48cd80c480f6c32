"""ACL enforcement with real clients, against an in-process broker with an authorizer.

The broker is configured with Kafka's ``authorizer.class.name`` and
``super.users=User:admin``; it runs in-process so a test can change
``allow.everyone.if.no.acl.found`` on the live authorizer. Clients authenticate over
SASL_PLAINTEXT with PLAIN as admin (a super user), alice and bob, so each
has its own principal. ACLs are made with CreateAcls through confluent-kafka's
AdminClient as admin; the authorizer follows the image, so each takes effect
once committed.

Covered: Produce (WRITE), Fetch and consumer groups (READ on topic and group),
Metadata hiding topics the caller may not DESCRIBE and refusing auto-creation
without CREATE, ListOffsets, super users, DENY over ALLOW, prefixed ACLs,
``allow.everyone.if.no.acl.found``, and the ACL APIs' own CLUSTER checks.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.app import Broker
from broker.config import STANDARD_AUTHORIZER, load_config

TIMEOUT_S = 30
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret", "dave": "dave-secret"}


class InProcessBroker:
    """A Broker on its own event loop thread."""

    def __init__(self, tmp_path):
        jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
            f'user_{u}="{p}"' for u, p in USERS.items()
        ) + ";"
        config = load_config(
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
                "log.dirs": str(tmp_path / "logs"),
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
                "share.coordinator.state.topic.replication.factor": "1",
                "share.coordinator.state.topic.min.isr": "1",
                "group.initial.rebalance.delay.ms": "0",
                "authorizer.class.name": STANDARD_AUTHORIZER,
                "super.users": "User:admin",
            },
            warn=lambda _: None,
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.broker = self.call(self._make(config))
        self.bootstrap = f"127.0.0.1:{self.broker.bound_ports['SASL_PLAINTEXT']}"

    async def _make(self, config):
        broker = Broker(config)
        await broker.start()
        return broker

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    def set_allow_everyone(self, value: bool) -> None:
        async def change():
            a = self.broker.authorizer
            self.broker.authorizer = a.with_config(super_users=a.super_users, allow_everyone_if_no_acl_found=value)

        self.call(change())

    def close(self) -> None:
        try:
            self.call(self.broker.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = InProcessBroker(tmp_path_factory.mktemp("authz"))
    yield broker
    broker.close()


def settings(broker, user: str, **extra) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        **extra,
    }


def admin_of(broker, user: str = "admin") -> AdminClient:
    return AdminClient(settings(broker, user))


def acl(resource_type, name, principal, operation, permission=AclPermissionType.ALLOW, pattern=ResourcePatternType.LITERAL):
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def add_acls(broker, *bindings) -> None:
    admin = admin_of(broker)  # kept until the answers are in: a collected client cancels them
    for future in admin.create_acls(list(bindings), request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def remove_acls(broker, *bindings) -> None:
    filters = [
        AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
        for b in bindings
    ]
    admin = admin_of(broker)
    for future in admin.delete_acls(filters, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def new_topic(broker, prefix: str = "authz") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = admin_of(broker)
    for future in admin.create_topics([NewTopic(name, 1, 1)], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)
    return name


def produce_error(broker, user: str, topic: str):
    """The delivery error of one message (None when delivered)."""
    outcome = []
    producer = Producer(settings(broker, user, **{"message.timeout.ms": 8000, "allow.auto.create.topics": False}))
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert outcome, "no delivery report"
    return outcome[0]


def consume(broker, user: str, topic: str, group: str, *, subscribe: bool = False, count: int = 1):
    """(values, error code or None): reads from the start of partition 0 (assigned, or
    subscribed as a member of ``group``; librdkafka visits the group's coordinator either way)."""
    consumer = Consumer(
        settings(broker, user, **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    )
    values, error = [], None
    try:
        if not subscribe:
            consumer.assign([TopicPartition(topic, 0, 0)])
        else:
            consumer.subscribe([topic])
        for _ in range(30):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                error = message.error().code()
                break
            values.append(message.value())
            if len(values) >= count:
                break
        if subscribe and values:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values, error


def test_produce_needs_write_and_the_authorizer_follows_the_image(secured):
    topic = new_topic(secured)
    assert produce_error(secured, "admin", topic) is None  # a super user needs no ACL
    assert produce_error(secured, "alice", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    write = acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)
    add_acls(secured, write)
    assert produce_error(secured, "alice", topic) is None
    assert produce_error(secured, "bob", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    remove_acls(secured, write)
    assert produce_error(secured, "alice", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_fetch_and_groups_need_read(secured):
    topic = new_topic(secured)
    assert produce_error(secured, "admin", topic) is None
    group = f"grp-{uuid.uuid4().hex[:6]}"
    values, error = consume(secured, "alice", topic, group)
    assert values == [] and error == KafkaError.GROUP_AUTHORIZATION_FAILED
    # DESCRIBE lets the consumer find the partition (Metadata), not read it (Fetch).
    add_acls(
        secured,
        acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ),
        acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.DESCRIBE),
    )
    values, error = consume(secured, "alice", topic, group)
    assert values == [] and error == KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ))
    assert consume(secured, "alice", topic, group) == ([b"v"], None)
    assert consume(secured, "alice", topic, group, subscribe=True) == ([b"v"], None)
    admin = admin_of(secured)
    committed = admin.list_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
    )[group].result(timeout=TIMEOUT_S)
    assert [(tp.topic, tp.offset) for tp in committed.topic_partitions] == [(topic, 1)]


def test_metadata_hides_topics_and_auto_creation_needs_create(secured):
    seen = new_topic(secured, "seen")
    hidden = new_topic(secured, "hidden")
    add_acls(secured, acl(ResourceType.TOPIC, seen, "User:bob", AclOperation.DESCRIBE))
    topics = admin_of(secured, "bob").list_topics(timeout=TIMEOUT_S).topics
    assert seen in topics and hidden not in topics
    assert hidden in admin_of(secured).list_topics(timeout=TIMEOUT_S).topics
    named = admin_of(secured, "bob").list_topics(hidden, timeout=TIMEOUT_S).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Auto-creation: DESCRIBE alone does not create; CREATE on the topic does.
    wanted = f"auto-{uuid.uuid4().hex[:8]}"
    add_acls(secured, acl(ResourceType.TOPIC, wanted, "User:bob", AclOperation.DESCRIBE))
    producer = Producer(settings(secured, "bob"))
    refused = producer.list_topics(wanted, timeout=TIMEOUT_S).topics[wanted]
    assert refused.error is not None and refused.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert wanted not in admin_of(secured).list_topics(timeout=TIMEOUT_S).topics
    add_acls(secured, acl(ResourceType.TOPIC, wanted, "User:bob", AclOperation.CREATE))
    producer.list_topics(wanted, timeout=TIMEOUT_S)
    assert wanted in admin_of(secured).list_topics(timeout=TIMEOUT_S).topics


def test_deny_wins_and_prefixed_acls_apply(secured):
    prefix = f"pfx-{uuid.uuid4().hex[:6]}"
    topic = new_topic(secured, prefix)
    add_acls(
        secured,
        acl(ResourceType.TOPIC, prefix, "User:*", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE, AclPermissionType.DENY),
    )
    assert produce_error(secured, "alice", topic) is None
    assert produce_error(secured, "bob", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    other = new_topic(secured, "elsewhere")
    assert produce_error(secured, "alice", other).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_list_offsets_needs_describe(secured):
    # librdkafka asks Metadata first, which DESCRIBE also guards: the partition
    # stays unknown to it (ListOffsets' own refusal: tests/unit/test_acl_handlers.py).
    topic = new_topic(secured)
    consumer = Consumer(settings(secured, "bob", **{"group.id": "unused"}))
    try:
        with pytest.raises(KafkaException) as raised:
            consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert raised.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    finally:
        consumer.close()
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.DESCRIBE))
    consumer = Consumer(settings(secured, "bob", **{"group.id": "unused"}))  # a fresh metadata cache
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    finally:
        consumer.close()


def test_acl_apis_need_cluster_permissions(secured):
    binding = acl(ResourceType.TOPIC, "x", "User:alice", AclOperation.READ)
    alice = admin_of(secured, "alice")
    with pytest.raises(KafkaException) as raised:
        alice.create_acls([binding], request_timeout=TIMEOUT_S)[binding].result(timeout=TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)
    admin = admin_of(secured)
    described = admin.describe_acls(every, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert described, "the super user sees the ACLs the other tests made"


def test_allow_everyone_if_no_acl_found(secured):
    topic = new_topic(secured)
    assert produce_error(secured, "bob", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    secured.set_allow_everyone(True)
    try:
        assert produce_error(secured, "bob", topic) is None
        # An ACL on the topic, even for someone else, ends "no ACL found".
        add_acls(secured, acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE))
        assert produce_error(secured, "bob", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        secured.set_allow_everyone(False)

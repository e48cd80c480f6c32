"""Authorization of the admin, cluster and transaction APIs, a denied and an allowed principal each.

Against an in-process broker with ``authorizer.class.name`` and
``super.users=User:admin`` (tests/interop/test_authorization.py's), over
SASL_PLAINTEXT with PLAIN: confluent-kafka's AdminClient and producers where
librdkafka has the API, else raw requests on a SASL-authenticated socket. Each
test first shows the refusal with Kafka's error code, then the same call
succeeding once the ACL that Kafka's checks ask for is created (as admin).
The same hooks on a broker that forwards to another node's controller:
tests/cluster/test_authorization_forwarding.py.
"""

from __future__ import annotations

import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, Array, Struct, struct_classes
from tests.interop._support import RawConnection
from tests.interop.test_authorization import (
    TIMEOUT_S,
    USERS,
    InProcessBroker,
    acl,
    add_acls,
    admin_of,
    new_topic,
    settings,
)

HANDSHAKE, AUTHENTICATE = APIS_BY_NAME["SaslHandshake"], APIS_BY_NAME["SaslAuthenticate"]


def build(struct: Struct, fields: dict):
    """A request value from plain dicts and lists, nested structs made by the schema."""

    def value(kind, given):
        if isinstance(kind, Array) and given is not None:
            return [value(kind.item, item) for item in given]
        if isinstance(kind, Struct) and isinstance(given, dict):
            return build(kind, given)
        return given

    types = {f.name: f.type for f in struct.fields}
    return struct.cls(**{name: value(types[name], given) for name, given in fields.items()})


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = InProcessBroker(tmp_path_factory.mktemp("authz-apis"))
    yield broker
    broker.close()


class Raw:
    """A raw connection authenticated with SASL PLAIN as ``user`` (``broker``: one with a
    ``bootstrap``, or "host:port" of a SASL_PLAINTEXT listener)."""

    def __init__(self, broker, user: str):
        self.connection = RawConnection(broker)
        handshake = self.connection.request(HANDSHAKE, 1, struct_classes(HANDSHAKE.request).SaslHandshakeRequest(mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.NONE
        auth_bytes = b"\x00" + user.encode() + b"\x00" + USERS[user].encode()
        answer = self.connection.request(AUTHENTICATE, 2, struct_classes(AUTHENTICATE.request).SaslAuthenticateRequest(auth_bytes=auth_bytes))
        assert answer.error_code == ErrorCode.NONE, answer

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.connection.close()

    def request(self, name: str, version: int, **fields):
        found = APIS_BY_NAME[name]
        return self.connection.request(found, version, build(found.request, fields))


def raw(broker, user: str, name: str, version: int, **fields):
    with Raw(broker, user) as connection:
        return connection.request(name, version, **fields)


def error_of(future) -> int:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    return raised.value.args[0].code()


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------------------- topics


def test_create_topics_needs_create(secured):
    name = uniq("ct")
    alice = admin_of(secured, "alice")
    assert error_of(alice.create_topics([NewTopic(name, 1, 1)], request_timeout=TIMEOUT_S)[name]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert name not in admin_of(secured).list_topics(timeout=TIMEOUT_S).topics
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:alice", Op.CREATE))
    assert alice.create_topics([NewTopic(name, 1, 1)], request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S) is None
    # Without DESCRIBE_CONFIGS the v5+ answer leaves the configs out (Kafka's topic_config_error_code).
    other = uniq("ct")
    add_acls(secured, acl(ResourceType.TOPIC, other, "User:alice", Op.CREATE))
    topic = lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    answer = raw(secured, "alice", "CreateTopics", 7, topics=[topic(other), topic(uniq("ct"))], timeout_ms=10000, validate_only=False)
    created, refused = answer.topics
    assert (created.name, created.error_code, created.topic_config_error_code, created.configs, created.num_partitions) == (
        other, ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED, [], -1
    )
    assert created.topic_id != ZERO_UUID
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # CREATE on the cluster allows any topic; DESCRIBE_CONFIGS shows the configs.
    add_acls(secured, acl(ResourceType.BROKER, "kafka-cluster", "User:bob", Op.CREATE),
             acl(ResourceType.TOPIC, "*", "User:bob", Op.DESCRIBE_CONFIGS))
    answer = raw(secured, "bob", "CreateTopics", 7, topics=[topic(uniq("ct"))], timeout_ms=10000, validate_only=False)
    assert answer.topics[0].error_code == ErrorCode.NONE and answer.topics[0].configs and answer.topics[0].num_partitions == 1


def test_create_partitions_needs_alter_and_delete_topics_delete(secured):
    name = new_topic(secured)
    alice = admin_of(secured, "alice")
    grow = lambda: alice.create_partitions([NewPartitions(name, 2)], request_timeout=TIMEOUT_S)[name]
    assert error_of(grow()) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:alice", Op.ALTER))
    assert grow().result(timeout=TIMEOUT_S) is None
    # ALTER implies DESCRIBE, not DELETE.
    assert error_of(alice.delete_topics([name], request_timeout=TIMEOUT_S)[name]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Whoever may not DESCRIBE learns nothing: an existing and a missing topic answer alike.
    missing = uniq("missing")
    bob = admin_of(secured, "bob")
    answers = bob.delete_topics([name, missing], request_timeout=TIMEOUT_S)
    assert [error_of(answers[n]) for n in (name, missing)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:alice", Op.DELETE))
    assert alice.delete_topics([name], request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S) is None


def test_delete_topics_by_id_hides_names_the_caller_may_not_describe(secured):
    name = new_topic(secured)
    topic_id = next(t.topic_id for t in raw(secured, "admin", "Metadata", 12, topics=None, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False).topics if t.name == name)
    state = lambda: {"name": None, "topic_id": topic_id}
    answer = raw(secured, "bob", "DeleteTopics", 6, topics=[state()], topic_names=[], timeout_ms=10000)
    assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [(None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:bob", Op.DESCRIBE))
    answer = raw(secured, "bob", "DeleteTopics", 6, topics=[state()], topic_names=[], timeout_ms=10000)
    assert [(r.name, r.error_code) for r in answer.responses] == [(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:bob", Op.DELETE))
    answer = raw(secured, "bob", "DeleteTopics", 6, topics=[state()], topic_names=[], timeout_ms=10000)
    assert [r.error_code for r in answer.responses] == [ErrorCode.NONE]


def test_delete_records_needs_delete(secured):
    name = new_topic(secured)
    alice = admin_of(secured, "alice")
    delete = lambda: alice.delete_records([TopicPartition(name, 0, 0)], request_timeout=TIMEOUT_S)[TopicPartition(name, 0)]
    # librdkafka looks the leader up first (Metadata: DESCRIBE); DeleteRecords itself needs DELETE.
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:alice", Op.DESCRIBE))
    assert error_of(delete()) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:alice", Op.DELETE))
    delete().result(timeout=TIMEOUT_S)


# ----------------------------------------------------------------------------- configs


def test_describe_and_alter_configs_per_resource(secured):
    name = new_topic(secured)
    topic = ConfigResource(ResourceType.TOPIC, name)
    node = ConfigResource(ResourceType.BROKER, str(secured.broker.node_id))
    alice = admin_of(secured, "alice")
    found = alice.describe_configs([topic, node], request_timeout=TIMEOUT_S)
    assert error_of(found[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert error_of(found[node]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    change = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    ])
    assert error_of(alice.incremental_alter_configs([change], request_timeout=TIMEOUT_S)[change]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    legacy = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "7200000"})
    assert error_of(alice.alter_configs([legacy], request_timeout=TIMEOUT_S)[legacy]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS; the cluster's DESCRIBE_CONFIGS covers the broker.
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:alice", Op.ALTER_CONFIGS),
             acl(ResourceType.BROKER, "kafka-cluster", "User:alice", Op.DESCRIBE_CONFIGS))
    assert alice.incremental_alter_configs([change], request_timeout=TIMEOUT_S)[change].result(timeout=TIMEOUT_S) is None
    found = alice.describe_configs([topic, node], request_timeout=TIMEOUT_S)
    assert found[topic].result(timeout=TIMEOUT_S)["retention.ms"].value == "3600000"
    assert found[node].result(timeout=TIMEOUT_S)
    assert alice.alter_configs([legacy], request_timeout=TIMEOUT_S)[legacy].result(timeout=TIMEOUT_S) is None


# ----------------------------------------------------------------------------- cluster APIs


def test_cluster_apis_need_cluster_permissions(secured):
    # carol: no ACL but the ones made here (the cluster's authorized operations are exact).
    name = new_topic(secured)
    partitions = [{"topic": name, "partitions": [0]}]
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    def answers(user):
        with Raw(secured, user) as connection:
            elect = connection.request("ElectLeaders", 2, election_type=0, topic_partitions=partitions, timeout_ms=10000)
            reassign = connection.request(
                "AlterPartitionReassignments", 0, timeout_ms=10000,
                topics=[{"name": name, "partitions": [{"partition_index": 0, "replicas": None}]}],
            )
            listed = connection.request("ListPartitionReassignments", 0, timeout_ms=10000, topics=None)
            log_dirs = connection.request("DescribeLogDirs", 4, topics=None)
            quorum = connection.request(
                "DescribeQuorum", 2, topics=[{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
            )
            scram = connection.request("DescribeUserScramCredentials", 0, users=None)
            cluster = connection.request("DescribeCluster", 1, include_cluster_authorized_operations=True, endpoint_type=1)
        return {
            "elect": (elect.error_code, [p.error_code for r in elect.replica_election_results for p in r.partition_result]),
            "reassign": (reassign.error_code, [p.error_code for r in reassign.responses for p in r.partitions]),
            "listed": listed.error_code,
            "log_dirs": (log_dirs.error_code, len(log_dirs.results)),
            "quorum": quorum.error_code,
            "scram": scram.error_code,
            "cluster_operations": cluster.cluster_authorized_operations,
        }

    refused = answers("carol")
    assert refused == {
        "elect": (denied, [denied]),
        "reassign": (denied, [denied]),
        "listed": denied,
        "log_dirs": (denied, 0),
        "quorum": denied,
        "scram": denied,
        "cluster_operations": 0,
    }
    add_acls(secured, acl(ResourceType.BROKER, "kafka-cluster", "User:carol", Op.ALTER),
             acl(ResourceType.BROKER, "kafka-cluster", "User:carol", Op.DESCRIBE))
    allowed = answers("carol")
    assert allowed["elect"] == (ErrorCode.NONE, [ErrorCode.ELECTION_NOT_NEEDED])
    assert allowed["reassign"] == (ErrorCode.NONE, [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS])
    assert (allowed["listed"], allowed["quorum"], allowed["scram"]) == (ErrorCode.NONE,) * 3
    assert allowed["log_dirs"][0] == ErrorCode.NONE and allowed["log_dirs"][1] >= 1
    assert allowed["cluster_operations"] == (1 << Op.ALTER.value) | (1 << Op.DESCRIBE.value)
    # The AdminClient sees the same refusal on AlterUserScramCredentials (bob has nothing).
    upsert = confluent_kafka.admin.UserScramCredentialUpsertion(
        "erin", confluent_kafka.admin.ScramCredentialInfo(confluent_kafka.admin.ScramMechanism.SCRAM_SHA_256, 4096), b"erin-secret"
    )
    bob, carol = admin_of(secured, "bob"), admin_of(secured, "carol")  # kept: a collected client cancels its futures
    assert error_of(bob.alter_user_scram_credentials([upsert], request_timeout=TIMEOUT_S)["erin"]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert carol.alter_user_scram_credentials([upsert], request_timeout=TIMEOUT_S)["erin"].result(timeout=TIMEOUT_S) is None


def test_update_features_needs_alter_on_the_cluster(secured):
    # bob: no cluster ACL; admin: a super user. The level a new cluster has, written again.
    update = {"feature": "group.version", "max_version_level": 1, "allow_downgrade": False, "upgrade_type": 1}

    def answer(user):
        response = raw(secured, user, "UpdateFeatures", 1, timeout_ms=10000, feature_updates=[update], validate_only=False)
        return response.error_code, [(r.feature, r.error_code) for r in response.results]

    assert answer("bob") == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    assert answer("admin") == (ErrorCode.NONE, [("group.version", ErrorCode.NONE)])


# ----------------------------------------------------------------------------- topic reads


def test_topic_describe_and_read_apis(secured):
    name = new_topic(secured)

    def answers(user):
        with Raw(secured, user) as connection:
            epochs = connection.request(
                "OffsetForLeaderEpoch", 4, replica_id=-1,
                topics=[{"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}],
            )
            producers = connection.request("DescribeProducers", 0, topics=[{"name": name, "partition_indexes": [0]}])
            described = connection.request(
                "DescribeTopicPartitions", 0, topics=[{"name": name}], response_partition_limit=100, cursor=None
            )
            every = connection.request("DescribeTopicPartitions", 0, topics=[], response_partition_limit=2000, cursor=None)
        topic = described.topics[0]
        return (
            epochs.topics[0].partitions[0].error_code,
            producers.topics[0].partitions[0].error_code,
            (topic.error_code, topic.topic_id == ZERO_UUID, len(topic.partitions)),
            name in [t.name for t in every.topics],
            topic.topic_authorized_operations,
        )

    epochs, producers, described, listed, _ = answers("dave")
    assert (epochs, producers, described, listed) == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, True, 0), False,
    )
    # READ implies DESCRIBE: all answer (dave has no other ACL, so the operations are exact).
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:dave", Op.READ))
    epochs, producers, described, listed, operations = answers("dave")
    assert (epochs, producers, described, listed) == (ErrorCode.NONE, ErrorCode.NONE, (ErrorCode.NONE, False, 1), True)
    assert operations == (1 << Op.READ.value) | (1 << Op.DESCRIBE.value)


def test_offset_delete_needs_group_delete_and_topic_read(secured):
    name = new_topic(secured)
    group = uniq("od")
    # admin commits an offset for the (empty, simple) group.
    admin = admin_of(secured)  # kept until the answer is in
    admin.alter_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions(group, [TopicPartition(name, 0, 0)])], request_timeout=TIMEOUT_S
    )[group].result(timeout=TIMEOUT_S)
    request = {"group_id": group, "topics": [{"name": name, "partitions": [{"partition_index": 0}]}]}
    assert raw(secured, "alice", "OffsetDelete", 0, **request).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.GROUP, group, "User:alice", Op.DELETE))
    answer = raw(secured, "alice", "OffsetDelete", 0, **request)
    assert (answer.error_code, answer.topics[0].partitions[0].error_code) == (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    add_acls(secured, acl(ResourceType.TOPIC, name, "User:alice", Op.READ))
    answer = raw(secured, "alice", "OffsetDelete", 0, **request)
    assert (answer.error_code, answer.topics[0].partitions[0].error_code) == (ErrorCode.NONE, ErrorCode.NONE)


# ----------------------------------------------------------------------------- transactions


def test_transactional_producer_needs_write_on_its_transactional_id(secured):
    name = new_topic(secured)
    txn_id = uniq("txn")
    config = settings(secured, "alice", **{"transactional.id": txn_id, "transaction.timeout.ms": 10000})
    producer = Producer(config)
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TRANSACTIONAL_ID, txn_id, "User:alice", Op.WRITE),
             acl(ResourceType.TOPIC, name, "User:alice", Op.WRITE))
    producer = Producer(config)
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(name, b"committed")
    producer.commit_transaction(TIMEOUT_S)
    # The transaction is visible to a read_committed reader (admin).
    consumer = confluent_kafka.Consumer(settings(secured, "admin", **{"group.id": uniq("g"), "isolation.level": "read_committed"}))
    try:
        consumer.assign([TopicPartition(name, 0, 0)])
        message = None
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                break
        assert message is not None and message.value() == b"committed"
    finally:
        consumer.close()


def test_transaction_apis_raw(secured):
    name = new_topic(secured)
    txn_id = uniq("txn")
    txn = {"transactional_id": txn_id, "producer_id": -1, "producer_epoch": -1}
    # Idempotent producers need IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    assert raw(secured, "bob", "InitProducerId", 5, transaction_timeout_ms=-1, **dict(txn, transactional_id=None)).error_code == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    add_acls(secured, acl(ResourceType.TOPIC, uniq("anything"), "User:bob", Op.WRITE))
    assert raw(secured, "bob", "InitProducerId", 5, transaction_timeout_ms=-1, **dict(txn, transactional_id=None)).error_code == ErrorCode.NONE
    # Transactional APIs: the transactional id first.
    assert raw(secured, "bob", "EndTxn", 4, committed=True, **txn).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    offsets = raw(secured, "bob", "AddOffsetsToTxn", 4, group_id="g", **txn)
    assert offsets.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    added = raw(secured, "bob", "AddPartitionsToTxn", 3, transactions=[], v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=-1, v3_and_below_producer_epoch=-1,
                v3_and_below_topics=[{"name": name, "partitions": [0]}])
    assert [p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition] == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ]
    committed = raw(secured, "bob", "TxnOffsetCommit", 3, group_id="g", generation_id=-1, member_id="", group_instance_id=None,
                    topics=[{"name": name, "partitions": [{"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1, "committed_metadata": ""}]}],
                    **txn)
    assert committed.topics[0].partitions[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    described = raw(secured, "bob", "DescribeTransactions", 0, transactional_ids=[txn_id])
    assert described.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # With WRITE on the id: the group (READ) and the topics (WRITE) are asked next.
    add_acls(secured, acl(ResourceType.TRANSACTIONAL_ID, txn_id, "User:bob", Op.WRITE))
    offsets = raw(secured, "bob", "AddOffsetsToTxn", 4, group_id="g", **txn)
    assert offsets.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    other = new_topic(secured)
    add_acls(secured, acl(ResourceType.TOPIC, other, "User:bob", Op.WRITE))
    added = raw(secured, "bob", "AddPartitionsToTxn", 3, transactions=[], v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=-1, v3_and_below_producer_epoch=-1,
                v3_and_below_topics=[{"name": name, "partitions": [0]}, {"name": other, "partitions": [0]}])
    assert {t.name: [p.partition_error_code for p in t.results_by_partition] for t in added.results_by_topic_v3_and_below} == {
        name: [ErrorCode.TOPIC_AUTHORIZATION_FAILED], other: [ErrorCode.OPERATION_NOT_ATTEMPTED]
    }
    # WRITE implies DESCRIBE: the id is described (it has no state yet).
    described = raw(secured, "bob", "DescribeTransactions", 0, transactional_ids=[txn_id])
    assert described.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    # Broker-to-broker forms need CLUSTER_ACTION.
    broker_form = raw(secured, "bob", "AddPartitionsToTxn", 4, transactions=[{
        "transactional_id": txn_id, "producer_id": 1, "producer_epoch": 0, "verify_only": True, "topics": [{"name": other, "partitions": [0]}]
    }], v3_and_below_transactional_id="", v3_and_below_producer_id=0, v3_and_below_producer_epoch=0, v3_and_below_topics=[])
    assert (broker_form.error_code, broker_form.results_by_transaction) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    markers = raw(secured, "bob", "WriteTxnMarkers", 1, markers=[{
        "producer_id": 1, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0, "topics": [{"name": other, "partition_indexes": [0]}]
    }])
    assert [p.error_code for m in markers.markers for t in m.topics for p in t.partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]


def test_list_transactions_lists_only_describable_ids(secured):
    name = new_topic(secured)
    mine, hidden = uniq("mine"), uniq("hidden")
    for txn_id in (mine, hidden):
        producer = Producer(settings(secured, "admin", **{"transactional.id": txn_id}))
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(name, b"x")
        producer.commit_transaction(TIMEOUT_S)
    add_acls(secured, acl(ResourceType.TRANSACTIONAL_ID, mine, "User:alice", Op.DESCRIBE))
    listed = raw(secured, "alice", "ListTransactions", 1, state_filters=[], producer_id_filters=[], duration_filter=-1)
    ids = {t.transactional_id for t in listed.transaction_states}
    assert mine in ids and hidden not in ids
    everything = raw(secured, "admin", "ListTransactions", 1, state_filters=[], producer_id_filters=[], duration_filter=-1)
    assert {mine, hidden} <= {t.transactional_id for t in everything.transaction_states}

"""Cluster and partition admin APIs through real clients over TCP: CreatePartitions,
DescribeCluster, DescribeTopicPartitions, DescribeLogDirs, OffsetForLeaderEpoch,
ElectLeaders and DescribeProducers, with kafka-python's KafkaAdminClient,
confluent-kafka's AdminClient and consumers/producers where a client drives the
API itself; raw requests (our own codec) for the cases clients refuse to send.

librdkafka answers describe_cluster and describe_topics with Metadata requests,
so those calls check what the new partitions look like to it, while
DescribeCluster and DescribeTopicPartitions themselves are driven through
kafka-python.
"""

from __future__ import annotations

import logging
import os
import time
import uuid

import pytest

from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes
from tests.conftest import wait_until
from tests.interop._support import (
    Msg,
    RawConnection,
    consume,
    create_topic,
    produce,
    topic_partition_dirs,
    unique_topic,
)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PARTITIONS = 37
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42
ELECTION_NOT_NEEDED = 84
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75

# Every ACL operation Kafka defines for the CLUSTER and TOPIC resources (no authorizer: all allowed).
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
CLUSTER_OPERATIONS_BITFIELD = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))
TOPIC_OPERATIONS_BITFIELD = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))


@pytest.fixture(scope="module")
def kadmin(shared_broker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=30000)
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def cadmin(shared_broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": shared_broker.bootstrap})


def log_dir(broker):
    return broker.data_dir / "logs"


def partition_indexes(kadmin, name: str) -> list[int]:
    [topic] = kadmin.describe_topics([name])
    assert topic["error_code"] == NONE, topic
    return sorted(p["partition_index"] for p in topic["partitions"])


def confluent_errors(futures, timeout_s: float = 30) -> dict:
    """name -> (error code, message) of a confluent admin call; (0, None) for success."""
    from confluent_kafka import KafkaException

    out = {}
    for name, future in futures.items():
        try:
            future.result(timeout_s)
            out[name] = (NONE, None)
        except KafkaException as exc:
            out[name] = (exc.args[0].code(), exc.args[0].str())
    return out


def raw(api_key: int):
    return APIS_BY_KEY[api_key], struct_classes(APIS_BY_KEY[api_key].request)


# --------------------------------------------------------------------------- CreatePartitions


def test_kafka_python_create_partitions_then_produce_and_consume_the_new_ones(shared_broker, kadmin):
    name = unique_topic("cp-kp")
    create_topic(shared_broker.bootstrap, name, 1)
    produce("kafka-python", shared_broker.bootstrap, name, [Msg(b"k0", b"before")], partition=0)

    response = kadmin.create_partitions({name: 3})
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [(name, NONE, None)]
    assert partition_indexes(kadmin, name) == [0, 1, 2]
    dirs = wait_until(lambda: [d.name for d in topic_partition_dirs(log_dir(shared_broker), name)] == [f"{name}-{i}" for i in range(3)], 5)
    assert dirs

    # Real clients produce to and consume from the new partitions at once.
    assert produce("confluent", shared_broker.bootstrap, name, [Msg(b"k2", b"on-2-a"), Msg(b"k2", b"on-2-b")], partition=2) == [0, 1]
    assert produce("aiokafka", shared_broker.bootstrap, name, [Msg(b"k1", b"on-1")], partition=1) == [0]
    got = consume("kafka-python", shared_broker.bootstrap, name, 4, partitions=(0, 1, 2))
    assert sorted((g.partition, g.offset, g.value) for g in got) == [
        (0, 0, b"before"),
        (1, 0, b"on-1"),
        (2, 0, b"on-2-a"),
        (2, 1, b"on-2-b"),
    ]
    got = consume("confluent", shared_broker.bootstrap, name, 2, partitions=(2,))
    assert [(g.offset, g.value) for g in got] == [(0, b"on-2-a"), (1, b"on-2-b")]


def test_confluent_create_partitions_with_assignments_and_validate_only(shared_broker, cadmin, kadmin):
    from confluent_kafka.admin import NewPartitions

    name = unique_topic("cp-c")
    create_topic(shared_broker.bootstrap, name, 2)
    assert confluent_errors(cadmin.create_partitions([NewPartitions(name, 5)], validate_only=True)) == {name: (NONE, None)}
    assert partition_indexes(kadmin, name) == [0, 1]  # validate_only changed nothing
    assert confluent_errors(cadmin.create_partitions([NewPartitions(name, 4, [[1], [1]])])) == {name: (NONE, None)}
    assert partition_indexes(kadmin, name) == [0, 1, 2, 3]

    from confluent_kafka import TopicCollection

    [future] = cadmin.describe_topics(TopicCollection([name])).values()
    described = future.result(30)
    assert sorted(p.id for p in described.partitions) == [0, 1, 2, 3]
    assert {(p.leader.id, tuple(r.id for r in p.replicas)) for p in described.partitions} == {(1, (1,))}
    # The new partitions are served: a real producer writes to the last one.
    assert produce("confluent", shared_broker.bootstrap, name, [Msg(None, b"x")], partition=3) == [0]


def test_create_partitions_errors(shared_broker, cadmin, kadmin):
    from confluent_kafka.admin import NewPartitions

    name = unique_topic("cp-err")
    create_topic(shared_broker.bootstrap, name, 3)
    missing = unique_topic("cp-missing")
    cases = [
        (NewPartitions(name, 2), INVALID_PARTITIONS, f"The topic {name} currently has 3 partition(s); 2 would not be an increase."),
        (NewPartitions(name, 3), INVALID_PARTITIONS, "Topic already has 3 partition(s)."),
        (NewPartitions(name, 5, [[1]]), INVALID_REPLICA_ASSIGNMENT,
         "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        (NewPartitions(name, 4, [[7]]), INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 7, but no such broker is registered."),
        (NewPartitions(name, 4, [[1, 1]]), INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes the broker 1 more than once."),
    ]
    for request, code, message in cases:
        assert confluent_errors(cadmin.create_partitions([request])) == {name: (code, message)}, request
    assert confluent_errors(cadmin.create_partitions([NewPartitions(missing, 2)]))[missing][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert partition_indexes(kadmin, name) == [0, 1, 2]

    # kafka-python: validate_only reports the same errors and succeeds without a change.
    response = kadmin.create_partitions({name: 2}, validate_only=True, raise_errors=False)
    assert [(r.error_code, r.error_message) for r in response.results] == [
        (INVALID_PARTITIONS, f"The topic {name} currently has 3 partition(s); 2 would not be an increase.")
    ]
    response = kadmin.create_partitions({name: 6}, validate_only=True)
    assert [r.error_code for r in response.results] == [NONE]
    assert partition_indexes(kadmin, name) == [0, 1, 2]


def test_create_partitions_raw_duplicates_null_and_empty_assignments(shared_broker, kadmin):
    """A topic named twice answers INVALID_REQUEST once and is left alone; null
    assignments let the broker place the partitions, an empty list names none."""
    api, Q = raw(37)
    twice, other = unique_topic("cp-dup"), unique_topic("cp-other")
    create_topic(shared_broker.bootstrap, twice, 1)
    create_topic(shared_broker.bootstrap, other, 1)
    with RawConnection(shared_broker) as conn:
        for version in (0, 3):
            response = conn.request(
                api,
                version,
                Q.CreatePartitionsRequest(
                    topics=[
                        Q.CreatePartitionsTopic(name=twice, count=2, assignments=None),
                        Q.CreatePartitionsTopic(name=other, count=2 + version, assignments=None),
                        Q.CreatePartitionsTopic(name=twice, count=3, assignments=None),
                    ],
                    timeout_ms=5000,
                    validate_only=False,
                ),
            )
            assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
                (twice, INVALID_REQUEST, "Duplicate topic name."),
                (other, NONE, None),
            ]
        response = conn.request(
            api, 1, Q.CreatePartitionsRequest(topics=[Q.CreatePartitionsTopic(name=other, count=7, assignments=[])], timeout_ms=0, validate_only=False)
        )
        assert response.results[0].error_code == INVALID_REPLICA_ASSIGNMENT
    assert partition_indexes(kadmin, twice) == [0]
    assert partition_indexes(kadmin, other) == [0, 1, 2, 3, 4]


def test_added_partitions_survive_a_restart(broker_factory):
    broker = broker_factory()
    name = unique_topic("cp-restart")
    create_topic(broker.bootstrap, name, 1)
    api, Q = raw(37)
    with RawConnection(broker) as conn:
        response = conn.request(
            api, 2, Q.CreatePartitionsRequest(topics=[Q.CreatePartitionsTopic(name=name, count=3, assignments=None)], timeout_ms=5000, validate_only=False)
        )
    assert response.results[0].error_code == NONE
    produce("kafka-python", broker.bootstrap, name, [Msg(None, b"p2")], partition=2)
    broker.stop()
    restarted = broker_factory(data_dir=broker.data_dir)
    got = consume("aiokafka", restarted.bootstrap, name, 1, partitions=(2,))
    assert [(g.partition, g.offset, g.value) for g in got] == [(2, 0, b"p2")]
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=restarted.bootstrap, request_timeout_ms=30000)
    try:
        assert partition_indexes(admin, name) == [0, 1, 2]
    finally:
        admin.close()


# --------------------------------------------------------------------------- DescribeCluster


def test_kafka_python_describe_cluster(broker_factory):
    from kafka import KafkaAdminClient

    broker = broker_factory({"broker.rack": "rack-a", "node.id": "7"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert cluster["controller_id"] == 7
    assert cluster["brokers"] == [{"broker_id": 7, "host": broker.host, "port": broker.port, "rack": "rack-a"}]
    assert set(cluster["authorized_operations"]) == CLUSTER_OPERATIONS
    meta = (broker.data_dir / "logs" / "meta.properties").read_text()
    assert f"cluster.id={cluster['cluster_id']}" in meta


def test_confluent_describe_cluster(shared_broker, cadmin):
    cluster = cadmin.describe_cluster(request_timeout=30).result(30)
    assert cluster.cluster_id
    assert cluster.controller.id == 1
    assert [(n.id, n.host, n.port, n.rack) for n in cluster.nodes] == [(1, shared_broker.host, shared_broker.port, None)]


def test_describe_cluster_raw_operations_and_endpoint_types(shared_broker):
    api, Q = raw(60)
    with RawConnection(shared_broker) as conn:
        for version in (0, 1):
            plain = conn.request(api, version, Q.DescribeClusterRequest(include_cluster_authorized_operations=False))
            assert plain.error_code == NONE and plain.cluster_authorized_operations == -(2**31)
            asked = conn.request(api, version, Q.DescribeClusterRequest(include_cluster_authorized_operations=True))
            assert asked.cluster_authorized_operations == CLUSTER_OPERATIONS_BITFIELD
            assert (asked.controller_id, [b.broker_id for b in asked.brokers]) == (1, [1])
        controllers = conn.request(api, 1, Q.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=2))
        assert controllers.error_code == 114  # MISMATCHED_ENDPOINT_TYPE: this is a broker endpoint
        assert controllers.brokers == [] and controllers.error_message
        unknown = conn.request(api, 1, Q.DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=9))
        assert (unknown.error_code, unknown.error_message) == (115, "Unsupported endpoint type 9")  # UNSUPPORTED_ENDPOINT_TYPE


# --------------------------------------------------------------------------- DescribeTopicPartitions


def test_kafka_python_describe_topic_partitions_pages_through_topics(shared_broker, kadmin):
    prefix = unique_topic("dtp")
    a, b, c = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    create_topic(shared_broker.bootstrap, a, 3)
    create_topic(shared_broker.bootstrap, b, 2)
    create_topic(shared_broker.bootstrap, c, 1)
    missing = f"{prefix}-zz"

    whole = kadmin.describe_topic_partitions([c, missing, a, b])
    assert whole["next_cursor"] is None
    assert [(t["name"], t["error_code"]) for t in whole["topics"]] == [(a, 0), (b, 0), (c, 0), (missing, UNKNOWN_TOPIC_OR_PARTITION)]
    first = whole["topics"][0]
    assert first["topic_id"] is not None and first["is_internal"] is False
    assert first["topic_authorized_operations"] == TOPIC_OPERATIONS_BITFIELD
    assert [(p["partition_index"], p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"], p["offline_replicas"]) for p in first["partitions"]] == [
        (i, 1, 0, [1], [1], []) for i in range(3)
    ]
    assert whole["topics"][3]["partitions"] == [] and whole["topics"][3]["topic_id"] in (None, uuid.UUID(int=0))

    # Pages of two partitions, following next_cursor until it is null.
    pages, seen, cursor = [], [], None
    for _ in range(10):
        page = kadmin.describe_topic_partitions([a, b, c, missing], response_partition_limit=2, cursor=cursor)
        pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]])
        seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [[(a, [0, 1])], [(a, [2]), (b, [0])], [(b, [1]), (c, [0])], [(missing, [])]]
    assert seen == [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1), (c, 0)]

    # A limit used up exactly at a topic's end points the cursor at the next topic.
    page = kadmin.describe_topic_partitions([a, b], response_partition_limit=3)
    assert [t["name"] for t in page["topics"]] == [a] and page["next_cursor"] == {"topic_name": b, "partition_index": 0}


def test_describe_topic_partitions_raw_all_topics_and_bad_cursor(shared_broker):
    api, Q = raw(75)
    name = unique_topic("dtp-raw")
    create_topic(shared_broker.bootstrap, name, 2)
    with RawConnection(shared_broker) as conn:
        everything = conn.request(api, 0, Q.DescribeTopicPartitionsRequest(topics=[], response_partition_limit=2000, cursor=None))
        names = [t.name for t in everything.topics]
        assert name in names and names == sorted(names)
        assert all(t.error_code == NONE for t in everything.topics)
        # Listing every topic from a cursor starts at that topic and partition.
        from_cursor = conn.request(
            api, 0, Q.DescribeTopicPartitionsRequest(topics=[], response_partition_limit=1, cursor=Q.Cursor(topic_name=name, partition_index=1))
        )
        head = from_cursor.topics[0]
        assert (head.name, [p.partition_index for p in head.partitions]) == (name, [1])
        # The cursor's topic must be one of the named topics.
        bad = conn.request(
            api, 0, Q.DescribeTopicPartitionsRequest(topics=[Q.TopicRequest(name=name)], cursor=Q.Cursor(topic_name="other", partition_index=0))
        )
        assert [(t.name, t.error_code) for t in bad.topics] == [(name, INVALID_REQUEST)]
        invalid = conn.request(api, 0, Q.DescribeTopicPartitionsRequest(topics=[Q.TopicRequest(name="bad name")]))
        assert invalid.topics[0].error_code == 17  # INVALID_TOPIC_EXCEPTION


# --------------------------------------------------------------------------- DescribeLogDirs


def test_kafka_python_describe_log_dirs(shared_broker, kadmin):
    name = unique_topic("logdirs")
    create_topic(shared_broker.bootstrap, name, 2)
    produce("kafka-python", shared_broker.bootstrap, name, [Msg(b"k", b"v" * 500) for _ in range(3)], partition=1)
    root = log_dir(shared_broker)

    def on_disk(partition: int) -> int:
        return sum(p.stat().st_size for p in (root / f"{name}-{partition}").glob("*.log"))

    [answer] = kadmin.describe_log_dirs({name: [0, 1, 9]})
    assert answer["broker"] == 1
    [result] = answer["log_dirs"]
    assert result["error_code"] == NONE and result["log_dir"] == os.path.abspath(root)
    assert 0 < result["usable_bytes"] <= result["total_bytes"]
    [topic] = result["topics"]
    assert topic["name"] == name
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    assert sizes == {0: 0, 1: on_disk(1)} and sizes[1] > 1500  # partition 9 does not exist: left out
    assert {(p["offset_lag"], p["is_future_key"]) for p in topic["partitions"]} == {(0, False)}

    # No filter: every partition the broker hosts, this topic's included.
    [everything] = kadmin.describe_log_dirs()
    listed = {(t["name"], p["partition_index"]) for d in everything["log_dirs"] for t in d["topics"] for p in t["partitions"]}
    assert {(name, 0), (name, 1)} <= listed
    assert not any(t["name"] == "__cluster_metadata" for d in everything["log_dirs"] for t in d["topics"])


def test_describe_log_dirs_every_log_dir(broker_factory, tmp_path):
    """With two log.dirs both are listed, each with the partitions it holds."""
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    broker = broker_factory({"log.dirs": ",".join(str(d) for d in dirs)})
    name = unique_topic("two-dirs")
    create_topic(broker.bootstrap, name, 4)
    api, Q = raw(35)
    with RawConnection(broker) as conn:
        response = conn.request(api, 4, Q.DescribeLogDirsRequest(topics=[Q.DescribableLogDirTopic(topic=name, partitions=[0, 1, 2, 3])]))
    assert response.error_code == NONE
    assert [r.log_dir for r in response.results] == [os.path.abspath(d) for d in dirs]
    held = {}
    for result in response.results:
        for topic in result.topics:
            for p in topic.partitions:
                held[p.partition_index] = result.log_dir
    assert sorted(held) == [0, 1, 2, 3]
    # A new partition's files are made by a worker soon after it is created
    # (storage/manager.py), so the directory may appear just after the answer.
    expected_paths = [dirs[0 if where == os.path.abspath(dirs[0]) else 1] / f"{name}-{partition}" for partition, where in held.items()]
    assert wait_until(lambda: all(path.is_dir() for path in expected_paths), timeout_s=10.0), [p for p in expected_paths if not p.is_dir()]
    assert len(set(held.values())) == 2  # spread over both directories


def test_describe_log_dirs_of_logs_not_opened_after_a_restart(broker_factory):
    """After a clean restart logs open lazily; their sizes are still reported."""
    broker = broker_factory()
    name = unique_topic("lazy")
    create_topic(broker.bootstrap, name, 1)
    produce("confluent", broker.bootstrap, name, [Msg(None, b"x" * 1000) for _ in range(5)], partition=0)
    broker.stop()
    restarted = broker_factory(data_dir=broker.data_dir)
    expected = sum(p.stat().st_size for p in (restarted.data_dir / "logs" / f"{name}-0").glob("*.log"))
    api, Q = raw(35)
    with RawConnection(restarted) as conn:
        response = conn.request(api, 1, Q.DescribeLogDirsRequest(topics=None))
    sizes = {(t.name, p.partition_index): p.partition_size for r in response.results for t in r.topics for p in t.partitions}
    assert sizes[(name, 0)] == expected and expected > 5000


# --------------------------------------------------------------------------- OffsetForLeaderEpoch


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_confluent_consumer_validates_its_position_with_offset_for_leader_epoch(shared_broker):
    """librdkafka validates a position assigned with a leader epoch through
    OffsetForLeaderEpoch before fetching (KIP-320)."""
    from confluent_kafka import Consumer, TopicPartition

    name = unique_topic("ofle-c")
    create_topic(shared_broker.bootstrap, name, 1)
    produce("confluent", shared_broker.bootstrap, name, [Msg(None, f"v{i}".encode()) for i in range(5)], partition=0)
    collect = _Collect()
    logger = logging.getLogger(f"rdkafka-{name}")
    logger.addHandler(collect)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "group.id": "interop-unused-group",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "debug": "fetch",
            "logger": logger,
        }
    )
    got = []
    try:
        consumer.assign([TopicPartition(name, 0, 3, leader_epoch=0)])
        deadline = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value(), message.leader_epoch()))
    finally:
        consumer.close()
    assert got == [(3, b"v3", 0), (4, b"v4", 0)]
    assert any("validation succeeded" in line and "end offset 5" in line for line in collect.lines), collect.lines[-20:]


def test_offset_for_leader_epoch_raw(shared_broker):
    api, Q = raw(23)
    name = unique_topic("ofle-raw")
    create_topic(shared_broker.bootstrap, name, 2)
    produce("kafka-python", shared_broker.bootstrap, name, [Msg(None, b"a"), Msg(None, b"b"), Msg(None, b"c")], partition=0)

    def ask(version, partitions, topic=name, replica_id=-1):
        body = Q.OffsetForLeaderEpochRequest(
            replica_id=replica_id,
            topics=[
                Q.OffsetForLeaderTopic(
                    topic=topic,
                    partitions=[Q.OffsetForLeaderPartition(partition=p, current_leader_epoch=c, leader_epoch=e) for p, c, e in partitions],
                )
            ],
        )
        with RawConnection(shared_broker) as conn:
            return [(r.partition, r.error_code, r.leader_epoch, r.end_offset) for r in conn.request(api, version, body).topics[0].partitions]

    assert ask(4, [(0, 0, 0), (1, -1, 0), (0, -1, 3), (0, -1, -1), (0, 1, 0), (7, -1, 0)]) == [
        (0, NONE, 0, 3),  # the current epoch ends at the log end
        (1, NONE, 0, 0),  # an empty partition: its leader's epoch starts at 0
        (0, NONE, -1, -1),  # an epoch newer than any the log knows
        (0, NONE, -1, -1),  # epoch -1: undefined
        (0, UNKNOWN_LEADER_EPOCH, -1, -1),  # the client believes in a newer leader epoch
        (7, UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]
    assert ask(3, [(0, 0, 0)], replica_id=-2) == [(0, NONE, 0, 3)]
    assert ask(4, [(0, -1, 0)], topic=unique_topic("nope")) == [(0, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


# --------------------------------------------------------------------------- ElectLeaders


def test_elect_leaders_through_both_clients(shared_broker, kadmin, cadmin):
    from confluent_kafka import ElectionType, TopicPartition

    name = unique_topic("elect")
    create_topic(shared_broker.bootstrap, name, 2)
    missing = unique_topic("elect-missing")

    results = cadmin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(name, 0), TopicPartition(name, 5), TopicPartition(missing, 0)]).result(30)
    codes = {(tp.topic, tp.partition): (err.code() if err is not None else NONE) for tp, err in results.items()}
    assert codes == {(name, 0): ELECTION_NOT_NEEDED, (name, 5): UNKNOWN_TOPIC_OR_PARTITION, (missing, 0): UNKNOWN_TOPIC_OR_PARTITION}
    # Every partition (null): only partitions where an election happened are answered.
    assert cadmin.elect_leaders(ElectionType.UNCLEAN, None).result(30) == {}

    for election_type in (0, 1):
        response = kadmin.elect_leaders(election_type, {name: [0, 1]})
        assert response.error_code == NONE
        assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result]) for r in response.replica_election_results] == [
            (name, [(0, ELECTION_NOT_NEEDED), (1, ELECTION_NOT_NEEDED)])
        ]


def test_elect_leaders_raw_versions_and_bad_type(shared_broker):
    api, Q = raw(43)
    name = unique_topic("elect-raw")
    create_topic(shared_broker.bootstrap, name, 1)
    with RawConnection(shared_broker) as conn:
        for version in (0, 1, 2):
            response = conn.request(
                api, version, Q.ElectLeadersRequest(election_type=0, topic_partitions=[Q.TopicPartitions(topic=name, partitions=[0])], timeout_ms=1000)
            )
            [result] = response.replica_election_results
            assert [(p.partition_id, p.error_code, p.error_message) for p in result.partition_result] == [
                (0, ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
            ]
            assert conn.request(api, version, Q.ElectLeadersRequest(election_type=1, topic_partitions=None)).replica_election_results == []
        bad = conn.request(api, 2, Q.ElectLeadersRequest(election_type=3, topic_partitions=[Q.TopicPartitions(topic=name, partitions=[0])]))
        assert bad.error_code == INVALID_REQUEST
        assert [(p.partition_id, p.error_code) for p in bad.replica_election_results[0].partition_result] == [(0, INVALID_REQUEST)]


# --------------------------------------------------------------------------- DescribeProducers


def test_kafka_python_describe_producers_of_an_idempotent_producer(shared_broker, kadmin):
    from kafka import TopicPartition

    name = unique_topic("producers")
    create_topic(shared_broker.bootstrap, name, 2)
    produce(
        "confluent", shared_broker.bootstrap, name, [Msg(None, f"m{i}".encode(), timestamp=1_700_000_000_000 + i) for i in range(4)],
        partition=0, extra={"enable.idempotence": True, "linger.ms": 0, "max.in.flight.requests.per.connection": 1},
    )
    states = kadmin.describe_producers([TopicPartition(name, 0), TopicPartition(name, 1)])
    [producer] = states[TopicPartition(name, 0)].active_producers
    assert producer.producer_id >= 0 and producer.producer_epoch == 0
    assert producer.last_sequence == 3  # four records, sequences 0..3
    assert producer.last_timestamp == 1_700_000_000_003
    assert (producer.coordinator_epoch, producer.current_transaction_start_offset) == (-1, -1)
    assert states[TopicPartition(name, 1)].active_producers == []  # nothing written there

    # A plain producer leaves no producer state.
    plain = unique_topic("producers-plain")
    create_topic(shared_broker.bootstrap, plain, 1)
    produce("kafka-python", shared_broker.bootstrap, plain, [Msg(None, b"x")], partition=0)
    assert kadmin.describe_producers([TopicPartition(plain, 0)])[TopicPartition(plain, 0)].active_producers == []


def test_describe_producers_raw_errors(shared_broker):
    api, Q = raw(61)
    name = unique_topic("producers-raw")
    create_topic(shared_broker.bootstrap, name, 1)
    with RawConnection(shared_broker) as conn:
        response = conn.request(
            api,
            0,
            Q.DescribeProducersRequest(
                topics=[Q.TopicRequest(name=name, partition_indexes=[0, 3]), Q.TopicRequest(name=unique_topic("none"), partition_indexes=[0])]
            ),
        )
    answers = [(t.name == name, p.partition_index, p.error_code, p.active_producers) for t in response.topics for p in t.partitions]
    assert answers == [(True, 0, NONE, []), (True, 3, UNKNOWN_TOPIC_OR_PARTITION, []), (False, 0, UNKNOWN_TOPIC_OR_PARTITION, [])]


def test_confluent_authorized_operations_through_metadata(shared_broker, cadmin):
    """librdkafka asks Metadata (v8+) for authorized operations; with no authorizer
    every operation of the resource type is allowed, and not asking gives none."""
    from confluent_kafka import TopicCollection

    topic = unique_topic("authz-ops")
    create_topic(shared_broker.bootstrap, topic)
    cluster = cadmin.describe_cluster(request_timeout=30, include_authorized_operations=True).result(30)
    assert {op.name for op in cluster.authorized_operations} == CLUSTER_OPERATIONS
    described = cadmin.describe_topics(TopicCollection([topic]), request_timeout=30, include_authorized_operations=True)
    operations = {op.name for op in described[topic].result(30).authorized_operations}
    assert operations == {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
    plain = cadmin.describe_topics(TopicCollection([topic]), request_timeout=30)[topic].result(30)
    assert plain.authorized_operations is None


def test_metadata_names_brokers_on_the_listener_the_client_came_in_on(broker_factory):
    """Two client listeners, as in a container (one for other containers, one
    published to the host): each client is told addresses on its own listener."""
    from confluent_kafka.admin import AdminClient

    from tests.cluster.test_quorum_processes import free_ports

    internal, external = free_ports(2)
    broker = broker_factory(
        {
            "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    for port, host in ((internal, "127.0.0.1"), (external, "localhost")):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        brokers = admin.list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [(host, port)], brokers

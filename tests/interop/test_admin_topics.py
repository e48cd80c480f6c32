"""CreateTopics and DeleteTopics through kafka-python's KafkaAdminClient and
confluent-kafka's AdminClient (plus a few raw requests for cases the clients
refuse to send).

Existence is checked with kafka-python's metadata calls, which never ask for
auto-creation (librdkafka's AdminClient is a producer-type handle whose
``list_topics(topic=...)`` does ask for it).
"""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import wait_until
from tests.interop._support import (
    Msg,
    consume,
    create_topics_raw,
    produce,
    topic_partition_dirs,
    unique_topic,
)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42

INVALID_NAMES = ["", ".", "..", "bad/name", "with space", "ümlaut", "a" * 250]


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


def describe(kadmin, name: str) -> dict:
    [topic] = kadmin.describe_topics([name])
    return topic


def exists(kadmin, name: str) -> bool:
    topic = describe(kadmin, name)
    if topic["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
        return False
    assert topic["error_code"] == NONE, topic
    return True


def confluent_results(futures, timeout=30) -> dict[str, int]:
    """Topic -> error code (0 for success) of a confluent admin call."""
    from confluent_kafka import KafkaException

    out = {}
    for name, future in futures.items():
        try:
            future.result(timeout)
            out[name] = NONE
        except KafkaException as exc:
            out[name] = exc.args[0].code()
    return out


def kafka_python_results(result: dict) -> dict[str, int]:
    return {t["name"]: t["error_code"] for t in result["topics"]}


# --------------------------------------------------------------------------- create


def test_kafka_python_create_with_partitions_and_replication(shared_broker, kadmin):
    name = unique_topic("kp-create")
    result = kadmin.create_topics({name: {"num_partitions": 3, "replication_factor": 1}})
    [topic] = result["topics"]
    assert (topic["name"], topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (name, NONE, 3, 1)
    assert topic["topic_id"] not in (None, str(uuid.UUID(int=0)))

    described = describe(kadmin, name)
    assert described["error_code"] == NONE
    assert str(described["topic_id"]) == str(topic["topic_id"])
    partitions = sorted(described["partitions"], key=lambda p: p["partition_index"])
    assert [p["partition_index"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert (p["error_code"], p["leader_id"], p["replica_nodes"], p["isr_nodes"]) == (NONE, 1, [1], [1])
    dirs = wait_until(lambda: [d.name for d in topic_partition_dirs(log_dir(shared_broker), name)] or None, 5)
    assert dirs == [f"{name}-0", f"{name}-1", f"{name}-2"]


def test_confluent_create_with_partitions_and_replication(shared_broker, cadmin, kadmin):
    from confluent_kafka.admin import NewTopic

    name = unique_topic("c-create")
    assert confluent_results(cadmin.create_topics([NewTopic(name, 4, 1)], operation_timeout=30)) == {name: NONE}
    described = describe(kadmin, name)
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2, 3]
    # The directories are made soon after the creation, by a worker thread (as in Kafka, not before the answer).
    assert wait_until(lambda: len(topic_partition_dirs(log_dir(shared_broker), name)) == 4 or None, 10)


def test_create_with_broker_defaults(shared_broker, kadmin, cadmin):
    """num_partitions / replication_factor -1 take num.partitions (1) and default.replication.factor (1)."""
    from confluent_kafka.admin import NewTopic

    kp_name = unique_topic("kp-default")
    [topic] = kadmin.create_topics({kp_name: {}})["topics"]
    assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (NONE, 1, 1)
    assert [p["partition_index"] for p in describe(kadmin, kp_name)["partitions"]] == [0]

    c_name = unique_topic("c-default")
    assert confluent_results(cadmin.create_topics([NewTopic(c_name)], operation_timeout=30)) == {c_name: NONE}
    assert [p["partition_index"] for p in describe(kadmin, c_name)["partitions"]] == [0]


def test_create_with_topic_configs(kadmin, cadmin):
    from confluent_kafka.admin import NewTopic

    name = unique_topic("kp-configs")
    overrides = {"cleanup.policy": "compact", "segment.bytes": "1048576", "retention.ms": "3600000", "max.message.bytes": "2000000"}
    [topic] = kadmin.create_topics({name: {"num_partitions": 1, "replication_factor": 1, "configs": overrides}})["topics"]
    assert topic["error_code"] == NONE
    for key, value in overrides.items():
        assert topic["configs"][key]["value"] == value
        assert topic["configs"][key]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert exists(kadmin, name)

    c_name = unique_topic("c-configs")
    futures = cadmin.create_topics([NewTopic(c_name, 1, 1, config={"cleanup.policy": "compact,delete", "segment.bytes": "2097152"})], operation_timeout=30)
    assert confluent_results(futures) == {c_name: NONE}
    assert exists(kadmin, c_name)


# Kafka 4.0's topic config defaults (LogConfig / ServerLogConfigs).
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": str(2**63 - 1),
    "flush.ms": str(2**63 - 1),
    "index.interval.bytes": "4096",
    "max.compaction.lag.ms": str(2**63 - 1),
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(2**63 - 1),
    "message.timestamp.after.max.ms": "3600000",  # one hour since Kafka 4.0 (KIP-1030)
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def test_create_response_reports_defaults_and_sources(kadmin):
    """CreateTopics v5+ returns every topic config with its source. On a broker
    whose server config sets none of the topic-config synonyms, everything not
    overridden is Kafka's default with source DEFAULT_CONFIG."""
    name = unique_topic("kp-sources")
    [topic] = kadmin.create_topics({name: {"configs": {"retention.ms": "1000"}}})["topics"]
    assert topic["error_code"] == NONE
    configs = topic["configs"]
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    wrong = {}
    for key, entry in configs.items():
        if key == "retention.ms":
            continue
        want = (KAFKA_TOPIC_DEFAULTS.get(key, entry["value"]), "DEFAULT_CONFIG")
        if (entry["value"], entry["config_source"]) != want:
            wrong[key] = {"got": (entry["value"], entry["config_source"]), "want": want}
    assert not wrong, wrong


def test_validate_only_creates_nothing(shared_broker, kadmin, cadmin):
    from confluent_kafka.admin import NewTopic

    name = unique_topic("validate")
    [topic] = kadmin.create_topics({name: {"num_partitions": 2, "replication_factor": 1}}, validate_only=True)["topics"]
    assert (topic["error_code"], topic["num_partitions"]) == (NONE, 2)

    c_name = unique_topic("validate-c")
    assert confluent_results(cadmin.create_topics([NewTopic(c_name, 2, 1)], validate_only=True, operation_timeout=30)) == {c_name: NONE}

    for n in (name, c_name):
        assert not exists(kadmin, n)
        assert n not in kadmin.list_topics()
        assert topic_partition_dirs(log_dir(shared_broker), n) == []

    # validate_only still reports what a real creation would fail with.
    result = kadmin.create_topics({name: {"num_partitions": 0}}, validate_only=True, raise_errors=False)
    assert kafka_python_results(result) == {name: INVALID_PARTITIONS}
    existing = unique_topic("validate-existing")
    kadmin.create_topics({existing: {}})
    result = kadmin.create_topics({existing: {}}, validate_only=True, raise_errors=False)
    assert kafka_python_results(result) == {existing: TOPIC_ALREADY_EXISTS}


# --------------------------------------------------------------------------- create errors


def test_kafka_python_create_errors(shared_broker, kadmin):
    from kafka.errors import TopicAlreadyExistsError

    existing = unique_topic("exists")
    kadmin.create_topics({existing: {"num_partitions": 2}})
    with pytest.raises(TopicAlreadyExistsError):
        kadmin.create_topics({existing: {"num_partitions": 2}})

    cases = {
        existing: ({"num_partitions": 1}, TOPIC_ALREADY_EXISTS),
        unique_topic("zero-partitions"): ({"num_partitions": 0, "replication_factor": 1}, INVALID_PARTITIONS),
        unique_topic("negative-partitions"): ({"num_partitions": -5, "replication_factor": 1}, INVALID_PARTITIONS),
        unique_topic("rf3"): ({"num_partitions": 1, "replication_factor": 3}, INVALID_REPLICATION_FACTOR),
        unique_topic("rf0"): ({"num_partitions": 1, "replication_factor": 0}, INVALID_REPLICATION_FACTOR),
        unique_topic("unknown-config"): ({"configs": {"no.such.config": "1"}}, INVALID_CONFIG),
        unique_topic("bad-config-value"): ({"configs": {"segment.bytes": "abc"}}, INVALID_CONFIG),
        unique_topic("bad-cleanup-policy"): ({"configs": {"cleanup.policy": "forever"}}, INVALID_CONFIG),
        unique_topic("ok-in-mixed-batch"): ({"num_partitions": 2}, NONE),
    }
    result = kadmin.create_topics({name: spec for name, (spec, _) in cases.items()}, raise_errors=False)
    assert kafka_python_results(result) == {name: code for name, (_, code) in cases.items()}
    for t in result["topics"]:
        if t["error_code"]:
            assert t["error_message"], t
    for name, (_, code) in cases.items():
        if name != existing:
            assert exists(kadmin, name) == (code == NONE), name
            if code == NONE:  # made soon after the creation, by a worker thread
                assert wait_until(lambda: topic_partition_dirs(log_dir(shared_broker), name) != [], 10), name
            else:
                assert topic_partition_dirs(log_dir(shared_broker), name) == [], name
    # The failed attempt left the existing topic alone.
    assert len(describe(kadmin, existing)["partitions"]) == 2


def test_invalid_topic_names(shared_broker, kadmin, cadmin):
    from confluent_kafka.admin import NewTopic

    result = create_topics_raw(shared_broker.bootstrap, [(n, 1, 1) for n in INVALID_NAMES])
    assert [(t.name, t.error_code) for t in result] == [(n, INVALID_TOPIC_EXCEPTION) for n in INVALID_NAMES]

    result = kadmin.create_topics({n: {"num_partitions": 1, "replication_factor": 1} for n in INVALID_NAMES}, raise_errors=False)
    assert kafka_python_results(result) == {n: INVALID_TOPIC_EXCEPTION for n in INVALID_NAMES}

    futures = cadmin.create_topics([NewTopic(n, 1, 1) for n in INVALID_NAMES], operation_timeout=30)
    assert confluent_results(futures) == {n: INVALID_TOPIC_EXCEPTION for n in INVALID_NAMES}

    assert not any(n in kadmin.list_topics() for n in INVALID_NAMES)
    # Nothing was written under the log dir for them either (only real topics' dirs).
    names = {p.name for p in log_dir(shared_broker).iterdir()}
    assert not any(name.startswith("bad") or name.startswith("with space") for name in names)


def test_longest_legal_topic_name(shared_broker, kadmin):
    name = "x" * 239 + uuid.uuid4().hex[:10]
    assert len(name) == 249
    assert kafka_python_results(kadmin.create_topics({name: {}})) == {name: NONE}
    assert exists(kadmin, name)
    assert wait_until(lambda: [d.name for d in topic_partition_dirs(log_dir(shared_broker), name)] == [f"{name}-0"], 10)


def test_confluent_create_errors(kadmin, cadmin):
    from confluent_kafka.admin import NewTopic

    existing = unique_topic("c-exists")
    assert confluent_results(cadmin.create_topics([NewTopic(existing, 1, 1)], operation_timeout=30)) == {existing: NONE}
    cases = {
        existing: (NewTopic(existing, 1, 1), TOPIC_ALREADY_EXISTS),
    }
    for label, kwargs, code in [
        ("c-zero", dict(num_partitions=0, replication_factor=1), INVALID_PARTITIONS),
        ("c-rf3", dict(num_partitions=1, replication_factor=3), INVALID_REPLICATION_FACTOR),
        ("c-unknown-config", dict(num_partitions=1, replication_factor=1, config={"no.such.config": "x"}), INVALID_CONFIG),
        ("c-bad-value", dict(num_partitions=1, replication_factor=1, config={"retention.ms": "-7"}), INVALID_CONFIG),
    ]:
        name = unique_topic(label)
        cases[name] = (NewTopic(name, **kwargs), code)
    futures = cadmin.create_topics([t for t, _ in cases.values()], operation_timeout=30)
    assert confluent_results(futures) == {name: code for name, (_, code) in cases.items()}
    for name in cases:
        if name != existing:
            assert not exists(kadmin, name)


def test_duplicate_names_in_one_request(shared_broker, kadmin):
    """Kafka answers every name listed twice in one CreateTopics with
    INVALID_REQUEST ("Duplicate topic name.") and creates none of them; the
    other topics of the request are created."""
    dup = unique_topic("dup")
    other = unique_topic("not-dup")
    result = create_topics_raw(shared_broker.bootstrap, [(dup, 1, 1), (other, 1, 1), (dup, 2, 1)])
    codes = {}
    for t in result:
        codes.setdefault(t.name, set()).add(t.error_code)
    assert codes == {dup: {INVALID_REQUEST}, other: {NONE}}
    assert not exists(kadmin, dup)
    assert exists(kadmin, other)


def test_names_colliding_on_dot_and_underscore(kadmin):
    """'.' and '_' collide in metric names: Kafka refuses a topic whose name
    differs from an existing one only by them (INVALID_TOPIC_EXCEPTION)."""
    base = uuid.uuid4().hex[:10]
    first, second = f"collide.{base}", f"collide_{base}"
    assert kafka_python_results(kadmin.create_topics({first: {}})) == {first: NONE}
    result = kadmin.create_topics({second: {}}, raise_errors=False)
    assert kafka_python_results(result) == {second: INVALID_TOPIC_EXCEPTION}
    assert not exists(kadmin, second)


# --------------------------------------------------------------------------- delete


def test_kafka_python_delete(shared_broker, kadmin):
    name = unique_topic("kp-delete")
    keep = unique_topic("kp-keep")
    kadmin.create_topics({name: {"num_partitions": 2}, keep: {}})
    produce("kafka-python", shared_broker.bootstrap, name, [Msg(b"k", b"v")])
    assert wait_until(lambda: len(topic_partition_dirs(log_dir(shared_broker), name)) == 2, 10)

    result = kadmin.delete_topics([name])
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(name, NONE)]
    assert not exists(kadmin, name)
    assert name not in kadmin.list_topics()
    assert wait_until(lambda: topic_partition_dirs(log_dir(shared_broker), name) == [], 10), "partition dirs removed"
    assert exists(kadmin, keep)
    assert wait_until(lambda: len(topic_partition_dirs(log_dir(shared_broker), keep)) == 1, 10)


def test_confluent_delete(shared_broker, kadmin, cadmin):
    from confluent_kafka.admin import NewTopic

    name = unique_topic("c-delete")
    assert confluent_results(cadmin.create_topics([NewTopic(name, 3, 1)], operation_timeout=30)) == {name: NONE}
    assert confluent_results(cadmin.delete_topics([name], operation_timeout=30)) == {name: NONE}
    assert not exists(kadmin, name)
    assert wait_until(lambda: topic_partition_dirs(log_dir(shared_broker), name) == [], 10)


def test_delete_unknown_topic(kadmin, cadmin):
    from kafka.errors import UnknownTopicOrPartitionError

    missing = unique_topic("never-existed")
    with pytest.raises(UnknownTopicOrPartitionError):
        kadmin.delete_topics([missing])
    result = kadmin.delete_topics([missing], raise_errors=False)
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(missing, UNKNOWN_TOPIC_OR_PARTITION)]
    assert confluent_results(cadmin.delete_topics([missing], operation_timeout=30)) == {missing: UNKNOWN_TOPIC_OR_PARTITION}
    assert not exists(kadmin, missing), "deleting must not create"


def test_delete_then_recreate_starts_at_offset_zero(shared_broker, kadmin):
    bootstrap = shared_broker.bootstrap
    name = unique_topic("recreate")
    [first] = kadmin.create_topics({name: {}})["topics"]
    assert produce("kafka-python", bootstrap, name, [Msg(b"old", f"old-{i}".encode()) for i in range(3)]) == [0, 1, 2]

    kadmin.delete_topics([name])
    assert wait_until(lambda: not exists(kadmin, name), 10)
    [second] = kadmin.create_topics({name: {}})["topics"]
    assert second["error_code"] == NONE
    assert second["topic_id"] != first["topic_id"], "a recreated topic gets a new id"

    assert produce("kafka-python", bootstrap, name, [Msg(b"new", b"new-0")]) == [0]
    got = consume("kafka-python", bootstrap, name, 1, settle_s=0.5)
    assert [(g.offset, g.key, g.value) for g in got] == [(0, b"new", b"new-0")]


def test_confluent_list_all_topics(shared_broker, kadmin, cadmin):
    """AdminClient.list_topics() without a topic sends librdkafka's all-topics
    Metadata request."""
    names = [unique_topic("listed") for _ in range(2)]
    kadmin.create_topics({n: {"num_partitions": 2} for n in names})
    metadata = cadmin.list_topics(timeout=30)
    for n in names:
        assert n in metadata.topics
        assert sorted(metadata.topics[n].partitions) == [0, 1]
    assert [b.id for b in metadata.brokers.values()] == [1]


def test_cluster_metadata_topic_is_off_limits(broker_factory):
    """``__cluster_metadata`` is the KRaft metadata log, not a user topic: Kafka
    refuses to create it (INVALID_REQUEST, "Creation of internal topic
    __cluster_metadata is prohibited.") and clients cannot append to it. Whatever
    a client tries, the broker must restart with its topics intact."""
    from protocol.records import build_batch
    from tests.interop._support import create_topic, list_offset, produce_raw

    broker = broker_factory()
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "keep")
    assert produce_raw(bootstrap, "keep", build_batch([(b"k", b"v", [], 1_700_000_000_000)])).error_code == NONE

    problems = []
    [created] = create_topics_raw(bootstrap, [("__cluster_metadata", 1, 1)])
    if created.error_code != INVALID_REQUEST:
        problems.append(f"CreateTopics __cluster_metadata answered {created.error_code}, expected {INVALID_REQUEST}")
    appended = produce_raw(bootstrap, "__cluster_metadata", build_batch([(b"k", b"not a metadata record", [], 1)]))
    if appended.error_code == NONE:
        problems.append(f"Produce to __cluster_metadata was appended at offset {appended.base_offset}")
    broker.stop()

    try:
        restarted = broker_factory(data_dir=broker.data_dir)
    except RuntimeError as exc:
        problems.append("broker did not restart: " + str(exc)[-600:])
    else:
        latest = list_offset(restarted.bootstrap, "keep", 0, -1)
        if (latest.error_code, latest.offset) != (NONE, 1):
            problems.append(f"topic 'keep' after restart: error {latest.error_code}, end offset {latest.offset}")
    assert not problems, "\n".join(problems)

"""broker/http/metrics.py without a process: the counters the hot path bumps, the
collector's families over a fake broker (caps, deleted topics), the parser of
metrics.listener, and the exposition read back by prometheus-client's parser."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.config import ConfigError, MetricsListener, load_config, parse_metrics_listener
from broker.http.metrics import LATENCY_BUCKETS_S, BrokerMetrics, _cumulative
from broker.loop_monitor import LoopMonitor
from broker.replica.manager import HostedPartitions
from protocol.consumer_offsets import OffsetAndMetadata
from protocol.records import RECORDS_COUNT_OFFSET


def batch(records: int, size: int = 100) -> bytes:
    """Enough of a v2 batch for the counters: its length and its header's record count."""
    data = bytearray(size)
    data[RECORDS_COUNT_OFFSET : RECORDS_COUNT_OFFSET + 4] = records.to_bytes(4, "big")
    return bytes(data)


class FakeLog:
    def __init__(self, end: int, high_watermark: int, sizes=(10,)):
        self.log_end_offset = end
        self.high_watermark = high_watermark
        self.log_start_offset = 0
        self.segments = [SimpleNamespace(size_bytes=s) for s in sizes]


def fake_broker(topics=("a", "b", "c"), logs=None, offsets=None, mirror_rows=(), classic_groups=None, consumer_groups=None):
    logs = logs or {}
    leader = SimpleNamespace(isr=(1,), replicas=(1, 2), min_insync_replicas=2)
    return SimpleNamespace(
        image=SimpleNamespace(
            topics={name: SimpleNamespace(partitions={0: SimpleNamespace(leader=1)}) for name in topics},
            topic_names_by_id={},
            offset=41,
        ),
        replicas=SimpleNamespace(
            leaders={("a", 0): leader}, followers={}, isr_shrinks=2, isr_expands=1,
            hosted=lambda: HostedPartitions(count=4, leaders=3, under_replicated=1, under_min_isr=1),
        ),
        raft=SimpleNamespace(is_leader=True, node=SimpleNamespace(epoch=3), high_watermark=42),
        raft_log=SimpleNamespace(end_offset=42),
        logs=SimpleNamespace(
            opened_logs=lambda: iter(list(logs.items())), logs=logs, open_count=len(logs), log_dirs=[Path("logs")], offline_dirs=set()
        ),
        groups=SimpleNamespace(coordinator=SimpleNamespace(offsets=offsets or {}, groups=classic_groups or {}),
                               consumer_groups=SimpleNamespace(groups=consumer_groups or {})),
        config=SimpleNamespace(listeners=[SimpleNamespace(name="PLAINTEXT")]),
        _connections=[SimpleNamespace(listener_name="PLAINTEXT"), SimpleNamespace(listener_name="PLAINTEXT")],
        loop_monitor=LoopMonitor(),
        mirrors=SimpleNamespace(partition_rows=lambda: iter(mirror_rows)),
        multi_master=SimpleNamespace(partitions={}),
        offset_sync=SimpleNamespace(translator=SimpleNamespace(results=dict)),
        schema_validator=SimpleNamespace(refused_records={}),
        is_broker=True,
        is_controller=True,
        controller=SimpleNamespace(balancer_view=lambda: None),  # not the active controller: no balancer series
    )


def metrics_of(broker, topic_series_max=1000, group_series_max=1000) -> BrokerMetrics:
    return BrokerMetrics(
        broker, MetricsListener("127.0.0.1", 0), topic_series_max=topic_series_max, group_series_max=group_series_max
    )


def samples(metrics: BrokerMetrics) -> dict:
    body, _ = metrics.exposition(None)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def produce_request(*topics):
    return SimpleNamespace(
        acks=-1,
        topic_data=[
            SimpleNamespace(name=name, partition_data=[SimpleNamespace(index=i, records=records) for i, records in parts])
            for name, parts in topics
        ],
    )


def produce_response(errors: dict):
    return SimpleNamespace(
        responses=[
            SimpleNamespace(name=name, partition_responses=[SimpleNamespace(index=i, error_code=e) for i, e in parts])
            for name, parts in errors.items()
        ]
    )


def test_produce_counts_bytes_and_records_of_appended_batches_and_failures():
    metrics = metrics_of(fake_broker())
    request = produce_request(("a", [(0, batch(7, 120)), (1, batch(3, 80))]), ("unknown", [(0, batch(1))]))
    metrics.produced(request, produce_response({"a": [(0, 0), (1, 2)], "unknown": [(0, 3)]}))
    a = metrics.topics["a"]
    assert a[0:2] == [120, 7]  # bytes in, messages in: the failed partition not counted
    assert a[3] == 2 and a[5] == 1  # produce partitions, failed
    assert "unknown" not in metrics.topics  # a topic the image lacks gets no series (any name could come)
    assert metrics.all_topics[3] == 3 and metrics.all_topics[5] == 2
    # acks=0: no answer, counted as appended.
    metrics.produced(produce_request(("b", [(0, batch(5, 90))])), None)
    assert metrics.topics["b"][0:2] == [90, 5]


def test_fetch_counts_consumer_bytes_and_keeps_replication_apart():
    metrics = metrics_of(fake_broker())
    response = SimpleNamespace(
        error_code=0,
        responses=[
            SimpleNamespace(topic="a", topic_id=None, partitions=[SimpleNamespace(records=b"x" * 50, error_code=0), SimpleNamespace(records=None, error_code=1)])
        ],
    )
    metrics.fetched(False, response)
    assert metrics.topics["a"][2] == 50 and metrics.topics["a"][4] == 2 and metrics.topics["a"][6] == 1
    metrics.fetched(True, response)
    assert metrics.replication_bytes_out == 50 and metrics.all_topics[2] == 50


def test_request_latency_buckets_are_prometheus_histograms():
    metrics = metrics_of(fake_broker())
    for elapsed_s in (0.0001, 0.003, 100.0):
        metrics.request_done(0, 9, elapsed_s)
    got = samples(metrics)
    assert got[("kafka_network_requestmetrics_requests_total", (("request", "Produce"), ("version", "9")))] == 3
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", (("le", "0.0005"), ("request", "Produce")))] == 1
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", (("le", "30.0"), ("request", "Produce")))] == 2
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", (("le", "+Inf"), ("request", "Produce")))] == 3
    assert _cumulative((1.0, 2.0), [1, 2, 3]) == [("1.0", 1), ("2.0", 3), ("+Inf", 6)]
    assert len(LATENCY_BUCKETS_S) == len(set(LATENCY_BUCKETS_S))


def test_topic_cap_keeps_the_first_topics_by_name_and_says_how_many_went():
    logs = {(name, 0): FakeLog(5, 5) for name in ("a", "b", "c")}
    broker = fake_broker(logs=logs)
    metrics = metrics_of(broker, topic_series_max=2)
    metrics.produced(produce_request(*[(name, [(0, batch(1))]) for name in ("a", "b", "c")]), produce_response({}))
    got = samples(metrics)
    sized = {dict(labels)["topic"] for name, labels in got if name == "kafka_log_log_size"}
    assert sized == {"a", "b"}
    counted = {dict(labels).get("topic") for name, labels in got if name == "kafka_server_brokertopicmetrics_messagesin_total"}
    assert counted == {None, "a", "b"}  # None: the all-topics series
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", ())] == 3
    assert got[("pybroker_metrics_series_dropped", (("family", "topic"),))] == 1
    # A deleted topic's counters go with it.
    del broker.image.topics["a"]
    samples(metrics)
    assert "a" not in metrics.topics


def test_group_lag_is_capped_and_never_negative():
    logs = {("a", 0): FakeLog(10, 8), ("a", 1): FakeLog(4, 4)}
    offsets = {
        "g1": {("a", 0): OffsetAndMetadata(3, -1, "", 0), ("a", 1): OffsetAndMetadata(9, -1, "", 0)},
        "g2": {("a", 0): OffsetAndMetadata(8, -1, "", 0), ("elsewhere", 0): OffsetAndMetadata(1, -1, "", 0)},
    }
    got = samples(metrics_of(fake_broker(logs=logs, offsets=offsets), group_series_max=2))
    lag = {labels: v for (name, labels), v in got.items() if name == "kafka_consumergroup_lag"}
    assert lag == {
        (("consumergroup", "g1"), ("partition", "0"), ("topic", "a")): 5,  # high watermark 8, committed 3
        (("consumergroup", "g1"), ("partition", "1"), ("topic", "a")): 0,  # committed past the end
    }
    # g2's partition here is dropped by the cap; its partition on another broker is not known here.
    assert got[("pybroker_metrics_series_dropped", (("family", "group_lag"),))] == 1


def test_group_counts_per_type_and_state():
    from broker.coordinators.groups.group import GroupState

    def classic(state):
        return SimpleNamespace(state=state)

    offset = OffsetAndMetadata(1, -1, "", 0)
    broker = fake_broker(
        classic_groups={"c1": classic(GroupState.STABLE), "c2": classic(GroupState.PREPARING_REBALANCE)},
        # c3: offsets only (an Empty classic group, as Kafka makes one); k1: a consumer group's offsets.
        offsets={"c1": {("a", 0): offset}, "c3": {("a", 0): offset, ("a", 1): offset}, "k1": {("a", 0): offset}},
        consumer_groups={"k1": SimpleNamespace(state="Reconciling"), "k2": SimpleNamespace(state="Stable")},
    )
    got = samples(metrics_of(broker))
    prefix = "kafka_server_group_coordinator_metrics_"
    assert {dict(labels)["protocol"]: v for (name, labels), v in got.items() if name == prefix + "group_count"} == {
        "classic": 3, "consumer": 2,
    }
    assert {dict(labels)["state"]: v for (name, labels), v in got.items() if name == prefix + "classic_group_count"} == {
        "PreparingRebalance": 1, "CompletingRebalance": 0, "Stable": 1, "Dead": 0, "Empty": 1,
    }
    assert {dict(labels)["state"]: v for (name, labels), v in got.items() if name == prefix + "consumer_group_count"} == {
        "Empty": 0, "Assigning": 0, "Reconciling": 1, "Stable": 1, "Dead": 0,
    }
    assert got[(prefix + "offset_count", ())] == 4
    legacy = "kafka_coordinator_group_groupmetadatamanager_"
    assert (got[(legacy + "numgroups", ())], got[(legacy + "numgroupsstable", ())], got[(legacy + "numgroupsempty", ())],
            got[(legacy + "numgroupspreparingrebalance", ())], got[(legacy + "numoffsets", ())]) == (3, 1, 1, 1, 4)


def test_state_families():
    got = samples(metrics_of(fake_broker()))
    assert got[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 1
    assert got[("kafka_server_replicamanager_underminisrpartitioncount", ())] == 1
    assert got[("kafka_server_replicamanager_partitioncount", ())] == 4
    assert got[("kafka_server_replicamanager_leadercount", ())] == 3
    assert got[("pybroker_log_open_partitions", ())] == 0
    assert got[("kafka_server_replicamanager_isrshrinks_total", ())] == 2
    assert got[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert got[("kafka_controller_kafkacontroller_globalpartitioncount", ())] == 3
    assert got[("kafka_server_raft_metrics_current_epoch", ())] == 3
    assert got[("kafka_server_broker_metadata_metrics_last_applied_record_offset", ())] == 41
    assert got[("kafka_server_socket_server_metrics_connection_count", (("listener", "PLAINTEXT"),))] == 2
    assert got[("pybroker_event_loop_lag_seconds_count", ())] == 0
    assert got[("pybroker_event_loop_lag_max_seconds", ())] == 0
    assert got[("pybroker_event_loop_lag_cpu_max_seconds", ())] == 0
    assert got[("pybroker_event_loop_lag_recent_max_seconds", ())] == 0


def test_offline_log_dirs_are_counted_and_named():
    broker = fake_broker()
    broker.logs.log_dirs = [Path("logs"), Path("logs2")]
    got = samples(metrics_of(broker))
    assert got[("kafka_log_logmanager_offlinelogdirectorycount", ())] == 0
    broker.logs.offline_dirs = {Path("logs2")}
    got = samples(metrics_of(broker))
    assert got[("kafka_log_logmanager_offlinelogdirectorycount", ())] == 1
    assert got[("kafka_log_logmanager_logdirectoryoffline", (("logdirectory", "logs2"),))] == 1
    assert got[("kafka_log_logmanager_logdirectoryoffline", (("logdirectory", "logs"),))] == 0


def test_the_loop_lag_maxima_are_published():
    import time

    broker = fake_broker()
    now_s = time.monotonic()
    broker.loop_monitor.record(80.0, now_s - 1_000)  # long before the recent window
    broker.loop_monitor.record(30.0, now_s)
    got = samples(metrics_of(broker))
    assert got[("pybroker_event_loop_lag_seconds_count", ())] == 2
    assert got[("pybroker_event_loop_lag_max_seconds", ())] == 0.08
    assert got[("pybroker_event_loop_lag_recent_max_seconds", ())] == 0.03


def test_schema_registry_families_only_where_the_registry_is_served():
    import json

    from broker.http.schema_registry_metrics import SchemaRegistryMetrics
    from broker.schemas.state import RegistryState

    metrics = metrics_of(fake_broker())
    assert not any(name.startswith("pybroker_schema_registry") for name, _ in samples(metrics))

    state = RegistryState()
    for subject, fields in (("a-value", ["x"]), ("b-value", ["x"]), ("b-value", ["x", "y"])):
        schema = {"type": "record", "name": "R", "fields": [{"name": f, "type": "string", "default": ""} for f in fields]}
        for key, value in state.plan_register(subject, "AVRO", json.dumps(schema)).records:
            state.apply(key, value)
    for key, value in state.plan_delete_subject("a-value", permanent=False)[1]:
        state.apply(key, value)
    registry = metrics.schema_registry = SchemaRegistryMetrics(SimpleNamespace(state=state))
    registry.request_done("POST", 200, 0.002)
    registry.request_done("POST", 409, 0.001)
    registry.request_done("GET", 404, 0.0001)
    registry.request_done("PATCH", 405, 0.0001)  # methods the API does not serve share one label
    got = samples(metrics)
    # Ids stay while a version uses them, soft-deleted or not; a soft-deleted subject is not counted.
    assert got[("pybroker_schema_registry_schemas", ())] == 2
    assert got[("pybroker_schema_registry_subjects", ())] == 1
    for method, status in (("POST", "200"), ("POST", "409"), ("GET", "404"), ("other", "405")):
        assert got[("pybroker_schema_registry_requests_total", (("method", method), ("status", status)))] == 1
    assert got[("pybroker_schema_registry_request_duration_seconds_count", (("method", "POST"),))] == 2
    assert got[("pybroker_schema_registry_request_duration_seconds_bucket", (("le", "0.001"), ("method", "POST")))] == 1
    assert got[("pybroker_schema_registry_request_duration_seconds_sum", (("method", "POST"),))] == pytest.approx(0.003)


def test_mirror_partition_families():
    from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PENDING_PROMOTE
    from protocol.errors import ErrorCode
    from replication.mirror_core import MirrorPartition

    behind = MirrorPartition("a", 0, started_ms=0, source_high_watermark=50, last_fetch_ms=1_000, caught_up_ms=1)
    caught_up = MirrorPartition("b", 0, started_ms=0, source_high_watermark=7, last_fetch_ms=2_000, error=ErrorCode.NETWORK_EXCEPTION)
    rows = [
        ("east", "a", 0, MIRROR_ACTIVE, behind, FakeLog(40, 40)),
        ("east", "b", 0, MIRROR_PENDING_PROMOTE, caught_up, FakeLog(7, 7)),
        ("east", "gone", 0, MIRROR_ACTIVE, caught_up, FakeLog(7, 7)),  # not among the kept topics
    ]
    got = samples(metrics_of(fake_broker(mirror_rows=rows), topic_series_max=2))
    a = (("link", "east"), ("partition", "0"), ("topic", "a"))
    b = (("link", "east"), ("partition", "0"), ("topic", "b"))
    assert got[("pybroker_mirror_partition_lag_records", a)] == 10
    assert got[("pybroker_mirror_partition_lag_records", b)] == 0
    assert got[("pybroker_mirror_partition_lag_ms", a)] > 0
    # b holds what the source last showed, but the source does not answer: its lag
    # in time grows from the last answer that showed it caught up (it never had one).
    assert got[("pybroker_mirror_partition_lag_ms", b)] > 0
    assert got[("pybroker_mirror_partition_last_fetch_timestamp_ms", a)] == 1_000
    assert got[("pybroker_mirror_partition_state", tuple(sorted(a + (("state", "ACTIVE"),))))] == 0
    assert got[("pybroker_mirror_partition_state", tuple(sorted(b + (("state", "PENDING_PROMOTE"),))))] == 2
    assert got[("pybroker_mirror_partition_error", a)] == 0
    assert got[("pybroker_mirror_partition_error", b)] == 1
    assert not any(labels and ("topic", "gone") in labels for _, labels in got)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("http://127.0.0.1:9404", MetricsListener("127.0.0.1", 9404)),
        ("http://0.0.0.0:9404/", MetricsListener("0.0.0.0", 9404)),
        ("http://:9404", MetricsListener("", 9404)),
        ("http://[::1]:0", MetricsListener("::1", 0)),
        ("", None),
    ],
)
def test_metrics_listener_values(raw, expected):
    assert parse_metrics_listener("metrics.listener", raw) == expected


@pytest.mark.parametrize("raw", ["127.0.0.1:9404", "https://h:1", "http://h", "http://h:99999", "http://h:1/metrics", "tcp://h:1"])
def test_metrics_listener_refusals_name_the_key(raw):
    with pytest.raises(ConfigError, match="metrics.listener"):
        load_config({"metrics.listener": raw})


def test_off_by_default_and_caps_validated():
    config = load_config({})
    assert config["metrics.listener"] is None
    assert BrokerMetrics.from_config(SimpleNamespace(config=config)) is None
    with pytest.raises(ConfigError, match="metrics.topic.series.max"):
        load_config({"metrics.topic.series.max": "-1"})


def test_isr_changes_are_counted_when_the_controller_commits_them(tmp_path):
    """ReplicaManager counts an ISR shrink or expansion of a partition it leads once
    AlterPartition's answer is applied, not when it is proposed or when stale."""
    import uuid

    from broker.replica.manager import ReplicaManager
    from tests.unit.test_replica_manager_roles import fake_broker as replica_broker
    from tests.unit.test_replica_manager_roles import replicated_image

    broker, plog = replica_broker(tmp_path, replicated_image(leader=1, leader_epoch=3))
    replicas = ReplicaManager(broker)
    replicas.registration_caught_up()
    leader = replicas.leader_for("t", 0)

    def answer(isr, partition_epoch):
        replicas._apply_alter_response(
            {("t", 0): (leader, None)},
            SimpleNamespace(topics=[SimpleNamespace(
                topic_id=uuid.UUID(int=7),
                partitions=[SimpleNamespace(partition_index=0, error_code=0, leader_epoch=3, isr=isr, partition_epoch=partition_epoch)],
            )]),
            0,
        )

    answer([1, 2], 4)
    assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 0)
    answer([1], 3)  # an older partition epoch: not applied, not counted
    assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 0)
    answer([1, 2, 3], 5)
    assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 1)
    plog.close()


def test_a_scrape_of_many_partitions_lets_the_loop_run_and_says_the_same():
    """The endpoint's scrape gathers in slices on the loop and formats on a
    thread: other tasks run meanwhile, and the series are those of a scrape in
    one piece (the process' own series aside, which move between the two)."""
    import asyncio
    import gc

    partitions = 20_000
    logs = {("t", p): FakeLog(p, p) for p in range(partitions)}
    metrics = metrics_of(fake_broker(topics=("t",), logs=logs))

    def without_process(body: bytes) -> dict:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            if not family.name.startswith("process_")
            for s in family.samples
        }

    async def scrape_while_ticking():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        body, _ = await metrics.exposition_off_loop(None)
        stop.set()
        await task
        return body, ticks

    body, ticks = asyncio.run(scrape_while_ticking())
    assert ticks >= partitions // 1000  # at least one turn of the loop per slice
    assert gc.isenabled()
    got = without_process(body)
    assert got == without_process(metrics.exposition(None)[0])
    assert got[("kafka_log_log_logendoffset", (("partition", "19999"), ("topic", "t")))] == 19999

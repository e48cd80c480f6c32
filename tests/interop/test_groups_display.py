"""A KIP-848 consumer group beside a classic one, as the tools, the REST proxy, the
web console and the metrics show them: one broker (console, REST and metrics
listeners on), a classic group of one confluent-kafka consumer (``range``) and a
``group.protocol=consumer`` group of two, both Stable on a 4-partition topic
with their offsets committed.

- ``pybroker groups`` (and its ``consumer-groups`` alias) as kafka-consumer-groups.sh
  4.x: ``--list --type`` (TYPE Classic / Consumer, the filter), ``--describe
  --state --verbose`` (GROUP-EPOCH, TARGET-ASSIGNMENT-EPOCH), ``--members
  --verbose`` (CURRENT-EPOCH, CURRENT-ASSIGNMENT, TARGET-EPOCH, TARGET-ASSIGNMENT),
  ``--offsets``; ``--reset-offsets`` refuses the consumer group while it has members.
- REST v3: ``type`` (CLASSIC, CONSUMER), ``is_mixed_consumer_group``, the assignor,
  Confluent's state names, the consumer group's consumers and their assignments.
- The console's groups page (type and protocol columns) and a consumer group's
  page (epochs, member epoch, current and target assignment).
- ``kafka_server_group_coordinator_metrics_*`` group counts per type and state.

Every wait is bounded; the consumers are closed and the broker stopped at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PROJECT_ROOT, BrokerProcess, wait_until
from tests.interop._rest import Rest, rest_port
from tests.interop._support import Msg, create_topic, produce, unique_topic
from tests.interop.test_console import console_url, http
from tests.interop.test_metrics import metrics_port

confluent_kafka = pytest.importorskip("confluent_kafka")
if confluent_kafka.libversion()[1] < 0x020C0000:
    pytest.skip("group.protocol=consumer needs librdkafka 2.12+", allow_module_level=True)

PARTITIONS = 4
WAIT_S = 40


class Groups:
    def __init__(self, broker: BrokerProcess, topic: str, classic: str, consumer: str, members: list):
        self.broker, self.topic, self.classic, self.consumer, self.members = broker, topic, classic, consumer, members


def consume_and_commit(consumers, records: int) -> None:
    """Polls every consumer until all ``records`` are read and committed (bounded)."""
    seen = 0
    deadline = time.monotonic() + WAIT_S
    while seen < records and time.monotonic() < deadline:
        for c in consumers:
            message = c.poll(0.05)
            if message is not None and message.error() is None:
                seen += 1
                c.commit(message=message, asynchronous=False)
    assert seen == records, f"consumed {seen} of {records}"


def describe(broker, group: str):
    from broker.tools.groups import GroupTool

    tool = GroupTool(broker.bootstrap, timeout_s=10)
    try:
        return tool.describe_group(group)
    finally:
        tool.close()


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("groups-display"), {
        "console.listener": "http://127.0.0.1:0", "rest.listener": "http://127.0.0.1:0",
        "metrics.listener": "http://127.0.0.1:0", "group.consumer.heartbeat.interval.ms": "300",
    }).start()
    consumers = []
    try:
        topic = unique_topic("display")
        create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
        classic, consumer = unique_topic("classic-group"), unique_topic("consumer-group")
        common = {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        consumers.append(confluent_kafka.Consumer({**common, "group.id": classic, "client.id": "classic-member",
                                                   "partition.assignment.strategy": "range"}))
        members = []
        for i in range(2):
            members.append(confluent_kafka.Consumer({**common, "group.id": consumer, "group.protocol": "consumer",
                                                     "client.id": f"kip848-member-{i}"}))
        consumers += members
        for c in consumers:
            c.subscribe([topic])

        def assigned() -> bool:
            for c in consumers:
                c.poll(0.05)  # nothing is produced yet: only the group protocol moves
            return len(consumers[0].assignment()) == PARTITIONS and all(len(m.assignment()) == PARTITIONS // 2 for m in members)

        assert wait_until(assigned, timeout_s=WAIT_S)
        # Produced once both groups are assigned: every record is read and committed by its owner.
        for p in range(PARTITIONS):
            produce("confluent", broker.bootstrap, topic, [Msg(None, b"v%d-%d" % (p, i)) for i in range(3)], partition=p)
        consume_and_commit(consumers[:1], 3 * PARTITIONS)
        consume_and_commit(members, 3 * PARTITIONS)
        assert wait_until(lambda: describe(broker, consumer).state == "Stable", timeout_s=WAIT_S)
        assert wait_until(lambda: describe(broker, classic).state == "Stable", timeout_s=WAIT_S)
        yield Groups(broker, topic, classic, consumer, members)
    finally:
        for c in consumers:
            c.close()
        broker.stop()


def run_groups(broker, *args, command: str = "groups") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", command, "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def test_tool_lists_types_and_describes_epochs_and_target_assignments(groups):
    broker, consumer, classic, topic = groups.broker, groups.consumer, groups.classic, groups.topic
    listed = run_groups(broker, "--list", "--type")
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "TYPE"], listed
    assert {tuple(line.split()) for line in lines[1:]} >= {(classic, "Classic"), (consumer, "Consumer")}
    assert lines[0].index("TYPE") == max(15, *(len(line.split()[0]) for line in lines[1:])) + 10 + 1
    both = run_groups(broker, "--list", "--type", "consumer", "--state")
    assert [line.split() for line in both.stdout.splitlines()] == [["GROUP", "TYPE", "STATE"], [consumer, "Consumer", "Stable"]]
    assert run_groups(broker, "list", "--type", "classic").stdout.splitlines()[1:] == [f"{classic:<{max(15, len(classic)) + 10}} Classic"]
    assert consumer in run_groups(broker, "--list", command="consumer-groups").stdout.split()
    refused = run_groups(broker, "--list", "--type", "share")
    assert refused.returncode == 2 and "--type: share: the types are classic, consumer" in refused.stderr

    state = run_groups(broker, "--describe", "--group", consumer, "--state", "--verbose")
    lines = state.stdout.splitlines()
    assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"], state
    group_id, _, _, assignor, group_state, group_epoch, target_epoch, count = lines[2].split()
    assert (group_id, assignor, group_state, count) == (consumer, "uniform", "Stable", "2")
    assert int(group_epoch) == int(target_epoch) >= 2  # two members joined: two epochs at least
    classic_state = run_groups(broker, "--describe", "--group", classic, "--state", "--verbose").stdout.splitlines()[2]
    assert classic_state.split()[3:] == ["range", "Stable", "-", "-", "1"]

    members = run_groups(broker, "describe", consumer, "--members", "--verbose")
    lines = members.stdout.splitlines()
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
              "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    assert lines[1].split() == header, members
    rows = [line.split() for line in lines[2:]]
    assert sorted(r[3] for r in rows) == ["kip848-member-0", "kip848-member-1"]
    owned = []
    for r in rows:
        assert r[4] == "2" and r[5] == r[7] == target_epoch and r[6] == r[8], r  # at its target: reconciled
        assert re.fullmatch(rf"{re.escape(topic)}:\d,\d", r[6]), r
        owned += [int(p) for p in r[6].split(":")[1].split(",")]
    assert sorted(owned) == list(range(PARTITIONS))

    offsets = run_groups(broker, "describe", consumer)
    rows = [line.split() for line in offsets.stdout.splitlines()[2:]]
    assert sorted(int(r[2]) for r in rows) == list(range(PARTITIONS)), offsets
    assert all(r[3:6] == ["3", "3", "0"] and r[6] != "-" for r in rows), offsets
    verbose = run_groups(broker, "describe", consumer, "--offsets", "--verbose").stdout.splitlines()
    assert verbose[1].split()[3] == "LEADER-EPOCH" and all(line.split()[3] == "0" for line in verbose[2:])
    # A consumer group with members is not reset: its state is ConsumerGroupDescribe's, not DescribeGroups' Dead.
    reset = run_groups(broker, "--reset-offsets", "--group", consumer, "--topic", topic, "--to-earliest", "--execute")
    assert reset.returncode == 1 and f"the group '{consumer}' is inactive, but the current state is Stable" in reset.stderr


def test_rest_shows_type_assignor_and_consumers(groups):
    broker, consumer, classic = groups.broker, groups.consumer, groups.classic
    rest = Rest(rest_port(broker))
    cid = rest.cluster_id()
    status, listed, _ = rest.get(f"/v3/clusters/{cid}/consumer-groups")
    assert status == 200, listed
    by_id = {g["consumer_group_id"]: g for g in listed["data"]}
    assert {k: by_id[consumer][k] for k in ("type", "state", "partition_assignor", "is_simple", "is_mixed_consumer_group")} == {
        "type": "CONSUMER", "state": "STABLE", "partition_assignor": "uniform", "is_simple": False, "is_mixed_consumer_group": False,
    }
    assert (by_id[classic]["type"], by_id[classic]["state"], by_id[classic]["partition_assignor"]) == ("CLASSIC", "STABLE", "range")
    base = f"/v3/clusters/{cid}/consumer-groups/{consumer}"
    status, one, _ = rest.get(base)
    assert status == 200 and one["type"] == "CONSUMER" and one["kind"] == "KafkaConsumerGroup"
    status, consumers, _ = rest.get(base + "/consumers")
    assert sorted(c["client_id"] for c in consumers["data"]) == ["kip848-member-0", "kip848-member-1"]
    partitions = []
    for c in consumers["data"]:
        # Followed as linked: a member id is base64 (librdkafka's hold "+" and "/"), percent-encoded in the link.
        status, assignments, raw = rest.get(urllib.parse.urlsplit(c["assignments"]["related"]).path)
        assert status == 200 and len(assignments["data"]) == PARTITIONS // 2, (c, raw)
        status, again, raw = rest.get(urllib.parse.urlsplit(c["metadata"]["self"]).path)
        assert status == 200 and again["consumer_id"] == c["consumer_id"], raw
        partitions += [a["partition_id"] for a in assignments["data"]]
    assert sorted(partitions) == list(range(PARTITIONS))
    status, lags, _ = rest.get(base + "/lags")
    assert status == 200 and len(lags["data"]) == PARTITIONS and all(row["lag"] == 0 and row["consumer_id"] for row in lags["data"])


def test_console_shows_type_protocol_and_member_epochs(groups):
    broker, consumer, classic, topic = groups.broker, groups.consumer, groups.classic, groups.topic
    url = console_url(broker)
    status, _, page = http(url + "/groups")
    assert status == 200
    rows = {cells[0]: cells[1:] for cells in (re.findall(r"<td>(.*?)</td>", re.sub(r"<a [^>]*>|</a>", "", row))
                                              for row in re.findall(r"<tr>(.*?)</tr>", page)) if cells}
    # group, type, protocol, coordinator, state, members, partitions committed, lag
    assert rows[consumer] == ["consumer", "consumer", "1", "Stable", "2", str(PARTITIONS), "0"], rows
    assert rows[classic] == ["classic", "consumer", "1", "Stable", "1", str(PARTITIONS), "0"], rows
    status, _, page = http(url + f"/group?id={consumer}")
    assert status == 200
    summary = re.search(r'id="group-summary">(.*?)</p>', page).group(1)
    assert "consumer group (KIP-848), assignor uniform" in summary and "target assignment epoch" in summary
    members = re.search(r'<table id="members">(.*?)</table>', page, re.S).group(1)
    assert "<th>member epoch</th>" in members and "<th>target assignment</th>" in members
    body = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(<td>.*?)</tr>", members)]
    assert len(body) == 2 and "reconciling" not in members
    for cells in body:
        epoch, assignment, target = cells[4:7]
        assert int(epoch) >= 2 and assignment == target and assignment.count(f"{topic}-") == 2, cells
    status, _, page = http(url + f"/group?id={classic}")
    assert status == 200 and "classic group, protocol consumer/range" in page


def test_metrics_count_groups_per_type_and_state(groups):
    port = metrics_port(groups.broker)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    prefix = "kafka_server_group_coordinator_metrics_"
    assert samples[(prefix + "group_count", (("protocol", "consumer"),))] == 1
    assert samples[(prefix + "group_count", (("protocol", "classic"),))] == 1
    assert samples[(prefix + "consumer_group_count", (("state", "Stable"),))] == 1
    assert samples[(prefix + "consumer_group_count", (("state", "Reconciling"),))] == 0
    assert samples[(prefix + "classic_group_count", (("state", "Stable"),))] == 1
    assert samples[(prefix + "offset_count", ())] == 2 * PARTITIONS
    assert samples[("kafka_coordinator_group_groupmetadatamanager_numgroups", ())] == 1
    assert samples[("kafka_coordinator_group_groupmetadatamanager_numgroupsstable", ())] == 1
    assert samples[("kafka_coordinator_group_groupmetadatamanager_numoffsets", ())] == 2 * PARTITIONS

"""``pybroker console-producer`` and ``console-consumer`` against a running broker.

The producer's records are read back with confluent-kafka (keys, headers,
partitions chosen as librdkafka's murmur2 partitioner chooses them, so keyed
records land where Java's and librdkafka's would); the consumer prints what
confluent-kafka produced, in Kafka's formats, commits as a group member, and
with read_committed leaves out an aborted transaction; two of them in one group
split the partitions after a rebalance."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT_ROOT
from tests.interop._support import create_topic, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient

TIMEOUT_S = 30


def pybroker(broker, *args, stdin: str | bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args[:1], "--bootstrap-server", broker.bootstrap, *args[1:]],
        capture_output=True, text=not isinstance(stdin, bytes), cwd=PROJECT_ROOT, timeout=90, check=False, input=stdin,
    )


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    for _ in range(200):  # bounded: 200 polls of at most 0.2 s
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message)
        if len(got) >= expected:
            break
    consumer.close()
    return got


def test_producer_keys_headers_and_partitions_as_librdkafka_chooses(shared_broker):
    broker = shared_broker
    topic = unique_topic("cliprod")
    create_topic(broker.bootstrap, topic, partitions=4)
    lines = "".join(f"h{i}:x{i},flag\tkey-{i}|value {i}\n" for i in range(40))
    produced = pybroker(broker, "console-producer", "--topic", topic, "--property", "parse.key=true",
                        "--property", "key.separator=|", "--property", "parse.headers=true",
                        "--compression-codec", "lz4", stdin=lines)
    assert (produced.returncode, produced.stdout, produced.stderr) == (0, "", "")
    got = read_all(broker.bootstrap, topic, 4, 40)
    assert sorted(m.value() for m in got) == sorted(f"value {i}".encode() for i in range(40))
    for m in got:
        i = int(m.key().decode().split("-")[1])
        assert m.headers() == [(f"h{i}", f"x{i}".encode()), ("flag", None)]

    # librdkafka's murmur2 partitioner is Java's default partitioner for keyed records.
    rd = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    reference = unique_topic("cliprodref")
    create_topic(broker.bootstrap, reference, partitions=4)
    for i in range(40):
        rd.produce(reference, value=b"v", key=f"key-{i}".encode())
    assert rd.flush(TIMEOUT_S) == 0
    expected = {m.key(): m.partition() for m in read_all(broker.bootstrap, reference, 4, 40)}
    assert {m.key(): m.partition() for m in got} == expected

    # Records go in batches: 40 lines in at most one batch per partition, not one request per line.
    offsets = pybroker(broker, "get-offsets", "--topic", topic)
    assert sum(int(line.rsplit(":", 1)[1]) for line in offsets.stdout.split()) == 40


def test_producer_sync_null_marker_acks_and_errors(shared_broker):
    broker = shared_broker
    topic = unique_topic("clisync")
    create_topic(broker.bootstrap, topic, partitions=1)
    produced = pybroker(broker, "console-producer", "--topic", topic, "--sync", "--producer-property", "acks=1",
                        "--property", "parse.key=true", "--property", "null.marker=<null>",
                        stdin="<null>\tno key\nk\t<null>\nplain\tvalue\n")
    assert produced.returncode == 0, produced.stderr
    got = read_all(broker.bootstrap, topic, 1, 3)
    assert [(m.key(), m.value(), m.offset()) for m in got] == [(None, b"no key", 0), (b"k", None, 1), (b"plain", b"value", 2)]
    fire_and_forget = pybroker(broker, "console-producer", "--topic", topic, "--producer-property", "acks=0", stdin="a\nb\n")
    assert fire_and_forget.returncode == 0, fire_and_forget.stderr
    no_separator = pybroker(broker, "console-producer", "--topic", topic, "--property", "parse.key=true", stdin="no tab\n")
    assert no_separator.returncode == 2 and no_separator.stderr == (
        "pybroker console-producer: line 1: no key separator '\\t' (parse.key=true)\n"
    )
    bad_acks = pybroker(broker, "console-producer", "--topic", topic, "--producer-property", "acks=2", stdin="")
    assert bad_acks.returncode == 2 and "acks" in bad_acks.stderr


def test_consumer_formats_offsets_and_partitions(shared_broker):
    broker = shared_broker
    topic = unique_topic("clicons")
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2, timestamp=1_700_000_000_000 + i,
                         headers=[("h", b"1")] if i == 0 else None)
    assert producer.flush(TIMEOUT_S) == 0

    out = pybroker(broker, "console-consumer", "--topic", topic, "--partition", "0", "--offset", "earliest",
                   "--max-messages", "3", "--property", "print.timestamp=true", "--property", "print.partition=true",
                   "--property", "print.offset=true", "--property", "print.headers=true", "--property", "print.key=true",
                   "--property", "key.separator=|")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "CreateTime:1700000000000|Partition:0|Offset:0|h:1|k0|v0\n"
        "CreateTime:1700000000002|Partition:0|Offset:1|NO_HEADERS|k2|v2\n"
        "CreateTime:1700000000004|Partition:0|Offset:2|NO_HEADERS|k4|v4\n"
    )
    assert out.stderr == "Processed a total of 3 messages\n"
    from_offset = pybroker(broker, "console-consumer", "--topic", topic, "--partition", "1", "--offset", "1",
                           "--timeout-ms", "1500")
    assert from_offset.stdout == "v3\nv5\n"
    everything = pybroker(broker, "console-consumer", "--topic", topic, "--from-beginning", "--timeout-ms", "1500")
    assert sorted(everything.stdout.split()) == [f"v{i}" for i in range(6)]
    latest = pybroker(broker, "console-consumer", "--topic", topic, "--timeout-ms", "1000")
    assert (latest.returncode, latest.stdout, latest.stderr) == (0, "", "Processed a total of 0 messages\n")

    usage = pybroker(broker, "console-consumer", "--topic", topic, "--offset", "3")
    assert usage.returncode == 2 and usage.stderr.startswith("pybroker console-consumer: --offset needs --partition")
    missing = pybroker(broker, "console-consumer", "--topic", "no-such-topic-here", "--timeout-ms", "500")
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_consumer_group_member_commits_what_it_printed(shared_broker):
    broker = shared_broker
    topic = unique_topic("cligroup")
    group = unique_topic("cligroupid")
    create_topic(broker.bootstrap, topic, partitions=3)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0

    first = pybroker(broker, "console-consumer", "--topic", topic, "--group", group, "--from-beginning",
                     "--max-messages", "12")
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.split()) == 12
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    committed = admin.list_consumer_group_offsets([confluent_kafka.ConsumerGroupTopicPartitions(group)])
    offsets = {tp.partition: tp.offset for tp in committed[group].result(timeout=TIMEOUT_S).topic_partitions}
    assert sum(o for o in offsets.values() if o > 0) == 12

    # Committed partitions go on from their offsets; one never printed from has none, so
    # --from-beginning (auto.offset.reset=earliest) applies to it alone.
    rest = pybroker(broker, "console-consumer", "--topic", topic, "--group", group, "--from-beginning", "--timeout-ms", "2000")
    assert rest.returncode == 0, rest.stderr
    assert sorted(first.stdout.split() + rest.stdout.split(), key=lambda v: int(v[1:])) == [f"v{i}" for i in range(30)]
    described = pybroker(broker, "groups", "describe", group, "--state")
    assert described.stdout.splitlines()[2].split()[-2] == "Empty", described.stdout  # the member left when it ended


def test_read_committed_skips_an_aborted_transaction(shared_broker):
    broker = shared_broker
    topic = unique_topic("clitxn")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(TIMEOUT_S)
    for outcome, values in (("abort", [b"aborted-1", b"aborted-2"]), ("commit", [b"kept-1", b"kept-2"])):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        producer.flush(TIMEOUT_S)
        getattr(producer, f"{outcome}_transaction")(TIMEOUT_S)
    committed = pybroker(broker, "console-consumer", "--topic", topic, "--from-beginning", "--timeout-ms", "1500",
                         "--isolation-level", "read_committed")
    assert committed.stdout == "kept-1\nkept-2\n"
    everything = pybroker(broker, "console-consumer", "--topic", topic, "--from-beginning", "--timeout-ms", "1500")
    assert everything.stdout == "aborted-1\naborted-2\nkept-1\nkept-2\n"


def test_two_console_consumers_share_a_group(shared_broker):
    """Two members of one group split the partitions (range assignor, a rebalance when the
    second joins) and together print every record once."""
    broker = shared_broker
    topic = unique_topic("clishare")
    group = unique_topic("clishareg")
    create_topic(broker.bootstrap, topic, partitions=2)

    def member():
        return subprocess.Popen(
            [sys.executable, "-m", "broker", "console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
             "--group", group, "--max-messages", "10", "--timeout-ms", "30000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT,
        )

    def assignments() -> list[str]:
        """The members' assignments in the members' table (``t:0,1``), sorted."""
        out = pybroker(broker, "groups", "describe", group, "--members", "--verbose").stdout
        return sorted(word for line in out.splitlines() for word in line.split() if word.startswith(f"{topic}:"))

    first = member()
    second = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and assignments() != [f"{topic}:0,1"]:
            time.sleep(0.3)
        assert assignments() == [f"{topic}:0,1"], "the first member holds both partitions"
        second = member()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and assignments() != [f"{topic}:0", f"{topic}:1"]:
            time.sleep(0.3)
        assert assignments() == [f"{topic}:0", f"{topic}:1"], "after the rebalance each holds one"
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(20):
            producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
        assert producer.flush(TIMEOUT_S) == 0
        outputs = [process.communicate(timeout=60)[0].split() for process in (first, second)]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)
    assert all(len(out) == 10 for out in outputs), outputs
    assert sorted(outputs[0] + outputs[1], key=lambda v: int(v[1:])) == [f"v{i}" for i in range(20)]
    # Each member printed one partition's records: even values on one, odd on the other.
    assert {int(v[1:]) % 2 for v in outputs[0]} != {int(v[1:]) % 2 for v in outputs[1]}

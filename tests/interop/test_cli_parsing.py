"""The admin tools' pure parts, without a broker: Kafka's murmur2 (its own test
vectors), the argument languages (``k=[a,b]`` config lists, partition ranges,
ISO durations, replica assignments, properties files with continuations,
console-producer lines) and the progress bars (shown on a TTY only)."""

from __future__ import annotations

import io

import pytest

from broker.tools.client import ToolError, read_properties, settings_from_properties
from broker.tools.configs import split_config_list
from broker.tools.console import LineFormat, murmur2, partition_for_key, range_assign
from broker.tools.group_admin import parse_duration_ms, parse_topic_partitions
from broker.tools.offsets import parse_offset_json, parse_partitions, parse_time
from broker.tools.progress import progress, track_dump
from broker.tools.topics import format_uuid, parse_replica_assignment, parse_uuid, topic_filter


def test_murmur2_matches_kafkas_test_vectors():
    # Apache Kafka's UtilsTest.testMurmur2 values.
    vectors = {
        "21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
        "a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        "abc": 479470107,
    }
    assert {k: murmur2(k.encode()) for k in vectors} == vectors
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_config_lists_and_names():
    assert split_config_list("a=1,b=[x,y,z],c=") == [("a", "1"), ("b", "x,y,z"), ("c", "")]
    assert split_config_list("SCRAM-SHA-256=[iterations=8192,password=p=w]") == [
        ("SCRAM-SHA-256", "iterations=8192,password=p=w")
    ]
    for bad in ("a=[1,2", "a=1]", "novalue"):
        with pytest.raises(ToolError):
            split_config_list(bad)


def test_partitions_times_durations_and_assignments():
    assert parse_partitions("0,2-4,3") == {0, 2, 3, 4}
    assert parse_partitions(None) is None
    with pytest.raises(ToolError):
        parse_partitions("4-2")
    assert [parse_time(t) for t in ("latest", "earliest", "max-timestamp", "-1", "1700000000000")] == [
        -1, -2, -3, -1, 1_700_000_000_000
    ]
    with pytest.raises(ToolError):
        parse_time("-4")
    assert parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 3600 + 3 * 60 + 4.5) * 1000
    assert parse_duration_ms("PT30M") == 1_800_000
    for bad in ("P", "PT", "1H", "P1H"):
        with pytest.raises(ToolError):
            parse_duration_ms(bad)
    assert parse_topic_partitions(["t", "u:2,0"]) == [("t", None), ("u", [0, 2])]
    assert parse_replica_assignment("1:2,2:3") == [[1, 2], [2, 3]]
    for bad in ("1:1", "1:2,3", "a:b"):
        with pytest.raises(ToolError):
            parse_replica_assignment(bad)
    with pytest.raises(ToolError):
        parse_offset_json('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}')


def test_topic_ids_and_filters():
    text = "IDFYbhTjTuilijsDzWcaNA"
    assert format_uuid(parse_uuid(text)) == text
    with pytest.raises(ToolError):
        parse_uuid("short")
    accept = topic_filter("a.*,b")
    assert [n for n in ("a1", "b", "bb", "xa1") if accept(n)] == ["a1", "b"]


def test_properties_files_and_settings(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\nsecurity.protocol = SASL_PLAINTEXT\nsasl.mechanism: SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n'
        '    username="carol" \\\n    password="carol-secret";\n'
    )
    properties = read_properties(str(path))
    assert properties["security.protocol"] == "SASL_PLAINTEXT" and properties["sasl.mechanism"] == "SCRAM-SHA-512"
    settings = settings_from_properties(properties)
    assert (settings.sasl_mechanism, settings.sasl_username, settings.sasl_password) == ("SCRAM-SHA-512", "carol", "carol-secret")
    assert "carol-secret" not in repr(settings)
    with pytest.raises(ToolError, match="security.protocol"):
        settings_from_properties({"security.protocol": "SSLv3"})
    with pytest.raises(ToolError, match="username"):
        settings_from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                  "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;"})


def test_console_producer_lines():
    fmt = LineFormat(parse_key=True, parse_headers=True, null_marker="~")
    assert fmt.parse("a:1,b,c:~\tk\tv\tw", 1) == (b"k", b"v\tw", [("a", b"1"), ("b", None), ("c", None)])
    assert fmt.parse("\t~\tv", 1) == (None, b"v", [])
    with pytest.raises(ToolError, match="line 3"):
        LineFormat(parse_key=True).parse("no separator", 3)


def test_range_assignor_spreads_partitions_like_kafka():
    members = {"m2": ["t"], "m1": ["t", "u"]}
    assert range_assign(members, {"t": 5, "u": 1}) == {"m1": [("t", 0), ("t", 1), ("t", 2), ("u", 0)], "m2": [("t", 3), ("t", 4)]}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_only_on_a_terminal(tmp_path):
    piped = io.StringIO()
    with progress(1000, "reset", stream=piped) as bar:
        bar.update(1000)
    assert piped.getvalue() == ""
    terminal = _Terminal()
    with progress(1000, "reset", stream=terminal) as bar:
        bar.update(500)
        assert bar.n == 500
    assert "reset:   0%" in terminal.getvalue() and "0/1000" in terminal.getvalue()
    small = _Terminal()
    with progress(10, "reset", stream=small) as bar:
        bar.update(10)
    assert small.getvalue() == ""

    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(bytes(2000))
    lines = [f"Dumping {segment}", "baseOffset: 0 position: 0 x", "baseOffset: 5 position: 1500 x"]
    terminal = _Terminal()
    assert list(track_dump(iter(lines), [str(segment)], stream=terminal, stdout=io.StringIO())) == lines
    assert terminal.getvalue() == ""  # 2 kB: below the size worth a bar
    from broker.tools import progress as module

    module.DUMP_BYTES_MIN, saved = 0, module.DUMP_BYTES_MIN
    try:
        terminal = _Terminal()
        assert list(track_dump(iter(lines), [str(segment)], stream=terminal, stdout=io.StringIO())) == lines
        assert "dump-log:   0%" in terminal.getvalue() and "/2.00k" in terminal.getvalue()
        quiet = _Terminal()
        list(track_dump(iter(lines), [str(segment)], stream=quiet, stdout=_Terminal()))
        assert quiet.getvalue() == "", "no bar when the dump itself goes to the terminal"
    finally:
        module.DUMP_BYTES_MIN = saved


def test_dump_progress_follows_batch_positions_across_files(tmp_path, monkeypatch):
    from contextlib import contextmanager

    from broker.tools import progress as module

    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_bytes(bytes(1000))
    second.write_bytes(bytes(3000))
    updates = []

    class Recorder:
        def update(self, count):
            updates.append(count)

    @contextmanager
    def recording(total, description, **kwargs):
        assert total == 4000
        yield Recorder()

    monkeypatch.setattr(module, "progress", recording)
    lines = [f"Dumping {first}", "baseOffset: 0 position: 0", "baseOffset: 9 position: 700",
             f"Dumping {second}", "baseOffset: 0 position: 0", "a record line", "baseOffset: 4 position: 2500"]
    assert list(track_dump(iter(lines), [str(first), str(second)], stdout=io.StringIO())) == lines
    # 700 into the first file, then the first file's end, then 2500 into the second.
    assert updates == [700, 300, 2500]


def test_a_left_bar_stays_for_a_state_like_reassignment_progress():
    # reassign --verify shows how many moves are completed, as a bar kept on the terminal.
    terminal = _Terminal()
    with progress(4, "reassigned", stream=terminal, total_min=1, leave=True) as bar:
        bar.update(3)
    assert "reassigned:  75%" in terminal.getvalue() and "3/4" in terminal.getvalue()

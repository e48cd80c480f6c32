"""``pybroker dump-log`` (storage/dump.py and its subcommand in broker/cli.py).

Segments are built with the real PartitionLog (several segments through a
small segment.bytes) or written batch by batch where the log would refuse the
batch (transactions, control markers, broken offsets). Batch lines are
cross-checked with kafka-python's independent batch parser; index lines with
the raw index bytes. Corruption, torn tails, index mismatches, checkpoint
files, the metadata log and the exit codes of the real command are covered.

Longer than ~700 lines on purpose: every segment and index layout dump-log
prints, over one set of segment-building helpers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from broker.cli import _value_formatter_for
from broker.cli import main as cli_main
from controller.features import default_feature_levels
from controller.topic_commands import ClusterDefaults, CreateTopicSpec
from protocol.compression import CompressionType
from protocol.records import (
    BATCH_HEADER_BYTES,
    ControlType,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_batches,
)
from storage.dump import (
    DumpOptions,
    DumpStats,
    dump_file,
    dump_files,
    dump_log_segment,
    dump_offset_index,
    dump_time_index,
    file_kind,
    parse_checkpoint,
)
from storage.index import OFFSET_ENTRY, TIME_ENTRY
from storage.log import LogConfig, PartitionLog
from tests.quorum_harness import METADATA_DIR_NAME
from tests.quorum_harness import SingleVoterController as MetadataController

PROJECT_ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
CODECS = list(CompressionType)
PRODUCER_ID = 4242

BATCH_FIELDS = [
    "baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId", "producerEpoch",
    "partitionLeaderEpoch", "isTransactional", "isControl", "position", "CreateTime", "size", "magic",
    "compresscodec", "crc", "isvalid",
]  # fmt: skip


# --------------------------------------------------------------------------- helpers


def run(generator_fn, *args, **kwargs) -> tuple[list[str], DumpStats]:
    stats = DumpStats()
    lines = list(generator_fn(*args, stats=stats, **kwargs))
    return lines, stats


def batch_fields(line: str) -> dict[str, str]:
    """The ``name: value`` pairs of a batch line, in order."""
    return dict(re.findall(r"(\w+): (\S+)", line))


def batch_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("baseOffset: ")]


def record_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("| offset: ")]


def problem_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(("Mismatch", "Corrupt"))]


def build_partition(directory: Path, *, batches: int = 12, records_per_batch: int = 3) -> list[dict]:
    """A several-segment partition of varied batches; returns what was appended, batch by batch."""
    plog = PartitionLog(directory, LogConfig(segment_bytes=600, index_interval_bytes=1))
    appended = []
    sequence = 0
    try:
        for b in range(batches):
            idempotent = b % 3 == 1
            codec = CODECS[b % len(CODECS)]
            records = [
                (
                    None if (b + i) % 4 == 3 else f"key-{b}-{i}".encode(),
                    f"value {b}.{i} ü".encode(),
                    [("trace", b"t"), ("hop", None)] if i == 0 else [],
                    T0 + 10 * b + i,
                )
                for i in range(records_per_batch)
            ]
            data = build_batch(
                records,
                codec=codec,
                producer_id=PRODUCER_ID if idempotent else -1,
                producer_epoch=3 if idempotent else -1,
                base_sequence=sequence if idempotent else -1,
            )
            if idempotent:
                sequence += records_per_batch
            result = plog.append(data, leader_epoch=5)
            appended.append(
                {
                    "base": result.base_offset,
                    "last": result.last_offset,
                    "records": records,
                    "codec": codec,
                    "idempotent": idempotent,
                    "base_sequence": sequence - records_per_batch if idempotent else -1,
                }
            )
    finally:
        plog.close()
    return appended


def write_segment(path: Path, batches: list[bytes]) -> list[int]:
    """Write batches as-is into a segment file; returns their positions."""
    positions = []
    out = bytearray()
    for data in batches:
        positions.append(len(out))
        out += data
    path.write_bytes(bytes(out))
    return positions


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dump") / "orders-0"
    appended = build_partition(directory)
    return directory, appended


# --------------------------------------------------------------------------- .log


def test_the_partition_has_several_segments(partition):
    directory, _ = partition
    assert len(list(directory.glob("*.log"))) >= 3


def test_batch_lines_match_kafka_python(partition):
    directory, appended = partition
    seen = []
    for log_path in sorted(directory.glob("*.log")):
        lines, stats = run(dump_file, log_path)
        assert lines[0] == f"Dumping {log_path}"
        assert lines[1] == f"Log starting offset: {int(log_path.stem)}"
        assert stats.exit_code == 0 and not problem_lines(lines)
        data = log_path.read_bytes()
        batches = list(iter_batches(data))
        assert len(batch_lines(lines)) == len(batches)
        assert not record_lines(lines)  # shallow by default
        for line, (position, size, _) in zip(batch_lines(lines), batches):
            fields = batch_fields(line)
            assert list(fields) == BATCH_FIELDS
            kp = DefaultRecordBatch(data[position : position + size])
            assert int(fields["baseOffset"]) == kp.base_offset
            assert int(fields["lastOffset"]) == kp.last_offset
            assert int(fields["count"]) == kp.records_count
            assert int(fields["baseSequence"]) == kp.base_sequence
            assert int(fields["lastSequence"]) == kp.last_sequence
            assert int(fields["producerId"]) == kp.producer_id
            assert int(fields["producerEpoch"]) == kp.producer_epoch
            assert int(fields["partitionLeaderEpoch"]) == kp.leader_epoch == 5
            assert fields["isTransactional"] == "false" and fields["isControl"] == "false"
            assert int(fields["position"]) == position
            assert int(fields["CreateTime"]) == kp.max_timestamp
            assert int(fields["size"]) == size == kp.size_in_bytes
            assert fields["magic"] == "2"
            assert fields["compresscodec"] == CompressionType(kp.compression_type).name
            assert int(fields["crc"]) == kp.crc
            assert fields["isvalid"] == "true" and kp.validate_crc()
            seen.append(fields)
    assert [int(f["baseOffset"]) for f in seen] == [a["base"] for a in appended]
    assert [f["compresscodec"] for f in seen] == [a["codec"].name for a in appended]
    assert {f["compresscodec"] for f in seen} == {"NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"}


def test_exact_batch_line(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    data = build_batch(
        [(b"k", b"v", [], T0), (b"k2", b"v2", [], T0 + 5)],
        producer_id=7,
        producer_epoch=1,
        base_sequence=10,
        partition_leader_epoch=2,
    )
    write_segment(path, [data])
    lines, _ = run(dump_log_segment, path)
    crc = DefaultRecordBatch(data).crc
    assert lines == [
        "Log starting offset: 0",
        (
            "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 10 lastSequence: 11 producerId: 7 producerEpoch: 1 "
            "partitionLeaderEpoch: 2 isTransactional: false isControl: false position: 0 "
            f"CreateTime: {T0 + 5} size: {len(data)} magic: 2 compresscodec: NONE crc: {crc} isvalid: true"
        ),
    ]


def test_print_data_log_prints_every_record(partition):
    directory, appended = partition
    expected = []
    for batch in appended:
        for i, (key, value, headers, timestamp) in enumerate(batch["records"]):
            sequence = batch["base_sequence"] + i if batch["idempotent"] else -1
            header_keys = ",".join(k for k, _ in headers)
            line = (
                f"| offset: {batch['base'] + i} CreateTime: {timestamp} keySize: {-1 if key is None else len(key)} "
                f"valueSize: {len(value)} sequence: {sequence} headerKeys: [{header_keys}]"
            )
            if key is not None:
                line += f" key: {key.decode()}"
            expected.append(line + f" payload: {value.decode()}")
    got = []
    for log_path in sorted(directory.glob("*.log")):
        lines, stats = run(dump_log_segment, log_path, DumpOptions(print_data=True))
        assert stats.exit_code == 0
        # Each batch line is followed by its records.
        kinds = ["b" if line.startswith("baseOffset") else "r" for line in lines[1:]]
        assert kinds[0] == "b"
        got += record_lines(lines)
    assert got == expected


def test_deep_iteration_without_data(partition):
    directory, _ = partition
    log_path = min(directory.glob("*.log"))
    lines, _ = run(dump_log_segment, log_path, DumpOptions(deep=True))
    records = record_lines(lines)
    assert records and len(records) == sum(int(batch_fields(b)["count"]) for b in batch_lines(lines))
    assert all(" key: " not in line and " payload: " not in line for line in records)
    assert records[0].endswith("headerKeys: [trace,hop]")


def test_undecodable_utf8_and_log_append_time_and_sequence_wrap(tmp_path):
    path = tmp_path / "00000000000000000100.log"
    first = build_batch(
        [(b"\xff\xfek", b"\xc3(", [], T0)], base_offset=100, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    wrapped = build_batch(
        [(b"a", b"x", [], T0), (b"b", b"y", [], T0)],
        base_offset=101,
        producer_id=9,
        producer_epoch=0,
        base_sequence=2**31 - 1,
    )
    write_segment(path, [first, wrapped])
    lines, stats = run(dump_log_segment, path, DumpOptions(print_data=True))
    assert stats.exit_code == 0
    assert lines[0] == "Log starting offset: 100"
    assert " LogAppendTime: " in lines[1]
    assert lines[2].startswith("| offset: 100 LogAppendTime: ")
    assert lines[2].endswith("key: \ufffd\ufffdk payload: \ufffd(")
    assert "baseSequence: 2147483647 lastSequence: 0 " in lines[3]
    assert [line.split(" sequence: ")[1].split()[0] for line in lines[4:6]] == ["2147483647", "0"]


def test_transaction_markers(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    data = build_batch([(b"k", b"v", [], T0)], producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True)
    marker = build_control_batch(
        ControlType.COMMIT, producer_id=3, producer_epoch=0, coordinator_epoch=17, timestamp_ms=T0 + 1, base_offset=1
    )
    write_segment(path, [data, marker])
    lines, stats = run(dump_log_segment, path, DumpOptions(print_data=True, verify=True))
    assert stats.exit_code == 0, lines
    assert "isTransactional: true isControl: false" in lines[1]
    assert "isTransactional: true isControl: true" in lines[3]
    assert lines[4].endswith("endTxnMarker: COMMIT coordinatorEpoch: 17")
    assert lines[-1] == f"Verified {path}: 2 batches, no problems"


def test_verify_prints_only_problems_and_a_summary(partition):
    directory, _ = partition
    for log_path in sorted(directory.glob("*.log")):
        lines, stats = run(dump_file, log_path, DumpOptions(verify=True))
        count = len(list(iter_batches(log_path.read_bytes())))
        assert lines == [f"Dumping {log_path}", f"Verified {log_path}: {count} batches, no problems"]
        assert stats.exit_code == 0


def test_corrupt_byte_fails_verify(tmp_path, partition):
    source, _ = partition
    log_path = tmp_path / sorted(source.glob("*.log"))[1].name
    data = bytearray(sorted(source.glob("*.log"))[1].read_bytes())
    batches = list(iter_batches(data))
    position, _, _ = batches[1]
    data[position + BATCH_HEADER_BYTES + 3] ^= 0x55  # inside the records: covered by the CRC
    log_path.write_bytes(bytes(data))

    lines, stats = run(dump_log_segment, log_path)
    assert stats.exit_code == 0  # printing is not checking
    assert [batch_fields(b)["isvalid"] for b in batch_lines(lines)] == ["true", "false"] + ["true"] * (len(batches) - 2)

    lines, stats = run(dump_log_segment, log_path, DumpOptions(verify=True))
    problems = problem_lines(lines)
    assert len(problems) == 1 and problems[0].startswith(f"Corrupt batch at position {position} of {log_path}")
    assert "CRC" in problems[0]
    assert lines[-1] == f"Verified {log_path}: {len(batches)} batches, 1 problem"
    assert stats.problems == 1 and stats.exit_code == 1

    # Deep iteration still gets through the batches it can decode.
    lines, stats = run(dump_log_segment, log_path, DumpOptions(print_data=True))
    assert len(batch_lines(lines)) == len(batches)


def test_torn_tail_is_reported_not_fatal(tmp_path, partition):
    source, _ = partition
    original = min(source.glob("*.log")).read_bytes()
    log_path = tmp_path / "00000000000000000000.log"
    next_batch = build_batch([(b"k", b"v" * 50, [], T0)])
    for cut in (5, 30, len(next_batch) - 1):  # inside the length, the header, the records
        log_path.write_bytes(original + next_batch[:cut])
        lines, stats = run(dump_log_segment, log_path, DumpOptions(print_data=True))
        assert lines[-1] == f"Found {cut} invalid bytes at the end of {log_path.name}"
        assert stats.exit_code == 0
        assert len(batch_lines(lines)) == len(list(iter_batches(original)))

        lines, stats = run(dump_log_segment, log_path, DumpOptions(verify=True))
        problems = problem_lines(lines)
        assert len(problems) == 1 and "does not end on a batch boundary" in problems[0]
        assert f"the {cut} bytes from position {len(original)} are a torn tail" in problems[0]
        assert stats.exit_code == 1


def test_garbage_in_the_log(tmp_path):
    log_path = tmp_path / "00000000000000000000.log"
    good = build_batch([(b"k", b"v", [], T0)])
    garbage = bytearray(build_batch([(b"k", b"v", [], T0)], base_offset=1))
    garbage[16] = 7  # magic
    log_path.write_bytes(good + garbage + good)
    lines, stats = run(dump_log_segment, log_path, DumpOptions(verify=True))
    assert lines[0] == f"Found {len(garbage) + len(good)} invalid bytes at the end of {log_path.name}"
    assert "unreadable: magic 7" in lines[1]
    assert stats.exit_code == 1


def test_offsets_must_increase(tmp_path):
    log_path = tmp_path / "00000000000000000010.log"
    write_segment(
        log_path,
        [
            build_batch([(b"a", b"1", [], T0), (b"b", b"2", [], T0)], base_offset=10),
            build_batch([(b"c", b"3", [], T0)], base_offset=11),  # overlaps the batch before
            build_batch([(b"d", b"4", [], T0)], base_offset=5),  # below the segment's base
        ],
    )
    lines, stats = run(dump_log_segment, log_path, DumpOptions(verify=True))
    problems = problem_lines(lines)
    assert len(problems) == 3
    assert "offsets do not increase (baseOffset 11 after lastOffset 11)" in problems[0]
    assert "baseOffset 5 is below the segment's base offset 10" in problems[1]
    assert "offsets do not increase (baseOffset 5 after lastOffset 11)" in problems[2]
    assert stats.exit_code == 1


def test_empty_log(tmp_path):
    log_path = tmp_path / "00000000000000000000.log"
    log_path.write_bytes(b"")
    assert run(dump_log_segment, log_path) == (["Log starting offset: 0"], DumpStats())
    lines, stats = run(dump_log_segment, log_path, DumpOptions(verify=True))
    assert lines == [f"Verified {log_path}: 0 batches, no problems"] and stats.exit_code == 0


# --------------------------------------------------------------------------- .index / .timeindex


def test_index_lines_are_the_raw_entries(partition):
    directory, _ = partition
    total = 0
    for index_path in sorted(directory.glob("*.index")):
        base = int(index_path.stem)
        raw = [(base + rel, pos) for rel, pos in OFFSET_ENTRY.iter_unpack(index_path.read_bytes())]
        lines, stats = run(dump_file, index_path)
        assert lines == [f"Dumping {index_path}"] + [f"offset: {o} position: {p}" for o, p in raw]
        assert stats.exit_code == 0
        total += len(raw)
    assert total >= 3


def test_timeindex_lines_are_the_raw_entries(partition):
    directory, appended = partition
    total = 0
    for path in sorted(directory.glob("*.timeindex")):
        base = int(path.stem)
        raw = [(ts, base + rel) for ts, rel in TIME_ENTRY.iter_unpack(path.read_bytes())]
        lines, _ = run(dump_file, path)
        assert lines == [f"Dumping {path}"] + [f"timestamp: {t} offset: {o}" for t, o in raw]
        total += len(raw)
    # Timestamps grow with every batch here, so every batch raised the maximum.
    assert total == len(appended)


def test_indexes_of_a_fresh_log_verify_clean(tmp_path):
    # Single-record batches: a batch's last offset is its base offset.
    plog = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=400, index_interval_bytes=1))
    try:
        for i in range(20):
            plog.append(build_batch([(b"k%d" % i, b"v" * 40, [], T0 + i)]))
    finally:
        plog.close()
    paths = sorted((tmp_path / "t-0").iterdir())
    assert len([p for p in paths if p.suffix == ".index"]) >= 3
    stats = DumpStats()
    lines = list(dump_files(paths, DumpOptions(verify=True), stats))
    assert not problem_lines(lines), lines
    assert stats.exit_code == 0
    assert len([line for line in lines if line.startswith("Verified ")]) == len(paths)


def test_preallocated_zero_tail_is_not_entries(tmp_path):
    # The active segment's indexes are preallocated with zeros, as Kafka's are.
    log_path = tmp_path / "00000000000000000050.log"
    positions = write_segment(
        log_path, [build_batch([(b"k", b"v%d" % i, [], T0 + i)], base_offset=50 + i) for i in range(4)]
    )
    index_path = log_path.with_suffix(".index")
    index_path.write_bytes(b"".join(OFFSET_ENTRY.pack(i, positions[i]) for i in (1, 3)) + bytes(8 * 100))
    time_path = log_path.with_suffix(".timeindex")
    time_path.write_bytes(b"".join(TIME_ENTRY.pack(T0 + i, i) for i in (0, 2)) + bytes(12 * 100))
    lines, stats = run(dump_file, index_path)
    assert lines == [
        f"Dumping {index_path}",
        f"offset: 51 position: {positions[1]}",
        f"offset: 53 position: {positions[3]}",
    ]
    lines, stats = run(dump_file, time_path)
    assert lines == [f"Dumping {time_path}", f"timestamp: {T0} offset: 50", f"timestamp: {T0 + 2} offset: 52"]
    for path in (index_path, time_path):
        lines, stats = run(dump_file, path, DumpOptions(verify=True))
        assert lines[-1] == f"Verified {path}: 2 entries, no problems" and stats.exit_code == 0
    # A wholly zero (empty, preallocated) index has no entries.
    index_path.write_bytes(bytes(8 * 1000))
    time_path.write_bytes(bytes(12 * 1000))
    for path in (index_path, time_path):
        assert run(dump_file, path, DumpOptions(verify=True))[0] == [
            f"Dumping {path}",
            f"Verified {path}: 0 entries, no problems",
        ]


def _index_case(
    tmp_path: Path, entries: list[tuple[int, int]], *, trailing: bytes = b""
) -> tuple[list[str], DumpStats]:
    base = 100
    log_path = tmp_path / f"{base:020d}.log"
    # Batches: 100-101 at 0, 102 at p1, 103-105 at p2.
    write_segment(
        log_path,
        [
            build_batch([(b"a", b"1", [], T0), (b"b", b"2", [], T0 + 1)], base_offset=100),
            build_batch([(b"c", b"3", [], T0 + 2)], base_offset=102),
            build_batch([(b"d", b"4", [], T0 + 3)] * 3, base_offset=103),
        ],
    )
    index_path = log_path.with_suffix(".index")
    index_path.write_bytes(b"".join(OFFSET_ENTRY.pack(o - base, p) for o, p in entries) + trailing)
    return run(dump_offset_index, index_path, DumpOptions(verify=True))


def test_verify_offset_index(tmp_path):
    size0 = len(build_batch([(b"a", b"1", [], T0), (b"b", b"2", [], T0 + 1)], base_offset=100))
    size1 = len(build_batch([(b"c", b"3", [], T0 + 2)], base_offset=102))
    good = [(101, 0), (102, size0), (105, size0 + size1)]
    lines, stats = _index_case(tmp_path, good)
    assert stats.exit_code == 0 and lines == [
        f"Verified {tmp_path / '00000000000000000100.index'}: 3 entries, no problems"
    ]

    lines, stats = _index_case(tmp_path, [(101, 0), (103, size0), (104, size0 + 1)])
    problems = problem_lines(lines)
    assert problems == [
        (
            f"Mismatch in {tmp_path / '00000000000000000100.index'}: index offset 103 points at position {size0}, "
            "where the batch's last offset is 102"
        ),
        (
            f"Mismatch in {tmp_path / '00000000000000000100.index'}: index offset 104 points at position {size0 + 1}, "
            "which is not the start of a batch"
        ),
    ]
    assert stats.exit_code == 1

    lines, stats = _index_case(tmp_path, [(102, size0), (101, 0)])
    assert any(p.startswith("Corrupt") and "offsets do not increase" in p for p in problem_lines(lines))
    assert any(p.startswith("Corrupt") and "positions do not increase" in p for p in problem_lines(lines))

    lines, stats = _index_case(tmp_path, good, trailing=b"\x01\x02\x03")
    assert "Found 3 invalid bytes at the end of 00000000000000000100.index" in lines
    assert any("3 trailing bytes are not a whole 8-byte entry" in p for p in problem_lines(lines))
    assert stats.exit_code == 1

    # The phantom entry (base offset, position 0) of an index that loaded its own
    # preallocated zeros as an entry: wrong when the first batch holds several offsets.
    lines, stats = _index_case(tmp_path, [(100, 0), (102, size0)])
    assert problem_lines(lines) == [
        (
            f"Mismatch in {tmp_path / '00000000000000000100.index'}: index offset 100 points at position 0, "
            "where the batch's last offset is 101"
        )
    ]


def test_verify_time_index(tmp_path):
    base = 100
    log_path = tmp_path / f"{base:020d}.log"
    write_segment(
        log_path,
        [
            build_batch([(b"a", b"1", [], T0), (b"b", b"2", [], T0 + 5)], base_offset=100),
            build_batch([(b"c", b"3", [], T0 + 9)], base_offset=102),
        ],
    )
    path = log_path.with_suffix(".timeindex")

    def check(entries):
        path.write_bytes(b"".join(TIME_ENTRY.pack(t, o - base) for t, o in entries))
        lines, stats = run(dump_time_index, path, DumpOptions(verify=True))
        return problem_lines(lines), stats

    problems, stats = check([(T0 + 5, 101), (T0 + 9, 102)])
    assert problems == [] and stats.exit_code == 0
    problems, stats = check([(T0 + 5, 101), (T0 + 4, 102)])
    assert (
        len(problems) == 2
        and "timestamps do not increase" in problems[0]
        and "maxTimestamp 1700000000009" in problems[1]
    )
    problems, stats = check([(T0 + 5, 101), (T0 + 9, 100)])
    assert any("offsets decrease" in p for p in problems) and stats.exit_code == 1
    problems, stats = check([(T0 + 5, 101), (T0 + 10, 103)])
    assert problems == [
        f"Mismatch in {path}: timestamp {T0 + 10} maps to offset 103, outside the segment's offsets [100, 102]"
    ]

    log_path.unlink()
    problems, stats = check([(T0 + 5, 101)])
    assert problems == [f"Mismatch in {path}: no log file {log_path.name} to check the time index against"]


# --------------------------------------------------------------------------- checkpoints


def test_offset_checkpoints(tmp_path):
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint"):
        path = tmp_path / name
        path.write_text("0\n3\norders 0 1234\norders 1 99\nmy.topic_x 12 0\n")
        lines, stats = run(dump_file, path)
        assert lines == [f"Dumping {path}", "orders-0: 1234", "orders-1: 99", "my.topic_x-12: 0"]
        assert stats.exit_code == 0
        lines, stats = run(dump_file, path, DumpOptions(verify=True))
        assert lines == [f"Dumping {path}", f"Verified {path}: 3 entries, no problems"]


def test_leader_epoch_checkpoint(tmp_path):
    path = tmp_path / "orders-0" / "leader-epoch-checkpoint"
    path.parent.mkdir()
    path.write_text("0\n2\n0 0\n3 120\n")
    lines, stats = run(dump_file, path)
    assert lines == [f"Dumping {path}", "epoch: 0 startOffset: 0", "epoch: 3 startOffset: 120"]
    path.write_text("0\n2\n4 50\n3 120\n")
    lines, stats = run(dump_file, path, DumpOptions(verify=True))
    assert problem_lines(lines) == [
        f"Corrupt {path}: epoch 3 at startOffset 120 does not follow epoch 4 at startOffset 50"
    ]
    assert stats.exit_code == 1


@pytest.mark.parametrize(
    "text, problem",
    [
        ("1\n0\n", "line 1: unsupported version '1' (expected 0)"),
        ("0\nx\n", "line 2: expected the number of entries, got 'x'"),
        ("0\n2\norders 0 1\n", "declares 2 entries but has 1"),
        ("0\n1\norders zero 1\n", "line 3: expected 'topic partition offset', got 'orders zero 1'"),
        ("0\n1\norders 0\n", "line 3: expected 'topic partition offset', got 'orders 0'"),
    ],
)
def test_malformed_checkpoints(tmp_path, text, problem):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    lines, stats = run(dump_file, path)
    assert f"Corrupt {path}: {problem}" in lines
    assert stats.exit_code == 1


def test_parse_checkpoint():
    assert parse_checkpoint("", False) == ([], [])
    assert parse_checkpoint("0\n0\n", False) == ([], [])
    assert parse_checkpoint("0\n1\nt 2 3\n\n", False) == ([("t", 2, 3)], [])
    assert parse_checkpoint("0\n2\n1 0\n2 10\n", True) == ([(1, 0), (2, 10)], [])


def test_checkpoints_written_by_storage_parse_back(tmp_path):
    checkpoint = pytest.importorskip("storage.checkpoint")
    write_offsets = getattr(checkpoint, "write_offsets", None)
    write_leader_epochs = getattr(checkpoint, "write_leader_epochs", None)
    if write_offsets is None or write_leader_epochs is None:
        pytest.skip("storage.checkpoint has no write_offsets/write_leader_epochs")
    offsets = {("orders", 0): 10, ("orders", 1): 0, ("x", 7): 123456789012}
    write_offsets(tmp_path / "replication-offset-checkpoint", offsets)
    lines, stats = run(dump_file, tmp_path / "replication-offset-checkpoint", DumpOptions(verify=True, deep=True))
    assert sorted(lines[1:-1]) == sorted(f"{t}-{p}: {o}" for (t, p), o in offsets.items())
    assert stats.exit_code == 0
    write_leader_epochs(tmp_path / "leader-epoch-checkpoint", [(0, 0), (2, 40)])
    lines, stats = run(dump_file, tmp_path / "leader-epoch-checkpoint")
    assert lines[1:] == ["epoch: 0 startOffset: 0", "epoch: 2 startOffset: 40"]


# --------------------------------------------------------------------------- files, the metadata log, the CLI


def test_file_kinds_and_unknown_files(tmp_path):
    assert file_kind(Path("a/00000000000000000000.log")) == "log"
    assert file_kind(Path("00000000000000000000.index")) == "index"
    assert file_kind(Path("00000000000000000000.timeindex")) == "timeindex"
    assert file_kind(Path("leader-epoch-checkpoint")) == "leader-epoch-checkpoint"
    assert file_kind(Path("log-start-offset-checkpoint")) == "offset-checkpoint"
    assert file_kind(Path("partition.metadata")) is None
    unknown = tmp_path / "partition.metadata"
    unknown.write_text("version: 0\n")
    missing = tmp_path / "00000000000000000000.log"
    nowhere = tmp_path / "nonexistent"
    (tmp_path / "a-dir.log").mkdir()
    stats = DumpStats()
    lines = list(dump_files([unknown, missing, nowhere, tmp_path / "a-dir.log"], DumpOptions(), stats))
    assert lines[0] == f"Dumping {unknown}"
    assert lines[1].startswith(f"Error: {unknown} is not a .log, .index or .timeindex file")
    # A path that is not there says so, whatever its name.
    assert lines[2:6] == [f"Dumping {missing}", f"Error: {missing}: no such file", f"Dumping {nowhere}", f"Error: {nowhere}: no such file"]
    assert lines[6:] == [f"Dumping {tmp_path / 'a-dir.log'}", f"Error: {tmp_path / 'a-dir.log'} is not a regular file"]
    assert stats.errors == 4 and stats.exit_code == 2


def test_exit_code_precedence():
    assert DumpStats().exit_code == 0
    assert DumpStats(problems=3).exit_code == 1
    assert DumpStats(problems=3, errors=1).exit_code == 2


def test_format_value_callback(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    write_segment(path, [build_batch([(b"k", b"abc", [], T0), (b"k", None, [], T0)])])
    lines, _ = run(dump_log_segment, path, DumpOptions(print_data=True, format_value=lambda v: f"<{len(v)} bytes>"))
    assert lines[2].endswith("key: k payload: <3 bytes>")
    assert lines[3].endswith("valueSize: -1 sequence: -1 headerKeys: [] key: k")  # null value: no payload


@pytest.fixture(scope="module")
def metadata_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("kraft")
    ids = iter([uuid.UUID(int=0x1234), uuid.UUID(int=0x5678)])
    controller = MetadataController(root, ClusterDefaults((1,), 1, 1), clock_ms=lambda: T0, new_uuid=lambda: next(ids))
    try:
        controller.create_topics([CreateTopicSpec("t", 2)])
    finally:
        controller.close()
    return root / METADATA_DIR_NAME


def test_metadata_log_records_are_decoded(metadata_dir):
    log_path = metadata_dir / "00000000000000000000.log"
    stats = DumpStats()
    lines = list(dump_files([log_path], DumpOptions(print_data=True), stats, format_value_for=_value_formatter_for))
    assert stats.exit_code == 0
    records = record_lines(lines)
    # The log opens with the one voter's LeaderChange control batch, then a new cluster's feature levels.
    assert records[0].endswith("controlType: 2")
    features = len(default_feature_levels())
    assert all("payload: FeatureLevelRecord(name=" in line for line in records[1 : 1 + features])
    records = records[1 + features :]
    topic_id = uuid.UUID(int=0x1234)
    assert records[0].endswith(
        f"keySize: -1 valueSize: 22 sequence: -1 headerKeys: [] payload: TopicRecord(name='t', topic_id={topic_id!r})"
    )
    assert len(records) == 3
    for partition_id, line in enumerate(records[1:]):
        assert (
            f"payload: PartitionRecord(partition_id={partition_id}, topic_id={topic_id!r}, replicas=[1], isr=[1],"
            in line
        )
    # Without the callback (or outside the metadata directory) values stay text.
    plain = record_lines(list(dump_files([log_path], DumpOptions(print_data=True))))
    assert "TopicRecord" not in plain[1]
    assert _value_formatter_for(Path("orders-0/00000000000000000000.log")) is None


def test_metadata_formatter_survives_garbage():
    formatter = _value_formatter_for(Path(METADATA_DIR_NAME) / "00000000000000000000.log")
    assert formatter is not None
    assert formatter(b"not a record").startswith("<not a metadata record: ")


def test_cli_in_process(tmp_path, partition, capsys):
    directory, _ = partition
    log_path = min(directory.glob("*.log"))
    assert cli_main(["dump-log", "--verify-index-only", str(log_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Dumping {log_path}" and out[-1].startswith(f"Verified {log_path}: ")
    assert cli_main(["dump-log", "-d", str(log_path)]) == 0
    assert " payload: value 0.0 ü" in capsys.readouterr().out


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "broker", "dump-log", *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_real_command(tmp_path, partition, metadata_dir):
    directory, _ = partition
    # (.index files are verified in test_indexes_of_a_fresh_log_verify_clean.)
    files = [str(p) for p in sorted(directory.iterdir()) if p.suffix in (".log", ".timeindex")]

    done = _run_cli(["--deep-iteration", "--verify", *files, str(metadata_dir / "00000000000000000000.log")], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.count("Dumping ") == len(files) + 1
    assert done.stdout.count(", no problems") == len(files) + 1

    # Relative paths from inside the metadata directory still decode metadata records.
    done = _run_cli(["-d", "00000000000000000000.log"], metadata_dir)
    assert done.returncode == 0 and "payload: TopicRecord(name='t'" in done.stdout

    broken = tmp_path / "00000000000000000000.log"
    broken.write_bytes(build_batch([(b"k", b"v", [], T0)])[:-1])
    done = _run_cli(["--verify", broken.name], tmp_path)
    assert done.returncode == 1
    assert (
        f"Found {len(build_batch([(b'k', b'v', [], T0)])) - 1} invalid bytes at the end of {broken.name}" in done.stdout
    )

    (tmp_path / "notes.txt").write_text("hello")
    done = _run_cli(["notes.txt", broken.name], tmp_path)
    assert done.returncode == 2
    assert "Error: notes.txt is not a .log" in done.stdout
    assert done.stdout.count("Dumping ") == 2

"""The corrupt nemesis' damage (FaultCluster.corrupt_segment): bytes flipped
inside one batch's records, so the log's framing still parses and exactly
that batch fails its CRC, in a closed segment when asked and the log has one."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

from protocol.records import build_batch, iter_batches
from storage.scrub import first_corrupt_batch
from tests.faults.cluster import FaultCluster


def write_log(directory: Path, segments: list[list[int]]) -> None:
    """Segments of one-record batches at the given offsets, named by their first."""
    directory.mkdir(parents=True)
    for offsets in segments:
        data = b"".join(build_batch([(b"k", b"value-%d" % o, [], 1)], base_offset=o) for o in offsets)
        (directory / f"{offsets[0]:020d}.log").write_bytes(data)


def test_one_batch_of_the_chosen_segment_fails_its_crc_and_nothing_else_changes(tmp_path):
    cluster = FaultCluster.__new__(FaultCluster)  # only the file work is used: no namespaces, no mounts
    node = SimpleNamespace(hostname="broker-4", data_dir=tmp_path, is_broker=True)
    directory = tmp_path / "logs" / "faults-2"
    write_log(directory, [[0, 1, 2], [3, 4, 5], [6, 7]])
    before = {p.name: p.read_bytes() for p in directory.glob("*.log")}
    for seed in range(20):
        for closed in (True, False):
            for path, data in before.items():
                (directory / path).write_bytes(data)
            done = cluster.corrupt_segment(node, "faults", 2, random.Random(seed), closed=closed)
            assert done["segment"] == ("closed" if closed else "active") and done["partition"] == 2
            assert (done["file"] != f"{6:020d}.log") == closed
            changed = {p.name: p.read_bytes() for p in directory.glob("*.log") if p.read_bytes() != before[p.name]}
            assert list(changed) == [done["file"]]
            data = changed[done["file"]]
            assert len(data) == len(before[done["file"]])
            assert [h.base_offset for _, _, h in iter_batches(data)] == [h.base_offset for _, _, h in iter_batches(before[done["file"]])]
            found = first_corrupt_batch(data, 0)
            assert found is not None and found.offset == done["batch_offset"] and "CRC" in found.reason
            assert 1 <= done["bytes"] <= 4


def test_a_log_that_never_rolled_is_hit_in_its_active_segment(tmp_path):
    cluster = FaultCluster.__new__(FaultCluster)
    node = SimpleNamespace(hostname="broker-5", data_dir=tmp_path, is_broker=True)
    write_log(tmp_path / "logs" / "faults-0", [[0, 1]])
    assert cluster.corrupt_segment(node, "faults", 0, random.Random(1), closed=True)["segment"] == "active"

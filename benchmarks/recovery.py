"""How long a partition log takes to open after a clean shutdown and after a crash.

Writes ``--gb`` GB (default 1) of v2 batches of 100-byte records to one
partition through ``storage.manager.LogManager``, closes it cleanly (clean
shutdown marker and offset checkpoints written), then times:

(a) clean:   a new LogManager opens the log with the marker present: the
             files are trusted, only the tail of the active segment is read
             (headers only, from its last index entry);
(b) unclean, no checkpoint: marker and recovery-point checkpoint deleted, as
             after a crash before the first checkpoint: every segment is
             re-read, every batch CRC-checked, the indexes rebuilt;
(c) unclean, checkpoint at the log end: the marker deleted but the recovery
             point known (as after a crash in durable mode): the segments
             from the one holding the recovery point on are re-read.

Each is measured with the files in the page cache and "cold" (evicted with
``posix_fadvise(DONTNEED)`` first; the virtual disk's host cache may still
help). Prints seconds and seconds per GB.

    python benchmarks/recovery.py --gb 1 --dir /tmp
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protocol.records import build_batch
from storage.checkpoint import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT
from storage.log import LogConfig
from storage.manager import LogManager

GB = 1_000_000_000
TOPIC = "bench"


def make_batch(target_bytes: int) -> bytes:
    now = int(time.time() * 1000)
    value = b"x" * 100
    count = max(1, target_bytes // 108)
    for _ in range(100):
        batch = build_batch([(None, value, [], now)] * count)
        if len(batch) <= target_bytes or count == 1:
            return batch
        count -= max(1, (len(batch) - target_bytes) // 106)
    raise RuntimeError("no batch size found")


def evict_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)  # dirty pages cannot be dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def warm_tree(root: Path) -> None:
    """Read every file once, so the next open finds it all in the page cache."""
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(8 << 20):
                    pass


def open_log(log_dir: Path, config: LogConfig) -> tuple[float, int, int]:
    """Seconds to register and open the partition; its log end and size."""
    started = time.perf_counter()
    manager = LogManager([log_dir])
    ((key, path),) = manager.existing_partitions().items()
    manager.register(*key, config, path)
    plog = manager.get(*key)
    seconds = time.perf_counter() - started
    end, size = plog.log_end_offset, plog.size_bytes
    manager.close()
    return seconds, end, size


def run(workdir: Path, batch_kb: int, total: int, segment_bytes: int) -> None:
    log_dir = workdir / f"logs-{batch_kb}"
    config = LogConfig(segment_bytes=segment_bytes, max_message_bytes=4 << 20)
    batch = make_batch(batch_kb * 1024)
    manager = LogManager([log_dir])
    plog = manager.get_or_create(TOPIC, 0, config)
    started = time.perf_counter()
    while plog.size_bytes < total:
        plog.append(batch)
    plog.flush(fsync=True)
    write_s = time.perf_counter() - started
    end, size = plog.log_end_offset, plog.size_bytes
    segments = len(plog.segments)
    manager.close()
    gb = size / GB
    print(
        f"\n{size / GB:.2f} GB in {segments} segment(s) of <= {segment_bytes >> 20} MiB, batches of "
        f"{len(batch) / 1024:.0f} KiB ({end:,} records), written in {write_s:.1f}s"
    )
    print(f"{'open':<38} {'cache':>6} {'seconds':>8} {'s/GB':>7}")
    marker = log_dir / CLEAN_SHUTDOWN_MARKER
    checkpoint = log_dir / RECOVERY_POINT_CHECKPOINT
    kept_checkpoint = checkpoint.read_bytes()
    cases = [
        ("(a) clean shutdown", lambda: None),
        ("(b) unclean, no checkpoint", lambda: (marker.unlink(), checkpoint.unlink())),
        ("(c) unclean, recovery point at the end", lambda: (marker.unlink(), checkpoint.write_bytes(kept_checkpoint))),
    ]
    for name, prepare in cases:
        for cold in (False, True):
            prepare()
            if cold:
                evict_tree(log_dir)
            else:
                warm_tree(log_dir)
            seconds, got_end, got_size = open_log(log_dir, config)
            assert (got_end, got_size) == (end, size), f"{name}: reopened at {got_end}/{got_size}, wrote {end}/{size}"
            print(f"{name:<38} {'cold' if cold else 'cached':>6} {seconds:8.2f} {seconds / gb:7.2f}", flush=True)
    shutil.rmtree(log_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="data to write, in GB (default 1)")
    parser.add_argument("--batch-kb", default="1024,16", help="batch sizes in KiB (default 1024,16)")
    parser.add_argument("--segment-mb", type=int, default=1024, help="segment.bytes in MiB (default 1024, Kafka's)")
    parser.add_argument("--dir", default=None, help="where the files go (default: the system temp dir)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pybroker-recovery-", dir=args.dir))
    print(f"recovery benchmark in {workdir}")
    try:
        for kb in (int(x) for x in args.batch_kb.split(",")):
            run(workdir, kb, int(args.gb * GB), args.segment_mb << 20)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

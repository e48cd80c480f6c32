"""Throughput of the log layer alone, next to the same machine's raw file IO.

Appends pre-built v2 batches of 100-byte records (``protocol.records.build_batch``,
built once before timing, so only ``PartitionLog.append`` is measured: the
copy, batch checks with CRC32C, base-offset patch, index upkeep and the write)
and reads them back in order with ``PartitionLog.read``; then does the same
with ``os.write`` / ``os.pread`` of blocks of the same size on a plain file
(``O_APPEND``, like the segments). Prints MB/s (10^6 bytes) and the log/raw
ratio (the target is >= 0.8).

Reads are done with requests of one batch's size and of 1 MiB (a consumer's
fetch), each measured twice: from the page cache (the file was just written,
the usual case for a consumer that keeps up) and "cold", after
``posix_fadvise(DONTNEED)`` evicted the file's pages (without root the caches
cannot be dropped otherwise; the virtual disk's host-side cache may still help).

    python benchmarks/log_layer.py --mb 256 --rounds 5 --dir /tmp

Figures without fsync depend on the kernel's dirty-page throttling: past a
few hundred MB of dirty pages on the reference VM, both sides slow down to
the virtual disk's pace and vary from run to run; hence 256 MB rounds,
interleaved, median of 5. ``--dir /dev/shm`` shows the CPU cost alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protocol.records import build_batch, iter_batches
from storage.handle_pool import FileHandlePool
from storage.log import LogConfig, PartitionLog

RECORD_BYTES = 100
MB = 1_000_000
FETCH_BYTES = 1 << 20  # besides reads of one batch's size


def make_batch(target_bytes: int) -> bytes:
    """One batch of 100-byte values, the largest that fits in ``target_bytes``."""
    now = int(time.time() * 1000)
    value = b"x" * RECORD_BYTES
    count = max(1, target_bytes // (RECORD_BYTES + 8))
    for _ in range(100):
        batch = build_batch([(None, value, [], now)] * count)
        if len(batch) <= target_bytes or count == 1:
            return batch
        count -= max(1, (len(batch) - target_bytes) // (RECORD_BYTES + 6))
    raise RuntimeError("no batch size found")


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def evict_dir(directory: Path) -> None:
    for path in directory.iterdir():
        if path.is_file():
            evict(path)


def read_sizes(batch: bytes) -> list[int]:
    return sorted({len(batch), FETCH_BYTES})


def label(size: int) -> str:
    return f"{size / 1024:.0f} KiB"


def log_round(workdir: Path, batch: bytes, total_bytes: int, *, cold: bool) -> dict[str, float]:
    directory = workdir / "log-0"
    pool = FileHandlePool(16)
    config = LogConfig(segment_bytes=1 << 30, max_message_bytes=4 << 20)
    plog = PartitionLog(directory, config, pool=pool)
    count = max(1, total_bytes // len(batch))
    started = time.perf_counter()
    for _ in range(count):
        plog.append(batch)
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    plog.flush(fsync=True)
    fsync_s = time.perf_counter() - started
    written = plog.size_bytes
    out = {"write": written / MB / append_s, "write+fsync": written / MB / (append_s + fsync_s)}
    end = plog.log_end_offset
    for size in read_sizes(batch):
        if cold:
            evict_dir(directory)
        # Sequential reads of at most `size` bytes from offset 0, as a consumer fetches.
        started = time.perf_counter()
        offset = 0
        read_bytes = 0
        for _ in range(count * 2 + 10):
            if offset >= end:
                break
            data = plog.read(offset, size)
            read_bytes += len(data)
            for _, _, header in iter_batches(data):
                offset = header.base_offset + header.last_offset_delta + 1
        read_s = time.perf_counter() - started
        assert offset == end and read_bytes == written, (offset, end, read_bytes, written)
        out[f"read {label(size)}"] = written / MB / read_s
    plog.close()
    pool.close_all()
    shutil.rmtree(directory)
    return out


def raw_round(workdir: Path, block: bytes, total_bytes: int, *, cold: bool) -> dict[str, float]:
    path = workdir / "raw.bin"
    count = max(1, total_bytes // len(block))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, block)
        append_s = time.perf_counter() - started
        started = time.perf_counter()
        os.fsync(fd)
        fsync_s = time.perf_counter() - started
    finally:
        os.close(fd)
    written = count * len(block)
    out = {"write": written / MB / append_s, "write+fsync": written / MB / (append_s + fsync_s)}
    for size in read_sizes(block):
        if cold:
            evict(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            started = time.perf_counter()
            position = 0
            while position < written:
                position += len(os.pread(fd, size, position))
            read_s = time.perf_counter() - started
        finally:
            os.close(fd)
        out[f"read {label(size)}"] = written / MB / read_s
    path.unlink()
    return out


def median_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256, help="data written per round, in MB (default 256)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure; the median is printed (default 5)")
    parser.add_argument("--dir", default=None, help="where the files go (default: the system temp dir)")
    parser.add_argument("--batch-kb", default="1024,16", help="batch sizes in KiB (default 1024,16)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pybroker-loglayer-", dir=args.dir))
    total = args.mb * MB
    print(f"log layer vs raw file IO: {args.mb} MB per round, median of {args.rounds} rounds, in {workdir}")
    print(f"{'batch':>9} {'cache':>6} | {'what':<15} {'log MB/s':>9} {'raw MB/s':>9} {'log/raw':>8}")
    try:
        for kb in (int(x) for x in args.batch_kb.split(",")):
            batch = make_batch(kb * 1024)
            for cold in (False, True):
                log_rounds, raw_rounds = [], []
                for i in range(args.rounds):
                    # Interleaved, alternating which goes first: the VM's writeback
                    # state drifts, and must not favour one side.
                    order = ((log_rounds, log_round), (raw_rounds, raw_round))
                    for results, run in order if i % 2 == 0 else reversed(order):
                        results.append(run(workdir, batch, total, cold=cold))
                log, raw = median_of(log_rounds), median_of(raw_rounds)
                for key in log:
                    if cold and not key.startswith("read"):
                        continue  # the writes of the cold rounds repeat the cached ones
                    print(
                        f"{label(len(batch)):>9} {'cold' if cold else 'cached':>6} | {key:<15} "
                        f"{log[key]:9.0f} {raw[key]:9.0f} {log[key] / raw[key]:8.2f}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

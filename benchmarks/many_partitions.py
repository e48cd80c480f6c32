"""Start-up time and memory of a LogManager with very many partitions.

Creates ``--partitions`` partition logs (default 100,000: topics of 1000
partitions) with one 10-record batch each, closes them cleanly, then starts a
new LogManager on them in a fresh process for each case and reports the time
and the resident memory (VmRSS from /proc/self/status, net of the process
before the LogManager was built):

- clean:   the clean-shutdown marker is present: registering only records
           each partition; a log is opened on first use ("open all" then
           opens every one, as a broker serving all partitions would);
- unclean: the marker is gone, as after a crash: every log is recovered at
           registration, from its recovery point (the checkpoint of the last
           clean shutdown is there);
- unclean, no checkpoints: the marker and the offset checkpoints are gone:
           every log is recovered from its first segment.

The handle pool is left at its default (1024 open files).

    python benchmarks/many_partitions.py --partitions 100000 --dir /tmp
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PER_TOPIC = 1000


def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def names(count: int):
    for i in range(count):
        yield f"t{i // PER_TOPIC:04d}", i % PER_TOPIC


# --------------------------------------------------------------------------- phases (run in child processes)


def phase_create(log_dir: Path, count: int) -> dict:
    from protocol.records import build_batch
    from storage.log import LogConfig
    from storage.manager import LogManager

    config = LogConfig()
    batch = build_batch([(b"key", b"x" * 100, [], int(time.time() * 1000))] * 10)
    manager = LogManager([log_dir])
    started = time.perf_counter()
    for topic, partition in names(count):
        manager.register(topic, partition, config)
    created = time.perf_counter() - started
    started = time.perf_counter()
    for topic, partition in names(count):
        manager.get(topic, partition).append(batch)
    appended = time.perf_counter() - started
    rss, hwm = rss_mb()
    started = time.perf_counter()
    manager.close()
    closed = time.perf_counter() - started
    return {"create": created, "append": appended, "close": closed, "rss": rss, "hwm": hwm}


def phase_start(log_dir: Path, count: int) -> dict:
    from storage.log import LogConfig
    from storage.manager import LogManager

    config = LogConfig()
    base_rss, _ = rss_mb()
    started = time.perf_counter()
    manager = LogManager([log_dir])
    found = manager.existing_partitions()
    scanned = time.perf_counter() - started
    assert len(found) == count, (len(found), count)
    started = time.perf_counter()
    for (topic, partition), path in found.items():
        manager.register(topic, partition, config, path)
    registered = time.perf_counter() - started
    after_register, _ = rss_mb()
    opened_at_start = len(manager.logs)
    started = time.perf_counter()
    for topic, partition in found:
        plog = manager.get(topic, partition)
        assert plog.log_end_offset == 10
    open_all = time.perf_counter() - started
    after_open, hwm = rss_mb()
    started = time.perf_counter()
    manager.close()
    closed = time.perf_counter() - started
    return {
        "scan": scanned,
        "register": registered,
        "opened_at_start": opened_at_start,
        "open_all": open_all,
        "close": closed,
        "rss_register": after_register - base_rss,
        "rss_open": after_open - base_rss,
        "hwm": hwm,
        "base_rss": base_rss,
    }


def child(args) -> None:
    log_dir = Path(args.log_dir)
    result = phase_create(log_dir, args.partitions) if args.phase == "create" else phase_start(log_dir, args.partitions)
    print(json.dumps(result))


def run_child(phase: str, log_dir: Path, count: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", phase, "--log-dir", str(log_dir), "--partitions", str(count)],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="where the logs go (default: the system temp dir)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.phase = args.child
        child(args)
        return

    from storage.checkpoint import (
        CLEAN_SHUTDOWN_MARKER,
        LOG_START_OFFSET_CHECKPOINT,
        RECOVERY_POINT_CHECKPOINT,
        REPLICATION_OFFSET_CHECKPOINT,
    )

    workdir = Path(tempfile.mkdtemp(prefix="pybroker-many-", dir=args.dir))
    log_dir = workdir / "logs"
    count = args.partitions
    print(f"{count:,} partitions in {workdir}")
    try:
        created = run_child("create", log_dir, count)
        print(
            f"create {created['create']:.1f}s, append one batch to each {created['append']:.1f}s, "
            f"clean close {created['close']:.1f}s (RSS {created['rss']:.0f} MB with every log open)"
        )
        print(
            f"{'start-up':<26} {'scan':>6} {'register':>9} {'opened':>8} {'open all':>9} {'RSS reg.':>9} {'RSS all':>8} {'peak':>7}"
        )
        marker = log_dir / CLEAN_SHUTDOWN_MARKER
        checkpoints = [
            log_dir / n for n in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)
        ]
        cases = [
            ("clean", lambda: None),
            ("unclean", lambda: marker.unlink()),
            ("unclean, no checkpoints", lambda: [p.unlink() for p in [marker, *checkpoints]]),
        ]
        for name, prepare in cases:
            assert marker.exists()
            prepare()
            r = run_child("start", log_dir, count)
            print(
                f"{name:<26} {r['scan']:5.1f}s {r['register']:8.1f}s {r['opened_at_start']:8d} {r['open_all']:8.1f}s "
                f"{r['rss_register']:6.0f} MB {r['rss_open']:5.0f} MB {r['hwm']:4.0f} MB",
                flush=True,
            )
    finally:
        started = time.perf_counter()
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"(removing the files took {time.perf_counter() - started:.1f}s)")


if __name__ == "__main__":
    main()

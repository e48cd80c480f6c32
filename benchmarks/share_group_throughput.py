"""Share group (KIP-932) throughput on one partition: 1, 4 and 16 consumers, one run.

A fresh broker gets one topic of ONE partition holding R records of S bytes
(written first, with an idempotent producer). Then, for each consumer count N,
a new share group (``share.auto.offset.reset=earliest``) of N confluent-kafka
``ShareConsumer``s, each polled from its own thread of this process, reads the
partition until every offset has been received; records are acknowledged
implicitly (ACCEPT at the next poll), as a share consumer does by default.

The window of each figure runs from the consumers' creation to the moment the
last offset arrives, so it covers joining the group, the first fetches and
every acquisition and acknowledgement the broker stored in
``__share_group_state`` until then (each one is written and replicated before
the consumer hears of it); only the acknowledgement of each consumer's last
poll, committed as it closes, falls after it. Printed per N: records per second, MB per second, how
many records arrived more than once (a record comes again only after it was
released: its lock ended, its consumer's share session closed, or the client
gave it back with RELEASE; its delivery count then says 2; each consumer
commits its last poll's acknowledgements before it closes), the broker's CPU
seconds in the window (from /proc, so Linux only) and its CPU seconds per GB
read.

    python benchmarks/share_group_throughput.py --records 200000 --record-bytes 100

The consumers are threads of one Python process: at high rates that process
itself is a bottleneck, which the broker's CPU share in the output shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.produce_consume import start_broker  # noqa: E402

CONSUMER_COUNTS = (1, 4, 16)
BROKER_OVERRIDES = {
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.auto.offset.reset": "earliest",
}
READ_LIMIT_S = 600.0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def fill_topic(ck, bootstrap: str, topic: str, records: int, record_bytes: int) -> None:
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([ck.admin.NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                            "batch.size": 1_000_000, "compression.type": "none"})
    value = b"x" * record_bytes
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered")


class ShareMember(threading.Thread):
    """One ShareConsumer polled from its own thread; it notes the offsets it receives."""

    def __init__(self, ck, bootstrap: str, group: str, topic: str, seen: dict, lock: threading.Lock,
                 done: threading.Event, seen_target: int):
        super().__init__(daemon=True)
        self.seen_target = seen_target  # offsets to receive, all consumers together
        self.consumer = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                          "share.acknowledgement.mode": "implicit", "max.poll.records": 2000})
        self.consumer.subscribe([topic])
        self.seen, self.lock, self.done = seen, lock, done

    def run(self) -> None:
        while not self.done.is_set():
            offsets = [m.offset() for m in self.consumer.poll(0.2) if m.error() is None]
            if not offsets:
                continue
            with self.lock:
                for offset in offsets:
                    self.seen[offset] = self.seen.get(offset, 0) + 1
                if len(self.seen) >= self.seen_target:
                    self.done.set()

    def close(self) -> None:
        # The records of the last poll are acknowledged by the next poll, which
        # never comes: commit them, or closing the session releases them and a
        # consumer still polling gets them again (delivery count 2).
        self.consumer.commit_sync()
        self.consumer.close()


def read_with(ck, bootstrap: str, broker_pid: int, topic: str, records: int, record_bytes: int, consumers: int) -> dict:
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    seen: dict[int, int] = {}
    lock, done = threading.Lock(), threading.Event()
    cpu_before, started = process_cpu_s(broker_pid), time.monotonic()
    members = [ShareMember(ck, bootstrap, group, topic, seen, lock, done, records) for _ in range(consumers)]
    for member in members:
        member.start()
    finished = done.wait(READ_LIMIT_S)
    elapsed_s, cpu_s = time.monotonic() - started, process_cpu_s(broker_pid) - cpu_before
    done.set()
    for member in members:
        member.join(10)
        member.close()
    if not finished:
        raise RuntimeError(f"{consumers} consumers read {len(seen)} of {records} offsets in {READ_LIMIT_S:.0f} s")
    megabytes = records * record_bytes / 1e6
    return {
        "consumers": consumers,
        "seconds": elapsed_s,
        "records_per_s": records / elapsed_s,
        "mb_per_s": megabytes / elapsed_s,
        "redelivered": sum(count - 1 for count in seen.values()),
        "broker_cpu_s": cpu_s,
        "broker_cpu_s_per_gb": cpu_s / (megabytes / 1000),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--consumers", default=",".join(map(str, CONSUMER_COUNTS)),
                        help="comma-separated consumer counts (default 1,4,16)")
    args = parser.parse_args(argv)
    import confluent_kafka as ck
    import confluent_kafka.admin  # noqa: F401  (ck.admin)

    counts = [int(part) for part in args.consumers.split(",") if part.strip()]
    with tempfile.TemporaryDirectory(prefix="share-bench-") as data_dir:
        proc, bootstrap = start_broker(Path(data_dir), overrides=BROKER_OVERRIDES)
        try:
            topic = f"share-bench-{uuid.uuid4().hex[:8]}"
            fill_topic(ck, bootstrap, topic, args.records, args.record_bytes)
            print(f"confluent-kafka {ck.__version__} (librdkafka {ck.libversion()[0]}); one partition, "
                  f"{args.records} records of {args.record_bytes} B; implicit acknowledgement")
            print(f"{'consumers':>9} {'seconds':>8} {'records/s':>10} {'MB/s':>7} {'redelivered':>11} "
                  f"{'broker CPU s':>12} {'CPU s/GB':>9}")
            for consumers in counts:
                row = read_with(ck, bootstrap, proc.pid, topic, args.records, args.record_bytes, consumers)
                print(f"{row['consumers']:>9} {row['seconds']:>8.2f} {row['records_per_s']:>10.0f} "
                      f"{row['mb_per_s']:>7.2f} {row['redelivered']:>11} {row['broker_cpu_s']:>12.2f} "
                      f"{row['broker_cpu_s_per_gb']:>9.1f}", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except Exception:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())

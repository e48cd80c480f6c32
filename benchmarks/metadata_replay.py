"""Replaying a KRaft metadata log into an image, and snapshotting the image.

Builds a synthetic metadata log of ``--records`` records (default 1,000,000)
as a controller of a busy cluster would write it: broker registrations and
unfencing, topics with their configs and partitions, then a long tail of
partition changes (leader elections, ISR shrinks and expands), broker fences
and unfences, config changes, topic deletions and re-creations, producer-id
blocks and no-ops. The records are framed (``encode_record``) and packed into
v2 batches of up to ``--batch-records`` records, as in ``__cluster_metadata``.

Then it measures, each the median of ``--rounds``:

* decode + replay: batches -> record values -> ``decode_record`` ->
  ``MetadataDelta``; once with a single delta applied at the end (start-up
  replay) and once publishing an image after every batch (a broker following
  the log);
* the snapshot of the final image: records, encoded bytes, the time to build
  and encode it, and the time to decode and replay it back (checked equal).

    python benchmarks/metadata_replay.py --records 1000000
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.metadata.delta import MetadataDelta
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    BROKER_ENDPOINT,
    BROKER_FEATURE,
    CONFIG_RECORD,
    FEATURE_LEVEL_RECORD,
    FENCE_BROKER_RECORD,
    NO_OP_RECORD,
    PARTITION_CHANGE_RECORD,
    PARTITION_RECORD,
    PRODUCER_IDS_RECORD,
    REGISTER_BROKER_RECORD,
    REMOVE_TOPIC_RECORD,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
    UNFENCE_BROKER_RECORD,
    decode_record,
    encode_record,
)
from controller.metadata.snapshot import decode_snapshot, encode_snapshot
from protocol.records import build_batch, decode_batch_records, iter_batches

BROKERS = 12
REPLICATION_FACTOR = 3
PRODUCER_ID_BLOCK = 1000
TOPIC_CONFIGS = (("retention.ms", "604800000"), ("cleanup.policy", "delete"), ("segment.bytes", "1073741824"))


class LogBuilder:
    """A controller's view while writing the synthetic log: which brokers and topics exist."""

    def __init__(self, seed: int, partitions_per_topic: int):
        self.rng = random.Random(seed)
        self.partitions_per_topic = partitions_per_topic
        self.records: list = []
        self.broker_epochs: dict[int, int] = {}
        self.fenced: set[int] = set()
        self.topics: dict[str, uuid.UUID] = {}
        self.leaders: dict[tuple[uuid.UUID, int], tuple[list[int], int]] = {}  # replicas, leader
        self.next_producer_id = 0
        self.topic_serial = 0

    def _uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128))

    def register_broker(self, broker_id: int) -> None:
        epoch = len(self.records)  # the broker epoch is the offset of its registration
        self.broker_epochs[broker_id] = epoch
        self.records.append(
            REGISTER_BROKER_RECORD(
                broker_id=broker_id,
                incarnation_id=self._uuid(),
                broker_epoch=epoch,
                end_points=[BROKER_ENDPOINT(name="PLAINTEXT", host=f"broker-{broker_id}", port=9092, security_protocol=0)],
                features=[BROKER_FEATURE(name="metadata.version", min_supported_version=1, max_supported_version=21)],
                rack=f"rack-{broker_id % 3}",
                log_dirs=[self._uuid()],
            )
        )
        self.records.append(UNFENCE_BROKER_RECORD(id=broker_id, epoch=epoch))

    def create_topic(self) -> None:
        name = f"topic-{self.topic_serial:06d}"
        self.topic_serial += 1
        topic_id = self._uuid()
        self.topics[name] = topic_id
        self.records.append(TOPIC_RECORD(name=name, topic_id=topic_id))
        for key, value in TOPIC_CONFIGS:
            self.records.append(CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name=name, name=key, value=value))
        for p in range(self.partitions_per_topic):
            first = self.rng.randrange(BROKERS)
            replicas = [(first + r) % BROKERS for r in range(REPLICATION_FACTOR)]
            self.leaders[(topic_id, p)] = (replicas, replicas[0])
            self.records.append(
                PARTITION_RECORD(
                    partition_id=p, topic_id=topic_id, replicas=replicas, isr=list(replicas), leader=replicas[0],
                    leader_epoch=0, partition_epoch=0,
                )
            )

    def delete_topic(self) -> None:
        name = self.rng.choice(sorted(self.topics))
        topic_id = self.topics.pop(name)
        for p in range(self.partitions_per_topic):
            del self.leaders[(topic_id, p)]
        self.records.append(REMOVE_TOPIC_RECORD(topic_id=topic_id))

    def change_partition(self) -> None:
        topic_id = self.topics[self.rng.choice(self.topic_names)]
        p = self.rng.randrange(self.partitions_per_topic)
        replicas, leader = self.leaders[(topic_id, p)]
        if self.rng.random() < 0.5:
            # An election: a new leader from the replicas and a full ISR.
            new_leader = self.rng.choice(replicas)
            self.leaders[(topic_id, p)] = (replicas, new_leader)
            record = PARTITION_CHANGE_RECORD(partition_id=p, topic_id=topic_id, leader=new_leader, isr=list(replicas))
        else:
            # An ISR shrink to the leader and one follower.
            follower = self.rng.choice([r for r in replicas if r != leader])
            record = PARTITION_CHANGE_RECORD(partition_id=p, topic_id=topic_id, isr=[leader, follower])
        self.records.append(record)

    def fence_or_unfence(self) -> None:
        broker_id = self.rng.randrange(BROKERS)
        epoch = self.broker_epochs[broker_id]
        if broker_id in self.fenced:
            self.fenced.discard(broker_id)
            self.records.append(UNFENCE_BROKER_RECORD(id=broker_id, epoch=epoch))
        else:
            self.fenced.add(broker_id)
            self.records.append(FENCE_BROKER_RECORD(id=broker_id, epoch=epoch))

    def build(self, total: int, topics: int) -> list:
        self.records.append(FEATURE_LEVEL_RECORD(name="metadata.version", feature_level=21))
        for broker_id in range(BROKERS):
            self.register_broker(broker_id)
        for _ in range(topics):
            self.create_topic()
        self.topic_names = sorted(self.topics)
        rng = self.rng
        while len(self.records) < total:
            roll = rng.random()
            if roll < 0.94:
                self.change_partition()
            elif roll < 0.96:
                self.fence_or_unfence()
            elif roll < 0.98:
                name = rng.choice(self.topic_names)
                value = None if rng.random() < 0.2 else str(rng.randrange(1, 10**9))
                self.records.append(CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name=name, name="retention.ms", value=value))
            elif roll < 0.985:
                self.next_producer_id += PRODUCER_ID_BLOCK
                self.records.append(
                    PRODUCER_IDS_RECORD(broker_id=rng.randrange(BROKERS), broker_epoch=-1, next_producer_id=self.next_producer_id)
                )
            elif roll < 0.9995:
                self.records.append(NO_OP_RECORD())
            elif len(self.records) + self.partitions_per_topic + 5 < total:
                # A topic deleted and another created in its place.
                self.delete_topic()
                self.create_topic()
                self.topic_names = sorted(self.topics)
        return self.records[:total]


def encode_log(records: list, batch_records: int) -> bytes:
    out = bytearray()
    now_ms = int(time.time() * 1000)
    for start in range(0, len(records), batch_records):
        chunk = records[start : start + batch_records]
        out += build_batch([(None, encode_record(r), [], now_ms) for r in chunk], base_offset=start)
    return bytes(out)


def replay_log(log: bytes, *, publish_every_batch: bool) -> MetadataImage:
    delta = MetadataDelta(MetadataImage())
    image = delta.image
    last_offset = -1
    for position, size, _ in iter_batches(log):
        header, records = decode_batch_records(log[position : position + size])
        delta.replay_all([decode_record(r.value) for r in records])
        last_offset = header.base_offset + header.last_offset_delta
        if publish_every_batch:
            image = delta.apply(last_offset)
    if not publish_every_batch:
        image = delta.apply(last_offset)
    return image


def timed(fn, rounds: int):
    times = []
    result = None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions-per-topic", type=int, default=50)
    parser.add_argument("--batch-records", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    start = time.perf_counter()
    records = LogBuilder(args.seed, args.partitions_per_topic).build(args.records, args.topics)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    log = encode_log(records, args.batch_records)
    encode_s = time.perf_counter() - start
    kinds: dict[str, int] = {}
    for r in records:
        kinds[type(r).__name__] = kinds.get(type(r).__name__, 0) + 1
    print(f"log: {len(records):,} records, {len(log) / 1e6:.1f} MB in batches of <= {args.batch_records} records "
          f"(built in {build_s:.1f} s, encoded in {encode_s:.1f} s = {len(records) / encode_s:,.0f} records/s)")
    for name, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<32} {count:>9,}")
    n = len(records)
    # A million live record objects would make every garbage collection walk
    # them and slow the replay down by half; a broker replaying its log holds
    # one batch's records at a time, and so does the measurement.
    del records
    gc.collect()

    # Decoding alone, to split the replay figure into its two halves.
    def decode_only():
        count = 0
        for position, size, _ in iter_batches(log):
            _, batch = decode_batch_records(log[position : position + size])
            count += len([decode_record(r.value) for r in batch])
        return count

    _, decode_s = timed(decode_only, args.rounds)
    image, replay_s = timed(lambda: replay_log(log, publish_every_batch=False), args.rounds)
    followed, follow_s = timed(lambda: replay_log(log, publish_every_batch=True), args.rounds)
    assert followed == image, "publishing per batch gave another image"
    print(f"decode only (batches + record frames):        {decode_s:6.2f} s  {n / decode_s:>10,.0f} records/s")
    print(f"decode + replay, one image at the end:         {replay_s:6.2f} s  {n / replay_s:>10,.0f} records/s")
    print(f"decode + replay, an image after every batch:   {follow_s:6.2f} s  {n / follow_s:>10,.0f} records/s")
    print(f"  replay share (one image):                    {replay_s - decode_s:6.2f} s  {n / max(replay_s - decode_s, 1e-9):>10,.0f} records/s")
    partitions = sum(len(t.partitions) for t in image.topics.values())
    print(f"image: {len(image.topics):,} topics, {partitions:,} partitions, {len(image.brokers)} brokers, "
          f"offset {image.offset:,}, next producer id {image.next_producer_id:,}")

    frames, snapshot_s = timed(lambda: encode_snapshot(image), args.rounds)
    snapshot_bytes = sum(len(f) for f in frames)
    restored, restore_s = timed(lambda: decode_snapshot(frames, image.offset), args.rounds)
    assert restored == image, "the snapshot does not recreate the image"
    print(f"snapshot: {len(frames):,} records, {snapshot_bytes / 1e6:.2f} MB of record values "
          f"({snapshot_bytes / max(len(log), 1):.1%} of the log); built+encoded in {snapshot_s:.2f} s, "
          f"decoded+replayed in {restore_s:.2f} s ({len(frames) / restore_s:,.0f} records/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

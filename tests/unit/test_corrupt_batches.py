"""Batches that went bad on a replica's disk: the leader never sends one to a
follower (its read path CRC-checks what a follower replica is sent), the
scrubber finds one in a segment nobody reads, and what the replica does next
depends on what its log is to the partition (broker/replica/corruption.py):
an out-of-sync follower cuts its log and fetches again, an in-sync replica
with another in-sync copy cuts its log and halts (the controller moves the
partition), the only in-sync copy cuts nothing and sends followers nothing
from there. Consumers' reads stay unchecked file slices, as in Kafka."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from broker.replica.manager import ReplicaManager
from broker.replica.read import FetchReader, ReplicaReader
from controller.metadata.image import BrokerRegistration, MetadataImage, PartitionImage, TopicImage
from protocol.errors import ErrorCode
from protocol.records import build_batch, iter_batches
from storage.scrub import SegmentScrubber, first_corrupt_batch
from tests.unit.test_replica_manager_roles import fake_broker

KEY = ("t", 0)
TOPIC_ID = uuid.UUID(int=36)
LEADER_EPOCH = 4
RECORDS_PER_BATCH = 3


def image(replicas, isr, leader: int) -> MetadataImage:
    partition = PartitionImage(0, tuple(replicas), tuple(isr), leader, LEADER_EPOCH, LEADER_EPOCH)
    topic = TopicImage("t", TOPIC_ID, {0: partition}, {})
    brokers = {b: BrokerRegistration(b, uuid.UUID(int=b), 10 + b, fenced=False) for b in (1, 2, 3)}
    return MetadataImage(topics={"t": topic}, topic_names_by_id={TOPIC_ID: "t"}, brokers=brokers)


def batch(first: int) -> bytes:
    return build_batch([(b"k", b"value-%d" % (first + i), [], 1_000) for i in range(RECORDS_PER_BATCH)])


def flip_in_records(path, batch_index: int) -> int:
    """Flip a byte in the records area of the log file's ``batch_index``-th batch
    (after its 61-byte header, so its framing still parses and only the CRC
    can tell); the batch's file position."""
    data = bytearray(path.read_bytes())
    position, size, _ = list(iter_batches(data))[batch_index]
    data[position + size - 5] ^= 0x5A
    path.write_bytes(bytes(data))
    return position


def replica_over(tmp_path, replicas, isr, leader: int = 1, batches: int = 3):
    broker, plog = fake_broker(tmp_path, image(replicas, isr, leader))
    broker.config["replica.selector.class"] = None
    broker.replicas = ReplicaManager(broker)
    broker.replicas.registration_caught_up()
    for i in range(batches):
        plog.append(batch(i * RECORDS_PER_BATCH), leader_epoch=LEADER_EPOCH)
    if leader == 1:
        plog.high_watermark = plog.log_end_offset
    return broker, plog


def fetch(broker, offset: int, replica_id: int = -1):
    fetch_partition = SimpleNamespace(
        partition=0, fetch_offset=offset, current_leader_epoch=LEADER_EPOCH, last_fetched_epoch=-1, log_start_offset=0
    )
    read = ReplicaReader(broker).read_partition(
        broker.image.topics["t"], fetch_partition, FetchReader(17, replica_id=replica_id), max_bytes=1 << 20, first=True, now_ms=1
    )
    data = None
    if read.records is not None:
        data = read.records.read_all()
        read.records.close()
    return read, data


def offsets_in(data) -> list[int]:
    return [header.base_offset for _, _, header in iter_batches(data)]


def test_a_sound_read_is_not_corrupt_and_a_flipped_byte_is_found_at_its_batch(tmp_path):
    data = bytearray(batch(0) + build_batch([(None, b"x" * 50, [], 1)], base_offset=3) + build_batch([(None, b"y", [], 1)], base_offset=4))
    assert first_corrupt_batch(bytes(data), 0) is None
    second = len(batch(0))
    data[second + 70] ^= 1
    found = first_corrupt_batch(bytes(data), 0)
    assert found is not None and found.position == second and found.offset == 3 and "CRC" in found.reason
    # A batch whose framing (its length) is bad is cut where the good ones end.
    data = bytearray(batch(0) + batch(3))
    data[second + 8 : second + 12] = (5).to_bytes(4, "big")
    assert first_corrupt_batch(bytes(data), 0)[:2] == (second, 3)


def test_the_scrubber_walks_a_segment_in_steps_and_stops_at_the_corrupt_batch(tmp_path):
    broker, plog = replica_over(tmp_path, (1, 2, 3), (1, 2, 3), batches=6)
    segment = plog.segments[-1]
    scrubber = SegmentScrubber(segment.log_path, segment.base_offset)
    whole = scrubber.step(0, segment.size_bytes, 0, chunk_bytes=1 << 20)
    assert (whole.verified_to, whole.next_offset, whole.corrupt) == (segment.size_bytes, 18, None)
    position = flip_in_records(segment.log_path, 4)
    at, next_offset, steps = 0, 0, 0
    while steps < 20:
        steps += 1
        step = scrubber.step(at, segment.size_bytes, next_offset, chunk_bytes=1)  # a batch at a time
        if step.corrupt is not None:
            break
        at, next_offset = step.verified_to, step.next_offset
    assert steps == 5 and step.corrupt.position == position and step.corrupt.offset == 12
    plog.close()


def test_a_leader_sends_a_follower_the_batches_before_a_corrupt_one_cuts_its_log_and_halts(tmp_path):
    broker, plog = replica_over(tmp_path, (1, 2, 3), (1, 2, 3))
    flip_in_records(plog.segments[-1].log_path, 1)
    read, data = fetch(broker, 0, replica_id=2)
    assert read.error == ErrorCode.NONE and offsets_in(data) == [0]  # the corrupt batch is not sent
    # Broker 2 and 3 hold the batch whole: this replica's log is cut before it,
    # and the broker halts so that the controller elects one of them.
    assert len(broker.halts) == 1
    assert plog.log_end_offset == RECORDS_PER_BATCH and plog.high_watermark == RECORDS_PER_BATCH
    plog.close()


def test_the_only_in_sync_copy_is_not_cut_and_followers_get_nothing_from_the_corrupt_batch_on(tmp_path):
    broker, plog = replica_over(tmp_path, (1, 2, 3), (1,))
    flip_in_records(plog.segments[-1].log_path, 1)
    read, data = fetch(broker, 0, replica_id=2)
    assert offsets_in(data) == [0]
    read, data = fetch(broker, RECORDS_PER_BATCH, replica_id=3)
    assert read.error == ErrorCode.KAFKA_STORAGE_ERROR and data is None
    assert broker.halts == [] and plog.log_end_offset == 3 * RECORDS_PER_BATCH
    # Consumers read file slices unchecked, as from Kafka: their client checks the CRC.
    read, data = fetch(broker, 0)
    assert read.error == ErrorCode.NONE and offsets_in(data) == [0, 3, 6]
    assert first_corrupt_batch(data, 0).offset == RECORDS_PER_BATCH
    plog.close()


def test_a_consumer_fetch_does_not_check_or_act(tmp_path):
    broker, plog = replica_over(tmp_path, (1, 2, 3), (1, 2, 3))
    flip_in_records(plog.segments[-1].log_path, 2)
    read, data = fetch(broker, 0)
    assert offsets_in(data) == [0, 3, 6] and broker.halts == [] and broker.corruption.found == 0
    plog.close()


def test_the_scrubber_finds_an_out_of_sync_followers_corrupt_batch_and_it_fetches_again(tmp_path):
    broker, plog = replica_over(tmp_path, (1, 2, 3), (2, 3), leader=2)
    broker.replicas.apply_image(MetadataImage(), broker.image)
    state = broker.replicas.followers[KEY]
    flip_in_records(plog.segments[-1].log_path, 1)
    checked = asyncio.run(broker.corruption.scrub_pass(bytes_per_s=0))
    assert checked > 0 and broker.corruption.found == 1 and broker.halts == []
    assert plog.log_end_offset == RECORDS_PER_BATCH
    # A fetch already out was asked for the old log end: its answer is dropped.
    assert broker.replicas.followers[KEY] is not state
    assert asyncio.run(broker.corruption.scrub_pass(bytes_per_s=0)) > 0 and broker.corruption.found == 1
    plog.close()


def test_the_scrubber_halts_an_in_sync_follower_after_cutting_its_log(tmp_path):
    broker, plog = replica_over(tmp_path, (1, 2, 3), (1, 2, 3), leader=2)
    broker.replicas.apply_image(MetadataImage(), broker.image)
    flip_in_records(plog.segments[-1].log_path, 2)
    asyncio.run(broker.corruption.scrub_pass(bytes_per_s=0))
    assert len(broker.halts) == 1 and plog.log_end_offset == 2 * RECORDS_PER_BATCH
    plog.close()


def test_a_refusal_holds_for_its_leader_epoch_only(tmp_path):
    broker, plog = replica_over(tmp_path, (1, 2, 3), (1,))
    flip_in_records(plog.segments[-1].log_path, 1)
    fetch(broker, 0, replica_id=2)
    assert broker.corruption.refuses(KEY, RECORDS_PER_BATCH, LEADER_EPOCH)
    assert not broker.corruption.refuses(KEY, RECORDS_PER_BATCH - 1, LEADER_EPOCH)
    # Under a later epoch the log may have been fetched whole again: the next
    # read for a follower looks afresh.
    assert not broker.corruption.refuses(KEY, RECORDS_PER_BATCH, LEADER_EPOCH + 1)
    plog.close()


def test_a_follower_keeps_fetching_after_a_batch_that_fails_its_checks(tmp_path):
    """Kafka's fetcher asks again after replica.fetch.backoff.ms: a batch spoiled
    on the way is refused, nothing of it appended, and the next sound answer is
    taken (the partition is not dropped until the leader changes)."""
    broker, plog = replica_over(tmp_path, (1, 2, 3), (2, 3), leader=2, batches=1)
    broker.replicas.apply_image(MetadataImage(), broker.image)
    state = broker.replicas.followers[KEY]
    sound = build_batch(
        [(b"k", b"value-%d" % (RECORDS_PER_BATCH + i), [], 1_000) for i in range(RECORDS_PER_BATCH)],
        base_offset=RECORDS_PER_BATCH, partition_leader_epoch=LEADER_EPOCH,
    )
    spoiled = bytearray(sound)
    spoiled[-5] ^= 0x5A

    def answer(records: bytes):
        return SimpleNamespace(
            error_code=ErrorCode.NONE, diverging_epoch=None, high_watermark=2 * RECORDS_PER_BATCH,
            log_start_offset=0, records=records,
        )

    assert broker.replicas.follower_response(KEY, state, answer(bytes(spoiled))) is False
    assert plog.log_end_offset == RECORDS_PER_BATCH
    assert broker.replicas.fetch_state(KEY) == (state, plog)  # asked for again after the backoff
    assert broker.replicas.follower_response(KEY, state, answer(sound)) is True
    assert plog.log_end_offset == 2 * RECORDS_PER_BATCH
    plog.close()

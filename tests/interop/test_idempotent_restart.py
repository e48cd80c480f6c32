"""Idempotent producers across broker restarts, over real TCP.

A broker process with small segments (so batches land in older segments
quickly) is stopped cleanly or killed with SIGKILL and started again on the
same data directory; raw Produce requests built with the project's own
batch encoder then replay, skip or fence batches of a producer whose state
must have survived in the partition's producer snapshots:

- a retried batch that now lives in an older segment is answered with its
  original base offset and is not written again;
- a gap in the sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, an epoch older than
  the newest one INVALID_PRODUCER_EPOCH (Kafka's answer to a zombie
  idempotent producer since 2.7);
- with a short ``producer.id.expiration.ms`` the broker forgets an idle
  producer, whose next batch is then accepted at any sequence.

test_idempotent_replay.py covers the replay on a running broker and
test_produce_consume_matrix.py kafka-python's default idempotent producer;
here each client library produces with idempotence explicitly enabled, before
and after a restart, and the partition must hold every message exactly once.
"""

from __future__ import annotations

import signal
import time

import pytest

from protocol.records import build_batch
from protocol.registry import APIS_BY_NAME
from storage.checkpoint import RECOVERY_POINT_CHECKPOINT, read_offsets
from tests.conftest import wait_until
from tests.interop._support import (
    CLIENTS,
    Msg,
    RawConnection,
    consume,
    create_topic,
    produce,
    produce_raw,
    read_all_batches,
    unique_topic,
)

INIT_PRODUCER_ID = APIS_BY_NAME["InitProducerId"]
NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
SEGMENT_BYTES = 1024
OVERRIDES = {
    "log.segment.bytes": str(SEGMENT_BYTES),
    # The recovery point reaches the disk soon, so a crash recovers from a snapshot.
    "log.flush.offset.checkpoint.interval.ms": "100",
    "auto.create.topics.enable": "false",
}


def now_ms() -> int:
    return int(time.time() * 1000)


def init_producer_id(bootstrap: str) -> tuple[int, int]:
    with RawConnection(bootstrap) as conn:
        response = conn.request(
            INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request.cls(transactional_id=None, transaction_timeout_ms=60000)
        )
    assert response.error_code == NONE
    return response.producer_id, response.producer_epoch


def batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    ts = now_ms()
    return build_batch(
        [(b"k", value, [], ts) for value in values],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def fill_segments(bootstrap: str, topic: str, producer_id: int, epoch: int, first_sequence: int, batches: int) -> int:
    """Batches of 3 records of ~200 bytes from one producer; returns the next sequence."""
    sequence = first_sequence
    for i in range(batches):
        response = produce_raw(bootstrap, topic, batch(producer_id, epoch, sequence, [b"f%04d-" % i + b"x" * 200] * 3))
        assert response.error_code == NONE, response
        sequence += 3
    return sequence


def log_end(bootstrap: str, topic: str) -> int:
    batches = read_all_batches(bootstrap, topic)
    return batches[-1][0].last_offset + 1 if batches else 0


def segment_bases(broker, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def snapshot_offsets(broker, topic: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{topic}-0").glob("*.snapshot"))


def restart(broker_factory, broker, *, kill: bool, overrides=OVERRIDES):
    if kill:
        broker.kill()
        assert broker.process.returncode == -signal.SIGKILL
    else:
        assert broker.stop() == 0, broker.log_text()[-3000:]
    return broker_factory(overrides, data_dir=broker.data_dir)


@pytest.mark.parametrize("kill", [False, True], ids=["clean-restart", "sigkill"])
def test_a_retried_batch_in_an_older_segment_is_deduplicated_after_a_restart(broker_factory, kill):
    broker = broker_factory(OVERRIDES)
    topic = unique_topic("idem-restart")
    create_topic(broker.bootstrap, topic)
    pid, epoch = init_producer_id(broker.bootstrap)
    other_pid, other_epoch = init_producer_id(broker.bootstrap)

    target = batch(pid, epoch, 0, [b"t0", b"t1", b"t2"])
    first = produce_raw(broker.bootstrap, topic, target)
    assert (first.error_code, first.base_offset) == (NONE, 0)
    fill_segments(broker.bootstrap, topic, other_pid, other_epoch, 0, 8)
    bases = segment_bases(broker, topic)
    assert len(bases) >= 3, f"segments should have rolled: {bases}"
    assert snapshot_offsets(broker, topic)[: len(bases) - 1] == bases[1:], "a snapshot per rolled segment"
    end = log_end(broker.bootstrap, topic)
    if kill:
        # Let the recovery point (at the last roll) reach the checkpoint file: recovery then
        # re-reads only the active segment and takes the older state from its snapshot.
        checkpoint = broker.data_dir / "logs" / RECOVERY_POINT_CHECKPOINT
        assert wait_until(
            lambda: checkpoint.exists() and read_offsets(checkpoint).get((topic, 0), -1) >= bases[-1], 10
        ), "the recovery point checkpoint did not move"

    broker = restart(broker_factory, broker, kill=kill)
    retried = produce_raw(broker.bootstrap, topic, target)
    assert (retried.error_code, retried.base_offset) == (NONE, 0), "answered with the original offset"
    assert log_end(broker.bootstrap, topic) == end, "nothing was appended"
    batches = read_all_batches(broker.bootstrap, topic)
    assert [h.base_offset for h, _ in batches if h.producer_id == pid] == [0]
    assert [r.value for r in batches[0][1]] == [b"t0", b"t1", b"t2"]

    # The producer continues where it was; a retry of that batch is a duplicate too.
    following = batch(pid, epoch, 3, [b"t3"])
    appended = produce_raw(broker.bootstrap, topic, following)
    assert (appended.error_code, appended.base_offset) == (NONE, end)
    assert produce_raw(broker.bootstrap, topic, following).base_offset == end
    assert log_end(broker.bootstrap, topic) == end + 1


@pytest.mark.parametrize("kill", [False, True], ids=["clean-restart", "sigkill"])
def test_sequence_gaps_and_stale_epochs_are_refused_after_a_restart(broker_factory, kill):
    broker = broker_factory(OVERRIDES)
    topic = unique_topic("idem-fence")
    create_topic(broker.bootstrap, topic)
    pid, _ = init_producer_id(broker.bootstrap)
    other_pid, other_epoch = init_producer_id(broker.bootstrap)
    # Epoch 0 writes, then the producer's epoch 1 takes over (sequences restart at 0).
    next_sequence = fill_segments(broker.bootstrap, topic, pid, 0, 0, 3)
    assert produce_raw(broker.bootstrap, topic, batch(pid, 1, 0, [b"e1-0"])).error_code == NONE
    next_sequence = fill_segments(broker.bootstrap, topic, pid, 1, 1, 4)
    # Another producer fills the following segments: after the restart the first
    # producer's state can only come from a snapshot.
    last_of_pid = log_end(broker.bootstrap, topic) - 1
    fill_segments(broker.bootstrap, topic, other_pid, other_epoch, 0, 6)
    bases = segment_bases(broker, topic)
    assert len(bases) >= 3 and bases[-1] > last_of_pid
    end = log_end(broker.bootstrap, topic)

    broker = restart(broker_factory, broker, kill=kill)
    gap = produce_raw(broker.bootstrap, topic, batch(pid, 1, next_sequence + 1, [b"gap"]))
    assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    zombie = produce_raw(broker.bootstrap, topic, batch(pid, 0, 12, [b"zombie"]))
    assert zombie.error_code == INVALID_PRODUCER_EPOCH
    assert log_end(broker.bootstrap, topic) == end, "refused batches are not written"
    ok = produce_raw(broker.bootstrap, topic, batch(pid, 1, next_sequence, [b"next"]))
    assert (ok.error_code, ok.base_offset) == (NONE, end)


def test_an_expired_producer_may_continue_at_any_sequence(broker_factory):
    overrides = {**OVERRIDES, "producer.id.expiration.ms": "2000", "producer.id.expiration.check.interval.ms": "100"}
    broker = broker_factory(overrides)
    topic = unique_topic("idem-expiry")
    create_topic(broker.bootstrap, topic)
    pid, epoch = init_producer_id(broker.bootstrap)
    assert produce_raw(broker.bootstrap, topic, batch(pid, epoch, 0, [b"a", b"b"])).error_code == NONE
    # Known to the partition: a gap is refused (well within the 2 s expiration).
    assert produce_raw(broker.bootstrap, topic, batch(pid, epoch, 1000, [b"late"])).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER

    def accepted_after_expiry():
        response = produce_raw(broker.bootstrap, topic, batch(pid, epoch, 1000, [b"late"]))
        assert response.error_code in (NONE, OUT_OF_ORDER_SEQUENCE_NUMBER), response
        return response.error_code == NONE

    started = time.monotonic()
    assert wait_until(accepted_after_expiry, timeout_s=20, interval_s=0.2), "the producer never expired"
    assert time.monotonic() - started >= 1.0, "expired well before producer.id.expiration.ms"
    values = [r.value for _, records in read_all_batches(broker.bootstrap, topic) for r in records]
    assert values == [b"a", b"b", b"late"]
    # From there on the producer is known again and its sequence checked.
    assert produce_raw(broker.bootstrap, topic, batch(pid, epoch, 1001, [b"next"])).error_code == NONE
    assert produce_raw(broker.bootstrap, topic, batch(pid, epoch, 5, [b"gap"])).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


IDEMPOTENCE = {
    "kafka-python": {"enable_idempotence": True},
    "confluent": {"enable.idempotence": True},
    "aiokafka": {"enable_idempotence": True},
}


@pytest.mark.parametrize("client", CLIENTS)
def test_idempotent_clients_write_each_message_once_across_a_restart(broker_factory, client):
    broker = broker_factory(OVERRIDES)
    topic = unique_topic(f"idem-{client}")
    create_topic(broker.bootstrap, topic)
    first = [Msg(b"k%d" % i, b"before-%03d-" % i + b"y" * 100) for i in range(30)]
    second = [Msg(b"k%d" % i, b"after-%03d-" % i + b"y" * 100) for i in range(30)]
    assert produce(client, broker.bootstrap, topic, first, extra=IDEMPOTENCE[client]) == list(range(30))
    broker = restart(broker_factory, broker, kill=False)
    assert produce(client, broker.bootstrap, topic, second, extra=IDEMPOTENCE[client]) == list(range(30, 60))

    got = consume(client, broker.bootstrap, topic, 60, settle_s=0.5)
    assert [(g.offset, g.key, g.value) for g in got] == [(i, m.key, m.value) for i, m in enumerate(first + second)]
    batches = read_all_batches(broker.bootstrap, topic)
    producer_ids = []
    for header, records in batches:
        assert header.producer_id >= 0, "every batch is idempotent"
        if not producer_ids or producer_ids[-1][0] != header.producer_id:
            producer_ids.append([header.producer_id, 0])
        assert header.base_sequence == producer_ids[-1][1], "sequences are contiguous per producer"
        producer_ids[-1][1] += len(records)
    assert [count for _, count in producer_ids] == [30, 30], "one producer id per session"
    assert len(segment_bases(broker, topic)) > 1

"""broker.replica.flusher.GroupFlusher and the two halves of a deferred flush (PartitionLog.begin_flush/end_flush)."""

from __future__ import annotations

import asyncio

import pytest

from broker.replica.flusher import GroupFlusher
from protocol.records import build_batch
from storage.deferred_io import PendingFlush
from storage.log import LogConfig, PartitionLog

BASE_MS = 1_700_000_000_000
DURABLE = LogConfig(flush_messages=1)


def batch(i: int) -> bytes:
    return build_batch([(None, b"v%d" % i, [], BASE_MS + i)])


def test_a_deferred_flush_moves_the_recovery_point_only_when_finished(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", DURABLE)
    result = plog.append(batch(0), defer_flush=True)
    assert result.flush_due and plog.recovery_point == 0
    pending = plog.begin_flush()
    assert pending is not None and pending.end_offset == 1
    plog.append(batch(1), defer_flush=True)  # after the flush was taken: not covered by it
    pending.sync()
    plog.end_flush(pending)
    assert plog.recovery_point == 1
    second = plog.begin_flush()
    assert second.end_offset == 2
    second.sync()
    plog.end_flush(second)
    assert plog.recovery_point == 2
    assert plog.begin_flush() is None  # nothing appended since
    plog.close()


def test_without_defer_flush_an_append_still_fsyncs_inline(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", DURABLE)
    result = plog.append(batch(0))
    assert not result.flush_due and plog.recovery_point == 1
    plog.close()


def test_a_truncation_between_the_halves_keeps_the_recovery_point_within_the_log(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", DURABLE)
    for i in range(3):
        plog.append(batch(i), defer_flush=True)
    pending = plog.begin_flush()
    plog.truncate_to(1)
    pending.sync()
    plog.end_flush(pending)
    assert plog.recovery_point == plog.log_end_offset == 1
    plog.close()


def test_the_flusher_groups_many_logs_into_few_passes(tmp_path):
    logs = [PartitionLog(tmp_path / f"t-{p}", DURABLE) for p in range(50)]
    failures = []

    async def scenario():
        flusher = GroupFlusher(lambda plog, exc: failures.append((plog, exc)))
        flusher.start()
        futures = []
        for round_index in range(3):
            for plog in logs:
                assert plog.append(batch(round_index), defer_flush=True).flush_due
                futures.append(flusher.flush(plog))
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        await flusher.stop()
        return flusher

    flusher = asyncio.run(scenario())
    assert not failures
    assert all(plog.recovery_point == plog.log_end_offset == 3 for plog in logs)
    # Asked all at once, synced in one pass (each log once per pass).
    assert flusher.passes == 1 and flusher.logs_synced == len(logs)
    for plog in logs:
        plog.close()


def test_a_failed_fsync_fails_its_waiters_and_reports_the_log(tmp_path, monkeypatch):
    plog = PartitionLog(tmp_path / "t-0", DURABLE)
    failures = []

    def broken_sync(self):
        self.close()
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(PendingFlush, "sync", broken_sync)

    async def scenario():
        flusher = GroupFlusher(lambda failed, exc: failures.append((failed, exc)))
        flusher.start()
        plog.append(batch(0), defer_flush=True)
        future = flusher.flush(plog)
        with pytest.raises(OSError):
            await asyncio.wait_for(future, 30)
        await flusher.stop()

    asyncio.run(scenario())
    assert len(failures) == 1 and failures[0][0] is plog
    assert plog.recovery_point == 0  # never claimed durable
    monkeypatch.undo()
    plog.close()


def test_stop_finishes_the_flushes_already_asked_for(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", DURABLE)

    async def scenario():
        flusher = GroupFlusher(lambda *_: None)
        flusher.start()
        plog.append(batch(0), defer_flush=True)
        future = flusher.flush(plog)
        await flusher.stop()
        assert future.done() and future.exception() is None

    asyncio.run(scenario())
    assert plog.recovery_point == 1
    plog.close()

"""Decisions of a mirror partition's leader (cluster links): pure, no IO.

A mirror partition's leader on the destination cluster fetches the source
partition as a consumer (``replica_id`` -1, read_uncommitted, so up to the
source's high watermark, markers included) and appends the batches as they
are. :class:`MirrorPartition` holds what it knows of the source partition and
turns each answer into one step the driver (broker/links/mirror_fetcher.py)
carries out:

* :class:`Append` the fetched batches (same offsets, epochs, producer ids);
* :class:`StartOver` at the source's log start: retention there removed
  records we never copied, so the local log is emptied and restarts at that
  offset; the records skipped are counted and shown;
* :class:`Diverged`: the source no longer holds records we copied (its
  OffsetForLeaderEpoch end offset for our last batch's epoch is below our log
  end, or a fetch named a diverging epoch that ends below it: an unclean
  election there). Copying stops for good (the mirror goes FAILED with the
  reason) rather than diverge silently;
* :class:`Backoff` on an error: a leader change on the source
  (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH...) also
  asks for fresh source metadata; a missing source topic is kept in the
  status (reporting the deletion is the topic watcher's);
* :class:`CheckEpoch` before batches of a new source leader epoch (see
  :meth:`MirrorPartition.on_fetch_answer`);
* :class:`CheckOffsets` after OFFSET_OUT_OF_RANGE: the driver asks the
  source's log start and end (ListOffsets) and :meth:`on_offsets` decides
  between a start over and a divergence check;
* :class:`CompareLastBatch` when the source cannot say where an epoch ends
  (it does not offer OffsetForLeaderEpoch, or answers -1, Kafka's "no
  information": an epoch above every one it knows, or no epoch cache at
  all): the driver fetches the source from where our last batch begins and
  :meth:`on_last_batch_answer` compares that batch byte for byte (leader
  epoch and CRC included). The same batch at the same offset means the
  source still holds everything we copied; anything else is a divergence.

Before the first fetch of a leadership, a log that holds records is checked
against the source (OffsetForLeaderEpoch for the epoch of its last batch).
:func:`failback_cut` is the rule every replica of a failed-back topic
applies once. The stop rules of a promote and a failover are :func:`stop_due` and
:func:`stop_mark`; :func:`transactions_to_abort` names the transactions the
source left open once the mirror is writable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from protocol.errors import ErrorCode
from protocol.records import iter_batches

# Source errors that a fresh look at the source's metadata resolves (the
# partition's leader moved, or our view of its epoch is old or new).
REFRESH_METADATA_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE,
})
# The source topic (or partition) is not there: deleted, or not created yet.
SOURCE_MISSING_ERRORS = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})

# Mirror states (controller/metadata/records.py MIRROR_*), repeated here so that
# this module needs nothing above the protocol; tests check they agree.
ACTIVE = 0
PENDING_PROMOTE = 2
PENDING_FAILOVER = 3
COPYING_STATES = frozenset({ACTIVE, PENDING_PROMOTE})
STOPPING_STATES = frozenset({PENDING_PROMOTE, PENDING_FAILOVER})


class Append(NamedTuple):
    records: bytes


class StartOver(NamedTuple):
    offset: int
    skipped_records: int


class Diverged(NamedTuple):
    reason: str


class Backoff(NamedTuple):
    error: ErrorCode
    refresh_metadata: bool
    message: str


class CheckOffsets(NamedTuple):
    pass


class CheckEpoch(NamedTuple):
    """Ask the source where our last batch's epoch ends (OffsetForLeaderEpoch) first."""


class CompareLastBatch(NamedTuple):
    """Fetch the source where our last batch begins and compare it (see :meth:`MirrorPartition.on_last_batch_answer`)."""


class Proceed(NamedTuple):
    """Nothing to do: fetch on."""


class StopMark(NamedTuple):
    """What the leader reports when a mirror partition stopped (MirrorPartitionsStopped)."""

    offset: int
    last_epoch: int
    max_producer_id: int


@dataclass
class MirrorPartition:
    """One mirror partition led by this broker: what is known of its source and
    how far behind it is. ``now_ms`` is wall-clock milliseconds."""

    topic: str
    partition: int
    started_ms: int
    # From the last answer of the source (-1: none yet).
    source_high_watermark: int = -1
    source_log_start_offset: int = -1
    last_fetch_ms: int = -1
    # When this partition last held everything the source had committed.
    caught_up_ms: int = -1
    # Records the source deleted (retention) before they could be copied.
    skipped_records: int = 0
    # The last error seen (NONE: the last answer was fine) and its message.
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    # Set when copying must not go on (a divergence); the mirror goes FAILED.
    failure: str | None = None
    # The local log holds records not yet checked against the source.
    needs_epoch_check: bool = False
    # (last epoch, log end) the source last confirmed: batches of newer epochs may follow there.
    verified_at: tuple[int, int] | None = None
    # OFFSET_OUT_OF_RANGE: ask the source's log start and end before fetching.
    needs_offsets: bool = False
    # The source could not place our last epoch: compare our last batch with its own.
    needs_batch_compare: bool = False
    # Where our last batch begins, when the source's answer to its Fetch was OFFSET_OUT_OF_RANGE.
    compare_base: int = -1
    # Where to fetch for the comparison when the source's log starts inside our last batch (-1: at its base).
    compare_from: int = -1
    # Copying is over (promote caught up, or failover); then the stop is reported once.
    stopped: bool = False
    reported: bool = False

    @classmethod
    def for_leadership(cls, topic: str, partition: int, log_end_offset: int, last_epoch: int, now_ms: int) -> MirrorPartition:
        """A partition whose leadership this broker just took: a log that holds
        records is checked against the source before anything is fetched."""
        return cls(topic, partition, now_ms, needs_epoch_check=log_end_offset > 0 and last_epoch >= 0)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def fetchable(self) -> bool:
        return not (self.failure or self.stopped or self.fetch_pending_check)

    # ----------------------------------------------------------------- answers

    def on_fetch_answer(
        self,
        log_end_offset: int,
        last_epoch: int,
        error: ErrorCode,
        high_watermark: int,
        log_start_offset: int,
        records: bytes | None,
        diverging: tuple[int, int] | None,
        now_ms: int,
    ):
        """The step for one partition of a Fetch answer, fetched from
        ``log_end_offset`` by a log whose last batch has ``last_epoch``.

        Batches of a leader epoch newer than ``last_epoch`` are appended only
        once the source confirmed that ``last_epoch`` ends at or past our log
        end there (OffsetForLeaderEpoch): a new epoch is where an unclean
        election on the source may have cut records we hold, and a source that
        does not report a diverging epoch to a consumer's fetch is caught too.
        The batches before it are appended first."""
        if error != ErrorCode.NONE:
            return self._on_error(error, now_ms, "fetch")
        self.last_fetch_ms = now_ms
        self.error, self.error_message = ErrorCode.NONE, None
        self.source_high_watermark = high_watermark
        if log_start_offset >= 0:
            self.source_log_start_offset = log_start_offset
        if diverging is not None and 0 <= diverging[1] < log_end_offset:
            return self._diverged(log_end_offset, diverging[1], f"fetch named diverging epoch {diverging[0]}")
        if records:
            records = bytes(records)
            first = next(iter_batches(records, allow_truncated_tail=True), None)
            if first is not None and first[2].base_offset < log_end_offset:
                # A batch that holds our log end but begins before it: the source's batches are not ours.
                return self._diverged(
                    log_end_offset, first[2].base_offset, f"its batch at offset {first[2].base_offset} straddles our log end"
                )
            if last_epoch >= 0 and self.verified_at != (last_epoch, log_end_offset):
                for position, _, header in iter_batches(records, allow_truncated_tail=True):
                    if header.partition_leader_epoch > last_epoch:
                        if position > 0:
                            return Append(records[:position])
                        self.needs_epoch_check = True
                        return CheckEpoch()
            return Append(records)
        self.observe(log_end_offset, now_ms)
        return Proceed()

    def on_epoch_answer(self, log_end_offset: int, last_epoch: int, error: ErrorCode, end_offset: int, now_ms: int):
        """The source's OffsetForLeaderEpoch answer for ``last_epoch`` (the epoch of
        our last batch): Diverged when it ends below our log end. An answer of
        -1 is Kafka's UNDEFINED_EPOCH_OFFSET, "no information": a Kafka epoch
        cache gives it for an epoch above every one it knows (then our records
        of that epoch were never the source's), and a source without an epoch
        cache gives it for every epoch. It decides nothing, so our last batch
        is compared with the source's instead (:class:`CompareLastBatch`),
        which tells both cases apart. (An epoch below every one the source
        still knows, after retention there, answers its first known start,
        which the offset range of the next fetch then judges.)"""
        if error != ErrorCode.NONE:
            return self._on_error(error, now_ms, "OffsetForLeaderEpoch")
        self.needs_epoch_check = False
        self.error, self.error_message = ErrorCode.NONE, None
        if end_offset < 0:
            return self._compare_last_batch()
        if end_offset < log_end_offset:
            return self._diverged(log_end_offset, end_offset, f"the source's epoch {last_epoch} ends at {end_offset}")
        self.verified_at = (last_epoch, log_end_offset)
        return Proceed()

    def on_epoch_unsupported(self) -> CompareLastBatch:
        """The source does not offer OffsetForLeaderEpoch (a Kafka consumer then
        skips its truncation check; a mirror compares its last batch instead)."""
        self.needs_epoch_check = False
        return self._compare_last_batch()

    def _compare_last_batch(self) -> CompareLastBatch:
        self.needs_batch_compare = True
        return CompareLastBatch()

    def on_last_batch_answer(
        self,
        log_end_offset: int,
        last_epoch: int,
        local_batch: bytes,
        error: ErrorCode,
        high_watermark: int,
        records: bytes | None,
        now_ms: int,
    ):
        """The source's Fetch answer from the base offset of ``local_batch``, the
        last batch of our log (which ends at ``log_end_offset``), or from
        :attr:`compare_from` when set (a Fetch answers from the batch that
        holds the offset asked).

        The source's batch at that offset equal byte for byte: the source holds
        everything we copied (offsets, epochs and records: the CRC covers the
        records, the comparison the epoch too), fetching goes on. A different
        batch there, or a source log that ends before our log end: Diverged.
        A source batch that begins at or past our log end (compaction there
        removed ours) leaves nothing to compare and nothing cut: fetching goes
        on. OFFSET_OUT_OF_RANGE goes to :meth:`on_offsets`: a source log start
        at or before our last batch means the source's log ends before it
        (Diverged); inside it, the comparison fetches again from there; at our
        log end, retention there removed it (nothing to compare).

        A source that answers from that offset with no batch and a high
        watermark below our log end holds nothing there: Diverged, as a Kafka
        consumer takes an undefined epoch answer for a truncation (KIP-320).
        (Kafka's new leaders can report a high watermark that lags for a
        moment; such a source also places epochs, and answers -1 only for an
        epoch it never had.)"""
        local_base = next(iter_batches(local_batch, allow_truncated_tail=False))[2].base_offset
        if error != ErrorCode.NONE:
            self.compare_base = local_base
            return self._on_error(error, now_ms, "Fetch of our last batch")
        self.needs_batch_compare = False
        self.compare_base, self.compare_from = -1, -1
        self.error, self.error_message = ErrorCode.NONE, None
        records = bytes(records or b"")
        for position, size, header in iter_batches(records, allow_truncated_tail=True):
            if position + size > len(records):
                break
            if header.base_offset + header.last_offset_delta < local_base:
                continue
            if header.base_offset >= log_end_offset:
                break
            if records[position : position + size] == local_batch:
                self.verified_at = (last_epoch, log_end_offset)
                return Proceed()
            return self._diverged(
                log_end_offset,
                header.base_offset,
                f"the source's batch at offset {header.base_offset} differs from ours at {local_base}",
            )
        if high_watermark < log_end_offset:
            return self._diverged(log_end_offset, high_watermark, "the source's log ends there")
        self.verified_at = (last_epoch, log_end_offset)
        return Proceed()

    def on_offsets(self, log_end_offset: int, last_epoch: int, source_log_start: int, source_end: int, now_ms: int):
        """The source's log start and end (ListOffsets, earliest and latest) after
        OFFSET_OUT_OF_RANGE: start over at its log start when retention passed
        our log end; otherwise the source's log ended before our log end when
        it answered, so check for a divergence (an epoch check, even when its
        log has grown past our log end meanwhile: a truncation there may have
        been followed by new records)."""
        self.needs_offsets = False
        self.source_log_start_offset = source_log_start
        if source_log_start > log_end_offset:
            skipped = source_log_start - log_end_offset
            self.skipped_records += skipped
            self.needs_batch_compare, self.compare_base, self.compare_from = False, -1, -1
            return StartOver(source_log_start, skipped)
        if self.needs_batch_compare and self.compare_base >= 0:
            compare_base, self.compare_base = self.compare_base, -1
            if source_log_start <= compare_base:
                # The source holds offsets from before our last batch, yet not that batch's offset: its log ends before it.
                return self._diverged(log_end_offset, min(source_end, compare_base), "the source's log ends there")
            if source_log_start < log_end_offset:
                # Its log starts inside our last batch (DeleteRecords can cut a batch): compare from there.
                self.compare_from = source_log_start
                return Proceed()
            # Retention there removed our last batch and the source goes on from our log end: nothing to compare.
            self.needs_batch_compare, self.compare_from = False, -1
            self.verified_at = (last_epoch, log_end_offset)
            return Proceed()
        if last_epoch >= 0:
            # Our log end was out of the source's range though not below its start: its log ended
            # before it then, whatever it holds now (it may have grown again since): check.
            self.needs_epoch_check = True
            self.verified_at = None
            return Proceed()
        if log_end_offset > source_end:
            return self._diverged(log_end_offset, source_end, "the source's log ends there")
        return Proceed()

    def on_source_missing(self, error: ErrorCode, now_ms: int, message: str):
        """Source metadata does not have the topic or partition."""
        return self._on_error(error, now_ms, message)

    def on_unanswered(self, error: ErrorCode, now_ms: int, what: str) -> Backoff:
        """A request the source answered without this partition (or refused whole with ``error``)."""
        message = f"{what}: the source answered {error.name}" if error != ErrorCode.NONE else f"{what}: the source's answer left the partition out"
        self.error, self.error_message = (error if error != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR), message
        return Backoff(self.error, False, message)

    def on_unavailable(self, message: str, now_ms: int) -> Backoff:
        """No answer from the source (connection refused, timeout)."""
        self.error, self.error_message = ErrorCode.NETWORK_EXCEPTION, message
        # What the source confirmed held until now; out of reach, it may have lost records meanwhile.
        self.verified_at = None
        return Backoff(ErrorCode.NETWORK_EXCEPTION, True, message)

    def _on_error(self, error: ErrorCode, now_ms: int, what: str):
        # An error (a leader change there, above all) is where a source may cut records: confirm again.
        self.verified_at = None
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.needs_offsets = True
            return CheckOffsets()
        if error in SOURCE_MISSING_ERRORS:
            message = f"{what}: the source has no such topic or partition ({error.name})"
        else:
            message = f"{what}: the source answered {error.name}"
        self.error, self.error_message = error, message
        return Backoff(error, error in REFRESH_METADATA_ERRORS or error in SOURCE_MISSING_ERRORS, message)

    def _diverged(self, log_end_offset: int, source_end: int, why: str) -> Diverged:
        reason = (
            f"partition {self.partition}: the source truncated records already copied "
            f"(local log end {log_end_offset}, source end {source_end}: {why})"
        )
        self.failure = reason
        self.error, self.error_message = ErrorCode.OFFSET_OUT_OF_RANGE, reason
        return Diverged(reason)

    # ----------------------------------------------------------------- lag

    def observe(self, log_end_offset: int, now_ms: int) -> None:
        """Our log end after an answer was applied."""
        if self.source_high_watermark >= 0 and log_end_offset >= self.source_high_watermark:
            self.caught_up_ms = now_ms

    def lag_records(self, log_end_offset: int) -> int:
        if self.source_high_watermark < 0:
            return -1
        return max(0, self.source_high_watermark - log_end_offset)

    def lag_ms(self, log_end_offset: int, now_ms: int) -> int:
        """0 while caught up; else the time since it last was (since the
        leadership began when it never was). While the source does not answer
        (or answers an error) its high watermark is not known: the time since
        an answer last showed this partition holding everything, which grows
        for as long as the source stays out of reach."""
        if self.source_high_watermark < 0:
            return -1
        if log_end_offset >= self.source_high_watermark and self.error == ErrorCode.NONE:
            return 0
        since = self.caught_up_ms if self.caught_up_ms >= 0 else self.started_ms
        return max(0, now_ms - since)

    # ----------------------------------------------------------------- stopping

    def stop_due(self, mirror_state: int, log_end_offset: int) -> bool:
        """Whether copying ends now: at once for a failover; for a promote, once an
        answer of the source showed a high watermark our log end has reached."""
        if self.stopped:
            return True
        if mirror_state == PENDING_FAILOVER:
            self.stopped = True
        elif mirror_state == PENDING_PROMOTE and self.source_high_watermark >= 0 and not self.fetch_pending_check:
            self.stopped = log_end_offset == self.source_high_watermark
        return self.stopped

    @property
    def fetch_pending_check(self) -> bool:
        return self.needs_epoch_check or self.needs_offsets or self.needs_batch_compare


def stop_mark(high_watermark: int, log_end_offset: int, last_epoch: int, max_producer_id: int) -> StopMark | None:
    """What a stopped partition reports, once every in-sync replica holds it
    (its high watermark reached its log end); None before."""
    if high_watermark < log_end_offset:
        return None
    return StopMark(log_end_offset, last_epoch, max_producer_id)


def transactions_to_abort(open_transactions: dict[int, int], producers: dict, mark_offset: int) -> list[tuple[int, int, int]]:
    """(producer id, producer epoch, coordinator epoch) of each transaction the
    source left open in a mirror that became writable: those that began before
    ``mark_offset`` (where the mirror stopped); a transaction a producer of
    this cluster began afterwards is its own. ``open_transactions`` maps a
    producer id to its open transaction's first offset, ``producers`` a
    producer id to its entry (``epoch``, ``coordinator_epoch``). The marker
    carries the producer's last coordinator epoch (0 when it never had one),
    which the log accepts."""
    aborts = []
    for producer_id, first_offset in sorted(open_transactions.items(), key=lambda item: item[1]):
        if mark_offset >= 0 and first_offset >= mark_offset:
            continue
        entry = producers.get(producer_id)
        if entry is None:
            continue
        aborts.append((producer_id, entry.epoch, max(entry.coordinator_epoch, 0)))
    return aborts


class FailbackCut(NamedTuple):
    """What a replica of a failed-back mirror does: cut its log back to
    ``cut_to`` (None: keep it) and remember ``record`` as applied (None: nothing new)."""

    cut_to: int | None
    record: tuple[int, int] | None


def failback_cut(mark: tuple[int, int] | None, log_end_offset: int, applied: tuple[int, int] | None) -> FailbackCut:
    """The failback rule for one replica of a mirror topic that follows its source.

    ``mark`` is the partition's (offset, epoch) in the MirrorTopicRecord (None:
    the mirror has no mark there, it never was failed back), ``applied`` the
    mark this replica already acted on (kept in its partition directory). A
    replica acts once per mark: when the mark is new to it, a log that ends
    past the mark is cut back to it (what it holds past the mark is the old
    source's own history, which the new primary never had), a shorter one is
    kept (copying resumes from its end); either way the mark is recorded, so
    a replica that restarts later, holding records copied from the new primary
    past the mark, never cuts them. Epochs cannot decide this: the two
    clusters number theirs independently (docs/cluster-links.md)."""
    if mark is None or mark == applied:
        return FailbackCut(None, None)
    offset = mark[0]
    return FailbackCut(offset if log_end_offset > offset else None, mark)

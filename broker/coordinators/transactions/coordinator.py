"""The transaction coordinator's state machine (Kafka's TransactionCoordinator,
TransactionMetadata and TransactionStateManager, transactions versions 1 and 2).

Longer than ~700 lines on purpose: one state machine whose transitions, of
both transaction versions, share the pending-transition, store and marker
machinery below; split, one set of rules would be spread over files.

Pure and single-threaded: every operation takes ``now_ms`` and returns a list
of effects for the IO side, which reports their outcomes back:

- ``Store(partition, coordinator_epoch, records, token, delay_ms)``: append
  these ``__transaction_state`` records as the partition's leader (after
  ``delay_ms``), wait until every in-sync replica has them, then call
  ``store_done(now_ms, token, error)`` with the coordinator's error for a
  failure (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...).
- ``SendMarkers(...)``: write the transaction's COMMIT or ABORT marker to each
  listed partition; report partitions as they are done (or dropped because
  their topic is gone) with ``markers_written``. Retrying failed partitions is
  the IO side's job, for as long as ``pending_markers`` still asks for them.
- ``AllocateProducerId(token)``: get a fresh producer id, then call
  ``producer_id_allocated(now_ms, token, producer_id, error)``.

Replies to clients go through the ``reply`` callback each request passes,
called exactly once (maybe at once, maybe from a later ``store_done``, or with
NOT_COORDINATOR when the partition is unloaded meanwhile).

The rules, in brief (Kafka's):

- A state change is prepared as a pending transition and takes effect only
  once its record is stored and replicated; a failed store changes nothing
  (a transactional id created by the failed request is forgotten again).
  While a transition is pending, other requests for the id are answered
  CONCURRENT_TRANSACTIONS.
- InitProducerId bumps the epoch (a new id starts at 0), or moves to a new
  producer id once the epoch is exhausted (32766). With an id and epoch from
  the producer (KIP-360) the epoch is bumped only if they are current (a
  retry of the last bump gets the same epoch again); otherwise PRODUCER_FENCED.
  On an ongoing transaction it fences the producer: the transaction is
  aborted with the epoch bumped, and the caller is told CONCURRENT_TRANSACTIONS
  so that it retries and gets a second bump.
- EndTxn stores PrepareCommit/PrepareAbort and is answered then; the markers
  follow, and CompleteCommit/CompleteAbort is stored once every partition has
  its marker. A retried EndTxn after completion is answered NONE, the other
  direction INVALID_TXN_STATE.
- Transactions version 2 (KIP-890 part 2, ``end_txn_v2``): the prepare record
  bumps the epoch (the markers carry it) and the answer is the identity the
  producer goes on with; at an exhausted epoch the record also names a new
  producer id, which the completion moves to at epoch 0 (kept as the previous
  id, so a retry with the old identity is recognised). A partition leader
  adds a version 2 producer's partitions (``add_partitions`` with
  ``client_transaction_version`` 2). The client transaction version and the
  producer ids are stored in the records (TransactionLogValue v1), so a new
  coordinator completes a prepared transaction as the old one would have.
  Fences and timeouts bump once, as for version 1.
- Ongoing transactions older than their timeout are aborted with an epoch
  bump (``abort_timed_out``); ids idle for ``transactional.id.expiration.ms``
  in Empty/CompleteCommit/CompleteAbort are removed with a tombstone
  (``expire_transactional_ids``).
- A ``__transaction_state`` partition is replayed with ``load_record`` and
  then ``finish_loading`` at its leader epoch (the coordinator epoch markers
  carry); transactions found in PrepareCommit/PrepareAbort resume their
  markers, one found in PrepareEpochFence resumes its abort.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from broker.coordinators.transactions.model import (
    COMPLETED,
    EPOCH_EXHAUSTED,
    EPOCH_MAX,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    OFFSETS_TOPIC,
    PREPARED,
    TRANSACTION_VERSION_1,
    TRANSACTION_VERSION_2,
    AllocateProducerId,
    Allocation,
    Effect,
    EndResult,
    InitResult,
    Kind,
    Pending,
    Reply,
    SendMarkers,
    Store,
    StoreWaiter,
    TxnConfig,
    TxnDescription,
    TxnListing,
    TxnMetadata,
    epoch_exhausted,
)
from protocol.consumer_offsets import partition_for_group
from protocol.errors import ErrorCode
from protocol.transaction_state import (
    TransactionValue,
    TxnState,
    decode_key,
    decode_value,
    key_bytes,
    partition_for,
    value_bytes,
)


class TransactionCoordinator:
    def __init__(self, config: TxnConfig):
        self.config = config
        # __transaction_state partition -> coordinator epoch (its leader epoch).
        self._loaded: dict[int, int] = {}
        self._loading: dict[int, dict[str, TxnMetadata]] = {}
        self._txns: dict[int, dict[str, TxnMetadata]] = {}
        self._stores: dict[int, StoreWaiter] = {}
        self._allocations: dict[int, Allocation] = {}
        self._next_token = 0

    # ----------------------------------------------------------------- lookups

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_partitions)

    def offsets_partition_for(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition AddOffsetsToTxn adds for a group:
        the one the group coordinator stores the group's offsets in."""
        return OFFSETS_TOPIC, partition_for_group(group_id, self.config.offsets_partitions)

    def metadata(self, transactional_id: str) -> TxnMetadata | None:
        """The id's metadata, if its partition is loaded (tests and tools read it)."""
        return self._txns.get(self.partition_for(transactional_id), {}).get(transactional_id)

    def _partition_error(self, partition: int) -> ErrorCode | None:
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._loaded:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _token(self) -> int:
        self._next_token += 1
        return self._next_token

    # ----------------------------------------------------------------- InitProducerId

    def init_producer_id(
        self,
        now_ms: int,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        reply: Reply,
        *,
        new_producer_id: int | None = None,
    ) -> list[Effect]:
        """``expected``: the (producer id, epoch) a v3+ producer already has (KIP-360),
        or None. ``reply`` gets an :class:`InitResult`."""
        if transactional_id == "":
            reply(InitResult(ErrorCode.INVALID_REQUEST))
            return []
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            reply(InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT))
            return []
        partition = self.partition_for(transactional_id)
        error = self._partition_error(partition)
        if error is not None:
            reply(InitResult(error))
            return []
        txns = self._txns[partition]
        meta = txns.get(transactional_id)

        def allocate() -> list[Effect]:
            token = self._token()

            def resume(later_ms: int, producer_id: int) -> list[Effect]:
                return self.init_producer_id(
                    later_ms, transactional_id, timeout_ms, expected, reply, new_producer_id=producer_id
                )

            self._allocations[token] = Allocation(partition, reply, resume)
            return [AllocateProducerId(token)]

        if meta is None:
            if new_producer_id is None:
                return allocate()
            meta = TxnMetadata(
                transactional_id,
                producer_id=new_producer_id,
                producer_epoch=NO_PRODUCER_EPOCH,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=frozenset(),
                start_ms=-1,
                last_update_ms=now_ms,
                stored=False,
            )
            txns[transactional_id] = meta
            new_producer_id = None  # used up
        if meta.pending is not None:
            reply(InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return []
        if expected is not None and not self._valid_producer_id(meta, *expected):
            return self._init_refused(partition, meta, ErrorCode.PRODUCER_FENCED, reply)
        if meta.state in PREPARED or meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            # Completing (or being removed): the client backs off and retries.
            reply(InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return []
        if meta.state == TxnState.ONGOING:
            # The abort's bumped epoch is never returned: the retry bumps again.
            return self._begin_fence(now_ms, partition, meta, Kind.FENCE, reply)
        # Empty, CompleteCommit, CompleteAbort.
        if epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            if new_producer_id is None:
                return allocate()
            pending = Pending(
                Kind.INIT,
                self._empty_target(meta, new_producer_id, 0, timeout_ms, now_ms),
                last_producer_epoch=meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                previous_producer_id=meta.producer_id,
                reply=reply,
            )
        else:
            bumped = self._bumped_epoch(meta, expected)
            if bumped is None:
                return self._init_refused(partition, meta, ErrorCode.PRODUCER_FENCED, reply)
            epoch, last_epoch = bumped
            pending = Pending(
                Kind.INIT,
                self._empty_target(meta, meta.producer_id, epoch, timeout_ms, now_ms),
                last_producer_epoch=last_epoch,
                previous_producer_id=meta.producer_id,
                reply=reply,
            )
        return self._store_transition(partition, meta, pending)

    def _init_refused(self, partition: int, meta: TxnMetadata, error: ErrorCode, reply: Reply) -> list[Effect]:
        if not meta.stored and meta.pending is None:
            del self._txns[partition][meta.transactional_id]  # created by this request
        reply(InitResult(error))
        return []

    @staticmethod
    def _valid_producer_id(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
        # A new id (no epoch yet) takes anyone recovering from UNKNOWN_PRODUCER_ID;
        # the current id is checked by epoch below; the previous id only as a
        # retry of the rotation that exhausted its epochs.
        return (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == meta.producer_id
            or (producer_id == meta.previous_producer_id and epoch_exhausted(producer_epoch))
        )

    @staticmethod
    def _bumped_epoch(meta: TxnMetadata, expected: tuple[int, int] | None) -> tuple[int, int] | None:
        """(new epoch, last epoch), or None when the producer is fenced."""
        if epoch_exhausted(meta.producer_epoch):
            # Only a producer with an older epoch gets here (the current one
            # rotates): it was fenced long ago.
            return None
        bumped = meta.producer_epoch + 1
        if expected is None:
            return bumped, NO_PRODUCER_EPOCH
        expected_epoch = expected[1]
        if meta.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == meta.producer_epoch:
            return bumped, meta.producer_epoch
        if expected_epoch == meta.last_producer_epoch:
            # A retry of a bump whose answer was lost: the same epoch again.
            return meta.producer_epoch, meta.last_producer_epoch
        return None

    @staticmethod
    def _empty_target(meta: TxnMetadata, producer_id: int, epoch: int, timeout_ms: int, now_ms: int) -> TransactionValue:
        return TransactionValue(
            producer_id=producer_id,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            last_update_ms=now_ms,
            start_ms=-1,
        )

    def producer_id_allocated(self, now_ms: int, token: int, producer_id: int | None, error: ErrorCode = ErrorCode.NONE) -> list[Effect]:
        allocation = self._allocations.pop(token, None)
        if allocation is None:
            return []  # its partition was unloaded; the request was answered then
        if error != ErrorCode.NONE or producer_id is None:
            allocation.reply(InitResult(error if error != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR))
            return []
        return allocation.resume(now_ms, producer_id)

    # ----------------------------------------------------------------- AddPartitionsToTxn / AddOffsetsToTxn

    def _producer_error(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[ErrorCode | None, int, TxnMetadata | None]:
        """The error of a request naming an id, producer id and epoch, if any; its partition and metadata."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, None
        partition = self.partition_for(transactional_id)
        error = self._partition_error(partition)
        if error is not None:
            return error, partition, None
        meta = self._txns[partition].get(transactional_id)
        if meta is None or not meta.stored or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, partition, None
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, partition, None
        return None, partition, meta

    def add_partitions(
        self,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
        reply: Reply,
        client_transaction_version: int = TRANSACTION_VERSION_1,
    ) -> list[Effect]:
        """``reply`` gets an ErrorCode. ``client_transaction_version`` is 2 when a
        partition leader adds the partition for a version 2 producer (Produce
        v12, TxnOffsetCommit v5); the transaction then ends with an epoch bump."""
        pending_error = self._pending_error(transactional_id) if client_transaction_version >= TRANSACTION_VERSION_2 else None
        if pending_error is not None:
            # First for a version 2 producer, as Kafka: across an epoch overflow
            # it already uses the new producer id, which is only pending here.
            # (A version 1 producer keeps the checks in their old order.)
            reply(pending_error)
            return []
        error, partition, meta = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error is not None:
            reply(error)
            return []
        added = frozenset(partitions)
        if meta.pending is not None or meta.state in PREPARED:
            reply(ErrorCode.CONCURRENT_TRANSACTIONS)
            return []
        if meta.state == TxnState.ONGOING and added <= meta.partitions:
            reply(ErrorCode.NONE)  # nothing new to store
            return []
        if meta.state not in (TxnState.ONGOING, *COMPLETED):
            reply(ErrorCode.CONCURRENT_TRANSACTIONS)
            return []
        start_ms = now_ms if meta.state in COMPLETED else meta.start_ms
        target = replace(
            meta.value(), state=TxnState.ONGOING, partitions=meta.partitions | added, start_ms=start_ms,
            last_update_ms=now_ms, client_transaction_version=client_transaction_version, next_producer_id=NO_PRODUCER_ID,
        )
        pending = Pending(Kind.ADD, target, meta.last_producer_epoch, meta.previous_producer_id, reply=reply)
        return self._store_transition(partition, meta, pending)

    def _pending_error(self, transactional_id: str) -> ErrorCode | None:
        """CONCURRENT_TRANSACTIONS while the id has a transition waiting for its record."""
        if not transactional_id:
            return None
        partition = self.partition_for(transactional_id)
        if self._partition_error(partition) is not None:
            return None
        meta = self._txns[partition].get(transactional_id)
        if meta is not None and meta.stored and meta.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return None

    def add_offsets(self, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, reply: Reply) -> list[Effect]:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction, so that the group's transactional offset commits get its marker."""
        return self.add_partitions(now_ms, transactional_id, producer_id, producer_epoch, [self.offsets_partition_for(group_id)], reply)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1, for a partition leader about to take a transaction's
        first batch: NONE for each partition the ongoing transaction of this
        producer id and epoch holds, INVALID_TXN_STATE for the others; a
        coordinator error (NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING,
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, ...) for all of them."""
        keys = list(dict.fromkeys(partitions))
        error, _, meta = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error is None and meta.state in PREPARED:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error is not None:
            return {key: error for key in keys}
        ongoing = meta.state == TxnState.ONGOING
        return {key: ErrorCode.NONE if ongoing and key in meta.partitions else ErrorCode.INVALID_TXN_STATE for key in keys}

    # ----------------------------------------------------------------- EndTxn

    def end_txn(self, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, reply: Reply) -> list[Effect]:
        """``reply`` gets an ErrorCode: NONE once PrepareCommit/PrepareAbort is stored."""
        error, partition, meta = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error is not None:
            reply(error)
            return []
        if meta.pending is not None:
            reply(ErrorCode.CONCURRENT_TRANSACTIONS)
            return []
        state = meta.state
        if state == TxnState.ONGOING:
            target = replace(
                meta.value(), state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, last_update_ms=now_ms
            )
            pending = Pending(Kind.END, target, meta.last_producer_epoch, meta.previous_producer_id, reply=reply)
            return self._store_transition(partition, meta, pending)
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            # A retry after the answer was lost: fine in the same direction only.
            done = (state == TxnState.COMPLETE_COMMIT) == commit
            reply(ErrorCode.NONE if done else ErrorCode.INVALID_TXN_STATE)
            return []
        if state in PREPARED:
            same = (state == TxnState.PREPARE_COMMIT) == commit
            reply(ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE)
            return []
        reply(ErrorCode.INVALID_TXN_STATE)  # Empty: no transaction to end
        return []

    def end_txn_v2(
        self,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        reply: Reply,
        *,
        new_producer_id: int | None = None,
    ) -> list[Effect]:
        """EndTxn of transactions version 2 (v5+, KIP-890 part 2); ``reply`` gets an
        :class:`EndResult`. The epoch is bumped at every end: PrepareCommit/
        PrepareAbort is stored with epoch + 1 (the markers carry it), and the
        answer is the producer id and epoch the producer goes on with. When the
        epoch would be exhausted, the prepare record also names a new producer
        id (``next_producer_id``) that the completion moves to, at epoch 0.
        A retry whose answer was lost (the epoch one below the current one, or
        the last epoch of the previous producer id after a rotation) is answered
        NONE with the current id and epoch in the same direction; an abort with
        the current epoch and no transaction open still bumps the epoch (Kafka's
        table: Empty/CompleteCommit/CompleteAbort take an abort)."""

        def fail(error: ErrorCode) -> list[Effect]:
            reply(EndResult(error))
            return []

        if not transactional_id:
            return fail(ErrorCode.INVALID_REQUEST)
        partition = self.partition_for(transactional_id)
        error = self._partition_error(partition)
        if error is not None:
            return fail(error)
        meta = self._txns[partition].get(transactional_id)
        if meta is None or not meta.stored:
            return fail(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        state = meta.state
        # A producer can hold the last epoch (32767) only after the coordinator
        # aborted its transaction at 32766 (a timeout or a fence bumps once, and
        # a late abort of that producer counts as the retry of its own). Its
        # end cannot bump any more: the prepare keeps 32767 and moves to a new id.
        retry_on_overflow = (
            meta.previous_producer_id == producer_id and producer_epoch >= EPOCH_EXHAUSTED and meta.producer_epoch == 0
        )
        retry_on_bump = meta.producer_epoch == producer_epoch + 1 or (
            state in PREPARED and meta.producer_epoch == producer_epoch == EPOCH_MAX
        )
        if state in PREPARED:
            valid_epoch = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == meta.producer_epoch
        else:  # Ongoing, Empty
            valid_epoch = producer_epoch == meta.producer_epoch
        retry = retry_on_bump or retry_on_overflow
        if meta.producer_id != producer_id and not retry_on_overflow:
            return fail(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return fail(ErrorCode.PRODUCER_FENCED)
        if meta.pending is not None:
            return fail(ErrorCode.CONCURRENT_TRANSACTIONS)
        if state in PREPARED:
            same = (state == TxnState.PREPARE_COMMIT) == commit
            return fail(ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE)
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            done = (state == TxnState.COMPLETE_COMMIT) == commit
            if retry:
                if not done:
                    return fail(ErrorCode.INVALID_TXN_STATE)
                reply(EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch))
                return []
            if commit:
                return fail(ErrorCode.INVALID_TXN_STATE)
        elif state == TxnState.EMPTY and commit or state not in (TxnState.ONGOING, TxnState.EMPTY):
            return fail(ErrorCode.INVALID_TXN_STATE)
        # Ongoing (either direction), or an abort with nothing open: bump.
        next_producer_id = NO_PRODUCER_ID
        if epoch_exhausted(meta.producer_epoch):
            if new_producer_id is None:
                token = self._token()

                def resume(later_ms: int, allocated: int) -> list[Effect]:
                    return self.end_txn_v2(
                        later_ms, transactional_id, producer_id, producer_epoch, commit, reply, new_producer_id=allocated
                    )

                self._allocations[token] = Allocation(partition, lambda result: reply(EndResult(result.error)), resume)
                return [AllocateProducerId(token)]
            next_producer_id = new_producer_id
        nothing_open = state != TxnState.ONGOING
        target = replace(
            meta.value(),
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_epoch=min(meta.producer_epoch + 1, EPOCH_MAX),
            next_producer_id=next_producer_id,
            client_transaction_version=TRANSACTION_VERSION_2,
            start_ms=now_ms if nothing_open else meta.start_ms,
            partitions=frozenset() if nothing_open else meta.partitions,
            last_update_ms=now_ms,
        )
        pending = Pending(Kind.END, target, meta.producer_epoch, meta.previous_producer_id, reply=reply, answers_identity=True)
        return self._store_transition(partition, meta, pending)

    @staticmethod
    def _identity_after(meta: TxnMetadata) -> tuple[int, int]:
        """The producer id and epoch a version 2 transaction's completion leaves."""
        if meta.client_transaction_version >= TRANSACTION_VERSION_2 and meta.next_producer_id != NO_PRODUCER_ID:
            return meta.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    def _begin_fence(self, now_ms: int, partition: int, meta: TxnMetadata, kind: Kind, reply: Reply | None) -> list[Effect]:
        """Abort the ongoing transaction with the epoch bumped, so that the producer
        holding the current epoch can neither add to it nor end it any more."""
        epoch = meta.producer_epoch + 1 if meta.producer_epoch < EPOCH_MAX else meta.producer_epoch
        target = replace(meta.value(), state=TxnState.PREPARE_ABORT, producer_epoch=epoch, last_update_ms=now_ms)
        pending = Pending(kind, target, NO_PRODUCER_EPOCH, meta.previous_producer_id, reply=reply)
        return self._store_transition(partition, meta, pending)

    def abort_timed_out(self, now_ms: int) -> list[Effect]:
        """Abort every ongoing transaction older than its timeout (Kafka's
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` job)."""
        effects: list[Effect] = []
        for partition in sorted(self._loaded):
            for meta in list(self._txns[partition].values()):
                if meta.pending is None and meta.state == TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now_ms:
                    effects += self._begin_fence(now_ms, partition, meta, Kind.TIMEOUT, None)
        return effects

    def timed_out_count(self, now_ms: int) -> int:
        return sum(
            1
            for partition in self._loaded
            for meta in self._txns[partition].values()
            if meta.pending is None and meta.state == TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now_ms
        )

    # ----------------------------------------------------------------- markers and completion

    def _begin_completion(self, now_ms: int, partition: int, meta: TxnMetadata) -> list[Effect]:
        commit = meta.state == TxnState.PREPARE_COMMIT
        producer_id, producer_epoch = self._identity_after(meta)
        rotated = producer_id != meta.producer_id
        previous_producer_id = meta.producer_id if rotated else meta.previous_producer_id
        target = replace(
            meta.value(),
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=frozenset(),
            last_update_ms=now_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            previous_producer_id=previous_producer_id
            if meta.client_transaction_version >= TRANSACTION_VERSION_2 else NO_PRODUCER_ID,
            next_producer_id=NO_PRODUCER_ID,
        )
        last_epoch = meta.producer_epoch if rotated else meta.last_producer_epoch
        meta.pending = Pending(
            Kind.COMPLETE, target, last_epoch, previous_producer_id, remaining=set(meta.partitions)
        )
        if not meta.pending.remaining:
            return self._store_completion(partition, meta)
        return [self._send_markers(partition, meta)]

    def _send_markers(self, partition: int, meta: TxnMetadata) -> SendMarkers:
        return SendMarkers(
            transactional_id=meta.transactional_id,
            partition=partition,
            coordinator_epoch=self._loaded[partition],
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            commit=meta.state == TxnState.PREPARE_COMMIT,
            partitions=tuple(sorted(meta.pending.remaining)),
        )

    def pending_markers(self, transactional_id: str, coordinator_epoch: int) -> SendMarkers | None:
        """The markers the id's completing transaction still waits for, at this
        coordinator epoch; None once there are none (or the coordinator moved on)."""
        partition = self.partition_for(transactional_id)
        if self._loaded.get(partition) != coordinator_epoch:
            return None
        meta = self._txns[partition].get(transactional_id)
        if meta is None or meta.pending is None or meta.pending.kind != Kind.COMPLETE or not meta.pending.remaining:
            return None
        return self._send_markers(partition, meta)

    def markers_written(
        self,
        now_ms: int,
        transactional_id: str,
        coordinator_epoch: int,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> list[Effect]:
        """Partitions that have the marker (or no longer exist). Once none is
        left, CompleteCommit/CompleteAbort is stored."""
        partition = self.partition_for(transactional_id)
        if self._loaded.get(partition) != coordinator_epoch:
            return []
        meta = self._txns[partition].get(transactional_id)
        if (
            meta is None
            or meta.pending is None
            or meta.pending.kind != Kind.COMPLETE
            or meta.pending.token is not None
            or (meta.producer_id, meta.producer_epoch) != (producer_id, producer_epoch)
            or not meta.pending.remaining
        ):
            return []
        meta.pending.remaining.difference_update(partitions)
        if meta.pending.remaining:
            return []
        return self._store_completion(partition, meta)

    @staticmethod
    def _record_target(pending: Pending) -> None:
        """The stored value is the state the metadata takes: a version 2
        transaction's record carries the previous producer id (and the next one
        while an end is rotating); a version 1 record carries neither (version 0)."""
        target = pending.target
        if target.client_transaction_version >= TRANSACTION_VERSION_2:
            pending.target = replace(target, previous_producer_id=pending.previous_producer_id)
        elif target.previous_producer_id != NO_PRODUCER_ID or target.next_producer_id != NO_PRODUCER_ID:
            pending.target = replace(target, previous_producer_id=NO_PRODUCER_ID, next_producer_id=NO_PRODUCER_ID)

    def _store_completion(self, partition: int, meta: TxnMetadata, delay_ms: int = 0) -> list[Effect]:
        pending = meta.pending
        self._record_target(pending)
        token = self._token()
        pending.token = token
        self._stores[token] = StoreWaiter(partition, self._loaded[partition], [(meta.transactional_id, pending)])
        record = (key_bytes(meta.transactional_id), value_bytes(pending.target))
        return [Store(partition, self._loaded[partition], (record,), token, delay_ms)]

    # ----------------------------------------------------------------- stores

    def _store_transition(self, partition: int, meta: TxnMetadata, pending: Pending) -> list[Effect]:
        self._record_target(pending)
        meta.pending = pending
        token = self._token()
        pending.token = token
        epoch = self._loaded[partition]
        self._stores[token] = StoreWaiter(partition, epoch, [(meta.transactional_id, pending)])
        return [Store(partition, epoch, ((key_bytes(meta.transactional_id), value_bytes(pending.target)),), token)]

    def store_done(self, now_ms: int, token: int, error: ErrorCode) -> list[Effect]:
        """The outcome of a ``Store``: NONE once every in-sync replica has the
        records, else the error the waiting client is told."""
        waiter = self._stores.pop(token, None)
        if waiter is None:
            return []
        effects: list[Effect] = []
        current = self._loaded.get(waiter.partition) == waiter.coordinator_epoch
        txns = self._txns.get(waiter.partition, {})
        for transactional_id, pending in waiter.entries:
            meta = txns.get(transactional_id) if current else None
            if meta is None or meta.pending is not pending:
                # Unloaded meanwhile (its waiters were answered then) or superseded.
                continue
            if error == ErrorCode.NONE:
                effects += self._applied(now_ms, waiter.partition, meta, pending)
            else:
                effects += self._failed(waiter.partition, meta, pending, error)
        return effects

    def _applied(self, now_ms: int, partition: int, meta: TxnMetadata, pending: Pending) -> list[Effect]:
        meta.pending = None
        kind = pending.kind
        if kind == Kind.DEAD:
            del self._txns[partition][meta.transactional_id]
            return []
        meta.apply(pending)
        if kind == Kind.INIT:
            pending.reply(InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch))
            return []
        if kind == Kind.ADD:
            pending.reply(ErrorCode.NONE)
            return []
        if kind == Kind.COMPLETE:
            return []
        # END, FENCE, TIMEOUT: PrepareCommit/PrepareAbort is stored; the markers follow.
        if kind == Kind.END:
            if pending.answers_identity:
                pending.reply(EndResult(ErrorCode.NONE, *self._identity_after(meta)))
            else:
                pending.reply(ErrorCode.NONE)
        elif kind == Kind.FENCE:
            pending.reply(InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
        return self._begin_completion(now_ms, partition, meta)

    def _failed(self, partition: int, meta: TxnMetadata, pending: Pending, error: ErrorCode) -> list[Effect]:
        if pending.kind == Kind.COMPLETE:
            # The transaction is decided and its markers are written: keep trying
            # for as long as this coordinator holds the partition.
            pending.attempts += 1
            backoff = self.config.store_retry_backoff_ms * 2 ** min(pending.attempts - 1, 16)
            return self._store_completion(partition, meta, min(backoff, self.config.store_retry_backoff_max_ms))
        meta.pending = None
        if not meta.stored:
            # Created by this request: it never existed as far as the log knows.
            del self._txns[partition][meta.transactional_id]
        if pending.reply is not None:
            pending.reply(self._error_answer(pending, error))
        return []

    @staticmethod
    def _error_answer(pending: Pending, error: ErrorCode) -> object:
        if pending.kind in (Kind.INIT, Kind.FENCE):
            return InitResult(error)
        if pending.answers_identity:
            return EndResult(error)
        return error

    # ----------------------------------------------------------------- expiration

    def expire_transactional_ids(self, now_ms: int) -> list[Effect]:
        """Tombstones for ids idle for ``transactional_id_expiration_ms`` with no
        transaction open; they are forgotten once the tombstones are stored."""
        effects: list[Effect] = []
        horizon_ms = now_ms - self.config.transactional_id_expiration_ms
        for partition in sorted(self._loaded):
            entries = []
            for meta in self._txns[partition].values():
                if meta.stored and meta.pending is None and meta.state in COMPLETED and meta.last_update_ms <= horizon_ms:
                    meta.pending = Pending(
                        Kind.DEAD, replace(meta.value(), state=TxnState.DEAD, partitions=frozenset()),
                        meta.last_producer_epoch, meta.previous_producer_id,
                    )
                    entries.append((meta.transactional_id, meta.pending))
            if entries:
                token = self._token()
                for _, pending in entries:
                    pending.token = token
                self._stores[token] = StoreWaiter(partition, self._loaded[partition], entries)
                records = tuple((key_bytes(transactional_id), None) for transactional_id, _ in entries)
                effects.append(Store(partition, self._loaded[partition], records, token))
        return effects

    # ----------------------------------------------------------------- describe and list

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnDescription | None]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        partition = self.partition_for(transactional_id)
        error = self._partition_error(partition)
        if error is not None:
            return error, None
        meta = self._txns[partition].get(transactional_id)
        if meta is None or not meta.stored or meta.state == TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        partitions = meta.partitions
        if meta.pending is not None and meta.pending.kind == Kind.COMPLETE:
            # As Kafka describes a completing transaction: the partitions still without a marker.
            partitions = frozenset(meta.pending.remaining)
        return ErrorCode.NONE, TxnDescription(
            transactional_id,
            meta.state,
            meta.timeout_ms,
            meta.start_ms,
            meta.producer_id,
            meta.producer_epoch,
            tuple(sorted(partitions)),
        )

    def list_transactions(
        self, now_ms: int, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (), duration_filter_ms: int = -1
    ) -> tuple[ErrorCode, list[str], list[TxnListing]]:
        """(error, unknown state names, listings) over the loaded partitions,
        filtered as Kafka's ListTransactions: by state name, producer id, and
        (duration >= 0) only transactions running longer than the duration."""
        if self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        states: set[TxnState] = set()
        unknown: list[str] = []
        names = list(state_filters)
        for name in names:
            state = TxnState.from_display_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        producer_ids = set(producer_id_filters)
        listings = []
        for partition in sorted(self._loaded):
            for meta in self._txns[partition].values():
                if not meta.stored or meta.state == TxnState.DEAD:
                    continue
                if producer_ids and meta.producer_id not in producer_ids:
                    continue
                if names and meta.state not in states:
                    continue
                if duration_filter_ms >= 0 and now_ms - meta.start_ms <= duration_filter_ms:
                    continue
                listings.append(TxnListing(meta.transactional_id, meta.producer_id, meta.state))
        return ErrorCode.NONE, unknown, listings

    # ----------------------------------------------------------------- loading

    def load_record(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One record of a partition being loaded (in log order); ProtocolError
        for bytes that are not a transaction record (the caller skips it)."""
        if partition in self._loaded:
            self.unload_partition(partition)  # loaded again (a new leader epoch): start afresh
        loading = self._loading.setdefault(partition, {})
        transactional_id = decode_key(key)
        decoded = decode_value(value)
        if decoded is None or decoded.state == TxnState.DEAD:
            loading.pop(transactional_id, None)
            return
        loading[transactional_id] = TxnMetadata(
            transactional_id,
            producer_id=decoded.producer_id,
            producer_epoch=decoded.producer_epoch,
            timeout_ms=decoded.timeout_ms,
            state=decoded.state,
            partitions=decoded.partitions,
            start_ms=decoded.start_ms,
            last_update_ms=decoded.last_update_ms,
            previous_producer_id=decoded.previous_producer_id,
            client_transaction_version=decoded.client_transaction_version,
            next_producer_id=decoded.next_producer_id,
        )

    def finish_loading(self, partition: int, coordinator_epoch: int, now_ms: int) -> list[Effect]:
        """Serve the partition's ids at ``coordinator_epoch``; transactions left
        between their decision and completion continue."""
        if partition in self._loaded and partition not in self._loading:
            self.unload_partition(partition)
        txns = self._loading.pop(partition, {})
        self._txns[partition] = txns
        self._loaded[partition] = coordinator_epoch
        effects: list[Effect] = []
        for meta in list(txns.values()):
            if meta.state in PREPARED:
                effects += self._begin_completion(now_ms, partition, meta)
            elif meta.state == TxnState.PREPARE_EPOCH_FENCE:
                # Kafka never stores this state; should a record hold it, the
                # fence it started is carried out.
                meta.state = TxnState.ONGOING
                effects += self._begin_fence(now_ms, partition, meta, Kind.TIMEOUT, None)
        return effects

    def unload_partition(self, partition: int) -> int:
        """Forget the partition's ids; requests waiting on them are answered
        NOT_COORDINATOR. Returns how many ids were dropped."""
        self._loading.pop(partition, None)
        self._loaded.pop(partition, None)
        txns = self._txns.pop(partition, {})
        for meta in txns.values():
            pending = meta.pending
            if pending is not None and pending.reply is not None:
                reply, pending.reply = pending.reply, None
                reply(self._error_answer(pending, ErrorCode.NOT_COORDINATOR))
        for token in [t for t, w in self._stores.items() if w.partition == partition]:
            del self._stores[token]
        for token in [t for t, a in self._allocations.items() if a.partition == partition]:
            self._allocations.pop(token).reply(InitResult(ErrorCode.NOT_COORDINATOR))
        return len(txns)

    def shutdown(self) -> None:
        for partition in list(self._loaded) + list(self._loading):
            self.unload_partition(partition)

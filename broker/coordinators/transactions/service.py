"""The transaction coordinator's asyncio shell: ``__transaction_state``, markers
and the other brokers.

Owns the one :class:`~broker.coordinators.transactions.coordinator.TransactionCoordinator`
of the broker and carries out its effects on the event loop, so the
coordinator needs no locks:

- ``__transaction_state`` is created on the first FindCoordinator for a
  transactional id (or InitProducerId with one): compacted,
  ``transaction.state.log.num.partitions`` partitions,
  ``transaction.state.log.replication.factor`` replicas (COORDINATOR_NOT_AVAILABLE
  while fewer brokers are registered), ``min.insync.replicas`` =
  ``transaction.state.log.min.isr``, no unclean leader election.
- A transactional id is coordinated by the leader of its partition. The service
  follows that leadership in the metadata with the group coordinator's shell
  (broker.coordinators.shell):
  a partition newly led (at a new leader epoch, the coordinator epoch) is
  replayed from its log start to its log end and loaded; one no longer led is
  unloaded and its waiting requests answered NOT_COORDINATOR. A broker answers
  as coordinator only while it holds its heartbeat lease.
- A state change is appended to the partition as its leader (after the
  ``min.insync.replicas`` check) and reported to the coordinator once every
  in-sync replica has it; storage errors become Kafka's coordinator errors.
- Markers: each completing transaction has one task that resolves the leader
  of each remaining partition in the metadata image, writes the markers of the
  partitions led here with ``broker.replica.txn_markers.write_markers_here`` and sends
  WriteTxnMarkers (the newest version both sides speak, batched per
  destination broker) to the others over the inter-broker listener. Failed
  partitions are retried with backoff (the leader resolved again each time);
  a partition whose topic is gone is dropped; the task ends when every
  partition has its marker (the coordinator then stores CompleteCommit/
  CompleteAbort), when the producer or coordinator epoch was fenced, or when
  this broker stops coordinating the id.
- ``verify_partitions`` answers a partition leader's question (KIP-890 part
  1) from the local coordinator, or with AddPartitionsToTxn ``verify_only`` to
  the coordinator's broker; with ``add`` (KIP-890 part 2, a transactions
  version 2 producer's Produce v12 or TxnOffsetCommit v5) the partitions are
  added to the transaction instead, locally or with AddPartitionsToTxn v5
  without ``verify_only``.
- ``transactions_v2(image)``: whether ``transaction.version`` 2 is finalized,
  the one gate of the version 2 behaviour (EndTxn v5's epoch bump, the
  implicit partition addition).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from broker.coordinators.producer_ids import ProducerIdAllocator
from broker.coordinators.shell import CoordinatorShell, InternalTopic
from broker.coordinators.transactions.coordinator import TransactionCoordinator
from broker.coordinators.transactions.model import (
    TRANSACTION_VERSION_2,
    AllocateProducerId,
    Effect,
    EndResult,
    InitResult,
    SendMarkers,
    Store,
    TxnConfig,
    TxnDescription,
    TxnListing,
)
from broker.coordinators.transactions.peers import MarkerChannel, Peers, RateLimitedLog, verify_remote
from broker.replica.txn_markers import TxnMarker
from broker.replica.txn_markers import write_markers_here as write_markers_here_default
from controller.errors import NotControllerError
from protocol.errors import ErrorCode
from protocol.transaction_state import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

TXN_TOPIC = TRANSACTION_STATE_TOPIC

# What an append to __transaction_state (or its replication) failed with, as the
# transaction APIs report it (Kafka's TransactionStateManager maps them so);
# anything else as it is. The leader's own refusals are among them: not led here
# (or not loaded at the store's coordinator epoch), a failed disk, too few
# in-sync replicas.
_STORE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}

# Marker outcomes (Kafka's TransactionMarkerRequestCompletionHandler):
# the partition no longer needs a marker from this transaction...
_MARKER_SKIPPED = frozenset({ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION})
# ... or a newer producer epoch / coordinator has been there: this coordinator is stale.
_MARKER_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})

# Kafka's request.timeout.ms (30 s) bounds the coordinator's own writes.
STORE_TIMEOUT_MS = 30_000
ALLOCATE_TIMEOUT_MS = 30_000
MARKER_RETRY_BACKOFF_MS = 100
MARKER_RETRY_BACKOFF_MAX_MS = 5_000

MarkerWriter = Callable[[object, object], Awaitable[dict[tuple[str, int], ErrorCode]]]

TRANSACTION_VERSION_FEATURE = "transaction.version"


def transactions_v2(image) -> bool:
    """Whether the cluster has finalized ``transaction.version`` 2 (KIP-890 part 2).
    Below it EndTxn v5, Produce v12 and TxnOffsetCommit v5 are served as their
    version 1 predecessors (no epoch bump, partitions verified, not added): a
    Kafka 4 client only uses version 2 once the feature is finalized."""
    return image.features.get(TRANSACTION_VERSION_FEATURE, 0) >= TRANSACTION_VERSION_2


class TransactionService:
    def __init__(
        self,
        broker,
        *,
        allocate_producer_id: Callable[[], Awaitable[int]] | None = None,
        write_markers_here: MarkerWriter | None = None,
    ):
        self._broker = broker
        config = broker.config
        self.config = TxnConfig(
            transaction_partitions=config["transaction.state.log.num.partitions"],
            offsets_partitions=config["offsets.topic.num.partitions"],
            max_timeout_ms=config["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
        )
        self.coordinator = TransactionCoordinator(self.config)
        topic = InternalTopic(
            TXN_TOPIC,
            num_partitions=self.config.transaction_partitions,
            replication_factor=config["transaction.state.log.replication.factor"],
            replication_factor_config="transaction.state.log.replication.factor",
            configs={
                "cleanup.policy": "compact",
                "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
                "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
                "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
            },
        )
        self.shell = CoordinatorShell(broker, topic, self, log)
        self.store_timeout_ms = STORE_TIMEOUT_MS
        # One allocator for the whole broker: idempotent producers (the InitProducerId
        # handler) and transactional ids draw from the same reserved blocks.
        self.producer_ids = ProducerIdAllocator(broker.controller, broker.node_id)
        self._allocate_producer_id = allocate_producer_id or self.producer_ids.next_id
        # The lead's partition-leader side (broker.replica.txn_markers); tests pass a fake.
        self._write_markers_here = write_markers_here or write_markers_here_default
        # __transaction_state partitions loaded into the coordinator, with the
        # leader epoch (coordinator epoch) they were loaded at.
        self.loaded = self.shell.loaded
        self._tasks: set[asyncio.Task] = set()
        self._marker_tasks: dict[str, tuple[int, asyncio.Task]] = {}
        self._peers = Peers(broker)
        self._channels: dict[int, MarkerChannel] = {}
        self._log_limited = RateLimitedLog(log)
        self.stopped = False

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    # ----------------------------------------------------------------- the internal topic

    def topic_exists(self) -> bool:
        return self.shell.topic_exists()

    async def ensure_topic(self) -> ErrorCode:
        """Create ``__transaction_state`` if it is missing."""
        return await self.shell.ensure_topic()

    def coordinator_of(self, transactional_id: str) -> tuple[ErrorCode, int]:
        """(error, broker id) of the id's coordinator: the leader of its
        ``__transaction_state`` partition. COORDINATOR_NOT_AVAILABLE while that
        partition (or the topic) does not exist or has no leader."""
        return self.shell.leader_of(self.coordinator.partition_for(transactional_id))

    def not_coordinator(self, transactional_id: str) -> ErrorCode | None:
        """The error for a request about ``transactional_id`` that this broker
        cannot answer as its coordinator, or None when it can."""
        if not self.topic_exists():
            return ErrorCode.NOT_COORDINATOR
        return self.shell.not_coordinator(self.coordinator.partition_for(transactional_id))

    # ----------------------------------------------------------------- requests

    async def _ask(self, call: Callable[[Callable[[object], None]], list[Effect]]):
        """Run one coordinator operation; its reply, which comes exactly once."""
        future = asyncio.get_running_loop().create_future()

        def reply(result) -> None:
            if not future.done():
                future.set_result(result)

        self._run(call(reply))
        return await future

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> InitResult:
        """InitProducerId with a transactional id; ``expected`` is the producer's
        (id, epoch) from v3+, or None."""
        if transactional_id and 0 < timeout_ms <= self.config.max_timeout_ms:
            # Kafka checks the request itself first, then whether it is the coordinator.
            if await self.ensure_topic() != ErrorCode.NONE:
                return InitResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            error = self.not_coordinator(transactional_id)
            if error is not None:
                return InitResult(error)
        return await self._ask(
            lambda reply: self.coordinator.init_producer_id(self.now_ms(), transactional_id, timeout_ms, expected, reply)
        )

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions, client_transaction_version: int = 0
    ) -> ErrorCode:
        if transactional_id and (error := self.not_coordinator(transactional_id)) is not None:
            return error
        return await self._ask(
            lambda reply: self.coordinator.add_partitions(
                self.now_ms(), transactional_id, producer_id, producer_epoch, partitions, reply, client_transaction_version
            )
        )

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        if transactional_id and (error := self.not_coordinator(transactional_id)) is not None:
            return error
        return await self._ask(
            lambda reply: self.coordinator.add_offsets(self.now_ms(), transactional_id, producer_id, producer_epoch, group_id, reply)
        )

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        if transactional_id and (error := self.not_coordinator(transactional_id)) is not None:
            return error
        return await self._ask(
            lambda reply: self.coordinator.end_txn(self.now_ms(), transactional_id, producer_id, producer_epoch, commit, reply)
        )

    async def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> EndResult:
        """EndTxn v5 with transaction.version 2 finalized: the epoch bump."""
        if transactional_id and (error := self.not_coordinator(transactional_id)) is not None:
            return EndResult(error)
        return await self._ask(
            lambda reply: self.coordinator.end_txn_v2(self.now_ms(), transactional_id, producer_id, producer_epoch, commit, reply)
        )

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 verification by this broker as the coordinator."""
        keys = list(dict.fromkeys(partitions))
        if transactional_id and (error := self.not_coordinator(transactional_id)) is not None:
            return {key: error for key in keys}
        return self.coordinator.verify(transactional_id, producer_id, producer_epoch, keys)

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnDescription | None]:
        if transactional_id and (error := self.not_coordinator(transactional_id)) is not None:
            return error, None
        return self.coordinator.describe(transactional_id)

    def list_transactions(self, state_filters, producer_id_filters, duration_filter_ms: int = -1) -> tuple[ErrorCode, list[str], list[TxnListing]]:
        return self.coordinator.list_transactions(self.now_ms(), state_filters, producer_id_filters, duration_filter_ms)

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions, *, add: bool = False
    ) -> dict[tuple[str, int], ErrorCode]:
        """For the Produce handler, before a transaction's first batch on a
        partition: NONE for each partition the coordinator has in this producer's
        ongoing transaction, INVALID_TXN_STATE for the others, or the
        coordinator's error (PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
        CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
        ...); COORDINATOR_NOT_AVAILABLE when the coordinator is unknown and
        NETWORK_EXCEPTION when it could not be asked (as Kafka's leaders report).
        With ``add`` (a transactions version 2 producer) the coordinator adds the
        partitions to the transaction (starting it if none is open) and answers
        NONE once that is stored, or its error."""
        keys = list(dict.fromkeys(partitions))
        error, leader = self.coordinator_of(transactional_id)
        if error != ErrorCode.NONE:
            return {key: error for key in keys}
        if leader == self._broker.node_id:
            if add:
                error = await self.add_partitions(transactional_id, producer_id, producer_epoch, keys, TRANSACTION_VERSION_2)
                return {key: error for key in keys}
            return self.verify(transactional_id, producer_id, producer_epoch, keys)
        return await verify_remote(
            self._peers.get(leader), transactional_id, producer_id, producer_epoch, keys, self._log_limited, verify_only=not add
        )

    # ----------------------------------------------------------------- effects

    def _run(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Store):
                if effect.delay_ms > 0:
                    self._spawn(self._store_later(effect), "txn state retry")
                else:
                    self._store(effect)
            elif isinstance(effect, SendMarkers):
                self._start_markers(effect)
            elif isinstance(effect, AllocateProducerId):
                self._spawn(self._allocate(effect), "txn producer id")
            else:  # pragma: no cover - a new effect type without a handler
                raise TypeError(f"unknown effect {effect!r}")

    def _spawn(self, coroutine, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _store_done(self, token: int, error: ErrorCode) -> None:
        if self.stopped:
            return
        self._run(self.coordinator.store_done(self.now_ms(), token, _STORE_ERRORS.get(error, error)))

    async def _store_later(self, store: Store) -> None:
        await asyncio.sleep(store.delay_ms / 1000)
        if not self.stopped:
            self._store(store)

    def _store(self, store: Store) -> None:
        """Append ``store.records`` now (so stores keep their order), then report
        once the in-sync replicas have them."""
        written = self.shell.write_store(store, self.now_ms(), timeout_ms=self.store_timeout_ms)
        if written.error != ErrorCode.NONE:
            if written.error == ErrorCode.NOT_ENOUGH_REPLICAS:
                # Checked before the append, as for an acks=all produce: nothing is written.
                self._log_limited(logging.WARNING, f"isr-{store.partition}", "%s-%d: %s", TXN_TOPIC, store.partition, written.message)
            elif written.refused_by_log:
                log.error("appending to %s-%d failed: %s", TXN_TOPIC, store.partition, written.message)
            self._store_done(store.token, written.error)
            return
        future = written.acks_future
        if future is None:
            self._store_done(store.token, written.acks_error)
            return

        async def replicated() -> None:
            self._store_done(store.token, await future)

        self._spawn(replicated(), "txn state replication")

    async def _allocate(self, effect: AllocateProducerId) -> None:
        error = ErrorCode.NONE
        producer_id = None
        try:
            producer_id = await asyncio.wait_for(self._allocate_producer_id(), ALLOCATE_TIMEOUT_MS / 1000)
        except NotControllerError:
            error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # as the idempotent path answers
        except TimeoutError:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        except Exception:
            log.exception("allocating a producer id failed")
            error = ErrorCode.UNKNOWN_SERVER_ERROR
        if not self.stopped:
            self._run(self.coordinator.producer_id_allocated(self.now_ms(), effect.token, producer_id, error))

    # ----------------------------------------------------------------- markers

    def _start_markers(self, markers: SendMarkers) -> None:
        previous = self._marker_tasks.pop(markers.transactional_id, None)
        if previous is not None:
            previous[1].cancel()
        task = self._spawn(self._send_markers(markers), f"txn markers {markers.transactional_id}")
        self._marker_tasks[markers.transactional_id] = (markers.partition, task)
        task.add_done_callback(lambda finished: self._marker_task_done(markers.transactional_id, finished))

    def _marker_task_done(self, transactional_id: str, task: asyncio.Task) -> None:
        entry = self._marker_tasks.get(transactional_id)
        if entry is not None and entry[1] is task:
            del self._marker_tasks[transactional_id]

    async def _send_markers(self, markers: SendMarkers) -> None:
        """Bounded by this coordinator's hold on the id: every round either ends
        the task or waits a backoff, and the task is cancelled when the
        partition is unloaded."""
        backoff_ms = MARKER_RETRY_BACKOFF_MS
        txn_id = markers.transactional_id
        while not self.stopped:
            current = self.coordinator.pending_markers(txn_id, markers.coordinator_epoch)
            if current is None or (current.producer_id, current.producer_epoch) != (markers.producer_id, markers.producer_epoch):
                return
            done, fenced = await self._write_markers_once(current)
            if done:
                self._run(
                    self.coordinator.markers_written(
                        self.now_ms(), txn_id, current.coordinator_epoch, current.producer_id, current.producer_epoch, done
                    )
                )
            if fenced is not None:
                # Kafka stops sending too: a newer coordinator (or producer epoch) is
                # in charge, and this broker will learn of it from the metadata.
                log.warning(
                    "transaction markers of %s (producer %d epoch %d) refused with %s: this coordinator is stale; stopping",
                    txn_id, current.producer_id, current.producer_epoch, fenced.name,
                )
                return
            if len(done) == len(current.partitions):
                continue  # the coordinator decides whether anything is left
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, MARKER_RETRY_BACKOFF_MAX_MS)

    async def _write_markers_once(self, markers: SendMarkers) -> tuple[list[tuple[str, int]], ErrorCode | None]:
        """One round over the remaining partitions: (partitions done, fencing error or None)."""
        image = self._broker.image
        done: list[tuple[str, int]] = []
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for key in markers.partitions:
            topic = image.topics.get(key[0])
            if topic is None or key[1] not in topic.partitions:
                log.info("%s-%d is gone: no %s marker needed for %s", key[0], key[1], "COMMIT" if markers.commit else "ABORT", markers.transactional_id)
                done.append(key)
                continue
            leader = topic.partitions[key[1]].leader
            if leader < 0:
                self._log_limited(logging.INFO, f"no-leader-{key}", "%s-%d has no leader: its transaction marker waits", *key)
                continue
            by_leader.setdefault(leader, []).append(key)

        async def write(leader: int, keys: list[tuple[str, int]]):
            marker = TxnMarker(
                producer_id=markers.producer_id,
                producer_epoch=markers.producer_epoch,
                commit=markers.commit,
                coordinator_epoch=markers.coordinator_epoch,
                partitions=tuple(keys),
            )
            if leader == self._broker.node_id:
                return await self._markers_here(marker)
            channel = self._channels.get(leader)
            if channel is None:
                channel = self._channels[leader] = MarkerChannel(self._peers, leader, self._log_limited)
            return await channel.send(marker)

        outcomes = await asyncio.gather(*(write(leader, keys) for leader, keys in by_leader.items()))
        fenced = None
        image = self._broker.image
        for outcome in outcomes:
            for key, error in outcome.items():
                if error == ErrorCode.NONE or error in _MARKER_SKIPPED:
                    done.append(key)
                elif error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and key[0] not in image.topics:
                    done.append(key)  # deleted meanwhile
                elif error in _MARKER_FENCED:
                    fenced = error
                else:
                    self._log_limited(
                        logging.INFO, f"marker-{key}", "writing the transaction marker of %s to %s-%d failed with %s; retrying",
                        markers.transactional_id, key[0], key[1], ErrorCode(error).name,
                    )
        return done, fenced

    async def _markers_here(self, marker) -> dict[tuple[str, int], ErrorCode]:
        try:
            return await self._write_markers_here(self._broker, marker)
        except Exception:  # a bug of ours must not end the transaction's completion
            self._log_limited(logging.ERROR, "markers-here", "writing transaction markers on this broker failed", exc_info=True)
            return {key: ErrorCode.UNKNOWN_SERVER_ERROR for key in marker.partitions}

    # ----------------------------------------------------------------- leadership

    def follow_leadership(self) -> None:
        """Load the ``__transaction_state`` partitions this broker now leads (at a
        new leader epoch) and unload those it stopped leading."""
        if self.stopped:
            return
        topic = self._broker.image.topics.get(TXN_TOPIC)
        if topic is not None:
            self._follow_partition_count(len(topic.partitions))
        self.shell.follow_leadership()

    def _follow_partition_count(self, count: int) -> None:
        # Kafka places ids over the topic's actual partition count, whatever the config says now.
        if count == self.coordinator.config.transaction_partitions:
            return
        log.warning(
            "%s has %d partitions, transaction.state.log.num.partitions says %d: using the topic's",
            TXN_TOPIC, count, self.coordinator.config.transaction_partitions,
        )
        for partition in list(self.loaded):
            self.shell.unload(partition)
        self.coordinator.shutdown()
        self.config = replace(self.config, transaction_partitions=count)
        self.coordinator = TransactionCoordinator(self.config)
        self.shell.topic = replace(self.shell.topic, num_partitions=count)

    # What the shell replays and the leadership changes it makes.

    def replay_record(self, partition: int, producer_id: int, key, value) -> None:
        self.coordinator.load_record(partition, bytes(key), None if value is None else bytes(value))

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        pass  # __transaction_state holds no transactions of its own

    def partition_loaded(self, partition: int, epoch: int, records: int) -> None:
        effects = self.coordinator.finish_loading(partition, epoch, self.now_ms())
        if records:
            log.info("transactions: loaded %s-%d at coordinator epoch %d: %d records", TXN_TOPIC, partition, epoch, records)
        self._run(effects)

    def partition_unloaded(self, partition: int, epoch: int) -> None:
        self.coordinator.unload_partition(partition)
        for txn_id, (txn_partition, task) in list(self._marker_tasks.items()):
            if txn_partition == partition:
                task.cancel()
                del self._marker_tasks[txn_id]
        log.info("transactions: %s-%d no longer led here at epoch %d: unloaded", TXN_TOPIC, partition, epoch)

    # ----------------------------------------------------------------- periodic jobs

    def abort_timed_out_transactions(self) -> None:
        """transaction.abort.timed.out.transaction.cleanup.interval.ms"""
        if self.stopped or not self._broker.lifecycle.may_serve_as_leader():
            return  # perhaps replaced already: the new coordinator does it
        effects = self.coordinator.abort_timed_out(self.now_ms())
        if effects:
            log.info("aborting %d transactions older than their timeout", len(effects))
        self._run(effects)

    def expire_transactional_ids(self) -> None:
        """transaction.remove.expired.transaction.cleanup.interval.ms"""
        if self.stopped or not self._broker.lifecycle.may_serve_as_leader():
            return
        self._run(self.coordinator.expire_transactional_ids(self.now_ms()))

    def start(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        """Requests still waiting are answered NOT_COORDINATOR; tasks end."""
        self.stopped = True
        self.coordinator.shutdown()
        self.loaded.clear()
        for task in list(self._tasks):
            task.cancel()
        for channel in self._channels.values():
            channel.close()
        self._peers.close()
        self._marker_tasks.clear()

"""The shell every coordinator backed by an internal topic shares.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) keep their state as records in a compacted internal
topic, and a key (a group id, a transactional id) is coordinated by the leader
of the partition it hashes to, as in Kafka. What is the same for both lives
here; each service keeps only its own state machine:

- **ensure the topic**: created on first need, as an internal topic with the
  coordinator's configs; COORDINATOR_NOT_AVAILABLE (logged at most once an
  interval) while it cannot be, for example before enough brokers registered
  for its replication factor.
- **follow leadership**: a partition this broker now leads (and may lead: the
  controller unfenced it and did not supersede the epoch) is replayed and
  loaded at its leader epoch; one no longer led at that epoch is unloaded.
- **replay with guards**: from the log start to the log end (not the high
  watermark: a new leader's may still be below records the old one
  acknowledged), record by record. A batch that cannot be decoded is skipped
  with a warning, as is a record the service cannot read: one bad batch must
  not keep the broker from coordinating. A read that yields nothing past the
  position ends the replay rather than spinning.
- **who coordinates**: COORDINATOR_NOT_AVAILABLE while the partition has no
  leader, NOT_COORDINATOR on another broker or without the heartbeat lease,
  COORDINATOR_LOAD_IN_PROGRESS until the partition is loaded.
- **write**: an acks=all append as the partition's leader
  (broker.replica.leader_append), refused as not led here unless the partition is loaded;
  ``write_store`` carries out a coordinator's Store effect (broker.coordinators.effects)
  that way, as one batch.

The service is the shell's ``owner`` and receives the replayed data and the
load/unload events through four methods: ``replay_record(partition,
producer_id, key, value)`` (raising ProtocolError for a record it cannot
read), ``replay_marker(partition, producer_id, commit)``,
``partition_loaded(partition, epoch, records)`` and
``partition_unloaded(partition, epoch)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from broker.coordinators.effects import Store
from broker.coordinators.transactions.peers import RateLimitedLog
from broker.replica.leader_append import LeaderAppend, append_as_leader
from broker.single_node_profile import single_node_hint
from controller.topic_commands import CreateTopicSpec
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import NO_SEQUENCE, build_batch, decode_batch_records, iter_batches

# How much of the log one read of a replay asks for.
REPLAY_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class InternalTopic:
    """The internal topic a coordinator keeps its state in, as it is created."""

    name: str
    num_partitions: int
    replication_factor: int
    # The broker setting the replication factor comes from, named when it cannot be met.
    replication_factor_config: str
    configs: dict[str, str] = field(default_factory=dict)


class CoordinatorShell:
    def __init__(self, broker, topic: InternalTopic, owner, logger: logging.Logger):
        self._broker = broker
        self.topic = topic
        self._owner = owner
        self._log = logger
        self._log_limited = RateLimitedLog(logger)
        # Partitions loaded into the owner's coordinator, with the leader epoch
        # they were loaded at (the transaction coordinator's epoch).
        self.loaded: dict[int, int] = {}

    # ----------------------------------------------------------------- the internal topic

    def topic_exists(self) -> bool:
        return self.topic.name in self._broker.image.topics

    async def ensure_topic(self) -> ErrorCode:
        """Create the topic if it is missing (Kafka does it on the first
        FindCoordinator for a key of this coordinator)."""
        if self.topic_exists():
            return ErrorCode.NONE
        topic = self.topic
        spec = CreateTopicSpec(
            topic.name, num_partitions=topic.num_partitions, replication_factor=topic.replication_factor, configs=dict(topic.configs)
        )
        (result,) = await self._broker.controller.create_topics([spec], internal=True)
        if result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR:
            # As Kafka: wait (clients retry) until enough brokers have registered.
            # Clients ask every few hundred ms: one line per interval says it.
            self._log_limited(
                logging.WARNING, "create", "cannot create %s yet: %s (%s=%d)%s",
                topic.name, result.error_message, topic.replication_factor_config, topic.replication_factor,
                single_node_hint(self._broker.config, topic.replication_factor_config, topic.replication_factor),
            )  # fmt: skip
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            self._log_limited(
                logging.ERROR, "create", "cannot create %s: %s %s", topic.name, result.error_code.name, result.error_message
            )
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if result.error_code == ErrorCode.NONE:
            self._log.info("created %s with %d partitions", topic.name, topic.num_partitions)
        return ErrorCode.NONE

    # ----------------------------------------------------------------- who coordinates

    def leader_of(self, partition: int) -> tuple[ErrorCode, int]:
        """(error, broker id) of the partition's leader, the coordinator of its keys;
        COORDINATOR_NOT_AVAILABLE while the topic or partition does not exist or has
        no leader."""
        topic = self._broker.image.topics.get(self.topic.name)
        if topic is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1
        image = topic.partitions.get(partition)
        if image is None or image.leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1
        return ErrorCode.NONE, image.leader

    def not_coordinator(self, partition: int) -> ErrorCode | None:
        """The error for a request about a key of ``partition`` that this broker
        cannot answer as its coordinator, or None when it can."""
        error, leader = self.leader_of(partition)
        if error != ErrorCode.NONE:
            return error
        if leader != self._broker.node_id:
            return ErrorCode.NOT_COORDINATOR
        if not self._broker.lifecycle.may_serve_as_leader():
            # Cut off from the controllers for a session: another broker may
            # coordinate the key already, and answering from here could serve
            # (or decide) from state older than what it acknowledged.
            return ErrorCode.NOT_COORDINATOR
        if partition not in self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    # ----------------------------------------------------------------- writes

    def write(self, partition: int, records, *, leader_epoch: int = -1, timeout_ms: int | None = None, from_coordinator: bool = False) -> LeaderAppend:
        """Append ``records`` to a loaded partition as its leader, acks=all (the
        in-sync replicas checked first; waited for when ``timeout_ms`` is given).
        NOT_LEADER_OR_FOLLOWER when the partition is not loaded here (at
        ``leader_epoch``, when given) or no longer led."""
        loaded_epoch = self.loaded.get(partition)
        if loaded_epoch is None or (leader_epoch != -1 and loaded_epoch != leader_epoch):
            return LeaderAppend(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return append_as_leader(
            self._broker,
            (self.topic.name, partition),
            records,
            timeout_ms=timeout_ms,
            leader_epoch=leader_epoch,
            from_coordinator=from_coordinator,
        )

    def write_store(self, store: Store, now_ms: int, *, timeout_ms: int | None = None) -> LeaderAppend:
        """Append a Store effect's records as one batch timestamped ``now_ms``. A
        batch of a producer (a TxnOffsetCommit) is transactional and the
        coordinator's own write: its producer epoch is checked, not its sequences,
        and its open transaction is tracked."""
        records = [(key, value, [], now_ms) for key, value in store.records]
        of_producer = store.producer_id >= 0
        if of_producer:
            batch = build_batch(
                records, producer_id=store.producer_id, producer_epoch=store.producer_epoch, base_sequence=NO_SEQUENCE, is_transactional=True
            )
        else:
            batch = build_batch(records)
        return self.write(store.partition, batch, leader_epoch=store.coordinator_epoch, timeout_ms=timeout_ms, from_coordinator=of_producer)

    # ----------------------------------------------------------------- leadership

    def led_partitions(self) -> dict[int, int]:
        """Partition -> leader epoch of each partition of the topic this broker leads
        and may serve."""
        topic = self._broker.image.topics.get(self.topic.name)
        replicas = self._broker.replicas
        if topic is None or not replicas.may_lead:
            return {}
        node_id = self._broker.node_id
        name = self.topic.name
        return {
            p: part.leader_epoch
            for p, part in topic.partitions.items()
            if part.leader == node_id and not replicas.is_superseded((name, p), part.leader_epoch)
        }

    def follow_leadership(self) -> None:
        """Load the partitions this broker now leads (at a new leader epoch) and
        unload those it stopped leading."""
        led = self.led_partitions()
        for partition, epoch in sorted(self.loaded.items()):
            if led.get(partition) != epoch:
                self.unload(partition)
        for partition, epoch in sorted(led.items()):
            if partition not in self.loaded:
                self._load(partition, epoch)

    def unload(self, partition: int) -> None:
        epoch = self.loaded.pop(partition)
        self._owner.partition_unloaded(partition, epoch)

    def _load(self, partition: int, epoch: int) -> None:
        plog = self._broker.partition_log(self.topic.name, partition)
        if plog is None:
            return
        records = self.replay(partition, plog)
        self.loaded[partition] = epoch
        self._owner.partition_loaded(partition, epoch, records)

    def replay(self, partition: int, plog) -> int:
        """Hand every record of ``plog`` from its log start to its log end to the
        owner; how many were handed (those it could not read included)."""
        name = self.topic.name
        owner = self._owner
        count = 0
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            data = plog.read(offset, REPLAY_READ_BYTES, upper_offset=plog.log_end_offset)
            if not data:
                break
            start = offset
            for position, size, header in iter_batches(data):
                last = header.base_offset + header.last_offset_delta
                if last < offset:
                    continue
                try:
                    _, batch_records = decode_batch_records(data[position : position + size])
                except ProtocolError as exc:  # one bad batch must not keep the broker from coordinating
                    self._log.warning("skipping unreadable %s-%d batch at offset %d: %s", name, partition, header.base_offset, exc)
                    offset = last + 1
                    continue
                if header.is_control:
                    # A transaction marker ends the producer's pending writes (other
                    # control records say nothing to a coordinator).
                    for record in batch_records:
                        if record.offset >= offset and record.control is not None and (record.control.is_commit or record.control.is_abort):
                            owner.replay_marker(partition, header.producer_id, record.control.is_commit)
                    offset = last + 1
                    continue
                producer_id = header.producer_id if header.is_transactional else -1
                for record in batch_records:
                    if record.offset < offset or record.key is None:
                        continue
                    try:
                        owner.replay_record(partition, producer_id, record.key, record.value)
                    except ProtocolError as exc:  # one bad record must not keep the broker from coordinating
                        self._log.warning("skipping unreadable %s-%d record at offset %d: %s", name, partition, record.offset, exc)
                    count += 1
                offset = last + 1
            if offset == start:
                break  # a read that yields nothing past the position: do not spin
        return count

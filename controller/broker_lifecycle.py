"""Brokers joining, heartbeating and being fenced, as pure functions of the image.

Kafka's KRaft rules (KIP-631):

* A broker registers with BrokerRegistration and is written down *fenced*
  (RegisterBrokerRecord). Its broker epoch is the offset of that record, so a
  re-registration always gets a larger epoch and stale requests are spotted.
* It then heartbeats. Once the metadata offset it reports has reached its
  registration record (it has seen itself registered), the active controller
  unfences it (UnfenceBrokerRecord) and it may lead partitions again.
* A broker whose heartbeats stop for ``broker.session.timeout.ms`` is fenced
  (FenceBrokerRecord): it leaves every ISR it was in (never emptying one) and
  every partition it led gets a new leader from the remaining ISR, or none.
* A broker that asks to shut down (want_shut_down) gives up its leaderships
  first (controlled shutdown) and is told it may stop once it leads nothing.

Session times are not replicated: only the active controller keeps them
(:class:`BrokerHeartbeatTracker`), and a newly active controller grants every
registered broker a fresh session, as Kafka's does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from controller.metadata.image import MetadataImage, PartitionImage
from controller.metadata.records import (
    BROKER_ENDPOINT,
    BROKER_FEATURE,
    BROKER_REGISTRATION_CHANGE_RECORD,
    CONTROLLED_SHUTDOWN_CHANGE_ENTER,
    FENCE_BROKER_RECORD,
    NO_LEADER,
    PARTITION_CHANGE_RECORD,
    REGISTER_BROKER_RECORD,
    UNFENCE_BROKER_RECORD,
)
from protocol.errors import ErrorCode


@dataclass(frozen=True)
class RegistrationResult:
    error: ErrorCode
    broker_epoch: int = -1
    message: str | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


class BrokerHeartbeatTracker:
    """The active controller's view of broker sessions (in memory only)."""

    def __init__(self, session_timeout_ms: int):
        self.session_timeout_ms = session_timeout_ms
        self._last_heartbeat_ms: dict[int, int] = {}
        # Brokers heard from since this controller became active (not just granted a session).
        self._heard: set[int] = set()

    def touch(self, broker_id: int, now_ms: int) -> None:
        self._last_heartbeat_ms[broker_id] = now_ms
        self._heard.add(broker_id)

    def reset_all(self, image: MetadataImage, now_ms: int) -> None:
        """A new active controller cannot know who heartbeated to its predecessor:
        every registered broker gets a fresh session, not yet heard from."""
        self._last_heartbeat_ms = {broker_id: now_ms for broker_id in image.brokers}
        self._heard.clear()

    def session_alive(self, broker_id: int, now_ms: int) -> bool:
        last = self._last_heartbeat_ms.get(broker_id)
        return last is not None and now_ms - last < self.session_timeout_ms

    def heard_alive(self, broker_id: int, now_ms: int) -> bool:
        """Alive on the evidence of a heartbeat to this controller. A session granted
        at activation does not count: otherwise a combined node restarted after a
        crash would be refused as its own duplicate until its old session ran out."""
        return broker_id in self._heard and self.session_alive(broker_id, now_ms)

    def expired(self, image: MetadataImage, now_ms: int) -> list[int]:
        """Unfenced brokers whose session ran out."""
        return sorted(
            broker_id
            for broker_id, broker in image.brokers.items()
            if not broker.fenced and not self.session_alive(broker_id, now_ms)
        )


def plan_register_broker(
    image: MetadataImage, request, *, cluster_id: str, broker_epoch: int, session_alive: bool
) -> tuple[RegistrationResult, list]:
    """BrokerRegistration: a RegisterBrokerRecord (fenced), or Kafka's error."""
    if request.cluster_id != cluster_id:
        return RegistrationResult(ErrorCode.INCONSISTENT_CLUSTER_ID, message=f"expected cluster {cluster_id}"), []
    existing = image.brokers.get(request.broker_id)
    if existing is not None and existing.incarnation_id != request.incarnation_id and session_alive:
        # Another process with the same node.id is alive: refuse rather than let them fight.
        return RegistrationResult(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            message=f"broker {request.broker_id} is registered with another incarnation and its session is alive",
        ), []
    record = REGISTER_BROKER_RECORD(
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        broker_epoch=broker_epoch,
        end_points=[
            BROKER_ENDPOINT.cls(name=l.name, host=l.host, port=l.port, security_protocol=l.security_protocol)
            for l in request.listeners
        ],
        features=[
            BROKER_FEATURE.cls(name=f.name, min_supported_version=f.min_supported_version, max_supported_version=f.max_supported_version)
            for f in request.features
        ],
        rack=request.rack,
        fenced=True,
        in_controlled_shutdown=False,
        log_dirs=list(getattr(request, "log_dirs", []) or []),
    )
    return RegistrationResult(ErrorCode.NONE, broker_epoch), [record]


def plan_broker_heartbeat(image: MetadataImage, request) -> tuple[HeartbeatResult, list]:
    """BrokerHeartbeat: unfence a caught-up broker, fence one that asks, or move
    leadership away from one that wants to shut down. The caller has already
    renewed the broker's session."""
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return HeartbeatResult(ErrorCode.BROKER_ID_NOT_REGISTERED), []
    if broker.epoch != request.broker_epoch:
        return HeartbeatResult(ErrorCode.STALE_BROKER_EPOCH), []
    # The broker epoch is the offset of its registration record: seeing that
    # offset means the broker has caught up with its own registration.
    caught_up = request.current_metadata_offset >= broker.epoch
    records: list = []
    fenced = broker.fenced
    if request.want_shut_down:
        records += _controlled_shutdown_records(image, broker.broker_id, broker.epoch, broker.in_controlled_shutdown)
        # Done once every leadership that can move has moved: a partition with
        # nobody else in sync stays led by the leaving broker (no data loss by
        # handing it to an out-of-sync replica), and is fenced with it.
        return HeartbeatResult(ErrorCode.NONE, caught_up, fenced, should_shut_down=True), records
    if fenced and not request.want_fence and caught_up:
        records.append(UNFENCE_BROKER_RECORD(id=broker.broker_id, epoch=broker.epoch))
        records += _elect_on_unfence(image, broker.broker_id)
        fenced = False
    elif not fenced and request.want_fence:
        records += plan_fence_brokers(image, [broker.broker_id])
        fenced = True
    return HeartbeatResult(ErrorCode.NONE, caught_up, fenced, False), records


def plan_fence_brokers(image: MetadataImage, broker_ids: list[int]) -> list:
    """Fence brokers (a session ran out, or they asked): FenceBrokerRecords, then
    every partition they led or followed in sync loses them."""
    gone = set(broker_ids)
    records: list = [FENCE_BROKER_RECORD(id=b, epoch=image.brokers[b].epoch) for b in sorted(gone) if b in image.brokers]
    records += _remove_from_isrs(image, gone, usable=_usable_after(image, gone))
    return records


def usable_broker_ids(image: MetadataImage) -> tuple[int, ...]:
    """Registered, unfenced brokers not shutting down: where new replicas and leaders may go."""
    return tuple(
        sorted(b for b, broker in image.brokers.items() if not broker.fenced and not broker.in_controlled_shutdown)
    )


def rack_alternating_order(image: MetadataImage, broker_ids: tuple[int, ...]) -> tuple[int, ...]:
    """Brokers in the order replicas are dealt out: one broker of each rack in turn
    (racks by name, brokers by id within a rack), as Kafka's rack-aware placement
    lists them, so that round-robin assignment puts a partition's replicas on as
    many racks as it can. Brokers without a rack form a rack of their own."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(broker_ids):
        rack = image.brokers[broker_id].rack if broker_id in image.brokers else None
        by_rack.setdefault(rack or "", []).append(broker_id)
    racks = [by_rack[name] for name in sorted(by_rack)]
    order = []
    for index in range(max((len(r) for r in racks), default=0)):
        order.extend(rack[index] for rack in racks if index < len(rack))
    return tuple(order)


# -- leadership ---------------------------------------------------------------


def _usable_after(image: MetadataImage, leaving: set[int]) -> set[int]:
    return {b for b in usable_broker_ids(image) if b not in leaving}


def _change(topic_id: uuid.UUID, partition: PartitionImage, *, isr=None, leader=None):
    fields = {"partition_id": partition.partition_id, "topic_id": topic_id}
    if isr is not None and tuple(isr) != partition.isr:
        fields["isr"] = list(isr)
    if leader is not None and leader != partition.leader:
        fields["leader"] = leader
    if len(fields) == 2:
        return None
    return PARTITION_CHANGE_RECORD(**fields)


def _remove_from_isrs(image: MetadataImage, leaving: set[int], usable: set[int]) -> list:
    records = []
    for topic in image.topics.values():
        for partition in topic.partitions.values():
            if not leaving.intersection(partition.isr) and partition.leader not in leaving:
                continue
            # The ISR never empties: its last member stays, so an unclean
            # election is never needed to learn who had the data.
            isr = [b for b in partition.isr if b not in leaving] or list(partition.isr[-1:])
            leader = partition.leader
            if leader in leaving or leader == NO_LEADER:
                leader = next((b for b in isr if b in usable), NO_LEADER)
            change = _change(topic.topic_id, partition, isr=isr, leader=leader)
            if change is not None:
                records.append(change)
    return records


def _elect_on_unfence(image: MetadataImage, broker_id: int) -> list:
    """Partitions without a leader whose ISR holds the returning broker get it back as leader."""
    records = []
    for topic in image.topics.values():
        for partition in topic.partitions.values():
            if partition.leader == NO_LEADER and broker_id in partition.isr:
                records.append(PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic.topic_id, leader=broker_id))
    return records


def _controlled_shutdown_records(image: MetadataImage, broker_id: int, broker_epoch: int, already: bool) -> list:
    records = []
    if not already:
        records.append(
            BROKER_REGISTRATION_CHANGE_RECORD(
                broker_id=broker_id, broker_epoch=broker_epoch, in_controlled_shutdown=CONTROLLED_SHUTDOWN_CHANGE_ENTER
            )
        )
    usable = _usable_after(image, {broker_id})
    for topic in image.topics.values():
        for partition in topic.partitions.values():
            if partition.leader != broker_id:
                continue
            successor = next((b for b in partition.isr if b != broker_id and b in usable), None)
            if successor is not None:
                # The others in sync take over; the leaving broker stays in the ISR until it is fenced.
                records.append(PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic.topic_id, leader=successor))
    return records

"""Cordoning and removing brokers (``pybroker cluster cordon`` / ``remove-broker``) as
BrokerPlacementRecords, planned as pure functions of the image.

A broker's placement state is ``normal``, ``cordoned`` (no new replica goes to
it: controller/placement.py leaves it out of new topics and partitions, and the
balancer moves none onto it, KIP-1066's cordon) or ``draining`` (cordoned, and
the balancer moves every replica off it: once it holds none it may be stopped,
Confluent's remove-broker). The state is in the metadata log, so a controller
failover keeps it; ``normal`` removes the entry (uncordon, or a drain
cancelled: what already moved stays where it is).

Nothing is written while ``balancer.version`` 1 is not finalized (a cluster
formatted by an older pybroker, whose nodes could not read the records):
every change answers UNSUPPORTED_VERSION, saying how to raise the level.

Per broker, first rule broken wins:

* a broker id that is not registered: BROKER_ID_NOT_REGISTERED;
* an unknown state: INVALID_REQUEST;
* ``draining`` with ``balancer.mode=off``: INVALID_REQUEST (nothing would move
  its replicas, so the request would claim what is not done);
* ``draining`` that would leave fewer brokers taking replicas than a topic's
  replication factor: INVALID_REQUEST naming them (the replicas could not go
  anywhere).

A state equal to the current one writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.features import BALANCER_VERSION_NEEDED, balancer_records_enabled
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    BROKER_PLACEMENT_RECORD,
    PLACEMENT_CORDONED,
    PLACEMENT_DRAINING,
    PLACEMENT_NORMAL,
    PLACEMENT_STATE_NAMES,
)
from protocol.errors import ErrorCode

STATES_BY_NAME = {name: state for state, name in PLACEMENT_STATE_NAMES.items()}


@dataclass(frozen=True)
class PlacementResult:
    broker_id: int
    error: ErrorCode
    message: str | None = None


def plan_alter_broker_placements(
    image: MetadataImage, changes: Sequence[tuple[int, str]], *, balancer_on: bool
) -> tuple[list[PlacementResult], list]:
    """(a result per change in request order; the records). A broker named twice
    is planned the second time against its first change."""
    if not balancer_records_enabled(image):
        return [PlacementResult(b, ErrorCode.UNSUPPORTED_VERSION, BALANCER_VERSION_NEEDED) for b, _ in changes], []
    placement = dict(image.broker_placement)
    results: list[PlacementResult] = []
    records: list = []
    for broker_id, state_name in changes:
        if broker_id not in image.brokers:
            results.append(PlacementResult(broker_id, ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {broker_id} is not registered."))
            continue
        state = STATES_BY_NAME.get(state_name)
        if state is None:
            names = ", ".join(STATES_BY_NAME)
            results.append(PlacementResult(broker_id, ErrorCode.INVALID_REQUEST, f"Unknown state {state_name!r}: one of {names}."))
            continue
        if state == PLACEMENT_DRAINING:
            problem = _drain_problem(image, placement, broker_id, balancer_on)
            if problem is not None:
                results.append(PlacementResult(broker_id, ErrorCode.INVALID_REQUEST, problem))
                continue
        if placement.get(broker_id, PLACEMENT_NORMAL) != state:
            records.append(BROKER_PLACEMENT_RECORD(broker_id=broker_id, state=state))
            if state == PLACEMENT_NORMAL:
                placement.pop(broker_id, None)
            else:
                placement[broker_id] = state
        results.append(PlacementResult(broker_id, ErrorCode.NONE))
    return results, records


def _drain_problem(image: MetadataImage, placement: dict[int, int], broker_id: int, balancer_on: bool) -> str | None:
    if not balancer_on:
        return "balancer.mode is off: nothing would move the broker's replicas (cordon it instead, and move them yourself)."
    takers = sorted(
        b for b, r in image.brokers.items()
        if b != broker_id and not r.fenced and not r.in_controlled_shutdown and b not in placement
    )
    # A partition being reassigned lists its old and new replicas together; its
    # replication factor is what it keeps, as Kafka counts it: replicas less removing.
    widest = max(
        (len(p.replicas) - len(p.removing_replicas) for t in image.topics.values() for p in t.partitions.values()), default=0
    )
    if widest > len(takers):
        return (
            f"Removing broker {broker_id} would leave {len(takers)} broker(s) taking replicas {takers}, "
            f"for a replication factor of {widest}."
        )
    return None


def cordoned_brokers(image: MetadataImage) -> frozenset[int]:
    return frozenset(b for b, s in image.broker_placement.items() if s == PLACEMENT_CORDONED)


def draining_brokers(image: MetadataImage) -> frozenset[int]:
    return frozenset(b for b, s in image.broker_placement.items() if s == PLACEMENT_DRAINING)

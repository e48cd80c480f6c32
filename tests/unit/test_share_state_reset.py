"""Resetting and deleting a share-partition's durable state (pure): what
AlterShareGroupOffsets (through InitializeShareGroupState) and
DeleteShareGroupOffsets (through DeleteShareGroupState) leave in
``__share_group_state`` and what a partition leader rebuilds from it."""

from __future__ import annotations

import uuid

from broker.coordinators.share_groups.partition import AcknowledgeType, DurableShareState, Persist, SharePartition, SharePartitionConfig
from broker.tools.share_groups import offsets_lines
from protocol.share_state_records import ShareRecordKind, ShareStateRecord, decode_record, encode_record

ACCEPT = int(AcknowledgeType.ACCEPT)
CONFIG = SharePartitionConfig(snapshot_every_updates=100)
TOPIC_ID = uuid.UUID(int=7)


def _replayed(records: list[ShareStateRecord]) -> DurableShareState | None:
    """The durable state the share coordinator holds after replaying ``records``
    (through their encoding), as its service replays them."""
    state = None
    for written in records:
        record = decode_record(*encode_record(written))
        if record.is_tombstone:
            if record.kind == ShareRecordKind.SNAPSHOT:
                state = None
            continue
        if state is None:
            state = DurableShareState()
        snapshot = record.kind == ShareRecordKind.SNAPSHOT
        state.apply(Persist(snapshot, record.start_offset, record.state_batches, record.snapshot_epoch))
        if snapshot:
            state.state_epoch = record.state_epoch
    return state


def _record(persist: Persist, state_epoch: int = 0) -> ShareStateRecord:
    kind = ShareRecordKind.SNAPSHOT if persist.snapshot else ShareRecordKind.UPDATE
    return ShareStateRecord(kind, "g", TOPIC_ID, 0, persist.start_offset, persist.state_batches,
                            snapshot_epoch=persist.snapshot_epoch, state_epoch=state_epoch)


def test_reset_replaces_the_state_and_skips_updates_of_the_old_snapshot():
    p = SharePartition(CONFIG, 0)
    _, first = p.acquire("m", 0, 10, 10)
    _, accepted = p.acknowledge("m", [(0, 3, [ACCEPT])])
    assert (first.snapshot, accepted.snapshot) == (True, False)
    records = [_record(first), _record(accepted)]
    held = _replayed(records)
    assert held.view() == (4, ((4, 9, 0, 1),))  # in flight: written as available, delivered once

    reset = DurableShareState.initialized(held, 2, held.state_epoch + 1)
    assert (reset.start_offset, reset.batches(), reset.state_epoch) == (2, (), 1)
    assert reset.snapshot_epoch > held.snapshot_epoch
    records.append(ShareStateRecord(ShareRecordKind.SNAPSHOT, "g", TOPIC_ID, 0, reset.start_offset, reset.batches(),
                                    snapshot_epoch=reset.snapshot_epoch, state_epoch=reset.state_epoch))
    # An update the old leader wrote against its snapshot, kept by compaction after the reset: skipped.
    _, late = p.acknowledge("m", [(4, 9, [ACCEPT])])
    records.append(_record(late))
    replayed = _replayed(records)
    assert replayed.view() == (2, ()) and replayed.state_epoch == 1

    # The leader built again from it delivers from the new start, first deliveries all.
    rebuilt = SharePartition.from_durable(CONFIG, replayed.start_offset, replayed.batches(), replayed.snapshot_epoch)
    acquired, persist = rebuilt.acquire("n", 0, 10, 100)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired] == [(2, 9, 1)]
    assert persist.snapshot and persist.snapshot_epoch == replayed.snapshot_epoch + 1


def test_reset_forward_past_in_flight_records_leaves_none():
    p = SharePartition(CONFIG, 0)
    _, first = p.acquire("m", 0, 10, 10)
    held = _replayed([_record(first)])
    reset = DurableShareState.initialized(held, 20, 1)
    rebuilt = SharePartition.from_durable(CONFIG, reset.start_offset, reset.batches(), reset.snapshot_epoch)
    assert rebuilt.start_offset == 20 and rebuilt.ranges() == []
    assert rebuilt.next_acquirable_offset(25) == 20


def test_a_reset_without_held_state_starts_a_snapshot_chain():
    reset = DurableShareState.initialized(None, 5, 3)
    assert (reset.start_offset, reset.batches(), reset.snapshot_epoch, reset.state_epoch) == (5, (), 0, 3)


def test_delete_tombstones_both_kinds_and_a_later_snapshot_starts_afresh():
    p = SharePartition(CONFIG, 0)
    _, first = p.acquire("m", 0, 10, 10)
    _, accepted = p.acknowledge("m", [(0, 3, [ACCEPT])])
    tombstones = [ShareStateRecord(kind, "g", TOPIC_ID, 0) for kind in ShareRecordKind]
    assert all(decode_record(*encode_record(t)).is_tombstone for t in tombstones)
    assert _replayed([_record(first), _record(accepted), *tombstones]) is None
    # The next leader starts where share.auto.offset.reset says, with a snapshot of its own.
    fresh = SharePartition(CONFIG, 10)
    acquired, persist = fresh.acquire("n", 0, 12, 10)
    assert [(a.first_offset, a.last_offset) for a in acquired] == [(10, 11)]
    replayed = _replayed([_record(first), _record(accepted), *tombstones, _record(persist, state_epoch=1)])
    assert replayed.view() == (10, ((10, 11, 0, 1),)) and replayed.state_epoch == 1


def test_state_epoch_survives_the_snapshot_encoding():
    record = ShareStateRecord(ShareRecordKind.SNAPSHOT, "g", TOPIC_ID, 3, 42, (), snapshot_epoch=2, state_epoch=9)
    assert decode_record(*encode_record(record)).state_epoch == 9


def test_offsets_table_shows_a_partition_without_state_as_a_dash():
    assert offsets_lines("g", [("t", 0, 10), ("t", 1, -1)]) == [
        "GROUP TOPIC PARTITION START-OFFSET",
        "g     t     0         10",
        "g     t     1         -",
    ]

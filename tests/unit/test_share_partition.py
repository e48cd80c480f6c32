"""The share-partition core (broker/coordinators/share_groups/partition.py) and
the __share_group_state records (protocol/share_state_records.py)."""

from __future__ import annotations

import uuid

from broker.coordinators.share_groups.partition import (
    AcknowledgeType,
    DurableShareState,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from protocol.errors import ErrorCode
from protocol.share_state_records import ShareRecordKind, ShareStateRecord, decode_record, encode_record

ACCEPT, RELEASE, REJECT, GAP = (int(t) for t in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT, AcknowledgeType.GAP))


def _partition(**kwargs) -> SharePartition:
    return SharePartition(SharePartitionConfig(**kwargs), 0)


def test_members_acquire_distinct_ranges_and_accept():
    p = _partition()
    a, _ = p.acquire("a", 0, 10, 4)
    b, _ = p.acquire("b", 0, 10, 100)
    assert [(x.first_offset, x.last_offset, x.delivery_count) for x in a] == [(0, 3, 1)]
    assert [(x.first_offset, x.last_offset, x.delivery_count) for x in b] == [(4, 9, 1)]
    assert p.acquire("c", 0, 10, 100)[0] == []
    # b cannot settle a's records; a settles them all or none.
    assert p.acknowledge("b", [(0, 0, [ACCEPT])])[0] == ErrorCode.INVALID_RECORD_STATE
    assert p.acknowledge("a", [(0, 4, [ACCEPT])])[0] == ErrorCode.INVALID_RECORD_STATE
    error, persist = p.acknowledge("a", [(0, 3, [ACCEPT])])
    assert error == ErrorCode.NONE and p.start_offset == 4 and persist.start_offset == 4


def test_per_offset_types_and_malformed_batches():
    p = _partition()
    p.acquire("a", 0, 4, 10)
    assert p.acknowledge("a", [(0, 3, [ACCEPT, RELEASE])])[0] == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("a", [(0, 1, [ACCEPT]), (1, 2, [ACCEPT])])[0] == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("a", [(0, 0, [9])])[0] == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("a", [(0, 3, [ACCEPT, RELEASE, REJECT, GAP])])[0] == ErrorCode.NONE
    assert p.start_offset == 1
    assert p.ranges()[0][:4] == (1, 1, RecordState.AVAILABLE, 1)
    again, _ = p.acquire("b", 0, 4, 10)
    assert [(x.first_offset, x.last_offset, x.delivery_count) for x in again] == [(1, 1, 2)]


def test_lock_expiry_redelivers_and_the_limit_archives():
    p = _partition(record_lock_duration_ms=100, delivery_count_limit=2)
    p.acquire("a", 0, 1, 10)
    assert p.next_deadline_ms() == 100
    p.expire_locks(99)
    assert p.ranges()[0][2] == RecordState.ACQUIRED
    p.expire_locks(100)
    (second,), _ = p.acquire("b", 100, 1, 10)
    assert second.delivery_count == 2
    # Its lock ended: a's late acknowledgement is refused.
    assert p.acknowledge("a", [(0, 0, [ACCEPT])])[0] == ErrorCode.INVALID_RECORD_STATE
    p.expire_locks(200)
    assert p.start_offset == 1 and p.acquire("c", 200, 1, 10)[0] == []


def test_leaving_member_releases_and_in_flight_cap():
    p = _partition(max_record_locks=5)
    p.acquire("a", 0, 100, 3)
    p.acquire("b", 0, 100, 100)
    assert p.end_offset == 5
    p.release_member("a")
    (got,), _ = p.acquire("c", 0, 100, 100)
    assert (got.first_offset, got.last_offset, got.delivery_count) == (0, 2, 2)


def test_rebuild_from_records_keeps_acknowledgements_and_counts():
    config = SharePartitionConfig(delivery_count_limit=2, snapshot_every_updates=3)
    p = SharePartition(config, 0)
    durable = DurableShareState()
    durable.apply(p.snapshot())

    def write(persist):
        if persist is not None:
            record = ShareStateRecord(
                ShareRecordKind.SNAPSHOT if persist.snapshot else ShareRecordKind.UPDATE,
                "g", uuid.UUID(int=1), 0, persist.start_offset, persist.state_batches,
            )
            decoded = decode_record(*encode_record(record))
            assert decoded == record
            durable.apply(persist)

    write(p.acquire("a", 0, 10, 10)[1])
    write(p.acknowledge("a", [(0, 9, [ACCEPT, REJECT, RELEASE, ACCEPT, ACCEPT, RELEASE, RELEASE, ACCEPT, GAP, RELEASE])])[1])
    write(p.acquire("b", 0, 10, 1)[1])  # offset 2 again: count 2, the limit
    assert durable.view() == p.durable_view()
    rebuilt = SharePartition.from_durable(config, durable.start_offset, durable.batches(), durable.snapshot_epoch)
    # The acquired offset 2 comes back archived (it reached the limit); 5 and 6, 9 available.
    assert rebuilt.start_offset == 5
    got, _ = rebuilt.acquire("c", 0, 12, 100)
    assert [(x.first_offset, x.last_offset, x.delivery_count) for x in got] == [(5, 6, 2), (9, 9, 2), (10, 11, 1)]


def test_log_start_moves_the_start_offset():
    p = _partition()
    p.acquire("a", 0, 10, 10)
    persist = p.advance_start(4)
    assert p.start_offset == 4 and persist.start_offset == 4 and p.ranges()[0][0] == 4
    p.advance_start(50)
    assert p.start_offset == 50 and p.ranges() == []


def test_tombstone_and_key_kind():
    record = ShareStateRecord(ShareRecordKind.UPDATE, "g", uuid.UUID(int=3), 2)
    key, value = encode_record(record)
    assert value is None and key[:2] == b"\x00\x01"
    assert decode_record(key, None).is_tombstone

"""Transactional offset commits in the group coordinator (KIP-98, KIP-447), pure.

The coordinator writes through a fake ``__consumer_offsets`` log that keeps
every batch in order (plain, transactional with its producer, markers), so
each test can also replay that log into a fresh coordinator and check that a
restarted coordinator agrees with the live one. Expected behaviour is Apache
Kafka's (OffsetMetadataManager and ClassicGroup.validateOffsetCommit).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from broker.config import load_config
from broker.coordinators.effects import Store
from broker.coordinators.groups.coordinator import GroupConfig, GroupCoordinator, JoinRequest, SyncResult
from broker.coordinators.groups.group import GroupState
from broker.coordinators.groups.pending_offsets import PendingOffset, PendingTxnOffsets
from broker.coordinators.groups.service import GroupService
from broker.handlers import offset_fetch
from protocol.consumer_offsets import OffsetAndMetadata, OffsetKey, decode_key, decode_offset_value, partition_for_group
from protocol.errors import ErrorCode
from protocol.records import ControlType, build_batch, build_control_batch
from storage.log import LogConfig, PartitionLog
from tests.unit.test_group_coordinator import DrivenCoordinator

PARTITIONS = 4
SESSION_MS = 10_000
TP = ("t", 0)
TP1 = ("t", 1)
PID = 1000
PID2 = 2000


@dataclass
class Written:
    """One batch of the fake log: records of one write, or a transaction marker."""

    partition: int
    records: list[tuple[bytes, bytes | None]]
    producer_id: int = -1  # >= 0: a transactional batch of that producer
    producer_epoch: int = -1
    marker: bool | None = None  # a marker: True COMMIT, False ABORT


class FakeLog:
    """Both stores of the coordinator, appending to one ordered list."""

    def __init__(self):
        self.batches: list[Written] = []
        self.fail_with: ErrorCode | None = None

    def write(self, store: Store) -> ErrorCode:
        if self.fail_with is not None:
            return self.fail_with
        self.batches.append(Written(store.partition, list(store.records), store.producer_id, store.producer_epoch))
        return ErrorCode.NONE

    def marker(self, coordinator, partition, producer_id, commit):
        """What the WriteTxnMarkers path does: the marker lands, then the coordinator hears of it."""
        self.batches.append(Written(partition, [], producer_id, marker=commit))
        coordinator.complete_transaction(partition, producer_id, commit)

    def replay(self, partition: int | None = None) -> GroupCoordinator:
        coordinator, _ = make(self)
        self.replay_into(coordinator, partition)
        return coordinator

    def replay_into(self, coordinator, partition: int | None = None, now_ms: int = 0) -> None:
        for written in self.batches:
            if partition is not None and written.partition != partition:
                continue
            if written.marker is not None:
                coordinator.complete_transaction(written.partition, written.producer_id, written.marker)
            else:
                for key, value in written.records:
                    coordinator.load_record(key, value, written.producer_id)
        coordinator.finish_loading(now_ms)


def make(fake_log: FakeLog | None = None, **config):
    fake_log = fake_log if fake_log is not None else FakeLog()
    ids = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupConfig(offsets_partitions=PARTITIONS, initial_rebalance_delay_ms=0, min_session_timeout_ms=1000, **config),
        lambda prefix: f"{prefix}-{next(ids)}",
    )
    return DrivenCoordinator(coordinator, fake_log.write), fake_log


def offset(value, metadata="", now=0):
    return OffsetAndMetadata(value, -1, metadata, now)


def committed(coordinator, group="g"):
    return {(t, p): o.offset for t, p, o in coordinator.fetch_offsets(group, None)}


def pending_state(coordinator):
    """Every pending offset as {(producer, group, tp): offset value}."""
    state = {}
    for group_id in coordinator.pending.group_ids():
        for tp in coordinator.pending.partitions_of(group_id):
            for producer_id in coordinator.pending.producer_ids():
                found = coordinator.pending.get(producer_id, group_id, tp)
                if found is not None:
                    state[(producer_id, group_id, tp)] = found.offset.offset
    return state


def txn_commit(coordinator, offsets, group="g", producer_id=PID, epoch=0, generation=-1, member="", instance=None, now=0):
    return coordinator.commit_transactional_offsets(
        now, group, producer_id, epoch, generation, member, instance, {tp: offset(v) for tp, v in offsets.items()}
    )


def stable_member(coordinator, group="g", instance=None):
    """A one-member group in Stable state; returns its member id (generation 1)."""
    answers = []
    request = JoinRequest(
        group_id=group, member_id="", group_instance_id=instance, client_id="c", client_host="/h",
        session_timeout_ms=SESSION_MS, rebalance_timeout_ms=SESSION_MS, protocol_type="consumer",
        protocols=[("range", b"")], require_known_member_id=False,
    )
    coordinator.join_group(0, request, answers.append)
    coordinator.tick(0)
    (joined,) = answers
    assert joined.error == ErrorCode.NONE, joined
    synced = []
    coordinator.sync_group(0, group, joined.generation_id, joined.member_id, instance, None, None, {joined.member_id: b""}, synced.append)
    assert synced and isinstance(synced[0], SyncResult) and synced[0].error == ErrorCode.NONE
    assert coordinator.groups[group].state is GroupState.STABLE
    return joined.member_id


# --------------------------------------------------------------------------- commit and abort


def test_pending_offsets_are_invisible_until_the_commit_marker():
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    assert txn_commit(coordinator, {TP: 5, TP1: 6}) == {TP: ErrorCode.NONE, TP1: ErrorCode.NONE}
    # One transactional batch of the producer, in the group's partition.
    (written,) = fake_log.batches
    assert (written.partition, written.producer_id, written.producer_epoch) == (partition, PID, 0)
    assert [decode_key(k) for k, _ in written.records] == [OffsetKey("g", "t", 0), OffsetKey("g", "t", 1)]
    assert [decode_offset_value(v).offset for _, v in written.records] == [5, 6]
    assert committed(coordinator) == {}
    assert coordinator.fetch_offsets("g", [TP]) == [("t", 0, None)]
    assert coordinator.has_pending_offsets("g", TP) and coordinator.has_pending_offsets("g", TP1)
    assert coordinator.groups["g"].state is GroupState.EMPTY, "a simple group is made for the commit"
    fake_log.marker(coordinator, partition, PID, commit=True)
    assert committed(coordinator) == {TP: 5, TP1: 6}
    assert not coordinator.has_pending_offsets("g", TP) and pending_state(coordinator) == {}


def test_abort_drops_the_pending_offsets_and_keeps_the_committed_ones():
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    coordinator.commit_offsets(0, "g", -1, "", None, {TP: offset(3)})
    txn_commit(coordinator, {TP: 9, TP1: 9})
    fake_log.marker(coordinator, partition, PID, commit=False)
    assert committed(coordinator) == {TP: 3}
    assert pending_state(coordinator) == {}
    assert fake_log.replay().fetch_offsets("g", None) == coordinator.fetch_offsets("g", None)


def test_repeated_and_foreign_markers_change_nothing():
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    txn_commit(coordinator, {TP: 5})
    # A marker in another partition, or of another producer, leaves the transaction open.
    fake_log.marker(coordinator, (partition + 1) % PARTITIONS, PID, commit=True)
    fake_log.marker(coordinator, partition, PID2, commit=True)
    assert committed(coordinator) == {} and coordinator.has_pending_offsets("g", TP)
    fake_log.marker(coordinator, partition, PID, commit=True)
    coordinator.commit_offsets(1, "g", -1, "", None, {TP: offset(7)})
    # The same marker again (a coordinator retry) does not bring the old offset back.
    fake_log.marker(coordinator, partition, PID, commit=True)
    fake_log.marker(coordinator, partition, PID, commit=False)
    assert committed(coordinator) == {TP: 7}


def test_the_marker_completes_only_the_groups_of_its_partition():
    coordinator, fake_log = make()
    other = next(f"h{i}" for i in range(1000) if partition_for_group(f"h{i}", PARTITIONS) != partition_for_group("g", PARTITIONS))
    txn_commit(coordinator, {TP: 1}, group="g")
    txn_commit(coordinator, {TP: 2}, group=other)
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=True)
    assert committed(coordinator, "g") == {TP: 1}
    assert committed(coordinator, other) == {} and coordinator.has_pending_offsets(other, TP)
    fake_log.marker(coordinator, partition_for_group(other, PARTITIONS), PID, commit=False)
    assert committed(coordinator, other) == {} and pending_state(coordinator) == {}


def test_a_later_commit_of_the_same_transaction_replaces_the_earlier_one():
    coordinator, fake_log = make()
    txn_commit(coordinator, {TP: 4})
    txn_commit(coordinator, {TP: 8})
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=True)
    assert committed(coordinator) == {TP: 8}


def test_two_producers_pending_on_one_partition_complete_independently():
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    txn_commit(coordinator, {TP: 10}, producer_id=PID)
    txn_commit(coordinator, {TP: 20}, producer_id=PID2)
    fake_log.marker(coordinator, partition, PID2, commit=True)
    assert committed(coordinator) == {TP: 20}
    assert coordinator.has_pending_offsets("g", TP), "PID's transaction is still open"
    # PID's record was written before PID2's: committing it now must not go back.
    fake_log.marker(coordinator, partition, PID, commit=True)
    assert committed(coordinator) == {TP: 20}
    assert not coordinator.has_pending_offsets("g", TP)


# --------------------------------------------------------------------------- interleaving with plain commits


def test_a_plain_commit_written_after_the_transactional_one_wins_at_commit():
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    txn_commit(coordinator, {TP: 5, TP1: 5})
    coordinator.commit_offsets(1, "g", -1, "", None, {TP: offset(50)})
    fake_log.marker(coordinator, partition, PID, commit=True)
    # Kafka keeps the newest commit record: the plain one for TP, the transaction's for TP1.
    assert committed(coordinator) == {TP: 50, TP1: 5}
    assert committed(fake_log.replay()) == {TP: 50, TP1: 5}


def test_a_plain_commit_written_before_the_transactional_one_is_replaced():
    coordinator, fake_log = make()
    coordinator.commit_offsets(0, "g", -1, "", None, {TP: offset(50)})
    txn_commit(coordinator, {TP: 5})
    assert committed(coordinator) == {TP: 50}, "the plain commit stays visible while the transaction is open"
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=True)
    assert committed(coordinator) == {TP: 5}
    assert committed(fake_log.replay()) == {TP: 5}


# --------------------------------------------------------------------------- validation


def test_membership_checks_of_v3_commits():
    coordinator, fake_log = make()
    member = stable_member(coordinator)
    generation = coordinator.groups["g"].generation_id
    cases = [
        ({"generation": generation, "member": "ghost"}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"generation": generation + 1, "member": member}, ErrorCode.ILLEGAL_GENERATION),
        ({"generation": generation - 1, "member": member}, ErrorCode.ILLEGAL_GENERATION),
        ({"generation": -1, "member": "ghost"}, ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    for kwargs, error in cases:
        assert txn_commit(coordinator, {TP: 1, TP1: 1}, **kwargs) == {TP: error, TP1: error}, kwargs
    assert txn_commit(coordinator, {TP: 1}, group="nogroup", generation=3, member="x") == {TP: ErrorCode.ILLEGAL_GENERATION}
    assert txn_commit(coordinator, {TP: 1}, group="") == {TP: ErrorCode.INVALID_GROUP_ID}
    assert txn_commit(coordinator, {TP: 1}, producer_id=-1) == {TP: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert txn_commit(coordinator, {TP: 1}, epoch=-1) == {TP: ErrorCode.INVALID_PRODUCER_EPOCH}
    assert fake_log.batches == [b for b in fake_log.batches if b.producer_id < 0], "nothing transactional was written"
    assert pending_state(coordinator) == {} and "nogroup" not in coordinator.groups
    assert txn_commit(coordinator, {TP: 1}, generation=generation, member=member) == {TP: ErrorCode.NONE}


def test_a_static_member_replaced_by_a_new_instance_is_fenced():
    coordinator, _ = make()
    member = stable_member(coordinator, instance="i1")
    generation = coordinator.groups["g"].generation_id
    assert txn_commit(coordinator, {TP: 1}, generation=generation, member="other", instance="i1") == {TP: ErrorCode.FENCED_INSTANCE_ID}
    assert pending_state(coordinator) == {}
    assert txn_commit(coordinator, {TP: 1}, generation=generation, member=member, instance="i1") == {TP: ErrorCode.NONE}


def test_commits_without_membership_are_accepted_in_any_group_state():
    # TxnOffsetCommit v0-2 carry no member id or generation: Kafka accepts them
    # even while the group has members (an OffsetCommit would be refused).
    coordinator, _ = make()
    stable_member(coordinator)
    assert coordinator.commit_offsets(0, "g", -1, "", None, {TP: offset(1)}) == {TP: ErrorCode.UNKNOWN_MEMBER_ID}
    assert txn_commit(coordinator, {TP: 1}) == {TP: ErrorCode.NONE}


def test_a_member_may_commit_while_the_group_completes_a_rebalance():
    coordinator, _ = make()
    answers = []
    request = JoinRequest(
        group_id="g", member_id="", group_instance_id=None, client_id="c", client_host="/h",
        session_timeout_ms=SESSION_MS, rebalance_timeout_ms=SESSION_MS, protocol_type="consumer",
        protocols=[("range", b"")], require_known_member_id=False,
    )
    coordinator.join_group(0, request, answers.append)
    coordinator.tick(0)
    (joined,) = answers
    assert coordinator.groups["g"].state is GroupState.COMPLETING_REBALANCE
    plain = coordinator.commit_offsets(0, "g", joined.generation_id, joined.member_id, None, {TP: offset(1)})
    assert plain == {TP: ErrorCode.REBALANCE_IN_PROGRESS}
    assert txn_commit(coordinator, {TP: 1}, generation=joined.generation_id, member=joined.member_id) == {TP: ErrorCode.NONE}


def test_a_dead_group_answers_coordinator_not_available():
    coordinator, fake_log = make()
    txn_commit(coordinator, {TP: 1})
    before = len(fake_log.batches)
    coordinator.groups["g"].transition(GroupState.DEAD, 0)
    assert txn_commit(coordinator, {TP: 2}, producer_id=PID2) == {TP: ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert len(fake_log.batches) == before and pending_state(coordinator) == {(PID, "g", TP): 1}


def test_metadata_too_large_is_refused_per_partition():
    coordinator, fake_log = make(offset_metadata_max_bytes=10)
    results = coordinator.commit_transactional_offsets(0, "g", PID, 0, -1, "", None, {TP: offset(1, "x" * 11), TP1: offset(2, "y" * 10)})
    assert results == {TP: ErrorCode.OFFSET_METADATA_TOO_LARGE, TP1: ErrorCode.NONE}
    assert [decode_key(k) for k, _ in fake_log.batches[-1].records] == [OffsetKey("g", "t", 1)]
    assert pending_state(coordinator) == {(PID, "g", TP1): 2}


def test_a_failed_write_leaves_nothing_pending():
    coordinator, fake_log = make()
    fake_log.fail_with = ErrorCode.INVALID_PRODUCER_EPOCH
    assert txn_commit(coordinator, {TP: 1}, group="new") == {TP: ErrorCode.INVALID_PRODUCER_EPOCH}
    assert pending_state(coordinator) == {} and "new" not in coordinator.groups
    fake_log.fail_with = None
    assert txn_commit(coordinator, {TP: 1}, group="new") == {TP: ErrorCode.NONE}


def test_the_commit_is_one_transactional_store_and_waits_for_its_outcome():
    coordinator = GroupCoordinator(GroupConfig(offsets_partitions=PARTITIONS), lambda prefix: prefix)
    answers = []
    (store,) = coordinator.commit_transactional_offsets(0, "g", PID, 3, -1, "", None, {TP: offset(1), TP1: offset(2)}, answers.append)
    assert (store.partition, store.producer_id, store.producer_epoch) == (partition_for_group("g", PARTITIONS), PID, 3)
    assert [decode_key(k) for k, _ in store.records] == [OffsetKey("g", "t", 0), OffsetKey("g", "t", 1)]
    assert [decode_offset_value(v).offset for _, v in store.records] == [1, 2]
    # Nothing is answered or pending before the shell reports the outcome.
    assert answers == [] and pending_state(coordinator) == {} and "g" not in coordinator.groups
    assert coordinator.store_done(store.token, ErrorCode.NONE) == []
    assert answers == [{TP: ErrorCode.NONE, TP1: ErrorCode.NONE}]
    assert pending_state(coordinator) == {(PID, "g", TP): 1, (PID, "g", TP1): 2}


# --------------------------------------------------------------------------- OffsetFetch require_stable


def test_offset_fetch_hides_pending_offsets_and_reports_them_unstable_when_asked():
    coordinator, fake_log = make()
    coordinator.commit_offsets(0, "g", -1, "", None, {TP: offset(3), ("u", 0): offset(4)})
    txn_commit(coordinator, {TP: 9, TP1: 9})
    topics = [SimpleNamespace(name="t", partition_indexes=[0, 1]), SimpleNamespace(name="u", partition_indexes=[0])]
    plain = offset_fetch._fetch(coordinator, "g", topics)
    assert [(t, [(p, o.offset if o else None, e) for p, o, e in parts]) for t, parts in plain] == [
        ("t", [(0, 3, ErrorCode.NONE), (1, None, ErrorCode.NONE)]),
        ("u", [(0, 4, ErrorCode.NONE)]),
    ]
    stable = offset_fetch._fetch(coordinator, "g", topics, require_stable=True)
    assert [(t, [(p, o, e) for p, o, e in parts]) for t, parts in stable] == [
        ("t", [(0, None, ErrorCode.UNSTABLE_OFFSET_COMMIT), (1, None, ErrorCode.UNSTABLE_OFFSET_COMMIT)]),
        ("u", [(0, offset(4), ErrorCode.NONE)]),
    ]
    # All offsets: only committed partitions are listed, the pending one among them unstable.
    everything = offset_fetch._fetch(coordinator, "g", None, require_stable=True)
    assert [(t, [(p, e) for p, _, e in parts]) for t, parts in everything] == [
        ("t", [(0, ErrorCode.UNSTABLE_OFFSET_COMMIT)]),
        ("u", [(0, ErrorCode.NONE)]),
    ]
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=True)
    stable = offset_fetch._fetch(coordinator, "g", topics, require_stable=True)
    assert [(p, o.offset, e) for _, parts in stable for p, o, e in parts] == [(0, 9, 0), (1, 9, 0), (0, 4, 0)]


# --------------------------------------------------------------------------- deletion and expiry


def test_offset_delete_drops_pending_offsets_with_a_tombstone():
    coordinator, fake_log = make()
    txn_commit(coordinator, {TP: 5, TP1: 6})
    error, results = coordinator.delete_offsets("g", [TP])
    assert error == ErrorCode.NONE and results == {TP: ErrorCode.NONE}
    last = fake_log.batches[-1]
    assert last.producer_id == -1 and last.records == [(last.records[0][0], None)]
    assert decode_key(last.records[0][0]) == OffsetKey("g", "t", 0)
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=True)
    assert committed(coordinator) == {TP1: 6}
    assert committed(fake_log.replay()) == {TP1: 6}


def test_deleting_an_empty_group_tombstones_its_pending_offsets():
    coordinator, fake_log = make()
    coordinator.commit_offsets(0, "g", -1, "", None, {TP: offset(1)})
    txn_commit(coordinator, {TP: 5, TP1: 6})
    assert coordinator.delete_groups(1, ["g"]) == {"g": ErrorCode.NONE}
    tombstoned = [decode_key(k) for k, v in fake_log.batches[-1].records if v is None]
    # One tombstone per partition (TP once, although both committed and pending), then the group's.
    assert tombstoned[:2] == [OffsetKey("g", "t", 0), OffsetKey("g", "t", 1)] and len(tombstoned) == 3
    assert pending_state(coordinator) == {} and "g" not in coordinator.groups
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=True)
    assert committed(coordinator) == {} and "g" not in coordinator.groups
    replayed = fake_log.replay()
    assert committed(replayed) == {} and "g" not in replayed.groups and pending_state(replayed) == {}


def test_a_group_with_members_is_not_deleted_whatever_is_pending():
    coordinator, _ = make()
    stable_member(coordinator)
    txn_commit(coordinator, {TP: 5})
    assert coordinator.delete_groups(1, ["g"]) == {"g": ErrorCode.NON_EMPTY_GROUP}
    assert coordinator.has_pending_offsets("g", TP)


def test_pending_offsets_stop_expiry_of_their_partition_and_of_the_group():
    coordinator, fake_log = make(offsets_retention_ms=1000)
    coordinator.commit_offsets(0, "g", -1, "", None, {TP: offset(1, now=0), TP1: offset(1, now=0)})
    txn_commit(coordinator, {TP: 2})
    assert coordinator.expire_offsets(5000) == 1, "only the partition without a pending commit expires"
    assert committed(coordinator) == {TP: 1} and "g" in coordinator.groups
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=False)
    assert coordinator.expire_offsets(5000) == 1
    assert "g" not in coordinator.groups

    # A group with nothing but a pending commit is not removed either.
    txn_commit(coordinator, {TP: 3}, group="only-pending", now=0)
    assert coordinator.expire_offsets(10_000) == 0 and "only-pending" in coordinator.groups
    fake_log.marker(coordinator, partition_for_group("only-pending", PARTITIONS), PID, commit=False)
    coordinator.expire_offsets(10_000)
    assert "only-pending" not in coordinator.groups


def test_a_deleted_topic_takes_its_pending_offsets():
    coordinator, fake_log = make()
    txn_commit(coordinator, {TP: 5, ("u", 0): 6})
    assert coordinator.remove_offsets_of_topics(0, {"t"}) == 1
    assert not coordinator.has_pending_offsets("g", TP) and coordinator.has_pending_offsets("g", ("u", 0))
    fake_log.marker(coordinator, partition_for_group("g", PARTITIONS), PID, commit=True)
    assert committed(coordinator) == {("u", 0): 6}
    assert committed(fake_log.replay()) == {("u", 0): 6}


# --------------------------------------------------------------------------- loading and unloading


def test_reload_keeps_open_transactions_pending_and_completed_ones_completed():
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    txn_commit(coordinator, {TP: 1}, producer_id=PID)
    fake_log.marker(coordinator, partition, PID, commit=True)
    txn_commit(coordinator, {TP1: 2}, producer_id=PID2)
    fake_log.marker(coordinator, partition, PID2, commit=False)
    txn_commit(coordinator, {TP1: 3}, producer_id=PID)  # PID's next transaction, still open
    restored = fake_log.replay()
    assert committed(restored) == {TP: 1}
    assert pending_state(restored) == {(PID, "g", TP1): 3}
    assert "g" in restored.groups
    # Its marker, arriving after the restart, completes it.
    restored.complete_transaction(partition, PID, True)
    assert committed(restored) == {TP: 1, TP1: 3}


def test_unloading_drops_pending_offsets_and_loading_brings_them_back():
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    other = next(f"h{i}" for i in range(1000) if partition_for_group(f"h{i}", PARTITIONS) != partition)
    txn_commit(coordinator, {TP: 1}, group="g")
    txn_commit(coordinator, {TP: 2}, group=other)
    coordinator.unload_partition(partition)
    assert pending_state(coordinator) == {(PID, other, TP): 2}
    # A marker for a partition not loaded here does nothing (the service does not even pass it on).
    coordinator.complete_transaction(partition, PID, True)
    assert committed(coordinator) == {}
    fake_log.replay_into(coordinator, partition)
    assert pending_state(coordinator) == {(PID, "g", TP): 1, (PID, other, TP): 2}


# --------------------------------------------------------------------------- pending structure


def test_pending_structure_keeps_its_two_indexes_in_step():
    pending = PendingTxnOffsets()
    a = PendingOffset(offset(1), 0)
    pending.add(1, "g", TP, a)
    pending.add(2, "g", TP, PendingOffset(offset(2), 1))
    pending.add(1, "h", TP1, PendingOffset(offset(3), 2))
    assert pending.take(1, lambda g: g == "g") == {"g": {TP: a}}
    assert pending.has("g", TP) and pending.producer_ids() == [1, 2]
    pending.discard("g", TP)
    assert not pending.has_group("g") and pending.producer_ids() == [1]
    pending.discard_groups(["h"])
    assert pending.group_ids() == [] and pending.producer_ids() == []
    assert pending.take(1, lambda g: True) == {}


# --------------------------------------------------------------------------- random histories


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_agree_with_a_model_and_with_a_replay(seed):
    """Plain commits, transactional commits of three producers, markers (some
    repeated), offset deletions and unload/reload cycles in a random order: the
    committed offsets follow the newest record of each partition among those that
    took effect, and replaying the log gives the same state at every step."""
    rng = random.Random(seed)
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    tps = [("t", 0), ("t", 1), ("t", 2)]
    producers = [PID, PID2, 3000]
    # Model: committed tp -> (value, write order); open txns: producer -> tp -> (value, write order).
    model_committed: dict = {}
    model_open: dict = {p: {} for p in producers}
    order = itertools.count()
    for _ in range(60):
        action = rng.random()
        tp = rng.choice(tps)
        value = rng.randrange(1000)
        if action < 0.3:
            assert coordinator.commit_offsets(0, "g", -1, "", None, {tp: offset(value)}) == {tp: ErrorCode.NONE}
            model_committed[tp] = (value, next(order))
        elif action < 0.6:
            producer = rng.choice(producers)
            assert txn_commit(coordinator, {tp: value}, producer_id=producer) == {tp: ErrorCode.NONE}
            model_open[producer][tp] = (value, next(order))
        elif action < 0.85:
            producer = rng.choice(producers)
            commit = rng.random() < 0.6
            fake_log.marker(coordinator, partition, producer, commit)
            if commit:
                for p, (v, position) in model_open[producer].items():
                    if p not in model_committed or model_committed[p][1] < position:
                        model_committed[p] = (v, position)
            model_open[producer] = {}
        elif action < 0.95:
            if "g" not in coordinator.groups:  # nothing written yet
                assert coordinator.delete_offsets("g", [tp]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
                continue
            assert coordinator.delete_offsets("g", [tp]) == (ErrorCode.NONE, {tp: ErrorCode.NONE})
            model_committed.pop(tp, None)
            for open_offsets in model_open.values():
                open_offsets.pop(tp, None)
        else:
            coordinator.unload_partition(partition)
            fake_log.replay_into(coordinator, partition)
        expected = {p: v for p, (v, _) in model_committed.items()}
        expected_pending = {(pr, "g", p): v for pr, offs in model_open.items() for p, (v, _) in offs.items()}
        assert committed(coordinator) == expected, f"seed {seed}"
        assert pending_state(coordinator) == expected_pending, f"seed {seed}"
        replayed = fake_log.replay()
        assert committed(replayed) == expected and pending_state(replayed) == expected_pending, f"seed {seed}"
        for p in tps:
            assert coordinator.has_pending_offsets("g", p) == any(p in offs for offs in model_open.values())


# --------------------------------------------------------------------------- the service's replay of a real log


def test_the_service_replays_transactional_batches_and_markers_from_a_real_log(tmp_path):
    """The group service's replay (broker.coordinators.shell) over a partition log holding what the
    coordinator and the transaction markers write: plain batches, transactional
    batches of two producers, a COMMIT and an ABORT marker, and an open transaction."""
    coordinator, fake_log = make()
    partition = partition_for_group("g", PARTITIONS)
    coordinator.commit_offsets(0, "g", -1, "", None, {TP: offset(1)})
    txn_commit(coordinator, {TP: 2, TP1: 2}, producer_id=PID)
    txn_commit(coordinator, {("u", 0): 3}, producer_id=PID2)
    fake_log.marker(coordinator, partition, PID2, commit=False)
    fake_log.marker(coordinator, partition, PID, commit=True)
    txn_commit(coordinator, {("u", 0): 4}, producer_id=PID2)  # open at the log end
    plog = PartitionLog(tmp_path / f"__consumer_offsets-{partition}", LogConfig())
    try:
        next_offset = 0
        for written in fake_log.batches:
            if written.marker is not None:
                data = build_control_batch(
                    ControlType.COMMIT if written.marker else ControlType.ABORT,
                    producer_id=written.producer_id, producer_epoch=0, coordinator_epoch=0,
                    timestamp_ms=0, base_offset=next_offset, partition_leader_epoch=0,
                )
            else:
                data = build_batch(
                    [(k, v, [], 0) for k, v in written.records],
                    base_offset=next_offset,
                    producer_id=written.producer_id,
                    producer_epoch=0 if written.producer_id >= 0 else -1,
                    is_transactional=written.producer_id >= 0,
                    partition_leader_epoch=0,
                )
            plog.append_as_follower(data)
            next_offset = plog.log_end_offset
        restored, _ = make()
        service = GroupService(SimpleNamespace(config=load_config({"offsets.topic.num.partitions": str(PARTITIONS)})))
        service.coordinator = restored
        records = service.shell.replay(partition, plog)
        restored.finish_loading(0)
    finally:
        plog.close()
    assert records == 1 + 2 + 1 + 1
    assert committed(restored) == committed(coordinator) == {TP: 2, TP1: 2}
    assert pending_state(restored) == pending_state(coordinator) == {(PID2, "g", ("u", 0)): 4}

"""Focused transitions of the pure Raft core (controller/raft/node.py) and its log model."""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace

import pytest

from controller.raft.log import Batch, MemoryRaftLog, OffsetAndEpoch, SnapshotId
from controller.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RequestFailed,
    VoteRequest,
    VoteResponse,
)
from controller.raft.node import (
    Appended,
    PrefixDeleted,
    RaftConfig,
    RaftError,
    RaftNode,
    Role,
    SnapshotInstalled,
    Truncated,
)
from controller.raft.quorum_state import QuorumState, QuorumStateError
from protocol.errors import ErrorCode

CONFIG = RaftConfig(
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=50,
    election_backoff_base_ms=10,
    request_timeout_ms=100,
    retry_backoff_ms=10,
    fetch_max_wait_ms=50,
    fetch_max_bytes=1 << 20,
    snapshot_chunk_bytes=7,
)
VOTERS = (1, 2, 3)


def make_node(node_id=1, voters=VOTERS, log=None, state=None, now_ms=0, config=CONFIG):
    return RaftNode(node_id, voters, log or MemoryRaftLog(), random.Random(node_id), now_ms, config, state)


def log_with(*batches: tuple[int, int]) -> MemoryRaftLog:
    """A flushed log of (epoch, record count) batches."""
    log = MemoryRaftLog()
    for epoch, count in batches:
        log.append(Batch(log.end_offset, epoch, tuple(b"r%d" % (log.end_offset + i) for i in range(count))))
    log.flush()
    return log


def sent(out, kind=None, to=None):
    return [m for dest, m in out.messages if (kind is None or isinstance(m, kind)) and (to is None or dest == to)]


def make_leader(node_id=1, voters=VOTERS, log=None, epoch=0):
    """Drive a node through pre-vote and vote to leadership of ``epoch + 1``."""
    node = make_node(node_id, voters, log, QuorumState(leader_epoch=epoch))
    now = node.next_deadline_ms
    node.tick(now)
    assert node.role is Role.PROSPECTIVE
    others = [v for v in voters if v != node_id]
    for voter in others:
        node.step(now, VoteResponse(voter, epoch, None, True, pre_vote=True))
        if node.role is Role.CANDIDATE:
            break
    assert node.role is Role.CANDIDATE and node.epoch == epoch + 1
    for voter in others:
        out = node.step(now, VoteResponse(voter, epoch + 1, None, True))
        if node.role is Role.LEADER:
            break
    assert node.role is Role.LEADER
    node.log.flush()
    node.tick(now)
    return node, out, now


# -- quorum-state ---------------------------------------------------------------


def test_quorum_state_encodes_kafkas_json_shape():
    state = QuorumState(leader_epoch=5, leader_id=1, voted_id=None, current_voters=(1, 2, 3))
    document = json.loads(state.encode())
    assert document == {
        "leaderId": 1,
        "leaderEpoch": 5,
        "votedId": -1,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }
    assert QuorumState.decode(state.encode()) == state


def test_quorum_state_reads_a_file_kafka_wrote_and_rejects_garbage():
    kafka = b'{"clusterId":"","leaderId":-1,"leaderEpoch":7,"votedId":2,"appliedOffset":0,"currentVoters":null,"data_version":0}'
    assert QuorumState.decode(kafka) == QuorumState(leader_epoch=7, leader_id=None, voted_id=2)
    for bad in (b"", b"[]", b'{"leaderId":true}', b'{"data_version":9}', b'{"currentVoters":[{"x":1}]}', b"\xff"):
        with pytest.raises(QuorumStateError):
            QuorumState.decode(bad)


# -- the log model ----------------------------------------------------------------


def test_memory_log_crash_loses_only_unflushed_batches():
    log = log_with((1, 3))
    log.append(Batch(3, 1, (b"a", b"b")))
    assert (log.end_offset, log.flushed_end_offset) == (5, 3)
    log.crash()
    assert (log.end_offset, log.flushed_end_offset) == (3, 3)


def test_memory_log_epoch_cache_and_batch_granular_truncation():
    log = log_with((1, 3), (1, 2), (3, 4), (4, 1))
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(5, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(5, 1)  # largest epoch <= 2 is 1
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(9, 3)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(10, 4)
    assert log.truncate_to(7) == 5  # the epoch-3 batch [5, 9) straddles 7 and goes whole
    assert log.last_epoch == 1 and log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 1)
    with pytest.raises(ValueError):
        log.append(Batch(5, 0, (b"x",)))  # epochs never go back


def test_memory_log_snapshot_moves_the_start_offset():
    log = log_with((1, 3), (2, 3), (2, 2))
    snapshot = SnapshotId(6, 2)
    log.create_snapshot(snapshot, b"state")
    log.delete_before(snapshot)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (6, 8, 2)
    assert log.epoch_at(5) == 2 and log.read(6, 1)[0].base_offset == 6
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(-1, -1)
    with pytest.raises(ValueError):
        log.delete_before(SnapshotId(7, 2))  # unknown snapshot


# -- elections ---------------------------------------------------------------------


def test_single_voter_elects_itself_and_commits_after_flush():
    node = make_node(1, voters=(1,))
    out = node.tick(node.next_deadline_ms)
    assert node.role is Role.LEADER and node.epoch == 1
    assert out.quorum_state == QuorumState(leader_epoch=1, leader_id=1, voted_id=1, current_voters=(1,))
    assert out.log_ops == [Appended(0, 1, 1)] and out.flush_soon and not out.flush
    assert node.high_watermark == 0  # the LeaderChange batch is not flushed yet
    node.log.flush()
    out = node.tick(0)
    assert out.high_watermark == 1 and out.committed == (0, 1)
    out = node.propose(0, [b"a", b"b"])
    assert out.proposal.base_offset == 1 and out.proposal.end_offset == 3
    node.log.flush()
    assert node.tick(0).committed == (1, 3)


def test_prevote_does_not_touch_epoch_or_vote():
    node = make_node(2)
    out = node.step(0, VoteRequest(1, 1, 0, 0, pre_vote=True))
    assert sent(out, VoteResponse)[0].vote_granted
    assert (node.epoch, node.voted_id, out.quorum_state) == (0, None, None)


def test_prevote_denied_while_the_leader_is_heard_and_granted_after_fetch_timeout():
    node = make_node(2, state=QuorumState(leader_epoch=3, leader_id=1))
    assert node.role is Role.FOLLOWER
    fetch = sent(node.tick(0), FetchRequest)[0]
    node.step(10, FetchResponse(1, 3, 1, fetch.fetch_offset, fetch.last_fetched_epoch))
    out = node.step(10, VoteRequest(3, 4, 0, 0, pre_vote=True))
    assert not sent(out, VoteResponse)[0].vote_granted
    out = node.step(10 + CONFIG.fetch_timeout_ms, VoteRequest(3, 4, 0, 0, pre_vote=True))
    assert sent(out, VoteResponse)[0].vote_granted
    assert node.epoch == 3


def test_prevote_rejected_for_a_shorter_log():
    node = make_node(2, log=log_with((1, 5)), state=QuorumState(leader_epoch=1))
    out = node.step(0, VoteRequest(3, 2, 1, 4, pre_vote=True))
    assert not sent(out, VoteResponse)[0].vote_granted


def test_failed_prevote_goes_back_to_the_known_leader_without_bumping_the_epoch():
    node = make_node(1, state=QuorumState(leader_epoch=3, leader_id=2))
    node.tick(CONFIG.fetch_timeout_ms)
    assert node.role is Role.PROSPECTIVE
    node.step(CONFIG.fetch_timeout_ms, VoteResponse(2, 3, 2, False, pre_vote=True))
    node.step(CONFIG.fetch_timeout_ms, VoteResponse(3, 3, 2, False, pre_vote=True))
    assert node.role is Role.FOLLOWER and node.leader_id == 2 and node.epoch == 3


def test_one_vote_per_epoch_persisted_with_the_reply():
    node = make_node(3)
    out = node.step(0, VoteRequest(1, 5, 0, 0))
    assert sent(out, VoteResponse)[0].vote_granted
    # The vote and its reply leave in the same output: the driver persists first.
    assert out.quorum_state == QuorumState(leader_epoch=5, voted_id=1, current_voters=VOTERS)
    out = node.step(1, VoteRequest(2, 5, 9, 100))
    assert not sent(out, VoteResponse)[0].vote_granted
    assert sent(node.step(2, VoteRequest(1, 5, 0, 0)), VoteResponse)[0].vote_granted  # a retry
    # After a restart from the persisted state the vote still holds.
    restarted = make_node(3, state=out.quorum_state or QuorumState(leader_epoch=5, voted_id=1))
    assert not sent(restarted.step(3, VoteRequest(2, 5, 9, 100)), VoteResponse)[0].vote_granted


@pytest.mark.parametrize(
    ("candidate_last", "granted"),
    [((2, 3), True), ((1, 9), False), ((2, 4), True), ((2, 2), False)],
)
def test_vote_compares_last_epoch_then_end_offset(candidate_last, granted):
    node = make_node(3, log=log_with((1, 1), (2, 2)))  # last epoch 2, end offset 3
    out = node.step(0, VoteRequest(1, 5, *candidate_last))
    assert sent(out, VoteResponse)[0].vote_granted is granted


def test_candidate_wins_and_begins_its_epoch():
    node, out, _ = make_leader(1)
    assert node.epoch == 1 and node.leader_id == 1
    assert {m.source_id for m in sent(out, BeginQuorumEpochRequest)} == {1}
    assert [d for d, m in out.messages if isinstance(m, BeginQuorumEpochRequest)] == [2, 3]
    assert node.log.batches[-1].control and node.log.batches[-1].epoch == 1


def test_begin_quorum_epoch_makes_a_follower_that_fetches():
    node = make_node(2)
    out = node.step(5, BeginQuorumEpochRequest(1, 4))
    assert node.role is Role.FOLLOWER and (node.epoch, node.leader_id) == (4, 1)
    assert out.quorum_state.leader_id == 1
    assert sent(out, BeginQuorumEpochResponse)[0].epoch == 4
    fetch = sent(node.tick(5), FetchRequest, to=1)[0]
    assert (fetch.epoch, fetch.fetch_offset) == (4, 0)


def test_higher_epoch_in_a_response_deposes_the_leader():
    node, _, now = make_leader(1)
    node.step(now, BeginQuorumEpochResponse(2, 7, 3))
    assert node.role is Role.FOLLOWER and (node.epoch, node.leader_id) == (7, 3)
    assert node.propose(now, [b"x"]).proposal.error is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_election_timeout_is_jittered_and_seeded():
    deadlines = {make_node(1, log=MemoryRaftLog()).next_deadline_ms for _ in range(3)}
    assert len(deadlines) == 1  # same seed, same jitter
    jittered = {RaftNode(1, VOTERS, MemoryRaftLog(), random.Random(s), 0, CONFIG).next_deadline_ms for s in range(20)}
    assert len(jittered) > 1 and all(100 <= d < 200 for d in jittered)


# -- replication and the high watermark ----------------------------------------------


def test_follower_flushes_what_it_appended_before_its_next_fetch_reports_it():
    follower = make_node(2, state=QuorumState(leader_epoch=1, leader_id=1))
    fetch = sent(follower.tick(0), FetchRequest)[0]
    batch = Batch(0, 1, (b"x", b"y"))
    out = follower.step(
        1, FetchResponse(1, 1, 1, fetch.fetch_offset, fetch.last_fetched_epoch, batches=(batch,), high_watermark=2)
    )
    assert out.flush and out.log_ops == [Appended(0, 2, 1)]
    assert sent(out, FetchRequest)[0].fetch_offset == 2
    assert out.high_watermark == 2 and out.committed == (0, 2)


def test_stale_fetch_response_is_ignored():
    follower = make_node(2, state=QuorumState(leader_epoch=1, leader_id=1))
    follower.tick(0)
    response = FetchResponse(1, 1, 1, 0, 0, batches=(Batch(0, 1, (b"x",)),), high_watermark=1)
    follower.step(1, response)
    out = follower.step(2, response)  # duplicate: answers a fetch at offset 0, we are at 1
    assert out.log_ops == [] and follower.log.end_offset == 1


def test_leader_answers_a_divergent_fetch_and_the_follower_truncates():
    # Leader: epoch 1 [0, 3), epoch 3 [3, 5) + its LeaderChange in epoch 4.
    leader, _, now = make_leader(1, log=log_with((1, 3), (3, 2)), epoch=3)
    # Follower: epoch 1 [0, 3), then epoch 2 [3, 6) that never committed.
    follower_log = log_with((1, 3), (2, 3))
    follower = make_node(2, log=follower_log, state=QuorumState(leader_epoch=4, leader_id=1))
    request = sent(follower.tick(now), FetchRequest)[0]
    assert (request.fetch_offset, request.last_fetched_epoch) == (6, 2)
    response = sent(leader.step(now, request), FetchResponse)[0]
    assert response.diverging == OffsetAndEpoch(3, 1) and not response.batches
    out = follower.step(now, response)
    assert out.log_ops == [Truncated(3)] and follower_log.end_offset == 3
    request = sent(out, FetchRequest)[0]
    response = sent(leader.step(now, request), FetchResponse)[0]
    assert [b.epoch for b in response.batches] == [3, 4]
    follower.step(now, response)
    assert follower_log.end_offset == leader.log.end_offset


def test_truncation_below_the_high_watermark_is_refused():
    follower = make_node(2, log=log_with((1, 4)), state=QuorumState(leader_epoch=2, leader_id=1))
    follower.tick(0)
    follower.step(0, FetchResponse(1, 2, 1, 4, 1, high_watermark=4))
    assert follower.high_watermark == 4
    with pytest.raises(RaftError):
        follower.step(1, FetchResponse(1, 2, 1, 4, 1, diverging=OffsetAndEpoch(2, 1)))


def test_high_watermark_waits_for_an_entry_of_the_leaders_own_epoch():
    # Old entries [0, 4) of epoch 1; the new leader's LeaderChange is [4, 5) in epoch 2.
    leader, _, now = make_leader(1, log=log_with((1, 4)), epoch=1)
    assert leader.log.end_offset == 5
    out = leader.step(now, FetchRequest(2, 2, 4, 1))  # voter 2 holds [0, 4) only
    assert leader.high_watermark == 0 and out.high_watermark is None
    out = leader.step(now, FetchRequest(2, 2, 5, 2))
    assert out.high_watermark == 5 and out.committed == (0, 5)


def test_leader_does_not_count_its_unflushed_entries():
    leader, _, now = make_leader(1)
    leader.step(now, FetchRequest(2, 1, 1, 1))
    assert leader.high_watermark == 1
    out = leader.propose(now, [b"a"])
    assert out.flush_soon and leader.log.flushed_end_offset == 1
    leader.step(now, FetchRequest(2, 1, 2, 1))  # voter 2 has it, but we only have it in memory
    assert leader.high_watermark == 1
    leader.log.flush()
    assert leader.tick(now).high_watermark == 2


def test_high_watermark_never_goes_down_on_a_follower():
    follower = make_node(2, log=log_with((1, 4)), state=QuorumState(leader_epoch=1, leader_id=1))
    follower.tick(0)
    follower.step(0, FetchResponse(1, 1, 1, 4, 1, high_watermark=4))
    follower.step(1, FetchResponse(1, 1, 1, 4, 1, high_watermark=2))
    assert follower.high_watermark == 4


def test_fetch_with_nothing_new_is_parked_until_data_arrives():
    leader, _, now = make_leader(1)
    leader.step(now, FetchRequest(2, 1, 1, 1, high_watermark=0, max_wait_ms=50))  # HW moves to 1
    out = leader.step(now, FetchRequest(2, 1, 1, 1, high_watermark=1, max_wait_ms=50))
    assert sent(out, FetchResponse) == [] and out.next_deadline_ms <= now + 50
    out = leader.propose(now + 5, [b"a"])
    assert [b.base_offset for b in sent(out, FetchResponse, to=2)[0].batches] == [1]


def test_follower_stands_for_election_after_fetch_timeout():
    follower = make_node(2, state=QuorumState(leader_epoch=1, leader_id=1))
    out = follower.tick(CONFIG.fetch_timeout_ms)
    assert follower.role is Role.PROSPECTIVE and follower.epoch == 1
    assert all(m.pre_vote and m.epoch == 2 for m in sent(out, VoteRequest))


# -- resignation and check-quorum ---------------------------------------------------------


def test_resign_sends_end_quorum_epoch_best_replicated_first():
    leader, _, now = make_leader(1)
    leader.step(now, FetchRequest(3, 1, 1, 1))
    out = leader.resign(now)
    assert leader.role is Role.RESIGNED
    requests = sent(out, EndQuorumEpochRequest)
    assert requests and all(r.preferred_successors == (3, 2) for r in requests)
    assert leader.propose(now, [b"x"]).proposal.error is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_preferred_successor_skips_the_backoff_and_others_grant_its_prevote():
    first = make_node(3, state=QuorumState(leader_epoch=1, leader_id=1))
    second = make_node(2, state=QuorumState(leader_epoch=1, leader_id=1))
    first.step(10, EndQuorumEpochRequest(1, 1, (3, 2)))
    second.step(10, EndQuorumEpochRequest(1, 1, (3, 2)))
    out = first.tick(10)
    assert first.role is Role.PROSPECTIVE
    assert second.next_deadline_ms > 10  # the second in line waits a little
    prevote = sent(out, VoteRequest, to=2)[0]
    assert sent(second.step(10, prevote), VoteResponse)[0].vote_granted  # its leader resigned


def test_leader_resigns_when_a_majority_stops_fetching():
    leader, _, now = make_leader(1)
    leader.step(now + 100, FetchRequest(2, 1, 1, 1))
    leader.tick(now + CONFIG.check_quorum_timeout_ms)  # 2 fetched 100 ms ago: still a majority
    assert leader.role is Role.LEADER
    leader.tick(now + 100 + CONFIG.check_quorum_timeout_ms)
    assert leader.role is Role.RESIGNED


def test_leader_reminds_a_silent_voter_and_yields_to_its_higher_epoch():
    leader, _, now = make_leader(1)
    leader.step(now, BeginQuorumEpochResponse(2, 1, 1))
    leader.step(now, BeginQuorumEpochResponse(3, 1, 1))
    leader.step(now + 10, FetchRequest(2, 1, 1, 1))
    later = now + CONFIG.fetch_timeout_ms // 2 + 1
    assert leader.next_deadline_ms <= later
    out = leader.tick(later)
    assert [d for d, m in out.messages if isinstance(m, BeginQuorumEpochRequest)] == [3]
    # Voter 3 lost an election in epoch 2 while cut off: it answers with that epoch.
    leader.step(later, BeginQuorumEpochResponse(3, 2, None, ErrorCode.FENCED_LEADER_EPOCH))
    assert leader.role is Role.UNATTACHED and leader.epoch == 2


def test_a_voter_that_answers_but_does_not_fetch_is_reminded_once_per_request_timeout():
    # A restarting voter answers BeginQuorumEpoch at once but has not fetched yet:
    # reminding it again on every answer was a busy loop between the two nodes.
    leader, _, now = make_leader(1)
    leader.step(now, BeginQuorumEpochResponse(2, 1, 1))
    leader.step(now, BeginQuorumEpochResponse(3, 1, 1))
    t = now + CONFIG.fetch_timeout_ms // 2 + 1
    reminders = []
    ticks = 0
    end = t + 10 * CONFIG.request_timeout_ms
    while t < end and ticks < 10_000:
        leader.step(t, FetchRequest(2, 1, 1, 1))  # voter 2 keeps fetching: a quorum
        out = leader.tick(t)
        ticks += 1
        for destination, message in out.messages:
            if isinstance(message, BeginQuorumEpochRequest) and destination == 3:
                reminders.append(t)
                leader.step(t, BeginQuorumEpochResponse(3, 1, 1))
        next_t = leader.next_deadline_ms
        assert next_t > t, f"deadline {next_t} not after now {t}: the driver would spin"
        t = min(next_t, t + CONFIG.fetch_timeout_ms // 4)
    assert leader.role is Role.LEADER
    assert 5 <= len(reminders) <= 11, reminders
    assert all(b - a >= CONFIG.request_timeout_ms for a, b in zip(reminders, reminders[1:])), reminders


def test_restart_refuses_a_different_voter_set():
    with pytest.raises(ValueError):
        make_node(1, state=QuorumState(leader_epoch=1, current_voters=(1, 2, 4)))


def test_restart_after_leading_comes_back_resigned():
    node = make_node(1, state=QuorumState(leader_epoch=4, leader_id=1, voted_id=1))
    assert node.role is Role.RESIGNED
    out = node.tick(node.next_deadline_ms)
    assert node.role is Role.PROSPECTIVE and sent(out, VoteRequest)[0].epoch == 5


# -- observers -------------------------------------------------------------------------------


def test_observers_do_not_vote_and_do_not_count():
    observer = make_node(9)
    assert not observer.is_voter
    assert not sent(observer.step(0, VoteRequest(1, 1, 0, 0)), VoteResponse)[0].vote_granted
    assert not sent(observer.step(0, VoteRequest(1, 1, 0, 0, pre_vote=True)), VoteResponse)[0].vote_granted
    observer.tick(10_000)
    assert observer.role is Role.UNATTACHED  # never stands for election

    leader, _, now = make_leader(1)
    leader.step(now, FetchRequest(9, 1, 1, 1))
    assert leader.high_watermark == 0  # leader + observer are not a majority of 3
    info = leader.describe_quorum()
    assert [r.replica_id for r in info.voters] == [1, 2, 3]
    assert [(r.replica_id, r.end_offset) for r in info.observers] == [(9, 1)]


def test_observer_finds_the_leader_through_any_voter():
    observer = make_node(9)
    out = observer.tick(0)
    probe = sent(out, FetchRequest)[0]
    follower = make_node(2, state=QuorumState(leader_epoch=3, leader_id=1))
    reply = sent(follower.step(0, probe), FetchResponse)[0]
    # The observer's epoch is behind: fenced, and told the epoch and leader the voter knows.
    assert reply.error is ErrorCode.FENCED_LEADER_EPOCH and (reply.epoch, reply.leader_id) == (3, 1)
    observer.step(0, reply)
    assert observer.role is Role.FOLLOWER and (observer.epoch, observer.leader_id) == (3, 1)


def test_observer_asks_again_soon_when_no_leader_is_known_or_a_voter_is_unreachable():
    # Brokers must find a new controller well within their session: a probe that
    # comes back without a leader, or fails, is retried after retry.backoff.ms,
    # not after a whole request timeout.
    observer = make_node(9)
    probe = sent(observer.tick(0), FetchRequest)[0]
    assert not sent(observer.tick(CONFIG.retry_backoff_ms), FetchRequest)  # the probe is in flight
    unattached_voter = make_node(2, state=QuorumState(leader_epoch=0))
    reply = sent(unattached_voter.step(0, probe), FetchResponse)[0]
    assert reply.leader_id is None
    observer.step(5, reply)
    assert not sent(observer.tick(5 + CONFIG.retry_backoff_ms - 1), FetchRequest)
    probe = sent(observer.tick(5 + CONFIG.retry_backoff_ms), FetchRequest)[0]
    observer.step(20, RequestFailed(3, probe))
    assert sent(observer.tick(20 + CONFIG.retry_backoff_ms), FetchRequest)
    # A failure reported while following a leader changes nothing: the fetch timeout decides.
    follower = make_node(9, state=QuorumState(leader_epoch=3, leader_id=1))
    fetch = sent(follower.tick(0), FetchRequest)[0]
    follower.step(1, RequestFailed(1, fetch))
    assert follower.role is Role.FOLLOWER and follower.leader_id == 1


# -- snapshots -------------------------------------------------------------------------------


def test_fetch_below_the_log_start_is_served_from_a_snapshot_in_chunks():
    leader, _, now = make_leader(1, log=log_with((1, 3)), epoch=1)
    leader.step(now, FetchRequest(2, 2, 4, 2))  # voter 2 is caught up: HW = 4
    assert leader.high_watermark == 4
    snapshot = SnapshotId(4, 2)
    state = b"state-of-four-records"
    leader.log.create_snapshot(snapshot, state)
    out = leader.snapshot_created(now, snapshot)
    assert out.log_ops == [PrefixDeleted(4)] and leader.log.start_offset == 4

    follower = make_node(3, state=QuorumState(leader_epoch=2, leader_id=1))
    request = sent(follower.tick(now), FetchRequest)[0]
    response = sent(leader.step(now, request), FetchResponse)[0]
    assert response.snapshot_id == snapshot
    out = follower.step(now, response)
    chunks = 0
    while True:
        request = sent(out, FetchSnapshotRequest)
        if not request:
            break
        chunks += 1
        reply = sent(leader.step(now, request[0]), FetchSnapshotResponse)[0]
        assert reply.size == len(state) and len(reply.data) <= CONFIG.snapshot_chunk_bytes
        out = follower.step(now, reply)
    assert chunks == 3  # 21 bytes in chunks of 7
    assert SnapshotInstalled(snapshot) in out.log_ops
    assert follower.log.snapshot_data(snapshot) == state
    assert (follower.log.start_offset, follower.log.end_offset, follower.high_watermark) == (4, 4, 4)
    fetch = sent(out, FetchRequest)[0]
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (4, 2)
    answer = sent(leader.step(now, replace(fetch, max_wait_ms=0)), FetchResponse)[0]
    assert answer.snapshot_id is None and answer.diverging is None and answer.error is ErrorCode.NONE


def test_snapshot_past_the_high_watermark_is_refused():
    leader, _, now = make_leader(1, log=log_with((1, 3)), epoch=1)
    leader.log.create_snapshot(SnapshotId(3, 1), b"s")
    with pytest.raises(RaftError):
        leader.snapshot_created(now, SnapshotId(3, 1))


def test_vanished_snapshot_makes_the_follower_fetch_again():
    follower = make_node(3, state=QuorumState(leader_epoch=2, leader_id=1))
    follower.tick(0)
    follower.step(0, FetchResponse(1, 2, 1, 0, 0, snapshot_id=SnapshotId(4, 2)))
    out = follower.step(0, FetchSnapshotResponse(1, 2, 1, SnapshotId(4, 2), 0, ErrorCode.SNAPSHOT_NOT_FOUND))
    assert sent(out, FetchRequest)[0].fetch_offset == 0


# -- size --------------------------------------------------------------------------------------


def test_a_million_record_log_is_served_batch_by_batch():
    log = MemoryRaftLog()
    records = tuple(b"%06d" % i for i in range(1000))
    for epoch in range(1, 1001):
        log.append(Batch(log.end_offset, 1 + epoch // 100, records))
    log.flush()
    assert log.end_offset == 1_000_000
    leader, _, now = make_leader(1, log=log, epoch=11)
    started = time.perf_counter()
    for i in range(2000):
        offset = (i * 997 % 1000) * 1000
        response = sent(
            leader.step(now, FetchRequest(2, 12, offset, log.epoch_at(offset - 1) if offset else 0)), FetchResponse
        )[0]
        assert response.batches[0].base_offset == offset and response.diverging is None
    elapsed = time.perf_counter() - started
    # Per-record work would cost seconds here; a bisect per fetch costs microseconds.
    assert elapsed < 2.0, elapsed
    response = sent(leader.step(now, FetchRequest(2, 12, 500_000, 5)), FetchResponse)[0]
    # The entry at 499_999 is of epoch 6; epoch 5 ends where epoch 6 starts.
    assert response.diverging == OffsetAndEpoch(499_000, 5)

"""controller.raft.quorum_state_store: the quorum-state file."""

from __future__ import annotations

import pytest

from controller.raft.quorum_state import QuorumState, QuorumStateError
from controller.raft.quorum_state_store import QUORUM_STATE_FILE_NAME, QuorumStateStore


def test_missing_file_is_the_initial_state(tmp_path):
    assert QuorumStateStore(tmp_path / "meta").read() == QuorumState()


def test_write_then_read_and_replace(tmp_path):
    store = QuorumStateStore(tmp_path / "meta")
    first = QuorumState(leader_epoch=3, voted_id=2, current_voters=(1, 2, 3))
    store.write(first)
    assert QuorumStateStore(tmp_path / "meta").read() == first
    second = QuorumState(leader_epoch=4, leader_id=1, voted_id=1, current_voters=(1, 2, 3))
    store.write(second)
    assert QuorumStateStore(tmp_path / "meta").read() == second
    assert sorted(p.name for p in (tmp_path / "meta").iterdir()) == [QUORUM_STATE_FILE_NAME]


def test_a_leftover_temporary_file_is_ignored(tmp_path):
    store = QuorumStateStore(tmp_path)
    state = QuorumState(leader_epoch=7, leader_id=2)
    store.write(state)
    (tmp_path / (QUORUM_STATE_FILE_NAME + ".tmp")).write_bytes(b'{"leaderEpoch": 9')  # a crash mid-write
    assert QuorumStateStore(tmp_path).read() == state


def test_a_file_written_by_kafka_reads_back(tmp_path):
    (tmp_path / QUORUM_STATE_FILE_NAME).write_text(
        '{"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert QuorumStateStore(tmp_path).read() == QuorumState(
        leader_epoch=5, leader_id=1, voted_id=None, current_voters=(1, 2, 3)
    )


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"leaderEpoch": "5"}'])
def test_a_damaged_file_stops_start_up_naming_it(tmp_path, content):
    (tmp_path / QUORUM_STATE_FILE_NAME).write_bytes(content)
    with pytest.raises(QuorumStateError, match=QUORUM_STATE_FILE_NAME):
        QuorumStateStore(tmp_path).read()

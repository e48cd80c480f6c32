"""The ``quorum-state`` file on disk: read at start-up, replaced atomically.

The Raft driver calls :meth:`QuorumStateStore.write` for every ``Output`` that
carries a new quorum state, before it sends that output's messages: a vote
must be on disk before the candidate can count it. The write goes to
``quorum-state.tmp``, is fsynced, renamed over ``quorum-state`` and the
directory fsynced, so a crash leaves either the old state or the new one,
never a mix. A leftover ``.tmp`` from a crash mid-write is ignored.
"""

from __future__ import annotations

from pathlib import Path

from controller.raft.quorum_state import QuorumState, QuorumStateError
from storage.checkpoint import write_atomically

QUORUM_STATE_FILE_NAME = "quorum-state"


class QuorumStateStore:
    def __init__(self, directory: Path):
        self.path = Path(directory) / QUORUM_STATE_FILE_NAME

    def read(self) -> QuorumState:
        """The last state written; the initial state when the file does not exist.
        A file that does not decode raises ``QuorumStateError`` (start-up must
        stop rather than vote again in an epoch it may already have voted in)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return QuorumState()
        try:
            return QuorumState.decode(data)
        except QuorumStateError as exc:
            raise QuorumStateError(f"{self.path}: {exc}") from None

    def write(self, state: QuorumState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, state.encode())

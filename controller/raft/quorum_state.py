"""The ``quorum-state`` file: who leads which epoch and whom this node voted for.

Kafka keeps it as one line of JSON in the metadata log directory, written with
an atomic replace whenever the epoch, the leader or the vote changes, e.g.::

    {"leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

``-1`` means "none" for the ids and epoch. ``appliedOffset`` is carried for
compatibility (Kafka writes 0 there). Decoding ignores keys it does not know
(older Kafka versions also wrote ``clusterId``) so a file written by Kafka
reads back. This module only encodes and decodes; `quorum_state_store` reads
the file and replaces it atomically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

DATA_VERSION = 0
NO_ID = -1


class QuorumStateError(ValueError):
    """The quorum-state content is not valid JSON of the expected shape."""


@dataclass(frozen=True, slots=True)
class QuorumState:
    leader_epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None
    applied_offset: int = 0
    current_voters: tuple[int, ...] | None = None

    def encode(self) -> bytes:
        document = {
            "leaderId": NO_ID if self.leader_id is None else self.leader_id,
            "leaderEpoch": self.leader_epoch,
            "votedId": NO_ID if self.voted_id is None else self.voted_id,
            "appliedOffset": self.applied_offset,
            "currentVoters": None
            if self.current_voters is None
            else [{"voterId": voter} for voter in self.current_voters],
            "data_version": DATA_VERSION,
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes | str) -> QuorumState:
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise QuorumStateError(f"quorum-state is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise QuorumStateError("quorum-state is not a JSON object")
        version = document.get("data_version", DATA_VERSION)
        if version not in (0, 1):
            raise QuorumStateError(f"unsupported quorum-state data_version {version!r}")

        def integer(key: str, default: int | None = None) -> int:
            value = document.get(key, default)
            # bool is an int subclass; a JSON true is not an id.
            if not isinstance(value, int) or isinstance(value, bool):
                raise QuorumStateError(f"quorum-state field {key!r} must be an integer, got {value!r}")
            return value

        voters_raw = document.get("currentVoters")
        voters: tuple[int, ...] | None = None
        if voters_raw is not None:
            if not isinstance(voters_raw, list):
                raise QuorumStateError("quorum-state field 'currentVoters' must be a list or null")
            ids = []
            for entry in voters_raw:
                voter_id = entry.get("voterId") if isinstance(entry, dict) else None
                if not isinstance(voter_id, int) or isinstance(voter_id, bool):
                    raise QuorumStateError(f"bad voter entry {entry!r}")
                ids.append(voter_id)
            voters = tuple(ids)
        leader_id = integer("leaderId", NO_ID)
        voted_id = integer("votedId", NO_ID)
        epoch = integer("leaderEpoch", NO_ID)
        return cls(
            leader_epoch=max(epoch, 0),
            leader_id=None if leader_id < 0 else leader_id,
            voted_id=None if voted_id < 0 else voted_id,
            applied_offset=integer("appliedOffset", 0),
            current_voters=voters,
        )

"""The messages Raft nodes exchange, as the core sees them (KIP-595 / KIP-996).

These are the core's own values, not wire encodings: the driver maps them to
Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot (and
their responses). Every message names its sender (``source_id``) and the
sender's epoch; responses echo what identifies the request they answer
(``fetch_offset``/``last_fetched_epoch``, snapshot id and position) so a
duplicated, delayed or reordered response can be recognised as stale without
correlation ids that would not survive a restart.

``leader_id`` is None when the sender knows no leader for its epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.raft.log import Batch, OffsetAndEpoch, SnapshotId
from protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class VoteRequest:
    source_id: int
    # The epoch the candidate runs in; for a pre-vote, the epoch it would run in
    # (its own + 1), which receivers never adopt.
    epoch: int
    last_epoch: int
    last_end_offset: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    source_id: int
    epoch: int
    leader_id: int | None
    vote_granted: bool
    pre_vote: bool = False
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    source_id: int
    epoch: int  # the sender leads this epoch


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    source_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    source_id: int
    epoch: int  # the epoch the sender led and is giving up
    # Voters ordered by how far they had replicated, best first: the first
    # stands for election at once, the others back off by their position.
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    source_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class FetchRequest:
    source_id: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    # The high watermark the fetcher knows; the leader parks a fetch that has
    # nothing new (neither records nor a newer high watermark) to tell it.
    high_watermark: int = 0
    max_wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class FetchResponse:
    source_id: int
    epoch: int
    leader_id: int | None
    fetch_offset: int
    last_fetched_epoch: int
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = 0
    log_start_offset: int = 0
    batches: tuple[Batch, ...] = ()
    # Set when the fetch position is not on the leader's log: truncate to at
    # most this (epoch, end offset) and fetch again.
    diverging: OffsetAndEpoch | None = None
    # Set when the fetch position is below the leader's log start.
    snapshot_id: SnapshotId | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    source_id: int
    epoch: int
    snapshot_id: SnapshotId
    position: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    source_id: int
    epoch: int
    leader_id: int | None
    snapshot_id: SnapshotId
    position: int
    error: ErrorCode = ErrorCode.NONE
    size: int = 0
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """A request this node sent got no answer (the destination refused the
    connection or the request timed out). Not a wire message: the IO driver
    reports it so the node can try elsewhere sooner than its own timers would."""

    destination_id: int
    request: "Request"


Request = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest
Response = VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse | FetchSnapshotResponse
Message = Request | Response | RequestFailed

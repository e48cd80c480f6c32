"""The asyncio driver of the Raft core: it gives :class:`controller.raft.node.RaftNode`
time, a disk and a network, and carries out what the core's outputs ask.

The driver contract (see ``controller/raft/node.py``) is kept literally, in
:meth:`RaftDriver._execute`: persist the quorum state, flush the log, only
then send, then hand what was committed to the state machine, then arm the
timer for the next deadline. The leader's own appends (``flush_soon``) are
flushed once per event-loop turn, so proposals that arrive together share one
fsync.

Network: every message the core sends is a request or a response of Kafka's
KRaft APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot),
mapped by :mod:`controller.raft.wire`. Requests this node sends go out on
their own connection per peer (fetches on a second one, so a fetch the leader
parks never delays a vote); the response is fed back to the core as a message
from that peer. Requests other nodes send arrive through the controller
listener (:meth:`handle_request`); the core answers them by emitting a
response addressed to the requester, possibly much later (a parked fetch), and
the driver matches it to the oldest waiting request of that kind from that
node. A failed or timed-out request is simply dropped: the core resends on its
own timers.

Time: the core runs on a monotonic clock; wall-clock milliseconds appear only
where Kafka reports timestamps (DescribeQuorum).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Protocol

from broker.clock import monotonic_ms
from broker.net.node_client import ClientSecurity, KafkaClientConnection
from controller.raft import wire
from controller.raft.log import RaftLog, SnapshotId
from controller.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RequestFailed,
    VoteRequest,
    VoteResponse,
)
from controller.raft.node import (
    Output,
    ProposeResult,
    QuorumInfo,
    RaftConfig,
    RaftNode,
    ReplicaState,
    Role,
    SnapshotInstalled,
)
from controller.raft.quorum_state_store import QuorumStateStore
from protocol.registry import APIS_BY_KEY

log = logging.getLogger(__name__)

_RESPONSE_TYPE = {
    VoteRequest: VoteResponse,
    BeginQuorumEpochRequest: BeginQuorumEpochResponse,
    EndQuorumEpochRequest: EndQuorumEpochResponse,
    FetchRequest: FetchResponse,
    FetchSnapshotRequest: FetchSnapshotResponse,
}
RAFT_API_KEYS = (1, 52, 53, 54, 59)


class RaftStateMachine(Protocol):
    """What runs on top of the log (the metadata image, the active controller)."""

    def raft_snapshot_installed(self, snapshot_id: SnapshotId) -> None:
        """The log now starts at a snapshot fetched from the leader: load it."""

    def raft_committed(self, high_watermark: int) -> None:
        """Every record below ``high_watermark`` is committed: apply what is new."""

    def raft_leadership(self, is_leader: bool, epoch: int, leader_id: int | None) -> None:
        """The node became or stopped being the leader, or learned of a new leader."""



class RaftDriver:
    def __init__(
        self,
        node_id: int,
        voter_addresses: dict[int, tuple[str, int] | None],
        raft_log: RaftLog,
        state_store: QuorumStateStore,
        config: RaftConfig,
        cluster_id: str,
        state_machine: RaftStateMachine,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
        security: ClientSecurity | None = None,
    ):
        self.node_id = node_id
        # The controller listener's security protocol (None: PLAINTEXT).
        self.security = security
        self.voter_addresses = dict(voter_addresses)
        self.log = raft_log
        self.state_store = state_store
        self.config = config
        self.cluster_id = cluster_id
        self.state_machine = state_machine
        self._clock_ms = clock_ms
        self._rng = rng or random.Random()
        self.node: RaftNode | None = None
        self._deadline_ms = 0
        self._wake = asyncio.Event()
        self._timer_task: asyncio.Task | None = None
        self._flush_scheduled = False
        self._channels: dict[tuple[int, str], KafkaClientConnection] = {}
        self._send_tasks: set[asyncio.Task] = set()
        # (source id, response type) -> waiting inbound requests, oldest first.
        self._waiting: dict[tuple[int, type], deque] = defaultdict(deque)
        # Fetch v17 cannot carry the fetcher's high watermark; remember what we
        # last told each fetcher (and from which connection) instead.
        self._hw_told: dict[int, tuple[str, int]] = {}
        self._leadership: tuple[bool, int, int | None] | None = None
        self._stopped = False

    # -- life cycle --------------------------------------------------------

    def start(self) -> None:
        """Create the core from the quorum-state file and start its timer (needs a running loop)."""
        voters = frozenset(self.voter_addresses)
        self.node = RaftNode(self.node_id, voters, self.log, self._rng, self._clock_ms(), self.config, self.state_store.read())
        self._timer_task = asyncio.get_running_loop().create_task(self._run_timer(), name="raft timer")
        self._execute(self.node.tick(self._clock_ms()))

    async def stop(self, resign_grace_ms: int = 500) -> None:
        """Resign if leading (EndQuorumEpoch lets the others elect at once), then stop."""
        if self.node is not None and self.node.role is Role.LEADER and not self._stopped:
            self._execute(self.node.resign(self._clock_ms()))
            deadline = time.monotonic() + resign_grace_ms / 1000
            while self._send_tasks and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        self._stopped = True
        if self._timer_task is not None:
            self._timer_task.cancel()
        for task in list(self._send_tasks):
            task.cancel()
        for channel in self._channels.values():
            channel.close()
        for waiting in self._waiting.values():
            for future, _, _ in waiting:
                if not future.done():
                    future.cancel()
        self._waiting.clear()

    # -- the core's outputs --------------------------------------------------

    def _execute(self, out: Output) -> None:
        if self._stopped:
            return
        node = self.node
        if out.quorum_state is not None:
            self.state_store.write(out.quorum_state)
        if out.flush:
            self.log.flush()
        for destination, message in out.messages:
            self._dispatch(destination, message)
        for op in out.log_ops:
            if isinstance(op, SnapshotInstalled):
                self.state_machine.raft_snapshot_installed(op.snapshot_id)
        leadership = (node.role is Role.LEADER, node.epoch, node.leader_id)
        if leadership != self._leadership:
            self._leadership = leadership
            self.state_machine.raft_leadership(*leadership)
        if out.committed is not None:
            self.state_machine.raft_committed(node.high_watermark)
        if out.flush_soon and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_leader_appends)
        self._arm(out.next_deadline_ms)

    def _flush_leader_appends(self) -> None:
        self._flush_scheduled = False
        if self._stopped:
            return
        self.log.flush()
        self._execute(self.node.tick(self._clock_ms()))

    def _arm(self, deadline_ms: int) -> None:
        self._deadline_ms = deadline_ms
        self._wake.set()

    async def _run_timer(self) -> None:
        while not self._stopped:
            self._wake.clear()
            delay_ms = self._deadline_ms - self._clock_ms()
            if delay_ms > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), min(delay_ms, 60_000) / 1000)
                except TimeoutError:
                    pass
                continue
            try:
                self._execute(self.node.tick(self._clock_ms()))
            except Exception:
                # A bug in the core or a failing disk: stop rather than run on a broken log.
                log.exception("raft: tick failed; the quorum driver stops")
                self._stopped = True
                raise

    # -- outbound ------------------------------------------------------------

    def _dispatch(self, destination: int, message) -> None:
        response_type = type(message)
        if response_type in _RESPONSE_TYPE.values():
            self._answer(destination, message)
            return
        task = asyncio.get_running_loop().create_task(self._send_request(destination, message))
        self._send_tasks.add(task)
        task.add_done_callback(self._send_tasks.discard)

    def _channel(self, destination: int, kind: str) -> KafkaClientConnection | None:
        channel = self._channels.get((destination, kind))
        if channel is None:
            address = self.voter_addresses.get(destination)
            if address is None:
                return None
            channel = KafkaClientConnection(
                address[0], address[1], f"raft-{self.node_id}-{kind}",
                connect_timeout_ms=self.config.request_timeout_ms, security=self.security,
            )
            self._channels[(destination, kind)] = channel
        return channel

    async def _send_request(self, destination: int, message) -> None:
        kind = "fetch" if isinstance(message, (FetchRequest, FetchSnapshotRequest)) else "control"
        channel = self._channel(destination, kind)
        if channel is None:
            return
        api_key, api_version, body = wire.request_to_wire(message, self.cluster_id)
        timeout_ms = self.config.request_timeout_ms
        if isinstance(message, FetchRequest):
            timeout_ms += message.max_wait_ms
        try:
            response_body = await channel.request(APIS_BY_KEY[api_key], api_version, body, timeout_ms=timeout_ms)
            response = wire.response_from_wire(api_key, api_version, response_body, destination, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the core resends on its own timers
            log.debug("raft: %s to %d failed: %s", type(message).__name__, destination, exc)
            if not self._stopped:
                self._execute(self.node.step(self._clock_ms(), RequestFailed(destination, message)))
            return
        if self._stopped:
            return
        self._execute(self.node.step(self._clock_ms(), response))

    # -- inbound -------------------------------------------------------------

    async def handle_request(self, api_key: int, api_version: int, body, peer: str):
        """A Raft request from another node, as the controller listener decoded it;
        returns the response body."""
        known_hw = 0
        if api_key == 1:
            replica_id = wire.fetch_replica_id(api_version, body)
            told = self._hw_told.get(replica_id)
            if told is not None and told[0] == peer:
                known_hw = told[1]
        request = wire.request_from_wire(api_key, api_version, body, self.cluster_id, known_high_watermark=known_hw)
        if not wire.is_core_request(request):
            return request  # a ready error response
        if self._stopped or self.node is None:
            raise ConnectionAbortedError("raft driver stopped")
        future = asyncio.get_running_loop().create_future()
        response_type = _RESPONSE_TYPE[type(request)]
        waiting = self._waiting[(request.source_id, response_type)]
        # A connection serves one request at a time, so a request still waiting
        # from the same node on another connection was left behind by a
        # connection that died or timed out (the node restarted). It would take
        # this request's answer (answers go first come, first served) and leave
        # the node a request behind for good: its handler is cancelled instead,
        # which closes that connection.
        for stale in [entry for entry in waiting if entry[2] != peer]:
            waiting.remove(stale)
            stale[0].cancel()
        waiting.append((future, api_version, peer))
        self._execute(self.node.step(self._clock_ms(), request))
        return await future

    def _answer(self, destination: int, message) -> None:
        waiting = self._waiting.get((destination, type(message)))
        if not waiting:
            return  # its requester gave up (connection closed)
        while waiting:
            future, api_version, peer = waiting.popleft()
            if future.done():
                continue
            api_key = wire.api_key_of(message)
            if isinstance(message, FetchResponse):
                self._hw_told[destination] = (peer, message.high_watermark)
            future.set_result(wire.response_to_wire(message, api_key, api_version))
            return

    # -- proposals and queries -------------------------------------------------

    def propose(self, records: list[bytes]) -> ProposeResult:
        """Append records as one batch if this node leads; they commit when the
        state machine sees the high watermark pass ``result.end_offset``."""
        out = self.node.propose(self._clock_ms(), records)
        result = out.proposal
        self._execute(out)
        return result

    @property
    def is_leader(self) -> bool:
        return self.node is not None and self.node.role is Role.LEADER

    @property
    def leader_id(self) -> int | None:
        return None if self.node is None else self.node.leader_id

    @property
    def high_watermark(self) -> int:
        return 0 if self.node is None else self.node.high_watermark

    def snapshot_created(self, snapshot_id: SnapshotId) -> None:
        self._execute(self.node.snapshot_created(self._clock_ms(), snapshot_id))

    def describe_quorum(self) -> QuorumInfo:
        """The core's view with its monotonic times turned into wall-clock milliseconds."""
        info = self.node.describe_quorum()
        now_ms = self._clock_ms()
        shift_ms = int(time.time() * 1000) - now_ms

        def wall(replica: ReplicaState) -> ReplicaState:
            if replica.replica_id == self.node_id and self.is_leader:
                # The leader is caught up with itself now (Kafka reports the current time).
                replica = ReplicaState(replica.replica_id, replica.end_offset, now_ms, now_ms)
            return ReplicaState(
                replica.replica_id,
                replica.end_offset,
                None if replica.last_fetch_ms is None else replica.last_fetch_ms + shift_ms,
                None if replica.last_caught_up_ms is None else replica.last_caught_up_ms + shift_ms,
            )

        return QuorumInfo(
            info.leader_id,
            info.leader_epoch,
            info.high_watermark,
            tuple(map(wall, info.voters)),
            tuple(map(wall, info.observers)),
        )

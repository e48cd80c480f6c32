"""The broker side of cluster membership: register, heartbeat, shut down in order.

After the node's metadata has caught up, it registers with the active
controller (BrokerRegistration with its advertised listeners and rack) and
then heartbeats every ``broker.heartbeat.interval.ms``, reporting how far it
has applied the metadata log and, for the balancer, its disk use and load
(broker/load_report.py). It starts fenced; the controller unfences it
once it has seen its own registration, and only then does the broker count as
started. On shutdown it asks to shut down (controlled shutdown) so that its
leaderships move before it goes.

Requests go to the active controller: in-process when this node is it,
otherwise to the leader's controller listener. A heartbeat answered
STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED (the registration was lost, or
another controller fenced and forgot us) sends the broker back to registering.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from broker.controller_node.listener import broker_heartbeat_response, broker_registration_response
from broker.load_report import LoadReporter
from controller.features import SUPPORTED_FEATURE_LEVELS
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

REGISTRATION = APIS_BY_NAME["BrokerRegistration"]
HEARTBEAT = APIS_BY_NAME["BrokerHeartbeat"]
REGISTRATION_VERSION = 4
HEARTBEAT_VERSION = 1
_REG = struct_classes(REGISTRATION.request)
_HB = struct_classes(HEARTBEAT.request)
# While fenced and waiting to be let in, heartbeat this often rather than every interval.
FENCED_HEARTBEAT_MS = 50
# A controlled shutdown gives up after this long without an answer from any
# controller: a node that reaches none cannot hand its leaderships to anyone
# (say, the last node of a cluster left running), and waiting out the whole
# grace period would only delay the stop. Its partitions then move as after a
# crash, when its session runs out, but its logs are closed cleanly.
CONTROLLED_SHUTDOWN_UNREACHABLE_MS = 1000
# Kafka's SecurityProtocol ids, as registrations carry them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class HeartbeatLease:
    """How long the controller cannot yet have fenced this broker.

    The active controller fences a broker ``broker.session.timeout.ms`` after
    the last heartbeat it *received*; a heartbeat is received after it was
    sent. So until the send time of the last heartbeat answered "not fenced"
    plus that timeout, no new leader can have been elected for this broker's
    partitions because of silence, and what this broker's metadata says it
    leads, it still leads (other moves reach a broker that is in contact).
    Past it, a broker cut off from the controllers may already be replaced
    without knowing: it must not answer as the leader of anything whose reads
    would then be stale. Pure: the clock is passed in."""

    __slots__ = ("_valid_until_s", "session_timeout_s")

    def __init__(self, session_timeout_ms: int):
        self.session_timeout_s = session_timeout_ms / 1000
        self._valid_until_s: float | None = None

    def answered(self, sent_at_s: float, fenced: bool) -> None:
        if fenced:
            self._valid_until_s = None
        else:
            self._valid_until_s = max(self._valid_until_s or sent_at_s, sent_at_s + self.session_timeout_s)

    def held(self, now_s: float) -> bool:
        return self._valid_until_s is not None and now_s < self._valid_until_s


class BrokerLifecycleManager:
    def __init__(self, broker):
        self.broker = broker
        self.config = broker.config
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.fenced = True
        self._unfenced = asyncio.Event()
        self.lease = HeartbeatLease(self.config["broker.session.timeout.ms"])
        self._task: asyncio.Task | None = None
        self._stopping = False
        # Set to send the next heartbeat at once (a log dir went offline).
        self._heartbeat_due = asyncio.Event()
        # What the balancer measures by, in every heartbeat (broker/load_report.py).
        self.load_reporter = LoadReporter(broker)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker lifecycle")

    def may_serve_as_leader(self) -> bool:
        """False while the controller may have fenced this broker without its
        knowing (see ``HeartbeatLease``). The active controller's own node
        heartbeats in-process and is never cut off from itself."""
        if self.broker.raft.is_leader:
            return True
        return self.lease.held(time.monotonic())

    async def wait_unfenced(self, timeout_ms: int) -> bool:
        try:
            await asyncio.wait_for(self._unfenced.wait(), timeout_ms / 1000)
            return True
        except asyncio.TimeoutError:
            return False

    # -- requests to the active controller --------------------------------------

    async def _call(self, api, version: int, body, local):
        if self.broker.raft.is_leader:
            return await local(self.broker, body)
        return await self.broker.controller_channel.send(api, version, body, timeout_ms=self.config.raft_config.request_timeout_ms)

    def _registration(self):
        listeners = []
        for listener in self.config.advertised_listeners:
            port = listener.port or self.broker.bound_ports.get(listener.name, listener.port)
            protocol = SECURITY_PROTOCOL_IDS[self.config.security_protocol(listener.name)]
            listeners.append(_REG.Listener(name=listener.name, host=listener.host, port=port, security_protocol=protocol))
        return _REG.BrokerRegistrationRequest(
            broker_id=self.broker.node_id,
            cluster_id=self.broker.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=listeners,
            # What this node can run at: the controller refuses it a registration
            # when a finalized level is outside, and checks updates against it.
            features=[
                _REG.Feature(name=name, min_supported_version=low, max_supported_version=high)
                for name, (low, high) in sorted(SUPPORTED_FEATURE_LEVELS.items())
            ],
            rack=self.config["broker.rack"],
            # The ids of the log dirs online now (KIP-858): a dir that failed
            # before this registration stays out until the next start.
            log_dirs=self.broker.log_dirs.online_ids(),
            previous_broker_epoch=self.broker_epoch,
        )

    def _heartbeat(self, want_shut_down: bool = False):
        return _HB.BrokerHeartbeatRequest(
            broker_id=self.broker.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.broker.controller.image.offset,
            want_fence=False,
            want_shut_down=want_shut_down,
            offline_log_dirs=self.broker.log_dirs.offline_ids(),
            balancer_load=self._balancer_load(),
        )

    def _balancer_load(self):
        try:
            return self.load_reporter.report()
        except Exception:  # a measurement failing must not stop the heartbeat itself
            log.exception("lifecycle: measuring this broker's load failed")
            return None

    # -- the loop ------------------------------------------------------------------

    async def _run(self) -> None:
        interval_s = self.config["broker.heartbeat.interval.ms"] / 1000
        retry_s = FENCED_HEARTBEAT_MS / 1000
        while not self._stopping:
            try:
                if self.broker_epoch < 0:
                    response = await self._call(REGISTRATION, REGISTRATION_VERSION, self._registration(), broker_registration_response)
                    if response is not None and response.error_code == ErrorCode.NONE:
                        self.broker_epoch = response.broker_epoch
                        log.info("lifecycle: registered with broker epoch %d", self.broker_epoch)
                        continue
                    if response is not None and response.error_code not in (ErrorCode.NOT_CONTROLLER,):
                        log.warning("lifecycle: registration refused: %s", ErrorCode(response.error_code).name)
                    await asyncio.sleep(retry_s)
                    continue
                self.load_reporter.prepare()  # the sizes, measured meanwhile for a later heartbeat
                sent_at_s = time.monotonic()
                response = await self._call(HEARTBEAT, HEARTBEAT_VERSION, self._heartbeat(), broker_heartbeat_response)
                if response is not None:
                    error = ErrorCode(response.error_code)
                    if error in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                        log.warning("lifecycle: heartbeat answered %s; registering again", error.name)
                        self.broker_epoch = -1
                        continue
                    if error == ErrorCode.NONE:
                        self.lease.answered(sent_at_s, response.is_fenced)
                        self._set_fenced(response.is_fenced)
                await self._until_next_heartbeat(retry_s if self.fenced else interval_s)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop heartbeats for good
                log.exception("lifecycle: unexpected failure")
                await asyncio.sleep(interval_s)

    def heartbeat_now(self) -> None:
        """Send the next heartbeat without waiting out the interval: a log dir
        went offline, and the controller should move its leaderships at once
        (Kafka's BrokerLifecycleManager.propagateDirectoryFailure)."""
        self._heartbeat_due.set()

    async def _until_next_heartbeat(self, wait_s: float) -> None:
        try:
            await asyncio.wait_for(self._heartbeat_due.wait(), wait_s)
        except asyncio.TimeoutError:
            pass
        self._heartbeat_due.clear()

    def _set_fenced(self, fenced: bool) -> None:
        if fenced != self.fenced:
            log.info("lifecycle: broker %s", "fenced" if fenced else "unfenced")
        self.fenced = fenced
        if fenced:
            self._unfenced.clear()
        else:
            self._unfenced.set()
            # Unfenced means caught up with our own registration: leading is safe now.
            self.broker.replicas.registration_caught_up()
            self.broker.mirrors.registration_caught_up()
            self.broker.groups.follow_leadership()
            self.broker.transactions.follow_leadership()
            self.broker.shares.follow_leadership()
            self.broker.schemas.follow_leadership()

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Ask to shut down until the controller has moved our leaderships away.
        False when time ran out, or no controller answered for
        ``CONTROLLED_SHUTDOWN_UNREACHABLE_MS``."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
        self.load_reporter.stop()
        if self.broker_epoch < 0:
            return True
        # Heartbeats may have been failing for a while: ask at once, not after their backoff.
        self.broker.controller_channel.retry_now()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        # A quorum of one is this node: it always answers, however long its commit takes.
        sole_voter = set(self.config.quorum_voters) == {self.broker.node_id}
        unreachable_s = timeout_ms / 1000 if sole_voter else CONTROLLED_SHUTDOWN_UNREACHABLE_MS / 1000
        last_answer = loop.time()
        while (now := loop.time()) < min(deadline, last_answer + unreachable_s):
            request = self._heartbeat(want_shut_down=True)
            try:
                # Bounded too: an active controller that lost its quorum holds
                # the answer until a commit that may never come.
                response = await asyncio.wait_for(
                    self._call(HEARTBEAT, HEARTBEAT_VERSION, request, broker_heartbeat_response),
                    min(deadline, last_answer + unreachable_s) - now,
                )
            except TimeoutError:
                response = None
            if response is not None and response.error_code == ErrorCode.NONE and response.should_shut_down:
                return True
            if response is not None and response.error_code != ErrorCode.NOT_CONTROLLER:
                last_answer = loop.time()
            await asyncio.sleep(FENCED_HEARTBEAT_MS / 1000)
        if loop.time() < deadline:
            log.warning(
                "lifecycle: no controller answered for %d ms; shutting down without moving leaderships "
                "(they move when this broker's session expires)",
                CONTROLLED_SHUTDOWN_UNREACHABLE_MS,
            )
        else:
            log.warning("lifecycle: the controller did not complete this broker's controlled shutdown within %d ms", timeout_ms)
        return False

    def close(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
        self.load_reporter.stop()

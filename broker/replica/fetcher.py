"""A follower's fetch loop against one leader broker (Kafka's ReplicaFetcherThread).

One task per (leader, fetcher index) (``num.replica.fetchers`` spreads a
leader's partitions over that many), one connection to the leader's
inter-broker listener, one Fetch request at a time covering every partition
this broker follows there. Each request carries, per partition, the log end
offset (the next offset wanted, which also tells the leader what this replica
holds), the leader epoch it follows and the epoch of its last batch (so the
leader can report a divergence, KIP-320). The requests use an incremental
fetch session (KIP-227) with the leader when it keeps one: after the first
full request only partitions whose fetch position or epochs changed are sent,
and the leader answers only partitions with news. Answers go to
:meth:`broker.replica.manager.ReplicaManager.follower_response`; a partition
whose answer is an error the metadata must resolve waits
``replica.fetch.backoff.ms`` before it is asked for again. Partitions this
broker's replica of is listed in ``follower.replication.throttled.replicas``
are left out of requests while ``follower.replication.throttled.rate`` is
exceeded and the replica is not caught up to the leader's high watermark
(replication throttles, KIP-73).
"""

from __future__ import annotations

import asyncio
import logging

from broker.clock import monotonic_ms
from broker.net.node_client import KafkaClientConnection
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.fetch_session import FetchSessionBuilder
from replication.throttle import FOLLOWER_THROTTLED_RATE, FOLLOWER_THROTTLED_REPLICAS, follower_holds_back, is_throttled

log = logging.getLogger(__name__)

FETCH = APIS_BY_NAME["Fetch"]
# v15+ names the follower in ReplicaState (with its broker epoch); v12+ carries
# diverging epochs; v13+ topic ids. Our leaders serve up to 17.
FETCH_VERSION = 17
# How long a fetcher whose every partition is throttled waits before it looks again.
THROTTLED_WAIT_MS = 100
_F = struct_classes(FETCH.request)
_SESSION_ERRORS = {
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
}


class ReplicaFetcher:
    def __init__(self, manager, leader_id: int, index: int):
        self.manager = manager
        self.leader_id = leader_id
        self.index = index
        config = manager.broker.config
        self.max_wait_ms = config["replica.fetch.wait.max.ms"]
        self.min_bytes = config["replica.fetch.min.bytes"]
        self.response_max_bytes = config["replica.fetch.response.max.bytes"]
        self.partition_max_bytes = config["replica.fetch.max.bytes"]
        self.backoff_ms = config["replica.fetch.backoff.ms"]
        self.socket_timeout_ms = config["replica.socket.timeout.ms"]
        self.partitions: dict = {}  # key -> None, in the order they were added
        self._backoff_until: dict = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._connection: KafkaClientConnection | None = None
        self._address: tuple[str, int] | None = None
        self.session = FetchSessionBuilder()

    # ----------------------------------------------------------------- partitions

    def add(self, key) -> None:
        self.partitions[key] = None
        self._backoff_until.pop(key, None)
        self._wakeup.set()

    def remove(self, key) -> None:
        self.partitions.pop(key, None)
        self._backoff_until.pop(key, None)

    # ----------------------------------------------------------------- task

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica fetcher {self.leader_id}-{self.index}"
            )

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # stop() cancels this task and waits for it to end. On Python 3.11 an
        # asyncio.wait_for whose awaitable finishes in the same loop turn as the
        # cancellation returns that result (or raises that error) instead: the
        # CancelledError is lost and a loop that only ends on it goes on for
        # good, its stop() with it (a node then never exits on SIGTERM). Our own
        # waits use asyncio.timeout, which does not do that; the flag also ends
        # the loop should any other await swallow the cancellation.
        while not self._stopping:
            try:
                waited = await self._fetch_once(loop)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours must not end replication for good
                log.exception("replica fetcher for leader %d failed", self.leader_id)
                waited = False
            if waited is False and not self._stopping:
                await asyncio.sleep(self.backoff_ms / 1000)

    def _leader_address(self) -> tuple[str, int] | None:
        registration = self.manager.broker.image.brokers.get(self.leader_id)
        name = self.manager.broker.config.inter_broker_listener_name
        if registration is None or name is None:
            return None
        endpoint = registration.endpoint(name)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def _connection_to(self, address: tuple[str, int]) -> KafkaClientConnection:
        if self._connection is None or self._address != address:
            if self._connection is not None:
                self._connection.close()
            # The inter-broker listener's security protocol (TLS, SASL) as well as its address.
            self._connection = self.manager.broker.node_connection(
                address[0], address[1], f"replica-fetcher-{self.manager.node_id}", to="broker", connect_timeout_ms=self.socket_timeout_ms
            )
            self._address = address
        return self._connection

    async def _fetch_once(self, loop) -> bool | None:
        """One fetch round. False: back off before the next; None/True: go on."""
        now = loop.time()
        ready = [key for key in self.partitions if self._backoff_until.get(key, 0) <= now]
        if not ready:
            self._wakeup.clear()
            pending = [t for t in self._backoff_until.values() if t > now]
            timeout_s = (min(pending) - now) if pending else None
            try:
                async with asyncio.timeout(timeout_s):  # not wait_for: see _run
                    await self._wakeup.wait()
            except TimeoutError:
                pass
            return None
        address = self._leader_address()
        if address is None:
            return False
        request, sent, throttled = self._build_request(ready)
        if not sent:
            if throttled:
                await asyncio.sleep(THROTTLED_WAIT_MS / 1000)
                return None
            return False
        connection = self._connection_to(address)
        try:
            response = await connection.request(
                FETCH, FETCH_VERSION, request, timeout_ms=self.max_wait_ms + self.socket_timeout_ms
            )
        except (TimeoutError, asyncio.TimeoutError, OSError, ConnectionError) as exc:
            self.session.handle_error()
            log.info("fetch from leader %d at %s:%d failed: %s", self.leader_id, address[0], address[1], exc)
            if self._connection is connection:
                connection.close()
                self._connection = None
            return False
        if not self.session.handle_response(ErrorCode(response.error_code), response.session_id):
            if response.error_code != ErrorCode.NONE:
                log.info("fetch from leader %d: %s", self.leader_id, ErrorCode(response.error_code).name)
            # A lost session is not the leader's failure: ask again at once, in full.
            return None if response.error_code in _SESSION_ERRORS else False
        names = self.manager.broker.image.topic_names_by_id
        backoff_at = loop.time() + self.backoff_ms / 1000
        now_ms = monotonic_ms()  # quota windows: a duration
        for topic_response in response.responses:
            name = names.get(topic_response.topic_id)
            for partition_data in topic_response.partitions:
                key = (name, partition_data.partition_index)
                state = sent.get(key)
                if state is None:
                    continue
                if key in throttled and partition_data.records:
                    self.manager.follower_quota.record(len(partition_data.records), now_ms)
                if not self.manager.follower_response(key, state, partition_data):
                    self._backoff_until[key] = backoff_at
        return True

    def _build_request(self, keys):
        """The next Fetch for ``keys`` (those not backing off) and the follower
        state of every partition it covers, by (name, partition)."""
        manager = self.manager
        image = manager.broker.image
        registration = image.brokers.get(manager.node_id)
        wanted: dict = {}
        sent = {}
        throttled = set()
        now_ms = monotonic_ms()  # quota windows: a duration
        over_quota = None
        for key in keys:
            found = manager.fetch_state(key)
            if found is None:
                continue
            state, plog = found
            if state.leader_id != self.leader_id:
                continue
            topic = image.topics.get(key[0])
            listed = topic.configs.get(FOLLOWER_THROTTLED_REPLICAS, "") if topic is not None else ""
            if is_throttled(listed, key[1], manager.node_id):
                throttled.add(key)  # its bytes count against the rate
                if follower_holds_back(listed, key[1], manager.node_id, state.caught_up):
                    if over_quota is None:
                        over_quota = manager.follower_quota.exceeded(manager.throttle_rate(FOLLOWER_THROTTLED_RATE), now_ms)
                    if over_quota:
                        continue  # asked for again once the rate is back under the limit
            sent[key] = state
            last_fetched_epoch = plog.leader_epochs[-1][0] if plog.leader_epochs else -1
            wanted[(state.topic_id, key[1])] = (state.leader_epoch, plog.log_end_offset, last_fetched_epoch, plog.log_start_offset)
        plan = self.session.build(wanted)
        topics: dict = {}
        for (topic_id, partition), (leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset) in plan.to_send:
            topics.setdefault(topic_id, []).append(
                _F.FetchPartition(
                    partition=partition,
                    current_leader_epoch=leader_epoch,
                    fetch_offset=fetch_offset,
                    last_fetched_epoch=last_fetched_epoch,
                    log_start_offset=log_start_offset,
                    partition_max_bytes=self.partition_max_bytes,
                )
            )
        forgotten: dict = {}
        for topic_id, partition in plan.forgotten:
            forgotten.setdefault(topic_id, []).append(partition)
        request = _F.FetchRequest(
            replica_state=_F.ReplicaState(replica_id=manager.node_id, replica_epoch=registration.epoch if registration else -1),
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.response_max_bytes,
            isolation_level=0,
            session_id=plan.session_id,
            session_epoch=plan.session_epoch,
            topics=[_F.FetchTopic(topic_id=topic_id, partitions=parts) for topic_id, parts in topics.items()],
            forgotten_topics_data=[_F.ForgottenTopic(topic_id=topic_id, partitions=parts) for topic_id, parts in forgotten.items()],
            rack_id="",
        )
        return request, sent, throttled

"""The v2 consumer instances of the REST proxy: real members of their consumer groups.

An instance (``POST /consumers/{group}``) is a Kafka consumer kept by the proxy
for an HTTP client: it subscribes (topics or a pattern) or is assigned
partitions, holds a position per partition, and reads, commits and seeks on
request (broker/http/rest/consumer_routes.py is the HTTP side). Its requests go
through broker/http/rest/consumer_client.py, as the principal that created it, so
the broker's authorization applies as to any client: READ on the group to join
it and commit, READ on the topics to fetch them.

Group membership is Kafka's classic consumer protocol, as Kafka's consumer and
``pybroker console-consumer`` speak it: JoinGroup (``protocol_type`` consumer,
the ``range`` assignor, whose plan the elected leader computes with
console-consumer's ``range_assign``), SyncGroup, then a Heartbeat every
``HEARTBEAT_INTERVAL_S`` from the instance's own task. A rebalance (another
instance or any Kafka consumer joining or leaving) is answered by rejoining at
the next heartbeat, so instances of one group share its partitions. Before a
rejoin an instance with ``auto.commit.enable`` commits its positions (Kafka's
consumer does the same), so a partition that moves goes on where it stopped;
after a join every assigned partition starts from the group's committed offset,
else from ``auto.offset.reset``. The committed offsets are the group's own
(OffsetCommit to its coordinator), seen by every Kafka tool.

With ``auto.commit.enable`` (Kafka's default, true) the positions of what was
returned are also committed every ``AUTO_COMMIT_INTERVAL_S`` and when the
instance is deleted or expires.

Expiry: an instance not used for ``rest.consumer.instance.timeout.ms``
(Confluent's ``consumer.instance.timeout.ms``, 300000 by default) is closed:
it leaves its group and its connections are closed. At most ``INSTANCES_MAX``
instances exist at a time.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass

from broker.http.rest.consumer_client import ConsumerKafka
from broker.http.rest.errors import RestError, kafka_error
from broker.http.rest.kafka import REQUESTS
from broker.tools.console import decode_versioned, encode_versioned, range_assign
from broker.tools.groups import decode_assignment
from protocol.errors import ErrorCode
from protocol.registry import DATA_MESSAGES
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

FORMATS = ("binary", "json")
SCHEMA_FORMATS = ("avro", "jsonschema", "protobuf")
OFFSET_RESETS = {"earliest": "earliest", "latest": "latest", "none": "none", "smallest": "earliest", "largest": "latest"}
ASSIGNOR = "range"
SESSION_TIMEOUT_MS = 45_000  # Kafka's session.timeout.ms default
REBALANCE_TIMEOUT_MS = 60_000
HEARTBEAT_INTERVAL_S = 3.0  # Kafka's heartbeat.interval.ms default
AUTO_COMMIT_INTERVAL_S = 5.0  # Kafka's auto.commit.interval.ms default
JOIN_ATTEMPTS_MAX = 10
INSTANCES_MAX = 1000
CLOSE_TIMEOUT_S = 5.0
FETCH_MIN_BYTES_DEFAULT = 1
REQUEST_TIMEOUT_MS_DEFAULT = 1000  # Confluent's consumer.request.timeout.ms default
REQUEST_TIMEOUT_MS_MAX = 30_000
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
REJOIN_ERRORS = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})

_SUBSCRIPTION = DATA_MESSAGES["ConsumerProtocolSubscription"]
_ASSIGNMENT = DATA_MESSAGES["ConsumerProtocolAssignment"]
_ASSIGNED = struct_classes(_ASSIGNMENT.struct)

TopicPartition = tuple[str, int]


def not_found() -> RestError:
    return RestError(404, 40403, "Consumer instance not found.")


def invalid_config(message: str) -> RestError:
    return RestError(422, 42204, f"Invalid consumer configuration: {message}")


def illegal_state(message: str) -> RestError:
    return RestError(409, 40903, f"Illegal state: {message}")


@dataclass(frozen=True)
class InstanceSettings:
    """What ``POST /consumers/{group}`` may set (Confluent's names)."""

    name: str
    format: str = "binary"
    auto_offset_reset: str = "latest"  # Kafka's default
    auto_commit: bool = True
    fetch_min_bytes: int = FETCH_MIN_BYTES_DEFAULT
    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT

    @classmethod
    def parse(cls, body) -> InstanceSettings:
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise invalid_config("the request body must be a JSON object.")
        known = {"name", "format", "auto.offset.reset", "auto.commit.enable", "fetch.min.bytes", "consumer.request.timeout.ms"}
        unknown = sorted(set(body) - known)
        if unknown:
            raise invalid_config(f"unknown field(s) {', '.join(unknown)}; accepted: {', '.join(sorted(known))}.")
        name = body.get("name")
        if name is None:
            name = f"rest-consumer-{uuid.uuid4()}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._\-]{1,249}", name):
            raise invalid_config("'name' must be 1 to 249 letters, digits, '.', '_' or '-'.")
        fmt = body.get("format", "binary")
        if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
            if isinstance(fmt, str) and fmt.lower() in SCHEMA_FORMATS:
                raise invalid_config(f"format {fmt} needs a schema registry, which this proxy does not have.")
            raise invalid_config(f"'format' must be one of {', '.join(FORMATS)}.")
        reset = body.get("auto.offset.reset", "latest")
        if not isinstance(reset, str) or reset.lower() not in OFFSET_RESETS:
            raise invalid_config("'auto.offset.reset' must be earliest, latest or none.")
        auto_commit = body.get("auto.commit.enable", True)
        if isinstance(auto_commit, str) and auto_commit.lower() in ("true", "false"):
            auto_commit = auto_commit.lower() == "true"
        if not isinstance(auto_commit, bool):
            raise invalid_config("'auto.commit.enable' must be true or false.")
        return cls(
            name=name, format=fmt.lower(), auto_offset_reset=OFFSET_RESETS[reset.lower()], auto_commit=auto_commit,
            fetch_min_bytes=_int_setting(body, "fetch.min.bytes", FETCH_MIN_BYTES_DEFAULT, 0, 2**31 - 1),
            request_timeout_ms=_int_setting(body, "consumer.request.timeout.ms", REQUEST_TIMEOUT_MS_DEFAULT, 0, REQUEST_TIMEOUT_MS_MAX),
        )


def _int_setting(body: dict, key: str, default: int, low: int, high: int) -> int:
    raw = body.get(key, default)
    if isinstance(raw, str) and re.fullmatch(r"-?\d{1,12}", raw.strip()):
        raw = int(raw)
    if type(raw) is not int or not low <= raw <= high:
        raise invalid_config(f"'{key}' must be an integer from {low} to {high}.")
    return raw


class ConsumerInstance:
    """One consumer instance; every operation on it holds ``lock`` (heartbeats do not)."""

    def __init__(self, registry: ConsumerInstances, group: str, settings: InstanceSettings, principal: str, host: str):
        self.registry = registry
        self.group = group
        self.settings = settings
        self.principal = principal
        self.kafka = ConsumerKafka(registry.broker, principal, host)
        self.lock = asyncio.Lock()
        self.topics: list[str] = []  # the subscription by names
        self.pattern: re.Pattern | None = None  # or by pattern
        self.manual: list[TopicPartition] | None = None  # or assigned by hand (no group membership)
        self.joined_topics: list[str] = []  # what the current membership subscribed
        self.member_id = ""
        self.generation_id = -1
        self.rejoin = False
        self.assigned: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int | None] = {}  # None: from the committed offset or the reset policy
        self.committed_positions: dict[TopicPartition, int] = {}  # what auto-commit last committed
        self.last_used_s = time.monotonic()
        self.closed = False
        self.assignment_changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._maintain(), name=f"rest-consumer-{self.group}-{self.settings.name}")

    def touch(self) -> None:
        self.last_used_s = time.monotonic()

    # ------------------------------------------------------------ subscription and assignment

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        if self.manual is not None:
            raise illegal_state("Subscription to topics, partitions and pattern are mutually exclusive.")
        if pattern is not None:
            try:
                self.pattern = re.compile(pattern)
            except re.error as exc:
                raise RestError(422, 42204, f"'topic_pattern' is not a valid regular expression: {exc}") from None
            self.topics = []
        else:
            self.topics = sorted(set(topics or []))
            self.pattern = None
        self.rejoin = True

    async def unsubscribe(self) -> None:
        await self._commit_if_auto()
        await self._leave()
        self.topics, self.pattern, self.manual = [], None, None
        self._set_assignment([])

    def assign(self, partitions: list[TopicPartition]) -> None:
        if self.subscribed:
            raise illegal_state("Subscription to topics, partitions and pattern are mutually exclusive.")
        self.manual = sorted(set(partitions))
        self._set_assignment(self.manual)

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        self.assigned = sorted(partitions)
        self.positions = {tp: None for tp in self.assigned}
        self.committed_positions = {}
        self.assignment_changed.set()

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        for tp in offsets:
            if tp not in self.positions:
                raise illegal_state(f"No current assignment for partition {tp[0]}-{tp[1]}.")
        self.positions.update(offsets)

    async def seek_to(self, partitions: list[TopicPartition], timestamp: int) -> None:
        for tp in partitions:
            if tp not in self.positions:
                raise illegal_state(f"No current assignment for partition {tp[0]}-{tp[1]}.")
        self.positions.update(await self._list_offsets(partitions, timestamp))

    # ------------------------------------------------------------ the group

    async def ensure_member(self) -> None:
        """Join (or rejoin) the group when the subscription asks for it; then start every
        partition without a position from the committed offsets or the reset policy."""
        if self.subscribed and (self.rejoin or not self.member_id):
            await self._commit_if_auto()
            await self._join()
        await self._initialize_positions()

    async def _subscribed_topics(self) -> list[str]:
        if self.pattern is None:
            return list(self.topics)
        metadata = await self.kafka.call("Metadata", topics=None, allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False)
        return sorted(t.name for t in metadata.topics
                      if t.error_code == ErrorCode.NONE and not t.is_internal and self.pattern.fullmatch(t.name))

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        if not topics:
            return {}
        M = REQUESTS["Metadata"]
        metadata = await self.kafka.call(
            "Metadata", topics=[M.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=t) for t in topics],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        )
        return {t.name: len(t.partitions) for t in metadata.topics if t.error_code == ErrorCode.NONE}

    async def _join(self) -> None:
        J = REQUESTS["JoinGroup"]
        topics = await self._subscribed_topics()
        subscription = encode_versioned(_SUBSCRIPTION, 0, topics=topics, user_data=None)
        for _ in range(JOIN_ATTEMPTS_MAX):  # MEMBER_ID_REQUIRED and rebalances take a few rounds
            joined = await self.kafka.group_call(
                self.group, "JoinGroup", wait_ms=REBALANCE_TIMEOUT_MS, group_id=self.group,
                session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer", reason=None,
                protocols=[J.JoinGroupRequestProtocol(name=ASSIGNOR, metadata=subscription)],
            )
            if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if joined.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if joined.error_code != ErrorCode.NONE:
                raise kafka_error(joined.error_code, None, self.group)
            self.member_id, self.generation_id = joined.member_id, joined.generation_id
            assignments = []
            if joined.leader == joined.member_id:
                assignments = await self._plan(joined.members)
            synced = await self.kafka.group_call(
                self.group, "SyncGroup", group_id=self.group, generation_id=self.generation_id, member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer", protocol_name=ASSIGNOR, assignments=assignments,
            )
            if synced.error_code in REJOIN_ERRORS:
                if synced.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            if synced.error_code != ErrorCode.NONE:
                raise kafka_error(synced.error_code, None, self.group)
            self.joined_topics = topics
            self.rejoin = False
            self._set_assignment(decode_assignment(synced.assignment))
            log.info("rest: consumer %s of group %s joined generation %d with %d partitions",
                     self.settings.name, self.group, self.generation_id, len(self.assigned))
            return
        raise RestError(500, 50003, f"Could not join group {self.group} after {JOIN_ATTEMPTS_MAX} attempts (rebalancing).")

    async def _plan(self, members) -> list:
        """The leader's assignment of the group (Kafka's range assignor)."""
        S = REQUESTS["SyncGroup"]
        subscriptions = {}
        for m in members:
            sub = decode_versioned(_SUBSCRIPTION, m.metadata)
            subscriptions[m.member_id] = list(sub.topics) if sub is not None else []
        counts = await self._partition_counts(sorted({t for ts in subscriptions.values() for t in ts}))
        plan = range_assign(subscriptions, counts)
        return [
            S.SyncGroupRequestAssignment(member_id=m, assignment=encode_versioned(
                _ASSIGNMENT, 0,
                assigned_partitions=[_ASSIGNED.TopicPartition(topic=t, partitions=[p for tt, p in tps if tt == t])
                                     for t in sorted({tt for tt, _ in tps})],
                user_data=None))
            for m, tps in plan.items()
        ]

    async def _heartbeat(self) -> None:
        if not self.member_id or self.rejoin:
            return
        generation_id, member_id = self.generation_id, self.member_id
        answer = await self.kafka.group_call(
            self.group, "Heartbeat", group_id=self.group, generation_id=generation_id, member_id=member_id,
            group_instance_id=None,
        )
        if (generation_id, member_id) != (self.generation_id, self.member_id):
            return  # a join finished meanwhile (a read rejoined): this answer is about the old generation
        if answer.error_code in REJOIN_ERRORS:
            if answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.rejoin = True
        elif answer.error_code != ErrorCode.NONE:
            log.info("rest: heartbeat of consumer %s of group %s: %s", self.settings.name, self.group,
                     ErrorCode(answer.error_code).name)
        elif self.pattern is not None and await self._subscribed_topics() != self.joined_topics:
            self.rejoin = True  # a topic matching the pattern came or went

    async def _leave(self) -> None:
        if not self.member_id:
            return
        L = REQUESTS["LeaveGroup"]
        member_id, self.member_id, self.generation_id = self.member_id, "", -1
        try:
            await self.kafka.group_call(self.group, "LeaveGroup", group_id=self.group, member_id=member_id,
                                        members=[L.MemberIdentity(member_id=member_id, group_instance_id=None, reason=None)])
        except RestError as exc:
            log.info("rest: consumer %s could not leave group %s: %s", self.settings.name, self.group, exc.message)

    # ------------------------------------------------------------ offsets

    async def _list_offsets(self, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        answers = await self.kafka.list_offsets(partitions, timestamp)
        out = {}
        for tp in partitions:
            p = answers.get(tp)
            if p is None:
                raise RestError(500, 50003, f"The leader of {tp[0]}-{tp[1]} could not be asked for its offsets.")
            if p.error_code != ErrorCode.NONE:
                raise kafka_error(p.error_code, None, tp[0])
            out[tp] = p.offset
        return out

    async def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, str | None]]:
        """The group's committed offset (and metadata) of each partition that has one."""
        if not partitions:
            return {}
        F = REQUESTS["OffsetFetch"]
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        answer = await self.kafka.group_call(
            self.group, "OffsetFetch", group_id=self.group, require_stable=True, groups=None,
            topics=[F.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in sorted(by_topic.items())],
        )
        if answer.error_code != ErrorCode.NONE:
            raise kafka_error(answer.error_code, None, self.group)
        out = {}
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    raise kafka_error(p.error_code, None, t.name)
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = (p.committed_offset, p.metadata)
        return out

    async def _initialize_positions(self) -> None:
        missing = [tp for tp, position in self.positions.items() if position is None]
        if not missing:
            return
        committed = await self.committed(missing)
        for tp, (offset, _) in committed.items():
            self.positions[tp] = offset
            self.committed_positions[tp] = offset
        reset = [tp for tp in missing if tp not in committed]
        if not reset:
            return
        if self.settings.auto_offset_reset == "none":
            raise RestError(500, 50002, f"No committed offset for partition {reset[0][0]}-{reset[0][1]} and auto.offset.reset is none.")
        timestamp = EARLIEST_TIMESTAMP if self.settings.auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        self.positions.update(await self._list_offsets(reset, timestamp))

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str | None]]) -> None:
        """OffsetCommit of ``offsets`` (partition -> next offset to read, metadata) to the group."""
        if not offsets:
            return
        C = REQUESTS["OffsetCommit"]
        by_topic: dict[str, list] = {}
        for (t, p), (offset, metadata) in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(C.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset, committed_leader_epoch=-1, commit_timestamp=-1,
                committed_metadata=metadata or ""))
        answer = await self.kafka.group_call(
            self.group, "OffsetCommit", read_topics=sorted(by_topic), group_id=self.group,
            generation_id_or_member_epoch=self.generation_id if self.member_id else -1, member_id=self.member_id,
            group_instance_id=None, retention_time_ms=-1,
            topics=[C.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code in REJOIN_ERRORS:
                    self.rejoin = self.subscribed
                    raise RestError(409, 40903, f"Commit failed: the group is rebalancing ({ErrorCode(p.error_code).name}); "
                                                "read again and commit after the rejoin.")
                if p.error_code != ErrorCode.NONE:
                    raise kafka_error(p.error_code, None, t.name)

    def current_positions(self) -> dict[TopicPartition, tuple[int, str | None]]:
        return {tp: (position, None) for tp, position in self.positions.items() if position is not None}

    async def _commit_if_auto(self) -> None:
        if not self.settings.auto_commit:
            return
        due = {tp: v for tp, v in self.current_positions().items() if self.committed_positions.get(tp) != v[0]}
        if not due:
            return
        try:
            await self.commit(due)
        except RestError as exc:
            log.info("rest: auto-commit of consumer %s of group %s: %s", self.settings.name, self.group, exc.message)
            return
        self.committed_positions.update({tp: v[0] for tp, v in due.items()})

    # ------------------------------------------------------------ life

    async def _maintain(self) -> None:
        """Heartbeats, rejoins on a rebalance, auto-commits, and expiry."""
        timeout_s = self.registry.instance_timeout_ms / 1000
        last_commit_s = time.monotonic()
        try:
            while not self.closed:
                idle_s = time.monotonic() - self.last_used_s
                if idle_s >= timeout_s and not self.lock.locked():
                    log.info("rest: consumer %s of group %s expired after %.0f s unused", self.settings.name, self.group, idle_s)
                    await self.registry.remove(self, expired=True)
                    return
                try:
                    await self._heartbeat()
                    if self.rejoin and self.subscribed and not self.lock.locked():
                        async with self.lock:
                            await self.ensure_member()
                    if time.monotonic() - last_commit_s >= AUTO_COMMIT_INTERVAL_S and not self.lock.locked():
                        last_commit_s = time.monotonic()
                        async with self.lock:
                            await self._commit_if_auto()
                except RestError as exc:
                    log.info("rest: consumer %s of group %s: %s", self.settings.name, self.group, exc.message)
                await asyncio.sleep(min(HEARTBEAT_INTERVAL_S, max(timeout_s - idle_s, 0.05)))
        except asyncio.CancelledError:
            pass

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, close the connections."""
        if self.closed:
            return
        self.closed = True
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()  # no heartbeat or rejoin from now on
        try:
            await self._commit_if_auto()
            await self._leave()
        finally:
            self.kafka.close()


class ConsumerInstances:
    """The proxy's consumer instances by (group, name)."""

    def __init__(self, broker, instance_timeout_ms: int):
        self.broker = broker
        self.instance_timeout_ms = instance_timeout_ms
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}

    def create(self, group: str, settings: InstanceSettings, principal: str, host: str) -> ConsumerInstance:
        key = (group, settings.name)
        if key in self._instances:
            raise RestError(409, 40902, "Consumer with specified consumer ID already exists in the specified consumer group.")
        if len(self._instances) >= INSTANCES_MAX:
            raise RestError(429, 42901, f"Too many consumer instances ({INSTANCES_MAX}): delete unused ones first.")
        instance = ConsumerInstance(self, group, settings, principal, host)
        self._instances[key] = instance
        instance.start()
        return instance

    def get(self, group: str, name: str, principal: str) -> ConsumerInstance:
        """The instance, used now; 40403 when there is none or another principal made it
        (an instance reads with its creator's rights, so it is not lent to others)."""
        instance = self._instances.get((group, name))
        if instance is None or instance.closed or instance.principal != principal:
            raise not_found()
        instance.touch()
        return instance

    async def remove(self, instance: ConsumerInstance, *, expired: bool = False) -> None:
        key = (instance.group, instance.settings.name)
        if self._instances.get(key) is instance:
            del self._instances[key]
        await instance.close()

    async def close(self) -> None:
        """At the proxy's stop: every instance commits (with auto-commit) and leaves its group,
        for at most ``CLOSE_TIMEOUT_S`` (a coordinator that does not answer does not hold the stop)."""
        instances = list(self._instances.values())
        self._instances.clear()
        closing = asyncio.gather(*(i.close() for i in instances), return_exceptions=True)
        try:
            await asyncio.wait_for(closing, CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.info("rest: %d consumer instances did not leave their groups within %.0f s", len(instances), CLOSE_TIMEOUT_S)
            for i in instances:
                i.kafka.close()

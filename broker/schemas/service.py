"""The schema registry's shell: ``_schemas`` kept, written by its leader, read by every broker.

- **Storage**: one compacted partition, created on the first write as an
  internal topic through ``CoordinatorShell`` (replication factor
  ``schema.registry.topic.replication.factor``, 1 in the single-node profile).
- **The single writer**: the broker leading ``_schemas-0`` plans each write on
  its state (broker/schemas/state.py: ids are the context's highest seen plus one,
  versions the subject's highest plus one) under one lock, appends the records
  acks=all and answers once they are replicated. At load (a new leader epoch)
  its state is replayed from the log start to the log end by the shell, so it
  knows every id the old leader gave out (an acknowledged write is on every
  in-sync replica, the new leader included).
- **Reads on every broker**: before answering, a broker catches its state up
  to the leader's high watermark of that moment: the leader reads its own log,
  any other broker fetches from the leader over the inter-broker listener (as
  a consumer, from the offset it has applied up to). A write acknowledged by
  any broker is below that high watermark, so a read anywhere after it sees it.
- **Writes on other brokers** raise :class:`NotLeader` with the leader's id;
  the HTTP API forwards the request to the leader's registry endpoint, whose
  address it learns from the leader's ``schema.registry.listener`` config
  (DescribeConfigs of that broker): the request, its answer and its errors
  are then exactly the leader's, as Confluent's registry forwards to its
  primary.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.coordinators.shell import CoordinatorShell, InternalTopic
from broker.net.node_client import ConnectionFailed
from protocol.schema_formats.records import RecordUnreadable
from broker.schemas.state import RegistryError, RegistryState
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import build_batch, decode_batch_records, iter_batches
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

SCHEMAS_TOPIC = "_schemas"
PARTITION = 0
FETCH = APIS_BY_NAME["Fetch"]
FETCH_VERSION = 12
DESCRIBE_CONFIGS = APIS_BY_NAME["DescribeConfigs"]
DESCRIBE_CONFIGS_VERSION = 4
_F = struct_classes(FETCH.request)
_DC = struct_classes(DESCRIBE_CONFIGS.request)
RESOURCE_BROKER = 4
# One read of the log (local or fetched) asks for this much.
READ_BYTES = 1 << 20
# Bounds of one request's wait: for a fetch or DescribeConfigs answer, for a new
# topic's leader to load, for an acks=all append.
REQUEST_TIMEOUT_MS = 10_000
LEADER_WAIT_S = 15.0
LEADER_POLL_S = 0.05
WRITE_TIMEOUT_MS = 30_000
# Between appends refused for too few in-sync replicas.
RETRY_BACKOFF_S = 0.1
# Reads of a catch-up, each making progress; the log is small, this is a guard.
CATCH_UP_READS_MAX = 10_000
# Catch-ups started over because the state was replaced meanwhile (a leadership change here).
CATCH_UP_ATTEMPTS = 3


class NotLeader(Exception):
    """This broker does not lead ``_schemas``; ``leader`` does (-1: none yet)."""

    def __init__(self, leader: int):
        super().__init__(f"the schemas topic is led by broker {leader}")
        self.leader = leader


def store_error(message: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend data store: {message}")


def timeout_error(message: str) -> RegistryError:
    return RegistryError(500, 50002, f"Operation timed out: {message}")


class SchemaRegistryService:
    def __init__(self, broker):
        self._broker = broker
        config = broker.config
        topic = InternalTopic(
            SCHEMAS_TOPIC,
            num_partitions=1,
            replication_factor=config["schema.registry.topic.replication.factor"],
            replication_factor_config="schema.registry.topic.replication.factor",
            configs={"cleanup.policy": "compact"},
        )
        self.shell = CoordinatorShell(broker, topic, self, log)
        self.state = RegistryState()
        # The next offset of _schemas-0 the state has not applied.
        self.position = 0
        self._loading: RegistryState | None = None
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._connection = None  # (leader id, address, connection)
        self._stopped = False

    # ----------------------------------------------------------------- the shell's owner

    def follow_leadership(self) -> None:
        self.shell.follow_leadership()

    def replay_record(self, partition: int, producer_id: int, key, value) -> None:
        if self._loading is None:
            self._loading = RegistryState()
        try:
            self._loading.apply(bytes(key), None if value is None else bytes(value))
        except RecordUnreadable as exc:
            raise ProtocolError(str(exc)) from None

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        pass  # the registry writes no transactions

    def partition_loaded(self, partition: int, epoch: int, records: int) -> None:
        plog = self._broker.partition_log(SCHEMAS_TOPIC, partition)
        self.state = self._loading or RegistryState()
        self._loading = None
        self.position = plog.log_end_offset
        log.info("schema registry: leading %s-%d at epoch %d: %d records, %d subjects, highest id %d",
                 SCHEMAS_TOPIC, partition, epoch, records, len(self.state.subjects), self.state.max_id)  # fmt: skip

    def partition_unloaded(self, partition: int, epoch: int) -> None:
        # What this broker applied past the new leader's high watermark may be
        # truncated: read everything again, from the new leader.
        self._reset()

    def _reset(self) -> None:
        self.state = RegistryState()
        self.position = 0

    # ----------------------------------------------------------------- reads

    async def read_state(self) -> RegistryState:
        """The state with every record below the leader's high watermark of now applied."""
        async with self._read_lock:
            await self._catch_up()
        return self.state

    async def _catch_up(self) -> None:
        for _ in range(CATCH_UP_ATTEMPTS):
            if await self._catch_up_once():
                return
        raise store_error(f"{SCHEMAS_TOPIC} changed leaders while being read: try again")

    async def _catch_up_once(self) -> bool:
        if not self.shell.topic_exists():
            return True
        error, leader = self.shell.leader_of(PARTITION)
        if error != ErrorCode.NONE:
            raise store_error(f"{SCHEMAS_TOPIC} has no leader yet")
        if leader == self._broker.node_id:
            plog = self._broker.partition_log(SCHEMAS_TOPIC, PARTITION)
            if plog is None:
                raise store_error(f"{SCHEMAS_TOPIC} is not open here yet")
            # Loaded: its state follows its own appends (to the log end); else up to what is acknowledged.
            upper = plog.log_end_offset if PARTITION in self.shell.loaded else plog.high_watermark
            self._read_local(plog, upper)
            return True
        return await self._fetch_from(leader)

    def _read_local(self, plog, upper: int) -> None:
        if self.position < plog.log_start_offset:
            self._reset()
            self.position = plog.log_start_offset
        for _ in range(CATCH_UP_READS_MAX):
            if self.position >= upper:
                return
            data = plog.read(self.position, READ_BYTES, upper_offset=upper)
            if not data or self._apply_batches(data, upper) == 0:
                return

    async def _fetch_from(self, leader: int) -> bool:
        """Fetch and apply up to the leader's high watermark; False when the state
        was replaced meanwhile."""
        target = None
        for _ in range(CATCH_UP_READS_MAX):
            state = self.state
            answer = await self._fetch(leader, self.position)
            if self.state is not state:
                # Loaded or reset meanwhile (a leadership change here): the answer
                # was for the old state's position; the catch-up starts over.
                return False
            if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                # Behind the log start or past a truncated end: read it all again.
                self._reset()
                self.position = max(0, answer.log_start_offset)
                continue
            if answer.error_code != ErrorCode.NONE:
                raise store_error(f"broker {leader} answered a fetch of {SCHEMAS_TOPIC} with {ErrorCode(answer.error_code).name}")
            if target is None:
                target = answer.high_watermark
            data = answer.records
            if data:
                self._apply_batches(bytes(data), answer.high_watermark)
            if self.position >= target:
                return True
            if not data:
                return True  # the leader has nothing more (its high watermark moved back: leadership changing)
        raise store_error(f"{SCHEMAS_TOPIC} could not be read up to offset {target}")

    def _apply_batches(self, data: bytes, upper: int) -> int:
        """Apply the records of ``data`` from the position up to ``upper``; how many batches."""
        applied = 0
        for position, size, header in iter_batches(data):
            last = header.base_offset + header.last_offset_delta
            if last < self.position:
                continue
            if header.base_offset >= upper:
                break
            applied += 1
            if not header.is_control:
                try:
                    _, records = decode_batch_records(data[position : position + size])
                except ProtocolError as exc:  # one bad batch must not stop the registry
                    log.warning("skipping unreadable %s batch at offset %d: %s", SCHEMAS_TOPIC, header.base_offset, exc)
                    records = []
                for record in records:
                    if record.offset < self.position or record.key is None:
                        continue
                    try:
                        self.state.apply(bytes(record.key), None if record.value is None else bytes(record.value))
                    except RecordUnreadable as exc:
                        log.warning("skipping unreadable %s record at offset %d: %s", SCHEMAS_TOPIC, record.offset, exc)
            self.position = last + 1
        return applied

    # ----------------------------------------------------------------- requests to the leader

    def _leader_connection(self, leader: int):
        registration = self._broker.image.brokers.get(leader)
        name = self._broker.config.inter_broker_listener_name
        endpoint = registration.endpoint(name) if registration is not None and name else None
        if endpoint is None:
            raise store_error(f"broker {leader} has no inter-broker endpoint")
        address = (endpoint.host, endpoint.port)
        if self._connection is not None and self._connection[:2] == (leader, address):
            return self._connection[2]
        self._close_connection()
        connection = self._broker.node_connection(address[0], address[1], "schema-registry", to="broker")
        self._connection = (leader, address, connection)
        return connection

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection[2].close()
            self._connection = None

    async def _request(self, leader: int, api, version: int, body):
        connection = self._leader_connection(leader)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_MS / 1000):
                return await connection.request(api, version, body, timeout_ms=REQUEST_TIMEOUT_MS)
        except (TimeoutError, OSError, ConnectionFailed) as exc:
            self._close_connection()
            raise timeout_error(f"broker {leader} did not answer {api.name}: {exc or type(exc).__name__}") from None

    async def _fetch(self, leader: int, offset: int):
        request = _F.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=READ_BYTES, isolation_level=0,
            session_id=0, session_epoch=-1,
            topics=[_F.FetchTopic(topic=SCHEMAS_TOPIC, partitions=[_F.FetchPartition(
                partition=PARTITION, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=READ_BYTES,
            )])],
            forgotten_topics_data=[], rack_id="",
        )  # fmt: skip
        response = await self._request(leader, FETCH, FETCH_VERSION, request)
        if response.error_code != ErrorCode.NONE:
            raise store_error(f"broker {leader} answered Fetch with {ErrorCode(response.error_code).name}")
        for topic in response.responses:
            for data in topic.partitions:
                if data.partition_index == PARTITION:
                    return data
        raise store_error(f"broker {leader} left {SCHEMAS_TOPIC} out of its Fetch answer")

    async def registry_listener_of(self, leader: int) -> str | None:
        """The leader's ``schema.registry.listener`` (http://HOST:PORT as configured), asked of it."""
        request = _DC.DescribeConfigsRequest(
            resources=[_DC.DescribeConfigsResource(resource_type=RESOURCE_BROKER, resource_name=str(leader), configuration_keys=["schema.registry.listener"])],
            include_synonyms=False, include_documentation=False,
        )  # fmt: skip
        response = await self._request(leader, DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, request)
        for result in response.results:
            for entry in result.configs or []:
                if entry.name == "schema.registry.listener":
                    return entry.value
        return None

    # ----------------------------------------------------------------- writes

    async def leader(self) -> int:
        """This broker's id once it leads a loaded ``_schemas`` (creating the topic on
        first need); NotLeader when another broker leads it."""
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            error = await self.shell.ensure_topic()
            if error == ErrorCode.NONE:
                error, leader = self.shell.leader_of(PARTITION)
                if error == ErrorCode.NONE and leader != self._broker.node_id:
                    raise NotLeader(leader)
                if error == ErrorCode.NONE and PARTITION in self.shell.loaded:
                    return leader
            if time.monotonic() >= deadline or self._stopped:
                raise store_error(f"{SCHEMAS_TOPIC} has no leader here yet (is {self.shell.topic.replication_factor_config} more than the brokers?)")
            await asyncio.sleep(LEADER_POLL_S)

    async def write(self, plan):
        """Run ``plan(state) -> (answer, records)`` as the leader on the caught-up
        state, append its records acks=all, and give the answer once they are
        replicated. NotLeader on another broker; RegistryError as the plan raises."""
        await self.leader()
        async with self._write_lock:
            epoch = self.shell.loaded.get(PARTITION)
            if epoch is None:
                raise NotLeader(-1)
            async with self._read_lock:
                await self._catch_up()
            answer, records = plan(self.state)
            if not records:
                return answer
            append = await self._append(records, epoch)
            if append.error != ErrorCode.NONE:
                if append.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    raise NotLeader(-1)
                raise store_error(f"append refused: {append.error.name} {append.message or ''}".strip())
            async with self._read_lock:
                await self._catch_up()
            outcome = append.acks_error
            if append.acks_future is not None:
                outcome = await append.acks_future
            if outcome != ErrorCode.NONE:
                self._reset()  # the records may be truncated: read the log again
                if outcome == ErrorCode.REQUEST_TIMED_OUT:
                    raise timeout_error("the write was not replicated in time")
                raise store_error(f"the write was not replicated: {ErrorCode(outcome).name}")
            return answer

    async def _append(self, records, epoch: int):
        """Append as the leader; while the in-sync replicas are too few (a new
        topic's followers not caught up yet, a replica down for a moment) nothing
        is written, and the append is tried again until LEADER_WAIT_S."""
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            now_ms = int(time.time() * 1000)
            batch = build_batch([(key, value, [], now_ms) for key, value in records])
            append = self.shell.write(PARTITION, batch, leader_epoch=epoch, timeout_ms=WRITE_TIMEOUT_MS)
            if append.error != ErrorCode.NOT_ENOUGH_REPLICAS or time.monotonic() >= deadline or self._stopped:
                return append
            await asyncio.sleep(RETRY_BACKOFF_S)

    def stop(self) -> None:
        self._stopped = True
        self._close_connection()

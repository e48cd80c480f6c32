"""``pybroker console-producer`` and ``console-consumer``, as kafka-console-producer.sh and
kafka-console-consumer.sh behave.

Producer: one record per stdin line. ``--property parse.key=true`` splits
``key<key.separator>value`` (separator default TAB); ``parse.headers=true``
takes ``h1:v1,h2:v2<headers.delimiter>`` first (``headers.separator`` ``,``,
``headers.key.separator`` ``:``, ``headers.delimiter`` TAB); ``null.marker``
makes a key, value or header value null. Records are batched: lines are
gathered until the input pauses for ``linger.ms`` (default 1000, Kafka's
console default), or a batch reaches ``batch.size`` bytes; each flush sends
one v2 batch per partition (protocol/records.py's encoder) in one Produce
request per leader. ``--sync`` sends each line on its own and waits for it.
Keyed records go to murmur2(key) % partitions (Kafka's default partitioner);
others stick to one partition per flush. ``--producer-property acks=all|1|0``
(default all), ``--compression-codec none|gzip|snappy|lz4|zstd``.

Consumer: fetches from each partition's leader and writes one value a line.
``--partition P`` with ``--offset N|earliest|latest``, ``--from-beginning``
(else it starts at the end), ``--max-messages N``, ``--timeout-ms MS`` (stop
after MS without a record), ``--isolation-level read_committed`` (records of
aborted transactions are dropped using the fetch response's aborted
transaction list, as Kafka's consumer does). ``--property print.timestamp=true
print.partition=true print.offset=true print.headers=true print.key=true
key.separator=...`` prefix each value in Kafka's order (``CreateTime:ms``,
``Partition:p``, ``Offset:o``, headers ``k:v,k2:v2`` or ``NO_HEADERS``, key),
each followed by the separator. With ``--group G`` it joins the group as a
real consumer member (JoinGroup/SyncGroup with the range assignor when it
leads, Heartbeat, OffsetCommit of what it printed, LeaveGroup on exit),
starting from the group's committed offsets. At the end it prints
``Processed a total of N messages`` on stderr, as Kafka's does.
"""

from __future__ import annotations

import os
import random
import select
import struct
import time
from dataclasses import dataclass, field

from broker.tools.client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NotFound, Refused, ToolClient, ToolError
from broker.tools.offsets import group_by_leader, list_offsets
from broker.tools.topics import ClusterMetadata, error_text, fetch_metadata
from protocol.codec import decode_struct, encode_struct
from protocol.compression import CompressionType
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import build_batch, decode_batch_records, iter_batches
from protocol.registry import APIS_BY_NAME, DATA_MESSAGES
from protocol.schema import struct_classes

_PRODUCE = struct_classes(APIS_BY_NAME["Produce"].request)
_FETCH = struct_classes(APIS_BY_NAME["Fetch"].request)
_COMMIT = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
_OFFSET_FETCH = struct_classes(APIS_BY_NAME["OffsetFetch"].request)
_JOIN = struct_classes(APIS_BY_NAME["JoinGroup"].request)
_SYNC = struct_classes(APIS_BY_NAME["SyncGroup"].request)
_LEAVE = struct_classes(APIS_BY_NAME["LeaveGroup"].request)
_SUBSCRIPTION = DATA_MESSAGES["ConsumerProtocolSubscription"]
_ASSIGNMENT = DATA_MESSAGES["ConsumerProtocolAssignment"]
_ASSIGNED = struct_classes(_ASSIGNMENT.struct)
PRODUCE_VERSION = 9
FETCH_VERSION = 12
JOIN_VERSION, SYNC_VERSION, HEARTBEAT_VERSION, LEAVE_VERSION = 5, 3, 3, 3
OFFSET_COMMIT_VERSION, OFFSET_FETCH_VERSION = 7, 7
FIND_COORDINATOR_VERSION = 3
PRODUCE_TIMEOUT_MS = 30_000
FETCH_WAIT_MS = 500
FETCH_BYTES_MAX = 50 << 20
PARTITION_FETCH_BYTES_MAX = 1 << 20
LINGER_MS_DEFAULT = 1000
BATCH_BYTES_DEFAULT = 16384
STDIN_CHUNK_BYTES = 65536
PRODUCE_ATTEMPTS_MAX = 5
RETRY_BACKOFF_S = 0.2
RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT,
}
CODECS = {"none": CompressionType.NONE, "gzip": CompressionType.GZIP, "snappy": CompressionType.SNAPPY,
          "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}
ASSIGNOR = "range"
SESSION_TIMEOUT_MS_DEFAULT = 45_000
REBALANCE_TIMEOUT_MS = 300_000
HEARTBEAT_INTERVAL_S = 3.0
JOIN_ATTEMPTS_MAX = 10


def parse_properties(pairs: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"{flag} expects key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _unescape(text: str) -> str:
    # Kafka's tools take \t and \n in separators literally typed on the command line.
    return text.encode().decode("unicode_escape") if "\\" in text else text


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as its default partitioner hashes keys."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, count: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % count


# ------------------------------------------------------------------ producer


@dataclass
class LineFormat:
    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_marker: str | None = None

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineFormat:
        return cls(
            parse_key=_true(props.get("parse.key")),
            key_separator=_unescape(props.get("key.separator", "\t")),
            parse_headers=_true(props.get("parse.headers")),
            headers_delimiter=_unescape(props.get("headers.delimiter", "\t")),
            headers_separator=_unescape(props.get("headers.separator", ",")),
            headers_key_separator=_unescape(props.get("headers.key.separator", ":")),
            null_marker=props.get("null.marker"),
        )

    def _bytes(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode()

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            text, sep, rest = rest.partition(self.headers_delimiter)
            if not sep:
                raise ToolError(f"line {number}: no headers delimiter {self.headers_delimiter!r} (parse.headers=true)")
            if text and text != self.null_marker:
                for item in text.split(self.headers_separator):
                    name, has_value, value = item.partition(self.headers_key_separator)
                    headers.append((name, self._bytes(value) if has_value else None))
        key = None
        if self.parse_key:
            key_text, sep, rest = rest.partition(self.key_separator)
            if not sep:
                raise ToolError(f"line {number}: no key separator {self.key_separator!r} (parse.key=true)")
            key = self._bytes(key_text)
        return key, self._bytes(rest), headers


class ConsoleProducer(ToolClient):

    def __init__(self, bootstrap: str, topic: str, *, acks: int, codec: int, timeout_s: float, settings=None):
        super().__init__(bootstrap, timeout_s, settings)
        self.topic = topic
        self.acks = acks
        self.codec = codec
        self.sent = 0
        self._metadata: ClusterMetadata | None = None
        self._sticky: int | None = None

    def _partition_count(self, refresh: bool = False) -> int:
        for _ in range(PRODUCE_ATTEMPTS_MAX):  # a topic being auto-created has no leaders at first
            if self._metadata is None or refresh:
                self._metadata = fetch_metadata(self, [self.topic], allow_auto_create=True)
            info = self._metadata.topics.get(self.topic)
            if info is not None and info.partitions and all(p.leader >= 0 for p in info.partitions):
                return len(info.partitions)
            refresh = True
            time.sleep(RETRY_BACKOFF_S)
        raise NotFound(f"topic {self.topic!r} does not exist (or has no leaders) and was not auto-created")

    def send(self, records: list[tuple[bytes | None, bytes | None, list]]) -> None:
        """One batch per partition, one Produce request per leader; retried on leader changes."""
        if not records:
            return
        count = self._partition_count()
        self._sticky = random.randrange(count)  # Kafka's sticky partitioner: keyless records stay together
        now_ms = int(time.time() * 1000)
        by_partition: dict[int, list] = {}
        for key, value, headers in records:
            partition = partition_for_key(key, count) if key is not None else self._sticky
            by_partition.setdefault(partition, []).append((key, value, headers, now_ms))
        pending = {p: build_batch(rs, codec=self.codec) for p, rs in by_partition.items()}
        sizes = {p: len(rs) for p, rs in by_partition.items()}
        for attempt in range(PRODUCE_ATTEMPTS_MAX):
            failed: dict[int, str] = {}
            for leader, tps in group_by_leader(self._metadata, [(self.topic, p) for p in sorted(pending)]).items():
                connection = self.broker_connection(leader, self._metadata.brokers)
                response = connection.call(
                    "Produce", PRODUCE_VERSION, expect_response=self.acks != 0, transactional_id=None, acks=self.acks,
                    timeout_ms=PRODUCE_TIMEOUT_MS,
                    topic_data=[_PRODUCE.TopicProduceData(name=self.topic, partition_data=[
                        _PRODUCE.PartitionProduceData(index=p, records=pending[p]) for _, p in tps
                    ])],
                )
                if response is None:
                    continue
                for topic in response.responses:
                    for p in topic.partition_responses:
                        if p.error_code != ErrorCode.NONE:
                            failed[p.index] = (p.error_code, p.error_message)
            done = [p for p in pending if p not in failed]
            self.sent += sum(sizes[p] for p in done)
            for p in done:
                del pending[p]
            if not pending:
                return
            fatal = {p: e for p, e in failed.items() if e[0] not in RETRIABLE}
            if fatal or attempt == PRODUCE_ATTEMPTS_MAX - 1:
                p, (code, message) = min((fatal or failed).items())
                raise Refused(f"producing to {self.topic}-{p} failed: {error_text(code, message)}")
            time.sleep(RETRY_BACKOFF_S)
            self._partition_count(refresh=True)


def produce_lines(producer: ConsoleProducer, fd: int, line_format: LineFormat, *, sync: bool,
                  linger_ms: int, batch_bytes: int) -> None:
    """Read ``fd`` to its end; send records as the module docstring says."""
    buffered = b""
    pending: list = []
    pending_bytes = 0
    number = 0
    while True:  # ends at end of input; each pass reads or flushes
        if pending and not sync:
            ready, _, _ = select.select([fd], [], [], linger_ms / 1000)
            if not ready:
                producer.send(pending)
                pending, pending_bytes = [], 0
                continue
        chunk = os.read(fd, STDIN_CHUNK_BYTES)
        if chunk:
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
        else:
            lines, buffered = ([buffered] if buffered else []), b""
        for raw in lines:
            number += 1
            line = raw.decode("utf-8", "surrogateescape").rstrip("\r")
            record = line_format.parse(line, number)
            if sync:
                producer.send([record])
                continue
            pending.append(record)
            pending_bytes += len(raw)
            if pending_bytes >= batch_bytes:
                producer.send(pending)
                pending, pending_bytes = [], 0
        if not chunk:
            producer.send(pending)
            return


# ------------------------------------------------------------------ consumer


@dataclass
class OutputFormat:
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> OutputFormat:
        return cls(
            print_timestamp=_true(props.get("print.timestamp")),
            print_partition=_true(props.get("print.partition")),
            print_offset=_true(props.get("print.offset")),
            print_headers=_true(props.get("print.headers")),
            print_key=_true(props.get("print.key")),
            print_value=props.get("print.value", "true").strip().lower() != "false",
            key_separator=_unescape(props.get("key.separator", "\t")).encode(),
            line_separator=_unescape(props.get("line.separator", "\n")).encode(),
            headers_separator=_unescape(props.get("headers.separator", ",")).encode(),
            headers_key_separator=_unescape(props.get("headers.key.separator", ":")).encode(),
            null_literal=props.get("null.literal", "null").encode(),
        )

    def render(self, partition: int, record, timestamp_type: int) -> bytes:
        out = bytearray()
        sep = self.key_separator
        if self.print_timestamp:
            kind = "LogAppendTime" if timestamp_type == 1 else "CreateTime"
            out += (f"{kind}:{record.timestamp_ms}" if record.timestamp_ms >= 0 else "NO_TIMESTAMP").encode() + sep
        if self.print_partition:
            out += f"Partition:{partition}".encode() + sep
        if self.print_offset:
            out += f"Offset:{record.offset}".encode() + sep
        if self.print_headers:
            if record.headers:
                out += self.headers_separator.join(
                    name.encode() + self.headers_key_separator + (self.null_literal if v is None else bytes(v))
                    for name, v in record.headers
                )
            else:
                out += b"NO_HEADERS"
            out += sep
        if self.print_key:
            out += (self.null_literal if record.key is None else bytes(record.key)) + sep
        if self.print_value:
            out += self.null_literal if record.value is None else bytes(record.value)
        return bytes(out) + self.line_separator


@dataclass
class GroupMember:
    group_id: str
    coordinator: object = None
    member_id: str = ""
    generation_id: int = -1
    assignment: list[tuple[str, int]] = field(default_factory=list)
    last_heartbeat_s: float = 0.0
    session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT


def encode_versioned(message, version: int, **fields) -> bytes:
    """A consumer-protocol data message (subscription, assignment): its int16 version, then the struct."""
    out = bytearray(struct.pack(">h", version))
    encode_struct(message.struct, version, False, message.struct.cls(**fields), out)
    return bytes(out)


def decode_versioned(message, data: bytes):
    """The struct of a consumer-protocol data message (a newer version read as ours); None when unreadable."""
    if data is None or len(data) < 2:
        return None
    version = min(struct.unpack_from(">h", data)[0], message.versions.high)
    try:
        value, _ = decode_struct(message.struct, version, False, data, 2, exact=False)
    except ProtocolError:
        return None
    return value


def range_assign(members: dict[str, list[str]], counts: dict[str, int]) -> dict[str, list[tuple[str, int]]]:
    """Kafka's RangeAssignor: per topic, partitions in ranges over the subscribed members in id order."""
    result: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    for topic in sorted({t for ts in members.values() for t in ts}):
        subscribed = sorted(m for m, ts in members.items() if topic in ts)
        count = counts.get(topic, 0)
        per, extra = divmod(count, len(subscribed))
        start = 0
        for index, member in enumerate(subscribed):
            size = per + (1 if index < extra else 0)
            result[member] += [(topic, p) for p in range(start, start + size)]
            start += size
    return result


class ConsoleConsumer(ToolClient):

    def __init__(self, bootstrap: str, topic: str, *, isolation_level: int, reset_earliest: bool, timeout_s: float,
                 settings=None):
        super().__init__(bootstrap, timeout_s, settings)
        self.topic = topic
        # Where a partition without a committed offset, or out of range, starts (auto.offset.reset).
        self._reset_earliest = reset_earliest
        self.isolation_level = isolation_level
        self.positions: dict[tuple[str, int], int] = {}
        self.metadata: ClusterMetadata | None = None
        self.group: GroupMember | None = None

    def refresh(self) -> ClusterMetadata:
        self.metadata = fetch_metadata(self, [self.topic])
        if self.topic not in self.metadata.topics:
            raise NotFound(f"topic {self.topic!r} does not exist")
        return self.metadata

    def start_at(self, partitions: list[int], start: str) -> None:
        """``start``: earliest, latest or an offset number."""
        tps = [(self.topic, p) for p in partitions]
        if start in ("earliest", "latest"):
            spec = EARLIEST_TIMESTAMP if start == "earliest" else LATEST_TIMESTAMP
            self.positions = dict(list_offsets(self, self.metadata, tps, spec))
        else:
            self.positions = {tp: int(start) for tp in tps}

    # ------------------------------------------------------------ fetching

    def fetch(self) -> list[tuple[int, object, int]]:
        """One round of Fetch requests; (partition, record, timestamp type) in offset order per partition."""
        out = []
        for leader, tps in group_by_leader(self.metadata, sorted(self.positions)).items():
            response = self.broker_connection(leader, self.metadata.brokers).call(
                "Fetch", FETCH_VERSION, cluster_id=None, replica_id=-1, max_wait_ms=FETCH_WAIT_MS, min_bytes=1,
                max_bytes=FETCH_BYTES_MAX, isolation_level=self.isolation_level, session_id=0, session_epoch=-1,
                topics=[_FETCH.FetchTopic(topic=self.topic, partitions=[
                    _FETCH.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=self.positions[(t, p)],
                                          last_fetched_epoch=-1, log_start_offset=-1,
                                          partition_max_bytes=PARTITION_FETCH_BYTES_MAX)
                    for t, p in tps
                ])],
                forgotten_topics_data=[], rack_id="",
            )
            if response.error_code != ErrorCode.NONE:
                raise Refused(f"Fetch: {error_text(response.error_code)}")
            for topic in response.responses:
                for p in topic.partitions:
                    out += self._records_of(p)
        return out

    def _records_of(self, data) -> list:
        tp = (self.topic, data.partition_index)
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.start_at([data.partition_index], "earliest" if self._reset_earliest else "latest")
            return []
        if data.error_code in RETRIABLE:
            self.refresh()
            return []
        if data.error_code != ErrorCode.NONE:
            raise Refused(f"Fetch of {tp[0]}-{tp[1]}: {error_text(data.error_code)}")
        buf = data.records or b""
        aborted = sorted((a.first_offset, a.producer_id) for a in (data.aborted_transactions or []))
        aborting: set[int] = set()
        out = []
        position = self.positions[tp]
        for pos, _, header in iter_batches(buf, allow_truncated_tail=True):
            while aborted and aborted[0][0] <= header.base_offset + header.last_offset_delta:
                aborting.add(aborted.pop(0)[1])
            next_offset = header.base_offset + header.last_offset_delta + 1
            if header.attributes & 0x20:  # control batch: a transaction marker ends that producer's abort
                aborting.discard(header.producer_id)
            elif not (header.attributes & 0x10 and header.producer_id in aborting):
                _, records = decode_batch_records(buf, pos)
                timestamp_type = (header.attributes >> 3) & 1
                out += [(data.partition_index, r, timestamp_type) for r in records if r.offset >= position]
            self.positions[tp] = max(self.positions[tp], next_offset)
        return out

    # ------------------------------------------------------------ group membership

    def join(self, group_id: str, session_timeout_ms: int) -> None:
        """Join (or rejoin) the group and start from its committed offsets."""
        if self.group is None:
            self.group = GroupMember(group_id, session_timeout_ms=session_timeout_ms)
            answer = self.bootstrap_connection().call("FindCoordinator", FIND_COORDINATOR_VERSION, key=group_id, key_type=0)
            if answer.error_code != ErrorCode.NONE:
                raise Refused(f"no coordinator for group {group_id!r}: {error_text(answer.error_code)}")
            self.group.coordinator = self._connection((answer.host, answer.port))
        group = self.group
        subscription = encode_versioned(_SUBSCRIPTION, 0, topics=[self.topic], user_data=None)
        for _ in range(JOIN_ATTEMPTS_MAX):  # MEMBER_ID_REQUIRED and rebalances make a few rounds
            joined = group.coordinator.call(
                "JoinGroup", JOIN_VERSION, group_id=group_id, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, member_id=group.member_id, group_instance_id=None,
                protocol_type="consumer", protocols=[_JOIN.JoinGroupRequestProtocol(name=ASSIGNOR, metadata=subscription)],
            )
            if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                group.member_id = joined.member_id
                continue
            if joined.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                group.member_id = ""
                continue
            if joined.error_code != ErrorCode.NONE:
                raise Refused(f"JoinGroup {group_id!r}: {error_text(joined.error_code)}")
            group.member_id, group.generation_id = joined.member_id, joined.generation_id
            assignments = []
            if joined.leader == joined.member_id:
                members = {}
                for m in joined.members:
                    sub = decode_versioned(_SUBSCRIPTION, m.metadata)
                    members[m.member_id] = list(sub.topics) if sub is not None else []
                counts = {n: len(t.partitions) for n, t in fetch_metadata(self, sorted({t for ts in members.values() for t in ts})).topics.items()}
                assignments = [
                    _SYNC.SyncGroupRequestAssignment(member_id=m, assignment=encode_versioned(
                        _ASSIGNMENT, 0,
                        assigned_partitions=[_ASSIGNED.TopicPartition(topic=t, partitions=[p for tt, p in tps if tt == t])
                                             for t in sorted({tt for tt, _ in tps})],
                        user_data=None))
                    for m, tps in range_assign(members, counts).items()
                ]
            synced = group.coordinator.call(
                "SyncGroup", SYNC_VERSION, group_id=group_id, generation_id=group.generation_id, member_id=group.member_id,
                group_instance_id=None, assignments=assignments,
            )
            if synced.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if synced.error_code != ErrorCode.NONE:
                raise Refused(f"SyncGroup {group_id!r}: {error_text(synced.error_code)}")
            decoded = decode_versioned(_ASSIGNMENT, synced.assignment)
            group.assignment = sorted((t.topic, p) for t in (decoded.assigned_partitions if decoded else []) for p in t.partitions)
            group.last_heartbeat_s = time.monotonic()
            self._start_from_committed()
            return
        raise Refused(f"could not join group {group_id!r} after {JOIN_ATTEMPTS_MAX} attempts")

    def _start_from_committed(self) -> None:
        group = self.group
        self.refresh()
        fetched = group.coordinator.call(
            "OffsetFetch", OFFSET_FETCH_VERSION, group_id=group.group_id, require_stable=True,
            topics=[_OFFSET_FETCH.OffsetFetchRequestTopic(name=self.topic, partition_indexes=[p for _, p in group.assignment])],
        )
        committed = {
            (t.name, p.partition_index): p.committed_offset
            for t in fetched.topics for p in t.partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
        }
        missing = [tp for tp in group.assignment if tp not in committed]
        spec = EARLIEST_TIMESTAMP if self._reset_earliest else LATEST_TIMESTAMP
        reset = list_offsets(self, self.metadata, missing, spec) if missing else {}
        self.positions = {tp: committed.get(tp, reset.get(tp)) for tp in group.assignment}

    def heartbeat_due(self) -> bool:
        """Send a heartbeat when due; True when the group is rebalancing and this member must rejoin."""
        group = self.group
        if group is None or time.monotonic() - group.last_heartbeat_s < HEARTBEAT_INTERVAL_S:
            return False
        group.last_heartbeat_s = time.monotonic()
        answer = group.coordinator.call(
            "Heartbeat", HEARTBEAT_VERSION, group_id=group.group_id, generation_id=group.generation_id,
            member_id=group.member_id, group_instance_id=None,
        )
        if answer.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
            return True
        if answer.error_code != ErrorCode.NONE:
            raise Refused(f"Heartbeat: {error_text(answer.error_code)}")
        return False

    def commit(self, printed: dict[tuple[str, int], int]) -> None:
        """Commit the position after each partition's last printed record."""
        group = self.group
        if group is None or not printed:
            return
        answer = group.coordinator.call(
            "OffsetCommit", OFFSET_COMMIT_VERSION, group_id=group.group_id,
            generation_id_or_member_epoch=group.generation_id, member_id=group.member_id, group_instance_id=None,
            topics=[_COMMIT.OffsetCommitRequestTopic(name=self.topic, partitions=[
                _COMMIT.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                                     committed_metadata="")
                for (_, p), o in sorted(printed.items())
            ])],
        )
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code not in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                    raise Refused(f"OffsetCommit of {t.name}-{p.partition_index}: {error_text(p.error_code)}")

    def leave(self) -> None:
        group = self.group
        if group is None or not group.member_id:
            return
        try:
            group.coordinator.call(
                "LeaveGroup", LEAVE_VERSION, group_id=group.group_id,
                members=[_LEAVE.MemberIdentity(member_id=group.member_id, group_instance_id=None)],
            )
        except ToolError:
            pass  # leaving is a courtesy: the session timeout removes the member anyway


def consume(consumer: ConsoleConsumer, out, output: OutputFormat, *, max_messages: int | None,
            timeout_ms: int | None, group_args: tuple | None) -> int:
    """Fetch and print until max_messages, or timeout_ms without a record, or Ctrl-C; the count printed."""
    total = 0
    last_record_s = time.monotonic()
    try:
        while max_messages is None or total < max_messages:  # each pass is one bounded fetch round
            if group_args is not None and consumer.heartbeat_due():
                consumer.join(*group_args)
            printed: dict[tuple[str, int], int] = {}
            for partition, record, timestamp_type in consumer.fetch() if consumer.positions else []:
                if max_messages is not None and total >= max_messages:
                    break
                out.write(output.render(partition, record, timestamp_type))
                printed[(consumer.topic, partition)] = record.offset + 1
                total += 1
                last_record_s = time.monotonic()
            out.flush()
            consumer.commit(printed)
            if not consumer.positions:
                time.sleep(FETCH_WAIT_MS / 1000)  # a member with nothing assigned waits for a rebalance
            if timeout_ms is not None and (time.monotonic() - last_record_s) * 1000 >= timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    return total

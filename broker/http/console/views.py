"""What the console's pages show: this broker's state in-process, other brokers' by request.

Every function runs on the event loop and reads the metadata image, the
replica manager, the logs and the group coordinator as they are at that
moment; only requests to other nodes are awaited. The message browser reads at most ``BROWSE_BYTES_MAX`` of
a partition's log (up to its high watermark: what a consumer may read) and a
search scans at most ``SEARCH_RECORDS_MAX`` records, so no page costs more
than a bounded amount of file reading however large the log.

What lives on other brokers is asked for through a
:class:`broker.http.cluster_reader.ClusterReader` (these functions are then
coroutines): a partition whose log is not here is browsed with ListOffsets and
Fetch to its leader, under the same bounds; groups coordinated elsewhere are
listed, described and their committed offsets read from their coordinators
(ListGroups, DescribeGroups, OffsetFetch), high watermarks of partitions led
elsewhere come from ListOffsets to their leaders (one request per leader), and
sizes of partitions with no log here from DescribeLogDirs to their leaders. A
node that does not answer within the reader's timeout is named as unavailable
on the page; nothing waits longer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from broker.http.cluster_reader import EARLIEST, LATEST, NodeUnavailable
from broker.tools.groups import decode_assignment
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import decode_records

BROWSE_BYTES_MAX = 1 << 20
BROWSE_RECORDS_MAX = 200
SEARCH_RECORDS_MAX = 10_000
SEARCH_BYTES_MAX = 16 << 20
MAX_GROUPS = 1000  # groups a page or a lag sample reads, this broker's first
SHOWN_BYTES_MAX = 4096  # of one key/value/header on the page; the rest is cut and said so
DECODINGS = ("text", "json", "hex")


def overview(broker) -> dict:
    image = broker.image
    node = broker.raft.node
    under, offline, partitions = [], [], 0
    for name in sorted(image.topics):
        for pid, p in sorted(image.topics[name].partitions.items()):
            partitions += 1
            if p.leader < 0:
                offline.append((name, pid, p.replicas, p.isr))
            elif len(p.isr) < len(p.replicas):
                under.append((name, pid, p.leader, p.replicas, p.isr))
    brokers = [
        {
            "id": b.broker_id,
            "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in b.endpoints],
            "rack": b.rack or "-",
            "state": "fenced" if b.fenced else ("controlled shutdown" if b.in_controlled_shutdown else "active"),
        }
        for _, b in sorted(image.brokers.items())
    ]
    # The quorum's voters (what the Raft layer knows, registered or not), with the
    # endpoints of those that registered in the metadata log.
    addresses = broker.raft.voter_addresses
    voter_ids = set(node.voters) if node is not None else set(addresses)
    controllers = []
    for cid in sorted(voter_ids | set(image.controllers)):
        registration = image.controllers.get(cid)
        if registration is not None:
            endpoints = [f"{e.name}://{e.host}:{e.port}" for e in registration.endpoints]
        else:
            address = addresses.get(cid)
            endpoints = [f"{address[0]}:{address[1]}"] if address else []
        controllers.append({"id": cid, "endpoints": endpoints or ["(this node)" if cid == broker.node_id else "-"], "voter": cid in voter_ids})
    return {
        "cluster_id": broker.cluster_id,
        "node_id": broker.node_id,
        "roles": ", ".join(sorted(broker.config.roles)),
        "quorum_leader": node.leader_id if node is not None else None,
        "quorum_epoch": node.epoch if node is not None else None,
        "metadata_offset": image.offset,
        "brokers": brokers,
        "controllers": controllers,
        "topic_count": len(image.topics),
        "partition_count": partitions,
        "under_replicated": under,
        "offline": offline,
    }


async def _remote_sizes(broker, reader, keys: list[tuple[str, int]]) -> tuple[dict, list[str]]:
    """Sizes of the leader replicas of ``keys`` (partitions with no log here): one
    DescribeLogDirs per leader, all at once. Returns (size by partition, notes on nodes
    that did not answer)."""
    by_leader: dict[int, list] = {}
    for key in keys:
        leader = reader.leader_of(*key)
        if leader >= 0:
            by_leader.setdefault(leader, []).append(key)
    leaders = sorted(by_leader)
    answers = await asyncio.gather(*(reader.log_dir_sizes(n, by_leader[n]) for n in leaders), return_exceptions=True)
    sizes, notes = {}, []
    for node_id, answer in zip(leaders, answers):
        if isinstance(answer, BaseException):
            notes.append(f"node {node_id} unavailable: {answer}")
        else:
            sizes.update(answer)
    return sizes, notes


async def topic_rows(broker, reader) -> tuple[list[dict], list[str]]:
    """One row per topic; its size is the sum of its partitions' leader replicas
    (one copy of the data), read here or from the leader by DescribeLogDirs."""
    image = broker.image
    logs = broker.logs
    remote = {
        (name, pid) for name, topic in image.topics.items() for pid, p in topic.partitions.items()
        if p.leader >= 0 and p.leader != broker.node_id
    }
    sizes, notes = await _remote_sizes(broker, reader, sorted(remote)) if remote else ({}, [])
    rows = []
    for name in sorted(image.topics):
        topic = image.topics[name]
        size, unknown, under = 0, 0, 0
        for pid, p in topic.partitions.items():
            key = (name, pid)
            # A log here that is not opened yet (after a restart, until first
            # used) is measured from its files and stays closed.
            local_size = None if key in remote else logs.size_bytes(name, pid)
            if key in sizes:
                size += sizes[key]
            elif local_size is not None:
                size += local_size
            else:
                unknown += 1  # no leader, or its leader did not answer
            under += len(p.isr) < len(p.replicas)
        replication = max((len(p.replicas) for p in topic.partitions.values()), default=0)
        rows.append({"name": name, "partitions": len(topic.partitions), "replication": replication, "under": under,
                     "size": size, "size_unknown": unknown})
    return rows, notes


async def topic_detail(broker, reader, name: str) -> dict | None:
    topic = broker.image.topics.get(name)
    if topic is None:
        return None
    logs = broker.logs.logs
    for pid, p in topic.partitions.items():
        if broker.logs.log_dir_of(name, pid) is None:
            continue
        # Hosted here but not opened yet (after a restart, until first used): asking
        # for the topic's page uses it, as a Fetch would; a leadership the metadata
        # gives this broker is taken up first, which sets the high watermark.
        if p.leader == broker.node_id:
            broker.replicas.leader_for(name, pid)
        broker.partition_log(name, pid)
    remote = [(name, pid) for pid in topic.partitions if (name, pid) not in logs]
    notes: list[str] = []
    sizes: dict = {}
    starts: dict = {}
    hws: dict = {}
    if remote:
        (sizes, notes), (starts, _), (hws, unknown) = await asyncio.gather(
            _remote_sizes(broker, reader, remote),
            reader.offsets_by_leader(remote, EARLIEST),
            reader.offsets_by_leader(remote, LATEST),
        )
        if unknown:
            notes.append("offsets unavailable for partitions " + ", ".join(str(p) for _, p in sorted(unknown)))
    partitions = []
    for pid, p in sorted(topic.partitions.items()):
        plog = logs.get((name, pid))
        key = (name, pid)
        partitions.append({
            "id": pid,
            "leader": p.leader,
            "replicas": ",".join(map(str, p.replicas)),
            "isr": ",".join(map(str, p.isr)),
            "under": len(p.isr) < len(p.replicas),
            "start": plog.log_start_offset if plog else starts.get(key),
            "hw": plog.high_watermark if plog else hws.get(key),
            # The log end offset is a replica's own; ListOffsets tells only the high watermark.
            "end": plog.log_end_offset if plog else None,
            "size": sum(s.size_bytes for s in plog.segments) if plog else sizes.get(key),
            "here": plog is not None,
        })
    return {"name": name, "topic_id": str(topic.topic_id), "partitions": partitions, "notes": notes}


# --------------------------------------------------------------------------- messages


@dataclass
class Shown:
    """One key, value or header value as the page shows it."""

    text: str | None  # None: null
    size: int = 0
    cut: bool = False
    note: str = ""


def show_bytes(data: bytes | None, decoding: str, *, quiet: bool = False) -> Shown:
    """``data`` as the page shows it; ``quiet``: no note when JSON falls back to text
    (keys and headers are often plain strings next to JSON values)."""
    if data is None:
        return Shown(None)
    size = len(data)
    head = bytes(data[:SHOWN_BYTES_MAX])
    cut = size > SHOWN_BYTES_MAX
    if decoding == "hex":
        return Shown(head.hex(" "), size, cut)
    text = head.decode("utf-8", errors="replace")
    if decoding == "json":
        if cut:
            return Shown(text, size, cut, "too long to parse as JSON: shown as text")
        try:
            return Shown(json.dumps(json.loads(text), indent=2, ensure_ascii=False), size)
        except ValueError:
            return Shown(text, size, note="" if quiet else "not JSON: shown as text")
    return Shown(text, size, cut)


@dataclass
class Browse:
    error: str = ""
    records: list[dict] = field(default_factory=list)
    start_offset: int | None = None
    next_offset: int | None = None
    log_start: int | None = None
    high_watermark: int | None = None
    scanned: int = 0
    note: str = ""


class _LocalPartition:
    """A partition whose log is on this broker: read in-process."""

    def __init__(self, plog):
        self.plog = plog
        self.where = "this broker"

    async def bounds(self) -> tuple[int, int]:
        return self.plog.log_start_offset, self.plog.high_watermark

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        found = self.plog.offset_for_timestamp(timestamp_ms)
        return None if found is None else found[0]

    async def read(self, position: int, max_bytes: int, hw: int) -> bytes:
        return self.plog.read(position, max_bytes, upper_offset=hw)


class _RemotePartition:
    """A partition whose log is elsewhere: ListOffsets and Fetch (read_uncommitted, as a
    consumer, bounded bytes) to its leader, through the cluster reader."""

    def __init__(self, reader, topic: str, partition: int):
        self.reader = reader
        self.key = (topic, partition)
        self.leader = reader.leader_of(topic, partition)
        self.where = f"its leader, node {self.leader}"

    async def _offset(self, timestamp: int) -> int | None:
        answer = await self.reader.list_offsets(self.leader, [self.key], timestamp)
        error, offset = answer.get(self.key, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1))
        if error != ErrorCode.NONE:
            raise PartitionUnreadable(f"node {self.leader} answered ListOffsets with {_code_name(error)}")
        return None if offset < 0 else offset

    async def bounds(self) -> tuple[int, int]:
        start, hw = await asyncio.gather(self._offset(EARLIEST), self._offset(LATEST))
        return start or 0, hw or 0

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return await self._offset(timestamp_ms)

    async def read(self, position: int, max_bytes: int, hw: int) -> bytes:
        data = await self.reader.fetch(self.key[0], self.key[1], position, max_bytes)
        if data.error_code != ErrorCode.NONE:
            raise PartitionUnreadable(f"node {self.leader} answered Fetch with {_code_name(data.error_code)}")
        return bytes(data.records or b"")


class PartitionUnreadable(Exception):
    """The leader answered a read with an error."""


def _code_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


async def browse(broker, reader, topic: str, partition: int, *, offset: int | None, timestamp_ms: int | None,
                 decoding: str, search: str, limit: int) -> Browse:
    """Records of one partition from ``offset`` (or the first at/after ``timestamp_ms``,
    or the last ``limit`` when neither), decoded; with ``search``, only those whose
    key, value or a header contains it, scanning a bounded range. A partition whose
    log is not on this broker is read from its leader (``reader``: a
    broker.http.cluster_reader.ClusterReader) with the same bounds."""
    if decoding not in DECODINGS:
        return Browse(error=f"unknown decoding {decoding!r}: one of {', '.join(DECODINGS)}")
    if topic not in broker.image.topics or partition not in broker.image.topics[topic].partitions:
        return Browse(error=f"{ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name}: no partition {partition} of topic {topic!r}")
    plog = broker.logs.logs.get((topic, partition))
    if plog is None and reader.leader_of(topic, partition) < 0:
        return Browse(error=f"{ErrorCode.LEADER_NOT_AVAILABLE.name}: partition {topic}-{partition} has no leader and no replica on this broker")
    source = _LocalPartition(plog) if plog is not None else _RemotePartition(reader, topic, partition)
    try:
        return await _browse(source, offset=offset, timestamp_ms=timestamp_ms, decoding=decoding, search=search, limit=limit)
    except (NodeUnavailable, PartitionUnreadable) as exc:
        return Browse(error=f"cannot read {topic}-{partition} from {source.where}: {exc}")


async def _browse(source, *, offset: int | None, timestamp_ms: int | None, decoding: str, search: str, limit: int) -> Browse:
    limit = max(1, min(limit, BROWSE_RECORDS_MAX))
    log_start, hw = await source.bounds()
    result = Browse(log_start=log_start, high_watermark=hw)
    if timestamp_ms is not None:
        found = await source.offset_for_timestamp(timestamp_ms)
        if found is None:
            result.note = "no record at or after that time"
            result.start_offset = result.next_offset = hw
            return result
        offset = found
    if offset is None:
        offset = max(hw - limit, log_start) if not search else log_start
    offset = max(offset, log_start)
    result.start_offset = offset
    needle = search.casefold()
    position = offset
    bytes_left = SEARCH_BYTES_MAX if search else BROWSE_BYTES_MAX
    while position < hw and len(result.records) < limit and bytes_left > 0 and result.scanned < SEARCH_RECORDS_MAX:
        data = await source.read(position, min(BROWSE_BYTES_MAX, bytes_left), hw)
        if not data:
            break
        bytes_left -= len(data)
        try:
            decoded = decode_records(data, allow_truncated_tail=True)
        except ProtocolError as exc:
            result.error = f"cannot decode the log at offset {position}: {exc}"
            break
        advanced = False
        for record in decoded:
            if record.offset < position or record.offset >= hw:
                continue
            position = record.offset + 1
            advanced = True
            if record.control is not None:
                continue  # transaction markers are not messages
            result.scanned += 1
            if search and not _matches(record, needle):
                if result.scanned >= SEARCH_RECORDS_MAX:
                    break
                continue
            result.records.append({
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": show_bytes(record.key, decoding, quiet=True),
                "value": show_bytes(record.value, decoding),
                "headers": [(k, show_bytes(v, decoding, quiet=True)) for k, v in record.headers],
            })
            if len(result.records) >= limit:
                break
        if not advanced:
            break
    result.next_offset = position
    if search and position < hw and len(result.records) < limit:
        result.note = f"searched {result.scanned} records (offsets {offset} to {position - 1}); continue from {position}"
    return result


def _matches(record, needle: str) -> bool:
    for data in (record.key, record.value, *(v for _, v in record.headers)):
        if data is not None and needle in bytes(data).decode("utf-8", errors="replace").casefold():
            return True
    return any(needle in k.casefold() for k, _ in record.headers)


# --------------------------------------------------------------------------- groups


@dataclass
class ClusterGroups:
    """Groups of the whole cluster as one moment's reads saw them."""

    # group -> {"coordinator": node id, "type": "classic" or "consumer", "protocol": the classic
    # group's protocol type (consumer, connect...) or "consumer", "state": str,
    # "members": int or None (not described)}
    groups: dict[str, dict] = field(default_factory=dict)
    # group -> (topic, partition) -> committed offset
    committed: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    # (topic, partition) -> high watermark (those left out: leader unavailable)
    hw: dict[tuple[str, int], int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dropped: int = 0


async def cluster_groups(broker, reader, *, max_groups: int = MAX_GROUPS, describe: bool = False) -> ClusterGroups:
    """Every group of the cluster (up to ``max_groups``: this broker's first, then by
    node): this broker's from its coordinator in-process, the others' by one ListGroups
    and one OffsetFetch (and with ``describe`` one DescribeGroups) per other broker,
    then the high watermark of every committed partition (this broker's leaders
    in-process, the rest by one ListOffsets per leader). Requests to different nodes
    go out at once."""
    result = ClusterGroups()
    if not broker.is_broker:
        return result
    coordinator = broker.groups.coordinator
    consumer_groups = broker.groups.consumer_groups.groups
    for name in sorted(set(coordinator.groups) | set(coordinator.offsets) | set(consumer_groups)):
        if len(result.groups) >= max_groups:
            result.dropped += 1
            continue
        kip848 = consumer_groups.get(name)
        if kip848 is not None:
            result.groups[name] = {"coordinator": broker.node_id, "type": "consumer", "protocol": "consumer",
                                   "state": kip848.state, "members": len(kip848.members)}
        else:
            group = coordinator.groups.get(name)
            result.groups[name] = {"coordinator": broker.node_id, "type": "classic",
                                   "protocol": (group.protocol_type if group else None) or "-",
                                   "state": group.state.value if group else "Empty",
                                   "members": len(group.members) if group else 0}
        result.committed[name] = {key: o.offset for key, o in coordinator.offsets.get(name, {}).items()}
    others = [n for n, b in sorted(broker.image.brokers.items()) if n != broker.node_id and not b.fenced]
    listed = await asyncio.gather(*(reader.list_groups(n) for n in others), return_exceptions=True)
    by_node: dict[int, list[str]] = {}
    consumer_by_node: dict[int, list[str]] = {}
    for node_id, answer in zip(others, listed):
        if isinstance(answer, BaseException):
            result.notes.append(f"node {node_id} unavailable: {answer}")
            continue
        for listed_group in sorted(answer, key=lambda g: g.group_id):
            name = listed_group.group_id
            if name in result.groups or reader.coordinator_of(name) != node_id:
                continue  # listed by a node that is no longer its coordinator
            if len(result.groups) >= max_groups:
                result.dropped += 1
                continue
            kind = "consumer" if listed_group.group_type == "consumer" else "classic"
            result.groups[name] = {"coordinator": node_id, "type": kind,
                                   "protocol": listed_group.protocol_type or "-",
                                   "state": listed_group.group_state or "-", "members": None}
            by_node.setdefault(node_id, []).append(name)
            if kind == "consumer":
                consumer_by_node.setdefault(node_id, []).append(name)
    nodes = sorted(by_node)
    calls = [(n, reader.committed_offsets(n, by_node[n])) for n in nodes]
    if describe:
        # Each type by its own API: DescribeGroups knows no consumer group, ConsumerGroupDescribe no classic one.
        calls += [(n, reader.describe_groups(n, [g for g in by_node[n] if g not in consumer_by_node.get(n, ())]))
                  for n in nodes]
        calls += [(n, reader.describe_consumer_groups(n, ids)) for n, ids in sorted(consumer_by_node.items())]
    answers = await asyncio.gather(*(call for _, call in calls), return_exceptions=True)
    for index, ((node_id, _), answer) in enumerate(zip(calls, answers)):
        if isinstance(answer, BaseException):
            result.notes.append(f"node {node_id} unavailable: {answer}")
        elif index < len(nodes):
            result.committed.update(answer)
        else:
            for name, described in answer.items():
                if name in result.groups and described.error_code == ErrorCode.NONE:
                    result.groups[name]["members"] = len(described.members)
    result.hw, unknown = await high_watermarks(broker, reader, {key for c in result.committed.values() for key in c})
    if unknown:
        result.notes.append(f"high watermark unavailable for {len(unknown)} partitions (their leader did not answer)")
    return result


async def high_watermarks(broker, reader, keys) -> tuple[dict, set]:
    """High watermarks: of partitions this broker leads in-process, of the others
    by ListOffsets to their leaders. Returns (hw by partition, partitions unknown)."""
    logs = broker.logs.logs
    leaders = broker.replicas.leaders
    found, remote = {}, []
    for key in keys:
        plog = logs.get(key)
        if key in leaders and plog is not None:
            found[key] = plog.high_watermark
        else:
            remote.append(key)
    unknown: set = set()
    if remote:
        answered, unknown = await reader.offsets_by_leader(remote, LATEST)
        found.update(answered)
    return found, unknown


def _lag(committed: int | None, hw: int | None) -> int | None:
    return max(hw - committed, 0) if committed is not None and hw is not None else None


async def group_rows(broker, reader) -> tuple[list[dict], list[str]]:
    view = await cluster_groups(broker, reader, describe=True)
    rows = []
    for name in sorted(view.groups):
        info = view.groups[name]
        committed = view.committed.get(name, {})
        lags = [_lag(offset, view.hw.get(key)) for key, offset in committed.items()]
        known = [lag for lag in lags if lag is not None]
        rows.append({
            "name": name,
            "type": info["type"],
            "protocol": info["protocol"],
            "coordinator": info["coordinator"],
            "state": info["state"],
            "members": info["members"] if info["members"] is not None else "-",
            "partitions": len(committed),
            "lag": sum(known) if known else None,
        })
    notes = list(view.notes)
    if view.dropped:
        notes.append(f"{view.dropped} more groups not shown (at most {MAX_GROUPS})")
    return rows, notes


def _assignment_text(assigned) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(assigned)) or "-"


def _local_consumer_group(broker, group) -> dict:
    """A KIP-848 group this broker coordinates, read in-process: epochs, and each member's
    epoch, current and target assignment (topics by name, from the metadata image)."""
    names = broker.image.topic_names_by_id
    by_id = {info.topic_id: info.name for info in group.subscription_metadata.values()}

    def named(partitions) -> list[tuple[str, int]]:
        return [(names.get(topic_id) or by_id.get(topic_id, str(topic_id)), p) for topic_id, p in partitions]

    members = [
        (m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch, named(m.assigned),
         named(group.target.get(m.member_id, ())))
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]
    return {"state": group.state, "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
            "assignor": broker.groups.consumer_groups.assignor_of(group), "members": members}


def _described_consumer_group(d) -> dict:
    """The same from a ConsumerGroupDescribe answer (a group coordinated elsewhere)."""

    def named(assignment) -> list[tuple[str, int]]:
        return [(t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions]

    members = [(m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch, named(m.assignment),
                named(m.target_assignment)) for m in d.members]
    return {"state": d.group_state, "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
            "assignor": d.assignor_name, "members": members}


async def group_detail(broker, reader, name: str) -> dict | None:
    """A group's state, members and per-partition lag, from this broker's coordinator
    in-process or (coordinated elsewhere) ConsumerGroupDescribe or DescribeGroups and
    OffsetFetch to its coordinator. A KIP-848 consumer group shows its epochs and each
    member's epoch with its current and target assignment."""
    node_id = reader.coordinator_of(name)
    notes: list[str] = []
    kip848 = None
    if node_id in (broker.node_id, -1):
        coordinator = broker.groups.coordinator
        offsets = {key: o.offset for key, o in coordinator.offsets.get(name, {}).items()}
        consumer_group = broker.groups.consumer_groups.groups.get(name)
        if consumer_group is not None:
            kip848 = _local_consumer_group(broker, consumer_group)
        else:
            group = coordinator.groups.get(name)
            if group is None and not offsets:
                return None
            state = group.state.value if group else "Empty"
            protocol_type = (group.protocol_type if group else None) or "-"
            protocol = (group.protocol_name if group else None) or "-"
            generation = group.generation_id if group else 0
            leader = (group.leader_id if group else None) or "-"
            raw_members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment)
                           for m in (group.members.values() if group else ())]
    else:
        try:
            consumer_described, described, committed = await asyncio.gather(
                reader.describe_consumer_groups(node_id, [name]), reader.describe_groups(node_id, [name]),
                reader.committed_offsets(node_id, [name]),
            )
        except NodeUnavailable as exc:
            return {"name": name, "unavailable": f"its coordinator, node {node_id}, is unavailable: {exc}", "coordinator": node_id}
        offsets = committed.get(name, {})
        c = consumer_described.get(name)
        if c is not None and c.error_code == ErrorCode.NONE:
            kip848 = _described_consumer_group(c)
        else:
            d = described.get(name)
            if d is None or d.error_code != ErrorCode.NONE or (d.group_state == "Dead" and not offsets):
                return None
            state, protocol_type, protocol = d.group_state, d.protocol_type or "-", d.protocol_data or "-"
            generation, leader = None, "-"  # DescribeGroups does not tell them
            raw_members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.member_assignment) for m in d.members]
    owners = {}
    members = []
    if kip848 is not None:
        state, protocol_type, protocol = kip848["state"], "consumer", kip848["assignor"]
        generation, leader = kip848["group_epoch"], "-"
        for member_id, instance, client_id, host, epoch, assigned, target in kip848["members"]:
            for tp in assigned:
                owners[tp] = member_id
            members.append({"id": member_id, "instance": instance or "-", "client_id": client_id, "host": host,
                            "epoch": epoch, "assignment": _assignment_text(assigned), "target": _assignment_text(target),
                            "reconciling": sorted(assigned) != sorted(target)})
    else:
        for member_id, instance, client_id, host, assignment in raw_members:
            assigned = decode_assignment(assignment) if protocol_type == "consumer" else []
            for tp in assigned:
                owners[tp] = member_id
            members.append({"id": member_id, "instance": instance or "-", "client_id": client_id, "host": host,
                            "epoch": "-", "assignment": _assignment_text(assigned), "target": "-", "reconciling": False})
    keys = set(offsets) | set(owners)
    hws, unknown = await high_watermarks(broker, reader, keys)
    if unknown:
        notes.append("high watermark unavailable for " + ", ".join(f"{t}-{p}" for t, p in sorted(unknown)))
    partitions = [
        {"topic": t, "partition": p, "committed": offsets.get((t, p)), "hw": hws.get((t, p)),
         "lag": _lag(offsets.get((t, p)), hws.get((t, p))), "owner": owners.get((t, p), "-")}
        for t, p in sorted(keys)
    ]
    return {"name": name, "coordinator": node_id, "type": "consumer" if kip848 is not None else "classic",
            "state": state, "protocol_type": protocol_type, "protocol": protocol,
            "generation": generation if generation is not None else "-", "leader": leader,
            "assignment_epoch": kip848["assignment_epoch"] if kip848 is not None else None,
            "members": members, "partitions": partitions, "notes": notes, "unavailable": ""}

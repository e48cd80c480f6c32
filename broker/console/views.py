"""What the console's pages show, read from the broker's in-process state.

Every function runs on the event loop and reads the metadata image, the
replica manager, the logs and the group coordinator as they are at that
moment; none waits. The message browser reads at most ``BROWSE_BYTES_MAX`` of
a partition's log (up to its high watermark: what a consumer may read) and a
search scans at most ``SEARCH_RECORDS_MAX`` records, so no page costs more
than a bounded amount of file reading however large the log.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from protocol.codec import decode_struct
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import decode_records
from protocol.registry import DATA_MESSAGES

BROWSE_BYTES_MAX = 1 << 20
BROWSE_RECORDS_MAX = 200
SEARCH_RECORDS_MAX = 10_000
SEARCH_BYTES_MAX = 16 << 20
SHOWN_BYTES_MAX = 4096  # of one key/value/header on the page; the rest is cut and said so
DECODINGS = ("text", "json", "hex")
_ASSIGNMENT = DATA_MESSAGES["ConsumerProtocolAssignment"]


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


def topic_rows(broker) -> list[dict]:
    image = broker.image
    logs = broker.logs.logs
    rows = []
    for name in sorted(image.topics):
        topic = image.topics[name]
        size = 0
        under = 0
        for pid, p in topic.partitions.items():
            plog = logs.get((name, pid))
            if plog is not None:
                size += sum(s.size_bytes for s in plog.segments)
            under += len(p.isr) < len(p.replicas)
        replication = max((len(p.replicas) for p in topic.partitions.values()), default=0)
        rows.append({"name": name, "partitions": len(topic.partitions), "replication": replication, "under": under, "size": size})
    return rows


def topic_detail(broker, name: str) -> dict | None:
    topic = broker.image.topics.get(name)
    if topic is None:
        return None
    logs = broker.logs.logs
    partitions = []
    for pid, p in sorted(topic.partitions.items()):
        plog = logs.get((name, pid))
        partitions.append({
            "id": pid,
            "leader": p.leader,
            "replicas": ",".join(map(str, p.replicas)),
            "isr": ",".join(map(str, p.isr)),
            "under": len(p.isr) < len(p.replicas),
            "start": plog.log_start_offset if plog else None,
            "hw": plog.high_watermark if plog else None,
            "end": plog.log_end_offset if plog else None,
            "size": sum(s.size_bytes for s in plog.segments) if plog else None,
        })
    return {"name": name, "topic_id": str(topic.topic_id), "partitions": partitions}


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


def browse(broker, topic: str, partition: int, *, offset: int | None, timestamp_ms: int | None,
           decoding: str, search: str, limit: int) -> Browse:
    """Records of one partition from ``offset`` (or the first at/after ``timestamp_ms``,
    or the last ``limit`` when neither), decoded; with ``search``, only those whose
    key, value or a header contains it, scanning a bounded range."""
    if decoding not in DECODINGS:
        return Browse(error=f"unknown decoding {decoding!r}: one of {', '.join(DECODINGS)}")
    if topic not in broker.image.topics or partition not in broker.image.topics[topic].partitions:
        return Browse(error=f"{ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name}: no partition {partition} of topic {topic!r}")
    plog = broker.logs.logs.get((topic, partition))
    if plog is None:
        return Browse(error=f"partition {topic}-{partition} has no replica on this broker (node {broker.node_id}): open the console of one of its replicas")
    limit = max(1, min(limit, BROWSE_RECORDS_MAX))
    hw, log_start = plog.high_watermark, plog.log_start_offset
    result = Browse(log_start=log_start, high_watermark=hw)
    if timestamp_ms is not None:
        found = plog.offset_for_timestamp(timestamp_ms)
        if found is None:
            result.note = "no record at or after that time"
            result.start_offset = result.next_offset = hw
            return result
        offset = found[0]
    if offset is None:
        offset = max(hw - limit, log_start) if not search else log_start
    offset = max(offset, log_start)
    result.start_offset = offset
    needle = search.casefold()
    position = offset
    bytes_left = SEARCH_BYTES_MAX if search else BROWSE_BYTES_MAX
    while position < hw and len(result.records) < limit and bytes_left > 0 and result.scanned < SEARCH_RECORDS_MAX:
        data = plog.read(position, min(BROWSE_BYTES_MAX, bytes_left), upper_offset=hw)
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


def group_rows(broker) -> list[dict]:
    coordinator = broker.groups.coordinator
    names = sorted(set(coordinator.groups) | set(coordinator.offsets))
    rows = []
    for name in names:
        group = coordinator.groups.get(name)
        rows.append({
            "name": name,
            "state": group.state.value if group else "Empty",
            "members": len(group.members) if group else 0,
            "partitions": len(coordinator.offsets.get(name, {})),
            "lag": _total_lag(broker, name),
        })
    return rows


def _total_lag(broker, name: str) -> int | None:
    total, known = 0, False
    for (topic, partition), committed in broker.groups.coordinator.offsets.get(name, {}).items():
        plog = broker.logs.logs.get((topic, partition))
        if plog is not None:
            known = True
            total += max(plog.high_watermark - committed.offset, 0)
    return total if known else None


def group_detail(broker, name: str) -> dict | None:
    coordinator = broker.groups.coordinator
    group = coordinator.groups.get(name)
    offsets = coordinator.offsets.get(name, {})
    if group is None and not offsets:
        return None
    owners = {}
    members = []
    for member in (group.members.values() if group else ()):
        assigned = _decode_assignment(member.assignment) if group.protocol_type == "consumer" else []
        for tp in assigned:
            owners[tp] = member.member_id
        members.append({
            "id": member.member_id,
            "instance": member.group_instance_id or "-",
            "client_id": member.client_id,
            "host": member.client_host,
            "assignment": ", ".join(f"{t}-{p}" for t, p in assigned) or "-",
        })
    partitions = []
    for (topic, partition) in sorted(set(offsets) | set(owners)):
        committed = offsets.get((topic, partition))
        plog = broker.logs.logs.get((topic, partition))
        hw = plog.high_watermark if plog is not None else None
        partitions.append({
            "topic": topic,
            "partition": partition,
            "committed": committed.offset if committed else None,
            "hw": hw,
            "lag": max(hw - committed.offset, 0) if committed is not None and hw is not None else None,
            "owner": owners.get((topic, partition), "-"),
        })
    return {
        "name": name,
        "state": group.state.value if group else "Empty",
        "protocol_type": (group.protocol_type if group else None) or "-",
        "protocol": (group.protocol_name if group else None) or "-",
        "generation": group.generation_id if group else 0,
        "leader": (group.leader_id if group else None) or "-",
        "members": members,
        "partitions": partitions,
    }


def _decode_assignment(data: bytes) -> list[tuple[str, int]]:
    if len(data) < 2:
        return []
    version = min(struct.unpack_from(">h", data)[0], _ASSIGNMENT.versions.high)
    try:
        value, _ = decode_struct(_ASSIGNMENT.struct, version, False, data, 2, exact=False)
    except ProtocolError:
        return []
    return sorted((t.topic, p) for t in value.assigned_partitions for p in t.partitions)

"""What the console's Links and mirror pages show: cluster links and their mirror topics.

The links, their settings and each mirror's state and reason come from the
metadata image (every broker has them); what a mirror partition's copying looks
like (the source's high watermark, the local log end and high watermark, the
lag in records and milliseconds, the time of the source's last answer, the last
error, the stop offset) only its leader knows, so DescribeMirrors is asked of
every live broker at once, through the console's cluster reader, and the
answers are joined as ``pybroker mirrors --describe`` joins them
(broker/tools/cluster_links.py). A broker that does not answer within the
reader's timeout is named on the page, and its partitions show no numbers.

A link with ``multi.master.topics`` also lists each partition's copy
(copying or stopped and why, position, lag), asked the same way of every live
broker with DescribeMultiMasterCopies: only a partition's leader copies it.

Per mirror topic, the lag over time (history.py) is the sum of its partitions'
lag in records (the records the mirror still has to copy) and the largest lag
in milliseconds of its partitions (how far behind its most-behind partition
is); a partition whose leader did not answer adds nothing to either.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from broker.tools.cluster_links import MirrorView, join_mirror_answers, state_name
from broker.tools.topics import error_text
from protocol.errors import ErrorCode

BOOTSTRAP_SERVERS = "bootstrap.servers"


@dataclass
class ClusterMirrors:
    """Every mirror topic as one moment's DescribeMirrors answers saw them."""

    views: dict[str, MirrorView] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


async def cluster_mirrors(broker, reader, topics: list[str] | None = None) -> ClusterMirrors:
    """DescribeMirrors of ``topics`` (None: every mirror topic) asked of every live
    broker at once; the answers joined per topic, each partition as its leader
    describes it. Nothing is asked when the image has no mirror topic."""
    result = ClusterMirrors()
    image = broker.image
    if not image.mirror_topics or not broker.is_broker:
        return result
    live = sorted(n for n, b in image.brokers.items() if not b.fenced)
    answers = await asyncio.gather(*(reader.describe_mirrors(n, topics) for n in live), return_exceptions=True)
    answered = {}
    for node_id, answer in zip(live, answers):
        if isinstance(answer, BaseException):
            # NodeUnavailable, or a connection that failed otherwise: named, as the other pages do.
            result.notes.append(f"node {node_id} unavailable: {answer}")
        else:
            answered[node_id] = answer
    result.views = join_mirror_answers(answered)
    return result


def mirror_lag_totals(view: MirrorView) -> tuple[int | None, int | None]:
    """(the sum of the partitions' lag in records, the largest lag in ms) of the
    partitions with a known lag; None when no partition tells one."""
    records = [p.lag_records for p in view.partitions.values() if p.lag_records >= 0]
    millis = [p.lag_ms for p in view.partitions.values() if p.lag_ms >= 0]
    return (sum(records) if records else None), (max(millis) if millis else None)


def _partition_error(p) -> str:
    return "" if p.error_code == ErrorCode.NONE else error_text(p.error_code, p.error_message)


def _mirror_summary(image, topic: str, mirror, view: MirrorView | None) -> dict:
    lag_records, lag_ms = mirror_lag_totals(view) if view is not None else (None, None)
    partitions = image.topics[topic].partitions if topic in image.topics else {}
    errors = []
    if view is not None:
        errors = list(dict.fromkeys([*view.errors, *(_partition_error(p) for p in view.partitions.values())]))
    return {
        "topic": topic,
        "source_topic": mirror.source_topic,
        "state": mirror.state_name,
        "reason": mirror.reason or "",
        "partitions": len(partitions),
        "described": len(view.partitions) if view is not None else 0,
        "lag_records": lag_records,
        "lag_ms": lag_ms,
        "errors": [e for e in errors if e],
    }


async def multi_master_copies(broker, reader) -> tuple[dict[str, list[dict]], list[str]]:
    """Each link's multi-master copies (DescribeMultiMasterCopies asked of every
    live broker at once), by link name, and the brokers that did not answer."""
    image = broker.image
    if not broker.is_broker or not any(link.configs.get("multi.master.topics") for link in image.cluster_links.values()):
        return {}, []
    live = sorted(n for n, b in image.brokers.items() if not b.fenced)
    answers = await asyncio.gather(*(reader.describe_multi_master(n) for n in live), return_exceptions=True)
    found: dict[str, list[dict]] = {}
    notes = []
    for node_id, answer in zip(live, answers):
        if isinstance(answer, BaseException):
            notes.append(f"node {node_id} unavailable: {answer}")
            continue
        for c in answer.copies:
            found.setdefault(c.link_name, []).append({
                "topic": c.topic, "partition": c.partition_index, "leader": c.leader_id,
                "state": "STOPPED" if c.stopped else "COPYING", "error": c.error_message or "",
                "position": c.source_position, "source_hw": c.source_high_watermark,
                "lag_records": c.lag_records, "lag_ms": c.lag_ms, "copied": c.copied_batches,
            })
    for rows in found.values():
        rows.sort(key=lambda r: (r["topic"], r["partition"]))
    return found, notes


async def link_rows(broker, reader) -> tuple[list[dict], list[str]]:
    """One entry per cluster link: its name, source bootstrap servers, its mirror
    topics (state, lag), the errors its mirror partitions report, and its
    multi-master copies."""
    image = broker.image
    seen = await cluster_mirrors(broker, reader)
    copies, copy_notes = await multi_master_copies(broker, reader)
    by_link: dict = {}
    for topic_id, mirror in image.mirror_topics.items():
        name = image.topic_names_by_id.get(topic_id)
        if name is not None:
            by_link.setdefault(mirror.link_id, []).append((name, mirror))
    rows = []
    for link_name in sorted(image.cluster_links):
        link = image.cluster_links[link_name]
        mirrors = [_mirror_summary(image, t, m, seen.views.get(t)) for t, m in sorted(by_link.get(link.link_id, []))]
        rows.append({
            "name": link.name,
            "link_id": str(link.link_id),
            "bootstrap": link.configs.get(BOOTSTRAP_SERVERS, ""),
            "mirrors": mirrors,
            # What stops every mirror of the link alike (a bad setting, a source that does not answer).
            "errors": list(dict.fromkeys(e for m in mirrors for e in m["errors"])),
            "multi_master_topics": link.configs.get("multi.master.topics") or "",
            "copies": copies.get(link.name, []),
        })
    return rows, list(dict.fromkeys(seen.notes + copy_notes))


async def mirror_detail(broker, reader, topic: str) -> dict | None:
    """A mirror topic's state and each partition's copying, or None when ``topic``
    is not a mirror topic."""
    image = broker.image
    mirror = image.mirror_of(topic)
    if mirror is None:
        return None
    link = image.link_by_id(mirror.link_id)
    seen = await cluster_mirrors(broker, reader, [topic])
    view = seen.views.get(topic)
    partitions = []
    for pid, p in sorted(image.topics[topic].partitions.items()):
        d = view.partitions.get(pid) if view is not None else None
        if d is None:
            partitions.append({"id": pid, "leader": p.leader, "described": False})
            continue
        partitions.append({
            "id": pid,
            "leader": d.leader_id,
            "described": True,
            "source_hw": d.source_high_watermark,
            "log_end": d.local_log_end_offset,
            "hw": d.local_high_watermark,
            "lag_records": d.lag_records,
            "lag_ms": d.lag_ms,
            "last_fetch_ms": d.last_fetch_ms,
            "error": _partition_error(d),
            "stop_offset": d.stop_offset,
        })
    summary = _mirror_summary(image, topic, mirror, view)
    return {
        **summary,
        "state": state_name(mirror.state),
        "link": link.name if link is not None else "",
        "bootstrap": link.configs.get(BOOTSTRAP_SERVERS, "") if link is not None else "",
        "partition_rows": partitions,
        "notes": seen.notes,
    }

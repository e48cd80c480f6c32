"""``pybroker groups --reset-offsets | --delete | --delete-offsets``, as kafka-consumer-groups.sh does.

- ``--reset-offsets --group G (--topic T[:P,...] ... | --all-topics)`` with one of
  ``--to-earliest``, ``--to-latest``, ``--to-current``, ``--to-offset N``,
  ``--shift-by N``, ``--to-datetime YYYY-MM-DDTHH:MM:SS[.sss][Z|+hh:mm]``,
  ``--by-duration PnDTnHnMnS``; ``--dry-run`` (the default, with a warning
  when neither is given) or ``--execute``. New offsets are clamped to
  [log start, log end], as Kafka clamps them; a datetime or duration with no
  record that late gives the log end offset. Refused (exit 1) while the group
  has members: Kafka resets only inactive groups. Prints Kafka's table,
  ``GROUP TOPIC PARTITION NEW-OFFSET``. ``--all-topics`` means the topics the
  group has committed offsets for.
- ``--delete --group G [--group G2 ...]``: DeleteGroups at each group's coordinator.
- ``--delete-offsets --group G --topic T[:P,...]``: OffsetDelete; a partition the
  group still consumes answers GROUP_SUBSCRIBED_TO_TOPIC.
"""

from __future__ import annotations

import datetime as dt
import re
import time

from broker.tools.client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NotFound, Refused, ToolClient, ToolError
from broker.tools.offsets import list_offsets
from broker.tools.progress import progress
from broker.tools.topics import error_text, fetch_metadata
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_COMMIT = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
_OFFSET_DELETE = struct_classes(APIS_BY_NAME["OffsetDelete"].request)
FIND_COORDINATOR_VERSION = 3
LIST_GROUPS_VERSION = 4
DESCRIBE_GROUPS_VERSION = 5
CONSUMER_GROUP_DESCRIBE_VERSION = 0
OFFSET_FETCH_VERSION = 7
OFFSET_COMMIT_VERSION = 7
DELETE_GROUPS_VERSION = 2
OFFSET_DELETE_VERSION = 0
INACTIVE_STATES = ("Empty", "Dead")
# Partitions per ListOffsets/OffsetCommit request: many partitions go in steps
# (the progress bar moves per step) instead of one huge request.
PARTITIONS_PER_REQUEST = 500
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration_ms(text: str) -> int:
    """ISO 8601 ``PnDTnHnMnS`` (Java's Duration.parse subset Kafka's --by-duration takes)."""
    match = _DURATION.match(text.strip().upper())
    if not match or text.strip().upper() in ("P", "PT"):
        raise ToolError(f"--by-duration: {text!r} is not a duration like PT0H30M0S or P1DT2H")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (none: local time)."""
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(f"--to-datetime: {text!r} is not a date-time like 2024-01-31T12:00:00.000") from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # local time zone, as Kafka's tool reads a zone-less value
    return int(parsed.timestamp() * 1000)


def parse_topic_partitions(values: list[str]) -> list[tuple[str, list[int] | None]]:
    """``T`` (every partition) or ``T:0,1``."""
    out = []
    for value in values:
        topic, sep, rest = value.partition(":")
        if not topic:
            raise ToolError(f"--topic: {value!r} names no topic")
        if not sep:
            out.append((topic, None))
            continue
        try:
            out.append((topic, sorted({int(p) for p in rest.split(",") if p.strip()})))
        except ValueError:
            raise ToolError(f"--topic: {value!r}: partitions must be numbers (T:0,1)") from None
    return out


def named_partitions(metadata, topics: list[tuple[str, list[int] | None]]) -> list[tuple[str, int]]:
    """The (topic, partition) pairs ``topics`` names (all of a topic's partitions
    for None), sorted; NotFound for a topic or partition ``metadata`` lacks."""
    partitions = []
    for topic, wanted in topics:
        info = metadata.topics.get(topic)
        if info is None:
            raise NotFound(f"topic {topic!r} does not exist")
        existing = {p.partition for p in info.partitions}
        for p in wanted if wanted is not None else sorted(existing):
            if p not in existing:
                raise NotFound(f"partition {topic}-{p} does not exist")
            partitions.append((topic, p))
    return sorted(set(partitions))


def new_offsets(client: ToolClient, metadata, tps, committed, kind: str, argument) -> dict[tuple[str, int], int]:
    """The offsets a reset ``kind`` (``to_earliest``, ``to_latest``, ``to_offset``,
    ``to_current``, ``shift_by``, ``to_datetime``, ``by_duration``) gives
    ``tps``, clamped to the log; ``committed`` for the relative kinds."""
    earliest = list_offsets(client, metadata, tps, EARLIEST_TIMESTAMP)
    latest = list_offsets(client, metadata, tps, LATEST_TIMESTAMP)

    def clamp(tp, offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    if kind == "to_earliest":
        return dict(earliest)
    if kind == "to_latest":
        return dict(latest)
    if kind == "to_offset":
        return {tp: clamp(tp, argument) for tp in tps}
    if kind in ("to_current", "shift_by"):
        missing = [tp for tp in tps if tp not in committed]
        if missing:
            t, p = missing[0]
            raise Refused(f"the group has no committed offset for {t}-{p} to {kind.replace('_', '-')} from")
        return {tp: clamp(tp, committed[tp] + (argument if kind == "shift_by" else 0)) for tp in tps}
    timestamp = argument if kind == "to_datetime" else int(time.time() * 1000) - argument
    found = list_offsets(client, metadata, tps, timestamp)
    return {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in tps}


class GroupAdmin(ToolClient):

    def _coordinator(self, group_id: str):
        answer = self.bootstrap_connection().call("FindCoordinator", FIND_COORDINATOR_VERSION, key=group_id, key_type=0)
        if answer.error_code != ErrorCode.NONE:
            raise Refused(f"no coordinator for group {group_id!r}: {error_text(answer.error_code)}")
        return self._connection((answer.host, answer.port))

    def consumer_group_ids(self) -> list[str]:
        """--all-groups: the consumer groups the cluster has (ListGroups), sorted."""
        answer = self.bootstrap_connection().call("ListGroups", LIST_GROUPS_VERSION, states_filter=[])
        if answer.error_code != ErrorCode.NONE:
            raise Refused(f"ListGroups: {error_text(answer.error_code)}")
        return sorted(g.group_id for g in answer.groups if g.protocol_type in ("consumer", ""))

    def _state(self, coordinator, group_id: str) -> str:
        """The group's state: ConsumerGroupDescribe's for a KIP-848 consumer group (Assigning,
        Reconciling, Stable: it has members), else DescribeGroups', as Kafka's tool asks."""
        if self.supports("ConsumerGroupDescribe"):
            kip848 = coordinator.call(
                "ConsumerGroupDescribe", CONSUMER_GROUP_DESCRIBE_VERSION, group_ids=[group_id],
                include_authorized_operations=False,
            ).groups[0]
            if kip848.error_code == ErrorCode.NONE:
                return kip848.group_state
            if kip848.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise Refused(f"ConsumerGroupDescribe {group_id!r}: {kip848.error_message or error_text(kip848.error_code)}")
        described = coordinator.call(
            "DescribeGroups", DESCRIBE_GROUPS_VERSION, groups=[group_id], include_authorized_operations=False
        ).groups[0]
        if described.error_code != ErrorCode.NONE:
            raise Refused(f"DescribeGroups {group_id!r}: {error_text(described.error_code)}")
        return described.group_state

    def _committed(self, coordinator, group_id: str) -> dict[tuple[str, int], int]:
        fetched = coordinator.call("OffsetFetch", OFFSET_FETCH_VERSION, group_id=group_id, topics=None, require_stable=False)
        if fetched.error_code != ErrorCode.NONE:
            raise Refused(f"OffsetFetch {group_id!r}: {error_text(fetched.error_code)}")
        return {
            (t.name, p.partition_index): p.committed_offset
            for t in fetched.topics for p in t.partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
        }

    def reset_offsets(self, group_id: str, topics: list[tuple[str, list[int] | None]], all_topics: bool,
                      spec: tuple[str, object], execute: bool) -> list[tuple[str, int, int]]:
        """(topic, partition, new offset), sorted; committed only when ``execute``."""
        coordinator = self._coordinator(group_id)
        state = self._state(coordinator, group_id)
        if state not in INACTIVE_STATES:
            raise Refused(
                f"Assignments can only be reset if the group '{group_id}' is inactive, but the current state is {state}."
            )
        committed = self._committed(coordinator, group_id)
        metadata = fetch_metadata(self, None if all_topics else sorted({t for t, _ in topics}))
        if all_topics:
            partitions = sorted(committed)
        else:
            partitions = named_partitions(metadata, topics)
        kind, argument = spec
        new: dict[tuple[str, int], int] = {}
        with progress(len(partitions), "reset-offsets") as bar:
            for start in range(0, len(partitions), PARTITIONS_PER_REQUEST):
                chunk = partitions[start:start + PARTITIONS_PER_REQUEST]
                new.update(new_offsets(self, metadata, chunk, committed, kind, argument))
                bar.update(len(chunk))
        if execute:
            self._commit(coordinator, group_id, new)
        return [(t, p, new[(t, p)]) for t, p in partitions]

    def _commit(self, coordinator, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        items = sorted(offsets.items())
        for start in range(0, len(items), PARTITIONS_PER_REQUEST):
            by_topic: dict[str, list] = {}
            for (topic, partition), offset in items[start:start + PARTITIONS_PER_REQUEST]:
                by_topic.setdefault(topic, []).append(_COMMIT.OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
                ))
            # Generation -1 and no member id: an admin commit, which the coordinator takes for a group without members.
            answer = coordinator.call(
                "OffsetCommit", OFFSET_COMMIT_VERSION, group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None,
                topics=[_COMMIT.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            )
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.NONE:
                        raise Refused(f"OffsetCommit of {t.name}-{p.partition_index}: {error_text(p.error_code)}")

    def delete_groups(self, group_ids: list[str]) -> dict[str, str | None]:
        """Per group, None when deleted, else the error."""
        results: dict[str, str | None] = {}
        for group_id in group_ids:
            coordinator = self._coordinator(group_id)
            answer = coordinator.call("DeleteGroups", DELETE_GROUPS_VERSION, groups_names=[group_id])
            for result in answer.results:
                results[result.group_id] = None if result.error_code == ErrorCode.NONE else error_text(result.error_code)
        return results

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int] | None]]) -> list[tuple[str, int, str | None]]:
        """(topic, partition, error or None) per partition asked for."""
        coordinator = self._coordinator(group_id)
        metadata = fetch_metadata(self, sorted({t for t, _ in topics}))
        requests = []
        for topic, wanted in topics:
            info = metadata.topics.get(topic)
            partitions = wanted if wanted is not None else sorted(p.partition for p in info.partitions) if info else []
            if info is None and wanted is None:
                raise NotFound(f"topic {topic!r} does not exist")
            requests.append(_OFFSET_DELETE.OffsetDeleteRequestTopic(name=topic, partitions=[
                _OFFSET_DELETE.OffsetDeleteRequestPartition(partition_index=p) for p in partitions
            ]))
        answer = coordinator.call("OffsetDelete", OFFSET_DELETE_VERSION, group_id=group_id, topics=requests)
        if answer.error_code != ErrorCode.NONE:
            raise Refused(f"cannot delete offsets of group {group_id!r}: {error_text(answer.error_code)}")
        return sorted(
            (t.name, p.partition_index, None if p.error_code == ErrorCode.NONE else error_text(p.error_code))
            for t in answer.topics for p in t.partitions
        )


def reset_table(rows: list[tuple[str, str, int, int]]) -> list[str]:
    """Kafka's reset table of (group, topic, partition, new offset): GROUP, TOPIC (30 wide), PARTITION (10), NEW-OFFSET."""
    lines = ["", f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} NEW-OFFSET"]
    lines += [f"{g:<30} {t:<30} {p:<10} {o}" for g, t, p, o in rows]
    return lines

"""Consumer offset sync: committed offsets of the source's groups, committed on the destination.

Each destination broker syncs the groups it coordinates (it leads their
``__consumer_offsets`` partition), so every group is synced by one broker
and the work spreads as the groups do. For every link with
``consumer.offset.sync.enable=true``, every ``consumer.offset.sync.ms``:

1. at the source: ListGroups on every broker, the groups
   ``consumer.offset.group.filters`` selects and this broker coordinates,
   FindCoordinator for them, and OffsetFetch (every partition) at each
   coordinator;
2. on the destination: the groups' members (DescribeGroups) and committed
   offsets (OffsetFetch) through this broker's own dispatcher, and the high
   watermarks of the mirror partitions (ListOffsets at their leaders);
3. :func:`broker.links.offset_sync_rules.offsets_to_commit` decides for
   mirror topics; the offsets of the link's multi-master topics are
   translated (broker/links/group_translation.py) and committed only when
   they move the group forward. An
   OffsetCommit with generation -1 and no member id (a commit from outside
   the group, as an admin tool makes) goes through the normal group
   coordinator path, every check included.

A failure is logged when it starts or changes, and when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable

from broker.links.clients import SourceClients
from broker.links.group_translation import GroupTranslator
from broker.links.multi_master_rules import LINK_GROUP_PREFIX, link_multi_master_topics
from broker.links.offset_sync_rules import (
    OFFSET_SYNC_ENABLE,
    OFFSET_SYNC_MS,
    GroupFilterError,
    MirroredTopic,
    SourceOffset,
    offsets_to_commit,
    parse_group_filters,
)
from broker.links.source import SourceCluster, SourceConfigError, SourceUnavailable
from broker.net.in_process_client import RequestRefused
from controller.link_configs import link_setting_enabled, link_setting_ms
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

LIST_GROUPS = APIS_BY_NAME["ListGroups"]
FIND_COORDINATOR = APIS_BY_NAME["FindCoordinator"]
OFFSET_FETCH = APIS_BY_NAME["OffsetFetch"]
OFFSET_COMMIT = APIS_BY_NAME["OffsetCommit"]
DESCRIBE_GROUPS = APIS_BY_NAME["DescribeGroups"]
LIST_OFFSETS = APIS_BY_NAME["ListOffsets"]
_LG = struct_classes(LIST_GROUPS.request)
_FC = struct_classes(FIND_COORDINATOR.request)
_OF = struct_classes(OFFSET_FETCH.request)
_OC = struct_classes(OFFSET_COMMIT.request)
_DG = struct_classes(DESCRIBE_GROUPS.request)
_LO = struct_classes(LIST_OFFSETS.request)
# Versions of the requests to this cluster (the destination speaks them all).
OFFSET_FETCH_VERSION = 8
OFFSET_COMMIT_VERSION = 8
DESCRIBE_GROUPS_VERSION = 5
LIST_OFFSETS_VERSION = 7
LATEST_TIMESTAMP = -1
IDLE_WAKE_S = 5.0
ROUND_TIMEOUT_S = 120.0


def link_sync_enabled(link) -> bool:
    return link_setting_enabled(link.configs, OFFSET_SYNC_ENABLE)


def link_sync_interval_ms(link) -> int:
    return link_setting_ms(link.configs, OFFSET_SYNC_MS)


# ----------------------------------------------------------------- the source


async def list_source_groups(source: SourceCluster) -> set[str]:
    """Every group any source broker lists (a group is listed by its coordinator only)."""
    await source.metadata([])
    groups: set[str] = set()
    for node_id in sorted(source.brokers):

        def body(version: int):
            return _LG.ListGroupsRequest(states_filter=[], types_filter=[])

        _, answer = await source.request_node(node_id, LIST_GROUPS, body)
        if answer.error_code != ErrorCode.NONE:
            raise SourceUnavailable(f"ListGroups at source broker {node_id} answered {ErrorCode(answer.error_code).name}")
        groups.update(group.group_id for group in answer.groups)
    return groups


async def find_source_coordinators(source: SourceCluster, groups: Iterable[str]) -> dict[str, int]:
    """group -> its coordinator at the source (groups whose lookup failed are left out)."""
    groups = sorted(set(groups))
    found: dict[str, int] = {}
    if not groups:
        return found
    single = [groups[0]]

    def batched(version: int):
        if version >= 4:
            return _FC.FindCoordinatorRequest(key_type=0, coordinator_keys=groups)
        return _FC.FindCoordinatorRequest(key=single[0], key_type=0)

    version, answer = await source.request_any(FIND_COORDINATOR, batched)
    if version >= 4:
        for coordinator in answer.coordinators:
            if coordinator.error_code == ErrorCode.NONE:
                found[coordinator.key] = coordinator.node_id
        return found
    # An old source: one group per request.
    for group in groups:
        single[0] = group
        version, answer = await source.request_any(FIND_COORDINATOR, batched)
        if answer.error_code == ErrorCode.NONE:
            found[group] = answer.node_id
    return found


async def fetch_source_offsets(source: SourceCluster, coordinators: dict[str, int]) -> dict[str, dict[tuple[str, int], SourceOffset]]:
    """group -> its committed offsets at the source, by (topic, partition)."""
    by_node: dict[int, list[str]] = {}
    for group, node_id in coordinators.items():
        by_node.setdefault(node_id, []).append(group)
    offsets: dict[str, dict[tuple[str, int], SourceOffset]] = {}
    for node_id, groups in sorted(by_node.items()):
        if node_id not in source.brokers:
            await source.metadata([])
        pending = sorted(groups)
        batched = True  # until the source shows it speaks only OffsetFetch before v8 (one group a request)
        while pending:
            batch = list(pending) if batched else pending[:1]

            def body(v: int, batch=batch):
                if v >= 8:
                    return _OF.OffsetFetchRequest(
                        groups=[_OF.OffsetFetchRequestGroup(group_id=g, member_id=None, member_epoch=-1, topics=None) for g in batch],
                        require_stable=False,
                    )
                return _OF.OffsetFetchRequest(group_id=batch[0], topics=None, require_stable=False)

            version, answer = await source.request_node(node_id, OFFSET_FETCH, body)
            if version >= 8:
                answered = [(g.group_id, g.error_code, g.topics) for g in answer.groups]
                pending = pending[len(batch):]
            else:
                answered = [(batch[0], answer.error_code, answer.topics)]
                pending = pending[1:]
                batched = False
            for group_id, error_code, topics in answered:
                if error_code != ErrorCode.NONE:
                    continue
                offsets[group_id] = {
                    (topic.name, p.partition_index): SourceOffset(p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.metadata)
                    for topic in topics
                    for p in topic.partitions
                    if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
                }
    return offsets


# ----------------------------------------------------------------- the destination


class _LinkCaller:
    """What the dispatcher reads of the connection of an in-process request."""

    __slots__ = ("listener_name", "peer", "peer_host", "principal")

    def __init__(self, principal: str, listener_name: str | None):
        self.peer = "cluster-link"
        self.peer_host = "127.0.0.1"
        self.listener_name = listener_name
        self.principal = principal


class ConsumerOffsetSync:
    """Syncs the committed offsets of the source groups ``broker`` coordinates.

    ``client``: an InProcessClient of this broker; ``principal``: who its
    requests come from (the inter-broker principal, which the authorizer
    grants what brokers do)."""

    def __init__(self, broker, client, principal: str):
        self._broker = broker
        self._client = client
        listeners = broker.config.broker_listeners
        self._caller = _LinkCaller(principal, broker.config.inter_broker_listener_name or (listeners[0].name if listeners else None))
        self._clients = SourceClients(f"pybroker-link-offsets-{broker.node_id}")
        self._due_s: dict[uuid.UUID, float] = {}
        self._problems: dict[uuid.UUID, str] = {}
        self._leader_connections: dict[tuple[int, str, int], object] = {}
        self.translator = GroupTranslator(broker, self._leader_connection)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="consumer offset sync")

    def metadata_changed(self) -> None:
        self._wakeup.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._clients.close()
        for connection in self._leader_connections.values():
            connection.close()
        self._leader_connections.clear()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wakeup.clear()
            try:
                await self.sync_due(loop.time())
            except Exception:  # keep syncing; the next round may succeed
                log.exception("consumer offset sync failed")
            now = loop.time()
            wait_s = min([IDLE_WAKE_S] + [max(0.0, due - now) for due in self._due_s.values()])
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=wait_s)
            except TimeoutError:
                pass

    def _mirrors_of(self, image, link_id: uuid.UUID) -> dict[str, MirroredTopic]:
        mirrors = {}
        for topic_id, mirror in image.mirror_topics.items():
            name = image.topic_names_by_id.get(topic_id)
            if mirror.link_id == link_id and name is not None:
                mirrors[mirror.source_topic] = MirroredTopic(name, mirror.state)
        return mirrors

    async def sync_due(self, now_s: float) -> int:
        """Sync every link that is due; returns the number of partitions committed."""
        image = self._broker.image
        links = {link.link_id: link for link in image.cluster_links.values() if link_sync_enabled(link)}
        for gone in set(self._due_s) - set(links):
            self._due_s.pop(gone, None)
            self._problems.pop(gone, None)
        self._clients.keep_only(links)
        self.translator.forget_links(set(links))
        committed = 0
        for link_id, link in links.items():
            if self._due_s.setdefault(link_id, now_s) > now_s:
                continue
            self._due_s[link_id] = now_s + link_sync_interval_ms(link) / 1000
            try:
                committed += await asyncio.wait_for(self.sync_link(link), ROUND_TIMEOUT_S)
            except (SourceConfigError, SourceUnavailable, GroupFilterError, ConnectionError, OSError, TimeoutError) as exc:
                self._problem(link, f"consumer offset sync: {exc or type(exc).__name__}")
            else:
                self._problem(link, None)
        return committed

    async def sync_link(self, link) -> int:
        image = self._broker.image
        mirrors = self._mirrors_of(image, link.link_id)
        multi_master = {t for t in link_multi_master_topics(link) if t in image.topics and image.mirror_of(t) is None}
        if not mirrors and not multi_master:
            return 0
        filters = parse_group_filters(link.configs.get("consumer.offset.group.filters"))
        if not filters.filters:
            return 0
        source = self._clients.for_link(link)
        selected = [g for g in await list_source_groups(source) if filters.selects(g) and not g.startswith(LINK_GROUP_PREFIX)]
        if selected and not self._broker.groups.offsets_topic_exists():
            # A destination no consumer used yet: __consumer_offsets is made
            # now, as a first FindCoordinator would, and used from the next
            # round on, once its partitions have leaders (a failure is logged there).
            await self._broker.groups.ensure_offsets_topic()
            return 0
        groups = [g for g in selected if self._coordinates(g)]
        if not groups:
            return 0
        coordinators = await find_source_coordinators(source, groups)
        source_offsets = await fetch_source_offsets(source, coordinators)
        members = await self._destination_members(list(source_offsets))
        committed = 0
        high_watermarks = await self._high_watermarks(
            {(mirrors[t].name, p) for offsets in source_offsets.values() for (t, p) in offsets if t in mirrors}
        )
        for group, offsets in sorted(source_offsets.items()):
            has_members = members.get(group)
            if has_members is None:
                continue  # the destination did not describe it: try again next round
            destination = await self._destination_offsets(group)
            if destination is None:
                continue
            commits = offsets_to_commit(offsets, mirrors, high_watermarks, destination, group_has_members=has_members)
            if multi_master and not has_members:
                commits.update(await self._translated(link, source, group, offsets, multi_master, destination))
            if commits:
                committed += await self._commit(link, group, commits)
        return committed

    async def _translated(
        self, link, source: SourceCluster, group: str, offsets: dict[tuple[str, int], SourceOffset], topics: set[str],
        destination: dict[tuple[str, int], int],
    ) -> dict[tuple[str, int], SourceOffset]:
        """The offsets to commit for ``group``'s multi-master ``topics``: its
        translated places, each only when past what the group has committed
        here (a sync never moves a group back; in a cycle of links a place
        translated from another cluster's translation is never ahead)."""
        committed = {key: offset.offset for key, offset in offsets.items() if key[0] in topics and offset.offset >= 0}
        if not committed:
            return {}
        commits = {}
        for key, place in (await self.translator.translate(link, source, group, committed)).items():
            current = destination.get(key)
            if current is None or place.offset > current:
                commits[key] = SourceOffset(place.offset, -1, offsets[key].metadata)
                log.debug(
                    "link %s: group %s: %s-%d resumes here at %d (%d at the source); %s%d records consumed there come again",
                    link.name, group, key[0], key[1], place.offset, committed[key], "" if place.again_counted else "at least ",
                    place.again_records,
                )
        return commits

    def _coordinates(self, group: str) -> bool:
        """This broker coordinates ``group`` on the destination."""
        error, leader = self._broker.groups.coordinator_of(group)
        return error == ErrorCode.NONE and leader == self._broker.node_id

    async def _call(self, api, version: int, body):
        try:
            return await self._client.request(api, version, body, self._caller)
        except (RequestRefused, ProtocolError) as exc:
            raise ConnectionError(f"{api.name} on this broker: {exc}") from None

    async def _destination_members(self, groups: list[str]) -> dict[str, bool]:
        """group -> whether it has members on the destination (absent: not answered)."""
        if not groups:
            return {}
        answer = await self._call(DESCRIBE_GROUPS, DESCRIBE_GROUPS_VERSION, _DG.DescribeGroupsRequest(groups=groups, include_authorized_operations=False))
        return {g.group_id: bool(g.members) for g in answer.groups if g.error_code == ErrorCode.NONE}

    async def _destination_offsets(self, group: str) -> dict[tuple[str, int], int] | None:
        body = _OF.OffsetFetchRequest(
            groups=[_OF.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1, topics=None)], require_stable=False
        )
        answer = await self._call(OFFSET_FETCH, OFFSET_FETCH_VERSION, body)
        (result,) = answer.groups
        if result.error_code != ErrorCode.NONE:
            return None
        return {
            (topic.name, p.partition_index): p.committed_offset
            for topic in result.topics
            for p in topic.partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
        }

    async def _high_watermarks(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The mirror partitions' high watermarks, asked of their leaders (ListOffsets LATEST, read_uncommitted)."""
        image = self._broker.image
        by_leader: dict[int, dict[str, list[int]]] = {}
        for name, partition_id in partitions:
            topic = image.topics.get(name)
            partition = None if topic is None else topic.partitions.get(partition_id)
            if partition is not None and partition.leader >= 0:
                by_leader.setdefault(partition.leader, {}).setdefault(name, []).append(partition_id)
        found: dict[tuple[str, int], int] = {}
        for leader, topics in by_leader.items():
            connection = self._leader_connection(image, leader)
            if connection is None:
                continue
            body = _LO.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    _LO.ListOffsetsTopic(
                        name=name,
                        partitions=[_LO.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=LATEST_TIMESTAMP) for p in sorted(ps)],
                    )
                    for name, ps in sorted(topics.items())
                ],
            )
            try:
                answer = await connection.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body, timeout_ms=30000)
            except (ConnectionError, OSError, TimeoutError) as exc:
                log.debug("ListOffsets at broker %d failed: %s", leader, exc)
                continue
            for topic in answer.topics:
                for p in topic.partitions:
                    if p.error_code == ErrorCode.NONE and p.offset >= 0:
                        found[(topic.name, p.partition_index)] = p.offset
        return found

    def _leader_connection(self, image, leader: int):
        registration = image.brokers.get(leader)
        listener = self._broker.config.inter_broker_listener_name
        endpoint = None if registration is None or listener is None else registration.endpoint(listener)
        if endpoint is None:
            return None
        key = (leader, endpoint.host, endpoint.port)
        connection = self._leader_connections.get(key)
        if connection is None:
            for old in [k for k in self._leader_connections if k[0] == leader]:
                self._leader_connections.pop(old).close()
            connection = self._broker.node_connection(endpoint.host, endpoint.port, f"pybroker-link-offsets-{self._broker.node_id}", to="broker")
            self._leader_connections[key] = connection
        return connection

    async def _commit(self, link, group: str, commits: dict[tuple[str, int], SourceOffset]) -> int:
        by_topic: dict[str, list] = {}
        for (name, partition_id), offset in sorted(commits.items()):
            by_topic.setdefault(name, []).append(
                _OC.OffsetCommitRequestPartition(
                    partition_index=partition_id,
                    committed_offset=offset.offset,
                    committed_leader_epoch=offset.leader_epoch,
                    committed_metadata=offset.metadata,
                )
            )
        body = _OC.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[_OC.OffsetCommitRequestTopic(name=name, partitions=parts) for name, parts in by_topic.items()],
        )
        answer = await self._call(OFFSET_COMMIT, OFFSET_COMMIT_VERSION, body)
        done = 0
        refused = set()
        for topic in answer.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE:
                    done += 1
                else:
                    refused.add(ErrorCode(p.error_code).name)
        if refused:
            # A group that gained members since it was described is refused here: its own commits win.
            log.debug("link %s: offsets of group %s not synced: %s", link.name, group, ", ".join(sorted(refused)))
        return done

    def _problem(self, link, problem: str | None) -> None:
        before = self._problems.get(link.link_id)
        if problem == before:
            return
        if problem is None:
            self._problems.pop(link.link_id, None)
            log.info("link %s: consumer offset sync works again", link.name)
        else:
            self._problems[link.link_id] = problem
            log.warning("link %s: %s", link.name, problem)


"""The source topic watcher: one task per broker for the mirrors whose partition 0 it leads.

Every ``topic.config.sync.ms`` of a mirror's link (default 5000) the task asks
the link's source for Metadata and DescribeConfigs of the due source topics
(one request of each per link and round, whatever the number of topics),
lets :mod:`broker.links.watch_rules` decide, and sends the active controller
an UpdateMirrorTopic (16008) for each mirror that needs one. Leading
partition 0 makes exactly one broker the watcher of a mirror, and the
watching moves with that leadership.

``send_update(body)`` is given by the broker's wiring: it reaches the active
controller (in-process when this node is it) and answers the response body,
or None when no controller answered. A failure is logged when it starts or
changes, and when it ends, never at every look.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable

from broker.links.clients import SourceClients
from broker.links.source import SourceCluster, SourceConfigError, SourceUnavailable
from broker.links.watch_rules import (
    TOPIC_CONFIG_SYNC_MS,
    WATCHED_STATES,
    MirrorUpdate,
    SourceLook,
    WatchMemory,
    decide,
    synced_configs_of,
)
from controller.link_configs import link_setting_ms
from controller.metadata.records import MIRROR_STATE_NAMES
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

log = logging.getLogger(__name__)

DESCRIBE_CONFIGS = APIS_BY_NAME["DescribeConfigs"]
UPDATE_MIRROR_TOPIC = APIS_BY_NAME["UpdateMirrorTopic"]
_DC = struct_classes(DESCRIBE_CONFIGS.request)
_UMT = struct_classes(UPDATE_MIRROR_TOPIC.request)
RESOURCE_TOPIC = 2
# The longest the task sleeps without a metadata change: a link's interval may have been shortened meanwhile.
IDLE_WAKE_S = 5.0
# A look's requests together may take at most this long (each is bounded by the link's request.timeout.ms too).
LOOK_TIMEOUT_S = 60.0


def link_interval_ms(link) -> int:
    """``topic.config.sync.ms`` of a link."""
    return link_setting_ms(link.configs, TOPIC_CONFIG_SYNC_MS)


async def look_at_source_topics(source: SourceCluster, names: Iterable[str]) -> dict[str, SourceLook | str]:
    """One look at each source topic in ``names``: a SourceLook, or a message
    when the source answered with an error for it (nothing is decided then).
    SourceUnavailable when the source did not answer at all."""
    names = sorted(set(names))
    metadata = await source.metadata(names)
    looks: dict[str, SourceLook | str] = {}
    present = []
    for topic in metadata.topics:
        if topic.name not in names:
            continue
        if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            looks[topic.name] = SourceLook(missing=True)
        elif topic.error_code != ErrorCode.NONE:
            looks[topic.name] = f"Metadata of {topic.name} answered {ErrorCode(topic.error_code).name}"
        else:
            topic_id = getattr(topic, "topic_id", None) or ZERO_UUID
            looks[topic.name] = SourceLook(topic_id=topic_id, partition_count=len(topic.partitions))
            present.append(topic.name)
    if not present:
        return looks

    def body(version: int):
        return _DC.DescribeConfigsRequest(
            resources=[
                _DC.DescribeConfigsResource(
                    # Every config (null keys), the synced ones picked here: the same answer by Kafka's
                    # semantics, and some sources (Tansu 0.6) cannot read a request that names keys.
                    resource_type=RESOURCE_TOPIC, resource_name=name, configuration_keys=None
                )
                for name in present
            ],
            include_synonyms=False,
            include_documentation=False,
        )

    # Any broker answers DescribeConfigs of a topic.
    version, described = await source.request_any(DESCRIBE_CONFIGS, body)
    for result in described.results:
        look = looks.get(result.resource_name)
        if not isinstance(look, SourceLook) or result.error_code != ErrorCode.NONE:
            continue
        looks[result.resource_name] = SourceLook(
            topic_id=look.topic_id, partition_count=look.partition_count,
            configs=synced_configs_of(result.configs, version=version),
        )
    return looks


def update_request(broker_id: int, broker_epoch: int, topic_id: uuid.UUID, update: MirrorUpdate):
    return _UMT.UpdateMirrorTopicRequest(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topic_id=topic_id,
        expected_state=update.expected_state,
        state=update.state,
        reason=update.reason,
        source_partition_count=update.source_partition_count,
        configs=[_UMT.SyncedTopicConfig(name=k, value=v) for k, v in sorted(update.configs.items())],
    )


class SourceTopicWatcher:
    """Watches the source topics of the mirrors whose partition 0 ``broker`` leads."""

    def __init__(self, broker, send_update: Callable[[object], Awaitable[object | None]]):
        self._broker = broker
        self._send_update = send_update
        self._clients = SourceClients(f"pybroker-link-watch-{broker.node_id}")
        self._memory: dict[uuid.UUID, WatchMemory] = {}
        self._due_s: dict[uuid.UUID, float] = {}
        # What was last logged per link (source errors) and per mirror (update outcomes).
        self._link_problems: dict[uuid.UUID, str] = {}
        self._mirror_problems: dict[uuid.UUID, str] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mirror source topic watcher")

    def metadata_changed(self) -> None:
        self._wakeup.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._clients.close()

    def watched(self, image) -> dict[uuid.UUID, tuple]:
        """topic id -> (mirror, topic image, link) of the mirrors this broker watches now."""
        node_id = self._broker.node_id
        found = {}
        for topic_id, mirror in image.mirror_topics.items():
            if mirror.state not in WATCHED_STATES:
                continue
            topic = image.topic_by_id(topic_id)
            link = image.link_by_id(mirror.link_id)
            first = None if topic is None else topic.partitions.get(0)
            if link is None or first is None or first.leader != node_id:
                continue
            found[topic_id] = (mirror, topic, link)
        return found

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wakeup.clear()
            try:
                await self.look_once(loop.time())
            except Exception:  # keep watching; the next round may succeed
                log.exception("the mirror source topic watcher failed")
            now = loop.time()
            wait_s = min([IDLE_WAKE_S] + [max(0.0, due - now) for due in self._due_s.values()])
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=wait_s)
            except TimeoutError:
                pass

    async def look_once(self, now_s: float) -> int:
        """Look at every due source topic; returns the number of updates sent."""
        image = self._broker.image
        watched = self.watched(image)
        for gone in set(self._memory) - set(watched):
            self._memory.pop(gone, None)
        for gone in set(self._due_s) - set(watched):
            self._due_s.pop(gone, None)
            self._mirror_problems.pop(gone, None)
        by_link: dict[uuid.UUID, list[uuid.UUID]] = {}
        for topic_id, (mirror, _, link) in watched.items():
            due = self._due_s.setdefault(topic_id, now_s)
            if due <= now_s:
                by_link.setdefault(link.link_id, []).append(topic_id)
        self._clients.keep_only({link.link_id for _, _, link in watched.values()})
        sent = 0
        for topic_ids in by_link.values():
            link = watched[topic_ids[0]][2]
            interval_s = link_interval_ms(link) / 1000
            for topic_id in topic_ids:
                self._due_s[topic_id] = now_s + interval_s
            sent += await self._look_for_link(link, [(topic_id, *watched[topic_id][:2]) for topic_id in topic_ids])
        return sent

    async def _look_for_link(self, link, mirrors) -> int:
        try:
            source = self._clients.for_link(link)
            looks = await asyncio.wait_for(
                look_at_source_topics(source, [mirror.source_topic for _, mirror, _ in mirrors]), LOOK_TIMEOUT_S
            )
        except (SourceConfigError, SourceUnavailable, ConnectionError, OSError, TimeoutError) as exc:
            self._link_problem(link, f"cannot look at the source topics: {exc or type(exc).__name__}")
            return 0
        self._link_problem(link, None)
        sent = 0
        for topic_id, mirror, topic in mirrors:
            look = looks.get(mirror.source_topic)
            if look is None or isinstance(look, str):
                self._mirror_problem(topic_id, topic.name, look or "the source did not describe the topic")
                continue
            update, memory = decide(
                source_topic=mirror.source_topic,
                mirror_state=mirror.state,
                mirror_partition_count=len(topic.partitions),
                mirror_configs=topic.configs,
                memory=self._memory.get(topic_id, WatchMemory()),
                look=look,
            )
            self._memory[topic_id] = memory
            if update is None:
                self._mirror_problem(topic_id, topic.name, None)
                continue
            sent += 1
            await self._send(topic_id, topic.name, update)
        return sent

    async def _send(self, topic_id: uuid.UUID, topic_name: str, update: MirrorUpdate) -> None:
        image = self._broker.image
        registration = image.brokers.get(self._broker.node_id)
        broker_epoch = registration.epoch if registration is not None else -1
        body = update_request(self._broker.node_id, broker_epoch, topic_id, update)
        try:
            response = await self._send_update(body)
        except (ConnectionError, OSError, TimeoutError) as exc:
            response, failure = None, str(exc) or type(exc).__name__
        else:
            failure = "no active controller answered"
        if response is None:
            self._mirror_problem(topic_id, topic_name, f"UpdateMirrorTopic not sent: {failure}")
        elif response.error_code != ErrorCode.NONE:
            detail = f": {response.error_message}" if response.error_message else ""
            self._mirror_problem(topic_id, topic_name, f"UpdateMirrorTopic refused: {ErrorCode(response.error_code).name}{detail}")
        else:
            self._mirror_problem(topic_id, topic_name, None)
            log.info("mirror %s: %s", topic_name, _describe(update))

    def _link_problem(self, link, problem: str | None) -> None:
        before = self._link_problems.get(link.link_id)
        if problem == before:
            return
        if problem is None:
            self._link_problems.pop(link.link_id, None)
            log.info("link %s: the source answers the topic watcher again", link.name)
        else:
            self._link_problems[link.link_id] = problem
            log.warning("link %s: %s", link.name, problem)

    def _mirror_problem(self, topic_id: uuid.UUID, topic_name: str, problem: str | None) -> None:
        before = self._mirror_problems.get(topic_id)
        if problem == before:
            return
        if problem is None:
            self._mirror_problems.pop(topic_id, None)
        else:
            self._mirror_problems[topic_id] = problem
            log.warning("mirror %s: %s", topic_name, problem)


def _describe(update: MirrorUpdate) -> str:
    parts = []
    if update.state != -1:
        parts.append(f"state {MIRROR_STATE_NAMES.get(update.state, update.state)} ({update.reason})")
    if update.source_partition_count != -1:
        parts.append(f"{update.source_partition_count} partitions at the source")
    if update.configs:
        parts.append("synced configs " + ", ".join(f"{k}={'(default)' if v is None else v}" for k, v in sorted(update.configs.items())))
    return "; ".join(parts)

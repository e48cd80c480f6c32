"""This broker's mirror fetchers and what they tell the controller (cluster links).

:class:`MirrorManager` keeps one :class:`broker.links.mirror_fetcher.LinkMirrorFetcher`
per link with mirror partitions this broker leads, from the metadata image
(``Broker._on_metadata_change``): the partitions of mirrors that copy
(ACTIVE, PENDING_PROMOTE) or stop (PENDING_FAILOVER) whose leader is this
broker; a change of a link's settings restarts its fetcher with a new client.
It sends MirrorPartitionsStopped (16007) and UpdateMirrorTopic (16008) to
the active controller (in-process when this node is it), aborts the
transactions the source left open in a mirror that became writable (an
ABORT marker per open producer through the leader's write path), and serves
the status DescribeMirrors and the metrics read.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import NamedTuple

from broker.links.mirror_fetcher import FETCHER_STATES, LinkMirrorFetcher, MirrorSpec
from broker.replica.leader_append import append_as_leader
from controller.metadata.image import MetadataImage
from controller.metadata.records import MIRROR_FAILED, MIRROR_WRITABLE_STATES
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.mirror_core import MirrorPartition, transactions_to_abort

log = logging.getLogger(__name__)

MIRROR_PARTITIONS_STOPPED = APIS_BY_NAME["MirrorPartitionsStopped"]
UPDATE_MIRROR_TOPIC = APIS_BY_NAME["UpdateMirrorTopic"]
_MS = struct_classes(MIRROR_PARTITIONS_STOPPED.request)
_UM = struct_classes(UPDATE_MIRROR_TOPIC.request)


class _Marker(NamedTuple):
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


class MirrorManager:
    """This broker's mirror fetchers, one per link with mirror partitions led here."""

    def __init__(self, broker):
        self.broker = broker
        self.fetchers: dict[uuid.UUID, LinkMirrorFetcher] = {}
        self.running = False
        self._aborts: set[asyncio.Task] = set()

    def start(self) -> None:
        self.running = True
        for fetcher in self.fetchers.values():
            fetcher.start()

    async def stop(self) -> None:
        self.running = False
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()

    # ----------------------------------------------------------------- image

    def led_mirror_partitions(self, image: MetadataImage) -> dict[uuid.UUID, dict[tuple[str, int], MirrorSpec]]:
        """Per link id, the mirror partitions this broker leads whose mirror copies or stops."""
        wanted: dict[uuid.UUID, dict] = {}
        node = self.broker.node_id
        for topic_id, mirror in image.mirror_topics.items():
            if mirror.state not in FETCHER_STATES:
                continue
            topic = image.topic_by_id(topic_id)
            if topic is None:
                continue
            for partition in topic.partitions.values():
                if partition.leader == node:
                    spec = MirrorSpec(topic_id, mirror.source_topic, mirror.state, partition.leader_epoch)
                    wanted.setdefault(mirror.link_id, {})[(topic.name, partition.partition_id)] = spec
        return wanted

    def apply_image(self, old: MetadataImage, new: MetadataImage) -> None:
        if not new.mirror_topics and not self.fetchers:
            return
        wanted = self.led_mirror_partitions(new)
        for link_id in list(self.fetchers):
            link = new.link_by_id(link_id)
            fetcher = self.fetchers[link_id]
            if link is None or link_id not in wanted or link != fetcher.link:
                # Gone, nothing to copy, or its settings changed: a new client next time.
                del self.fetchers[link_id]
                self._spawn(fetcher.stop())
        for link_id, partitions in wanted.items():
            link = new.link_by_id(link_id)
            if link is None:
                continue
            fetcher = self.fetchers.get(link_id)
            if fetcher is None:
                fetcher = self.fetchers[link_id] = LinkMirrorFetcher(self, link)
                if self.running:
                    fetcher.start()
            fetcher.update(partitions)
        self._abort_left_open(old, new)

    def registration_caught_up(self) -> None:
        """This broker may lead now (the controller unfenced it): what waited for
        that (aborting what the source left open) is done now; the fetchers
        find their leaderships by themselves."""
        self.apply_image(MetadataImage(), self.broker.image)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    def _abort_left_open(self, old: MetadataImage, new: MetadataImage) -> None:
        """A mirror that became writable (or whose partition changed leader since):
        abort, with an ABORT marker through the leader's write path, each
        transaction the source left open before where the mirror stopped."""
        node = self.broker.node_id
        for topic_id, mirror in new.mirror_topics.items():
            if mirror.state not in MIRROR_WRITABLE_STATES:
                continue
            before = old.mirror_topics.get(topic_id)
            topic = new.topic_by_id(topic_id)
            if topic is None:
                continue
            old_topic = old.topic_by_id(topic_id)
            became_writable = before is None or before.state not in MIRROR_WRITABLE_STATES
            for partition in topic.partitions.values():
                if partition.leader != node:
                    continue
                old_partition = old_topic.partitions.get(partition.partition_id) if old_topic is not None else None
                if not became_writable and old_partition is not None and old_partition.leader_epoch == partition.leader_epoch:
                    continue
                mark = mirror.partition_marks.get(partition.partition_id)
                if mark is None:
                    continue
                self._abort_partition((topic.name, partition.partition_id), mark[0])

    def _abort_partition(self, key: tuple[str, int], mark_offset: int) -> None:
        plog = self.broker.partition_log(*key)
        if plog is None:
            return
        for producer_id, epoch, coordinator_epoch in transactions_to_abort(
            plog.ongoing_transactions(), plog.producer_state.producers, mark_offset
        ):
            written = append_as_leader(
                self.broker, key, plog=plog, marker=_Marker(producer_id, epoch, coordinator_epoch, False), acks=1
            )
            if written.error != ErrorCode.NONE:
                log.warning(
                    "%s-%d: could not abort producer %d's transaction left open by the source: %s %s",
                    key[0], key[1], producer_id, written.error.name, written.message or "",
                )
            else:
                log.info("%s-%d: aborted producer %d's transaction left open by the source", key[0], key[1], producer_id)

    # ----------------------------------------------------------------- to the controller

    def _broker_epoch(self) -> int:
        registration = self.broker.image.brokers.get(self.broker.node_id)
        return registration.epoch if registration is not None else -1

    async def send_stopped(self, stopped: dict[uuid.UUID, list]) -> bool:
        request = _MS.MirrorPartitionsStoppedRequest(
            broker_id=self.broker.node_id,
            broker_epoch=self._broker_epoch(),
            topics=[_MS.StoppedMirrorTopic(topic_id=t, partitions=parts) for t, parts in stopped.items()],
        )
        return await self._send(MIRROR_PARTITIONS_STOPPED, request)

    async def send_failure(self, spec: MirrorSpec, reason: str) -> bool:
        request = _UM.UpdateMirrorTopicRequest(
            broker_id=self.broker.node_id,
            broker_epoch=self._broker_epoch(),
            topic_id=spec.topic_id,
            expected_state=spec.state,
            state=MIRROR_FAILED,
            reason=reason,
            source_partition_count=-1,
            configs=[],
        )
        return await self._send(UPDATE_MIRROR_TOPIC, request)

    async def _send(self, api, request) -> bool:
        """To the active controller (in-process when this node is it): True once it answered NONE."""
        try:
            response = await self.broker.controller_channel.to_active_controller(api, 0, request)
        except Exception as exc:  # a failover or a broken connection: the next round asks again
            log.info("%s could not be sent: %s", api.name, exc)
            return False
        if response is None:
            log.debug("%s: no answer from the active controller", api.name)
            return False
        if response.error_code != ErrorCode.NONE:
            log.info("%s: %s %s", api.name, ErrorCode(response.error_code).name, response.error_message or "")
            return False
        return True

    # ----------------------------------------------------------------- status

    def status(self, key: tuple[str, int]) -> tuple[MirrorPartition, str | None] | None:
        """(the partition's mirror state here, a link-level error) when a fetcher copies it here."""
        for fetcher in self.fetchers.values():
            entry = fetcher.entries.get(key)
            if entry is not None:
                return entry.core, fetcher.config_error
        return None

    def partition_rows(self):
        """(link name, topic, partition, mirror state name, core, log) of every partition copied here."""
        for fetcher in self.fetchers.values():
            for key, entry in fetcher.entries.items():
                plog = self.broker.partition_log(*key)
                if plog is not None:
                    yield fetcher.link.name, key[0], key[1], entry.spec.state, entry.core, plog

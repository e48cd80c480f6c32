"""This broker's log dirs as the controller sees them (KIP-112, KIP-858 JBOD):
their ids, the ones that failed, and which dir holds each replica.

* A write or fsync that fails in a log dir (EIO, ENOSPC, ...) takes that dir
  offline (:meth:`LogDirs.failed`, Kafka's LogDirFailureChannel and
  ReplicaManager.handleLogDirFailure): its logs are let go without another
  write, this broker stops leading and following its partitions (their
  requests answer KAFKA_STORAGE_ERROR, and no write that hit the error is
  acknowledged), and the partitions of the other dirs are served as before.
  The next heartbeat, sent at once, lists the dir in ``offline_log_dirs``,
  and the active controller moves the leaderships (controller/log_dirs.py).
  When the failed dir holds the metadata log, or no other log dir is online,
  the broker halts at once instead, as Kafka's does: its partitions move when
  its session runs out, and the next start recovers its logs from disk.
* An offline dir comes back only with a restart, which recovers its logs as
  after a crash (it has no clean-shutdown marker) and registers it again.
* With more than one log dir, the broker tells the active controller which
  dir holds each of its replicas (AssignReplicasToDirs, as Kafka's
  AssignmentsManager does), so that the controller knows which replicas a
  failed dir takes with it. With one log dir a failure halts the broker, and
  nothing needs to be known.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import uuid
from pathlib import Path

from controller.directories import replica_directory
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from storage.meta_properties import META_PROPERTIES, read_meta_properties

log = logging.getLogger(__name__)

ASSIGN_REPLICAS_TO_DIRS = APIS_BY_NAME["AssignReplicasToDirs"]
_ARD = struct_classes(ASSIGN_REPLICAS_TO_DIRS.request)
# Replicas per AssignReplicasToDirs request: a start with 100,000 partitions
# sends them in requests of this size, one after the other.
ASSIGNMENTS_PER_REQUEST_MAX = 1000
# After a request that failed (no controller, a failover), wait this long.
ASSIGN_RETRY_S = 1.0

Key = tuple[str, int]


def directory_ids(log_dirs: list[Path]) -> dict[Path, uuid.UUID]:
    """The ``directory.id`` of each log dir's meta.properties (base64url, as
    Kafka writes it), as UUIDs; dirs without one are left out."""
    ids = {}
    for directory in log_dirs:
        try:
            text = read_meta_properties(Path(directory) / META_PROPERTIES).get("directory.id")
        except OSError:
            continue
        if text:
            ids[Path(directory)] = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return ids


class LogDirs:
    def __init__(self, broker):
        self.broker = broker
        self.ids = directory_ids(broker.config.log_dirs)
        # Offline dir -> what failed there (its first error).
        self.failures: dict[Path, str] = {}
        # Replicas whose dir the controller may not know yet (AssignReplicasToDirs).
        self._unassigned: dict[Key, None] = {}
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    @property
    def jbod(self) -> bool:
        return len(self.broker.logs.log_dirs) > 1

    def online_ids(self) -> list[uuid.UUID]:
        """What BrokerRegistration's ``log_dirs`` carries."""
        offline = self.broker.logs.offline_dirs
        return [directory_id for directory, directory_id in self.ids.items() if directory not in offline]

    def offline_ids(self) -> list[uuid.UUID]:
        """What every BrokerHeartbeat's ``offline_log_dirs`` carries."""
        return [self.ids[d] for d in sorted(self.broker.logs.offline_dirs) if d in self.ids]

    # ----------------------------------------------------------------- failure

    def failed(self, directory: Path, exc: OSError) -> None:
        """A write or fsync in ``directory`` failed: take it offline, or halt."""
        broker = self.broker
        logs = broker.logs
        directory = Path(directory)
        if directory in logs.offline_dirs:
            return
        metadata_dir = Path(broker.config.metadata_log_dir)
        holds_metadata = directory == metadata_dir or os.path.abspath(directory) == os.path.abspath(metadata_dir)
        others_online = [d for d in logs.online_dirs if d != directory]
        if holds_metadata or not others_online or directory not in logs.log_dirs:
            why = "it holds the metadata log" if holds_metadata else "no other log directory is online"
            log.critical(
                "log directory %s failed (%s): %s; halting this broker without acknowledging the write",
                directory, exc, why,
            )
            logging.shutdown()
            os._exit(1)
        self.failures[directory] = str(exc)
        held = logs.mark_offline(directory)
        log.error(
            "log directory %s (directory.id %s) is offline: %s; its %d partition(s) are no longer served here "
            "(KAFKA_STORAGE_ERROR) until this broker restarts",
            directory, self.ids.get(directory), exc, len(held),
        )
        broker.replicas.dir_offline(held)
        for key in held:
            broker.partition_watch.notify(key)  # long-polling fetches there answer now
        if held:
            # The coordinators look at every partition they use in one go: once is enough.
            broker.leadership_lost(held[0])
        broker.lifecycle.heartbeat_now()

    def failed_from_thread(self, loop: asyncio.AbstractEventLoop):
        """``failed`` as a callback for worker threads (checkpoint writers)."""
        return lambda directory, exc: loop.call_soon_threadsafe(self.failed, directory, exc)

    # -------------------------------------------------------------- assignment

    def assign_later(self, key: Key) -> None:
        """``key``'s log was placed in a dir (registered): the controller hears of it."""
        if not self.jbod:
            return
        self._unassigned[key] = None
        if self._wakeup is not None:
            self._wakeup.set()

    def start(self) -> None:
        if not self.jbod:
            return
        self._wakeup = asyncio.Event()
        if self._unassigned:
            self._wakeup.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="log dir assignments")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # Bounded: each round sends at most ASSIGNMENTS_PER_REQUEST_MAX, and a
            # round that got nowhere waits ASSIGN_RETRY_S before the next.
            while self._unassigned:
                if self.broker.lifecycle.broker_epoch < 0:
                    await asyncio.sleep(ASSIGN_RETRY_S)
                    continue
                batch = self._next_batch()
                if not batch:
                    break
                try:
                    done = await self._send(batch)
                except Exception as exc:  # a failover or a broken connection: again later
                    log.info("AssignReplicasToDirs could not be sent: %s", exc)
                    done = set()
                for key in done:
                    self._unassigned.pop(key, None)
                if not done:
                    await asyncio.sleep(ASSIGN_RETRY_S)

    def _next_batch(self) -> dict[Key, tuple[uuid.UUID, uuid.UUID]]:
        """Up to ASSIGNMENTS_PER_REQUEST_MAX replicas whose dir the image does not
        name yet, as key -> (dir id, topic id); those it names already are dropped."""
        image = self.broker.image
        logs = self.broker.logs
        batch = {}
        for key in list(self._unassigned):
            topic = image.topics.get(key[0])
            partition = topic.partitions.get(key[1]) if topic is not None else None
            directory = logs.log_dir_of(*key)
            directory_id = self.ids.get(directory) if directory is not None else None
            if partition is None or directory_id is None or self.broker.node_id not in partition.replicas:
                self._unassigned.pop(key, None)
                continue
            if replica_directory(partition, self.broker.node_id) == directory_id:
                self._unassigned.pop(key, None)
                continue
            batch[key] = (directory_id, topic.topic_id)
            if len(batch) >= ASSIGNMENTS_PER_REQUEST_MAX:
                break
        return batch

    async def _send(self, batch: dict[Key, tuple[uuid.UUID, uuid.UUID]]) -> set[Key]:
        """One AssignReplicasToDirs; the keys the controller took."""
        by_dir: dict = {}
        for (_, partition), (directory_id, topic_id) in batch.items():
            by_dir.setdefault(directory_id, {}).setdefault(topic_id, []).append(partition)
        request = _ARD.AssignReplicasToDirsRequest(
            broker_id=self.broker.node_id,
            broker_epoch=self.broker.lifecycle.broker_epoch,
            directories=[
                _ARD.DirectoryData(
                    id=directory_id,
                    topics=[
                        _ARD.TopicData(topic_id=topic_id, partitions=[_ARD.PartitionData(partition_index=p) for p in parts])
                        for topic_id, parts in topics.items()
                    ],
                )
                for directory_id, topics in by_dir.items()
            ],
        )
        broker = self.broker
        if broker.raft.is_leader:
            errors = await broker.controller.assign_replicas_to_dirs(request)
        else:
            response = await broker.controller_channel.send(ASSIGN_REPLICAS_TO_DIRS, 0, request)
            if response is None:
                return set()
            if response.error_code != ErrorCode.NONE:
                errors = {None: response.error_code}
            else:
                errors = {
                    (d.id, t.topic_id, p.partition_index): p.error_code
                    for d in response.directories
                    for t in d.topics
                    for p in t.partitions
                }
        if None in errors:
            log.info("AssignReplicasToDirs answered %s", ErrorCode(errors[None]).name)
            return set()
        # Taken, or refused for good (the partition or this replica is gone): done either way.
        retriable = {ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT}
        return {
            key
            for key, (directory_id, topic_id) in batch.items()
            if errors.get((directory_id, topic_id, key[1]), ErrorCode.NOT_CONTROLLER) not in retriable
        }

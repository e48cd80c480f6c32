"""The broker's partition replicas (Kafka's ReplicaManager): roles, leader state,
acks=all waits, follower fetching and ISR changes, wired to the event loop.

Roles come from the committed metadata image only. For each partition this
broker is a replica of, a new image makes it:

* **leader** when the image names it with a leader epoch it has not led yet:
  a fresh :class:`replication.partition.LeaderPartition` (followers' progress
  unknown until they fetch), and it stops fetching the partition; when it led
  the previous epoch too, the new state carries the followers' progress over
  and acks=all produces waiting here go on under it;
* **follower** when another broker leads with a new epoch: acks=all produces
  waiting here end with NOT_LEADER_OR_FOLLOWER, and the partition moves to the
  fetcher of its leader, which truncates by epoch (KIP-320) before appending;
* **neither** when the partition has no leader (it stops fetching and keeps
  its log) or this broker is no longer a replica.

Partitions with a single replica need no replication: their logs keep moving
their own high watermark and their leader state is made on first use, so a
broker with many such partitions opens no log it is not asked about;
``hosted()`` counts hosted and led partitions from the image, so that the
metrics and the console count them all the same.

This is the shell: it runs on the event loop and carries out decisions made
by pure code the replication simulation runs too: roles, fetch answers and
AlterPartition answers in ``replication/replica_core.py``, the leader's rules
in ``replication/partition.py``, acks=all and DeleteRecords waits in
``replication/delayed.py`` and ``replication/purgatory.py``. The follower's
fetch loops are ``broker/replica/fetcher.py``.

Past 700 lines on purpose: the roles, the leader side and the follower side
all read and change the same maps of leader and follower state.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import NamedTuple

from broker.clock import monotonic_ms
from broker.replica.fetcher import ReplicaFetcher
from controller.directories import offline_replicas
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from controller.metadata.records import RESOURCE_BROKER
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.delayed import DelayedDeleteRecords, DelayedProduce
from replication.partition import IsrProposal, LeaderPartition
from replication.replica_core import (
    Backoff,
    FollowerState,
    Role,
    StartOver,
    Truncate,
    adopt_leader_marks,
    apply_alter_partition_answer,
    isr_shrink,
    on_fetch_response,
    on_follower_fetch,
    role_for,
    should_resend,
)
from replication.throttle import UNLIMITED_RATE, ReplicationQuota, is_throttled
from storage.append_checks import AppendError
from storage.log import PartitionLog

log = logging.getLogger(__name__)

ALTER_PARTITION = APIS_BY_NAME["AlterPartition"]
ALTER_PARTITION_VERSION = 3
_AP = struct_classes(ALTER_PARTITION.request)
Key = tuple[str, int]


def _now_ms() -> int:
    # Replica lag and ISR changes are durations: the monotonic clock, so a
    # stepped wall clock neither shrinks the ISR nor keeps a dead follower in it.
    return monotonic_ms()


def _resolver(future: asyncio.Future):
    """Sets the future's result unless its waiter went away (cancelled it)."""

    def resolve(*answer) -> None:
        if not future.done():
            future.set_result(answer[0] if len(answer) == 1 else answer)

    return resolve


class LocalReplica(NamedTuple):
    """What this broker holds of one partition, checked for a partition-scoped
    request (see ``ReplicaManager.local_replica``). ``error`` is NONE when the
    request may be served; ``leader`` is None when it is served by a follower."""

    error: ErrorCode
    partition: PartitionImage | None = None
    plog: PartitionLog | None = None
    leader: LeaderPartition | None = None


@dataclass(frozen=True)
class HostedPartitions:
    """Kafka's ReplicaManager gauges: PartitionCount, LeaderCount,
    UnderReplicatedPartitions, UnderMinIsrPartitionCount."""

    count: int
    leaders: int
    under_replicated: int
    under_min_isr: int


class ReplicaManager:
    def __init__(self, broker):
        self.broker = broker
        config = broker.config
        self.node_id = broker.node_id
        self.lag_max_ms = config["replica.lag.time.max.ms"]
        self.leaders: dict[Key, LeaderPartition] = {}
        self.followers: dict[Key, FollowerState] = {}
        # The broker's one purgatory and its timer (acks=all, DeleteRecords and
        # long-polling fetches wait there).
        self.purgatory = broker.partition_watch
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.fetcher_count = config["num.replica.fetchers"]
        self._hw_initialised: set[Key] = set()
        # key -> (leader, the proposal as it was made): sent as made, so a proposal
        # overtaken by a newer ISR or a follower's restart is refused, not applied.
        self._alter_queue: dict[Key, tuple[LeaderPartition, IsrProposal]] = {}
        # Partitions whose change the controller last answered with an error that
        # settles nothing (the change is sent again), and that error: logged once
        # per error, not at every resend.
        self._alter_unsettled: dict[Key, ErrorCode] = {}
        self._alter_wakeup: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self.running = False
        # No leadership until the controller has seen this process caught up with its
        # own registration (it unfences us then). Before, the image may still name
        # this broker leader of an epoch whose log lost its unflushed tail in a
        # crash; the registration's commit moves such leaderships away.
        self.may_lead = False
        # key -> a leader epoch the controller said is over (AlterPartition
        # answered FENCED_LEADER_EPOCH) while this broker's image still names it
        # leader at that epoch: its metadata is behind, perhaps after a network
        # cut, and a leader (or group coordinator) that knows it was replaced
        # must not go on answering as one until the metadata catches up.
        self.superseded: dict[Key, int] = {}
        # Replication throttles (KIP-73): bytes this broker sent to throttled
        # followers, and fetched for its throttled partitions.
        self.leader_quota = ReplicationQuota()
        self.follower_quota = ReplicationQuota()
        # ISR changes of partitions led here, counted when the controller commits
        # them (Kafka's IsrShrinksPerSec/IsrExpandsPerSec), read by broker/http/metrics.py.
        self.isr_shrinks = 0
        self.isr_expands = 0
        # (image, partitions hosted, those led with their min.insync.replicas) for hosted().
        self._hosted_cache: tuple[MetadataImage, int, list] | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.running = True
        self._alter_wakeup = asyncio.Event()
        self._tasks.append(loop.create_task(self._isr_check_loop(), name="isr expiration"))
        self._tasks.append(loop.create_task(self._alter_partition_loop(), name="alter partition sender"))
        for fetcher in self.fetchers.values():
            fetcher.start()

    async def stop(self) -> None:
        self.running = False
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        for task in self._tasks:
            task.cancel()
        for key in list(self.leaders):
            self.purgatory.cancel_key(key)
        self.purgatory.close()

    # ----------------------------------------------------------------- throttles

    def throttle_rate(self, name: str) -> int:
        """A dynamic broker config rate (bytes/s): this broker's own value, else the
        cluster-wide default, else no limit."""
        image = self.broker.image
        value = image.configs_of(RESOURCE_BROKER, str(self.node_id)).get(name)
        if value is None:
            value = image.configs_of(RESOURCE_BROKER, "").get(name)
        return UNLIMITED_RATE if value is None else int(value)

    def throttled(self, topic: TopicImage, config_name: str, partition_id: int, broker_id: int) -> bool:
        """Whether ``broker_id``'s replica of the partition is listed in the topic's
        ``leader.`` / ``follower.replication.throttled.replicas``."""
        return is_throttled(topic.configs.get(config_name, ""), partition_id, broker_id)

    def topic_config_changed(self, topic: TopicImage) -> None:
        """The topic's effective configs changed (its overrides, or broker defaults
        through dynamic broker configs): the partitions led here apply its
        ``min.insync.replicas`` to the next acks=all produce at once."""
        min_insync_replicas = int(self.broker.topic_config(topic).get("min.insync.replicas", 1))
        for partition_id in topic.partitions:
            leader = self.leaders.get((topic.name, partition_id))
            if leader is not None:
                leader.min_insync_replicas = min_insync_replicas

    # ----------------------------------------------------------------- roles

    def apply_image(self, old: MetadataImage, new: MetadataImage) -> None:
        """Take the roles ``new`` gives this broker (``old`` is what was applied before)."""
        now_ms = _now_ms()
        brokers_changed = old.brokers is not new.brokers
        if brokers_changed:
            ineligible = self._ineligible(new)
        for name, topic in new.topics.items():
            previous = old.topics.get(name)
            if previous is topic:
                continue
            same_topic = previous is not None and previous.topic_id == topic.topic_id
            for partition in topic.partitions.values():
                old_partition = previous.partitions.get(partition.partition_id) if same_topic else None
                if old_partition is partition:
                    continue
                self._apply_partition(new, topic, partition, old_partition, now_ms)
        for name, topic in old.topics.items():
            current = new.topics.get(name)
            if current is topic:
                continue  # unchanged (images copy a topic only when it changes): nothing to stop
            if current is not None and current.topic_id == topic.topic_id:
                for partition_id, partition in topic.partitions.items():
                    now = current.partitions.get(partition_id)
                    if now is not None and self.node_id in partition.replicas and self.node_id not in now.replicas:
                        self._stop_replica((name, partition_id))
                continue
            for partition_id in topic.partitions:
                self._stop_replica((name, partition_id))
        if brokers_changed:
            registered = self._registered_epochs(new)
            for key, leader in self.leaders.items():
                topic = new.topics.get(key[0])
                partition = topic.partitions.get(key[1]) if topic is not None else None
                if leader.set_ineligible(self._ineligible_for(new, partition, ineligible), now_ms, registered):
                    self._high_watermark_moved(key, leader)

    def registration_caught_up(self) -> None:
        """The controller unfenced this process: take the leaderships the image gives."""
        if self.may_lead:
            return
        self.may_lead = True
        self.apply_image(MetadataImage(), self.broker.image)

    def _ineligible(self, image: MetadataImage) -> set[int]:
        return {b for b, r in image.brokers.items() if r.fenced or r.in_controlled_shutdown}

    @staticmethod
    def _ineligible_for(image: MetadataImage, partition: PartitionImage | None, ineligible: set[int]) -> set[int]:
        """``ineligible`` and, for ``partition``, the replicas in a log dir their
        broker reported offline (KIP-858): a follower without a log is never
        counted caught up from the progress it made before, nor taken back into
        the ISR (the controller would refuse it: INELIGIBLE_REPLICA)."""
        if partition is None or not partition.directories:
            return ineligible
        offline = offline_replicas(image, partition)
        return ineligible | offline if offline else ineligible

    def _registered_epochs(self, image: MetadataImage) -> dict[int, int]:
        return {b: r.epoch for b, r in image.brokers.items()}

    def _apply_partition(
        self, image: MetadataImage, topic: TopicImage, partition: PartitionImage, old: PartitionImage | None, now_ms: int
    ) -> None:
        key = (topic.name, partition.partition_id)
        leader = self.leaders.get(key)
        following = self.followers.get(key)
        role = role_for(
            self.node_id,
            partition.leader,
            partition.leader_epoch,
            partition.replicas,
            may_lead=self.may_lead,
            superseded=self.is_superseded(key, partition.leader_epoch),
            led_epoch=None if leader is None else leader.leader_epoch,
            followed=None if following is None else (following.leader_id, following.leader_epoch),
        )
        if role is Role.NOT_A_REPLICA:
            if old is not None and self.node_id in old.replicas:
                self._stop_replica(key)
            return
        if role is Role.HELD_BACK:
            self._resign(key)
            self._stop_following(key)
            return
        self.superseded.pop(key, None)  # a newer epoch, or no longer ours: the image has caught up
        if role is Role.LEADER_UPDATE:
            self._stop_following(key)
            leader.set_replicas(partition.replicas)
            if partition.directories != (old.directories if old is not None else ()):
                # A replica's log dir named or gone offline (KIP-858).
                if leader.set_ineligible(
                    self._ineligible_for(image, partition, self._ineligible(image)), now_ms, self._registered_epochs(image)
                ):
                    self._high_watermark_moved(key, leader)
            plog = self.broker.logs.logs.get(key) if len(partition.replicas) > 1 else None
            if plog is not None and not plog.replicated:
                # A reassignment gave a single replica followers: from now on
                # the high watermark waits for the ISR, not for the append.
                # (Its current one, the log end, is right: it was alone.)
                plog.replicated = True
                self._hw_initialised.add(key)
            if leader.committed(partition.isr, partition.partition_epoch, now_ms):
                self._high_watermark_moved(key, leader)
        elif role is Role.NEW_LEADER:
            self._stop_following(key)
            if leader is not None and old is not None and old.leader == self.node_id:
                self._lead_next_epoch(image, topic, partition, leader, now_ms)
                return
            self._resign(key)
            if len(partition.replicas) > 1:
                self._become_leader(image, topic, partition, now_ms)
        elif role is Role.LEADERLESS:
            self._resign(key)
            self._stop_following(key)
        elif role is Role.FOLLOWING:
            self._resign(key)
        else:
            self._resign(key)
            self._become_follower(topic, partition)

    def _log(self, key: Key) -> PartitionLog | None:
        return self.broker.partition_log(*key)

    def _init_high_watermark(self, key: Key, plog: PartitionLog) -> None:
        """The first time a replicated partition's log is used after opening, its high
        watermark is the checkpointed one: the log may hold uncommitted batches."""
        plog.replicated = True
        if key in self._hw_initialised:
            return
        self._hw_initialised.add(key)
        checkpointed = self.broker.logs.checkpointed_high_watermark(*key)
        plog.reset_high_watermark(min(max(checkpointed or 0, plog.log_start_offset), plog.log_end_offset))

    def _become_leader(self, image: MetadataImage, topic: TopicImage, partition: PartitionImage, now_ms: int) -> LeaderPartition | None:
        key = (topic.name, partition.partition_id)
        plog = self._log(key)
        if plog is None:
            return None
        if len(partition.replicas) > 1:
            self._init_high_watermark(key, plog)
        else:
            plog.replicated = False
            plog.high_watermark = plog.log_end_offset
        config = self.broker.topic_config(topic)
        leader = LeaderPartition(
            local_id=self.node_id,
            replicas=partition.replicas,
            isr=partition.isr,
            leader_epoch=partition.leader_epoch,
            partition_epoch=partition.partition_epoch,
            high_watermark=plog.high_watermark,
            now_ms=now_ms,
            lag_max_ms=self.lag_max_ms,
            min_insync_replicas=int(config.get("min.insync.replicas", 1)),
            ineligible=self._ineligible_for(image, partition, self._ineligible(image)),
            registered_epochs=self._registered_epochs(image),
            log=plog,
        )
        self.leaders[key] = leader
        if len(partition.replicas) > 1:
            log.info(
                "%s-%d: leader at epoch %d, isr %s, high watermark %d",
                key[0], key[1], partition.leader_epoch, list(partition.isr), plog.high_watermark,
            )
        return leader

    def _lead_next_epoch(
        self, image: MetadataImage, topic: TopicImage, partition: PartitionImage, previous: LeaderPartition, now_ms: int
    ) -> None:
        """A new leader epoch that leaves the leadership here (a reassignment that
        adds or removes replicas, or any other change that bumps the epoch
        without moving the leader): new leader state for the epoch, carrying
        what the followers were known to hold, and the acks=all produces and
        DeleteRecords waiting here go on under it, as Kafka's do (they end with
        NOT_LEADER_OR_FOLLOWER only when the leadership leaves). An ISR change
        proposed in the old epoch is void."""
        key = (topic.name, partition.partition_id)
        self._alter_queue.pop(key, None)
        del self.leaders[key]
        leader = self._become_leader(image, topic, partition, now_ms)
        if leader is None:  # the log went away: nothing can complete here
            self.purgatory.cancel_key(key)
            return
        leader.carry_over(previous, now_ms)
        # The waits re-test under the new state (a smaller ISR may complete them
        # now), and long-polling fetches re-read against the new epoch.
        self._high_watermark_moved(key, leader)

    def _resign(self, key: Key) -> None:
        if self.leaders.pop(key, None) is not None:
            self.purgatory.cancel_key(key)
            self._alter_queue.pop(key, None)
            self._alter_unsettled.pop(key, None)

    def _become_follower(self, topic: TopicImage, partition: PartitionImage) -> None:
        key = (topic.name, partition.partition_id)
        plog = self._log(key)
        if plog is None:
            return
        self._init_high_watermark(key, plog)
        self._stop_following(key)
        state = FollowerState(topic.topic_id, partition.leader, partition.leader_epoch)
        self.followers[key] = state
        log.info(
            "%s-%d: follower of %d at epoch %d from offset %d",
            key[0], key[1], partition.leader, partition.leader_epoch, plog.log_end_offset,
        )
        self._fetcher_for(partition.leader, key).add(key)

    def restart_following(self, key: Key) -> None:
        """Fetch ``key`` again from its log end (which was just cut) under a new
        follower state: the answer to a fetch already out was asked for the log
        as it was, and is dropped (``follower_response`` checks the state)."""
        if key not in self.followers:
            return
        topic = self.broker.image.topics.get(key[0])
        partition = topic.partitions.get(key[1]) if topic is not None else None
        if partition is not None:
            self._become_follower(topic, partition)

    def _fetcher_for(self, leader_id: int, key: Key) -> ReplicaFetcher:
        index = hash(key) % self.fetcher_count
        fetcher = self.fetchers.get((leader_id, index))
        if fetcher is None:
            fetcher = ReplicaFetcher(self, leader_id, index)
            self.fetchers[(leader_id, index)] = fetcher
            if self.running:
                fetcher.start()
        return fetcher

    def _stop_following(self, key: Key) -> None:
        state = self.followers.pop(key, None)
        if state is None:
            return
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    def _stop_replica(self, key: Key) -> None:
        self._resign(key)
        self._stop_following(key)
        self._hw_initialised.discard(key)

    def dir_offline(self, keys: list[Key]) -> None:
        """Their log dir went offline (broker/replica/log_dirs.py): stop leading and
        following them. The produces and DeleteRecords waiting on them end now,
        unacknowledged; they stay replicas here in the metadata, without a log,
        until the controller moves their leaderships and a restart brings the
        dir back."""
        for key in keys:
            self._stop_replica(key)
    # ----------------------------------------------------------------- leader side

    def leader_for(self, topic: str, partition_id: int) -> LeaderPartition | None:
        """This broker's leader state of a partition, or None when it does not lead it."""
        key = (topic, partition_id)
        leader = self.leaders.get(key)
        if leader is not None:
            return leader
        image = self.broker.image
        topic_image = image.topics.get(topic)
        partition = topic_image.partitions.get(partition_id) if topic_image is not None else None
        if partition is None or partition.leader != self.node_id or not self.may_lead:
            return None
        if self.is_superseded(key, partition.leader_epoch):
            return None
        return self._become_leader(image, topic_image, partition, _now_ms())

    def local_replica(self, topic: str, partition_id: int, *, current_leader_epoch: int = -1, require_leader: bool = True) -> LocalReplica:
        """The checks every partition-scoped request makes before it reads or changes
        a replica, in Kafka's order (ReplicaManager.getPartitionOrException, then
        Partition.localLogWithEpochOrThrow): a topic or partition the metadata does
        not know is UNKNOWN_TOPIC_OR_PARTITION; one this broker does not host is
        NOT_LEADER_OR_FOLLOWER; a ``current_leader_epoch`` older than the one this
        broker knows is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH; and
        with ``require_leader``, a follower answers NOT_LEADER_OR_FOLLOWER. A
        follower's state is never read or changed as if it led the partition."""
        topic_image = self.broker.image.topics.get(topic)
        partition = topic_image.partitions.get(partition_id) if topic_image is not None else None
        if partition is None:
            return LocalReplica(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        plog = self.broker.partition_log(topic, partition_id)
        if plog is None:
            if self.broker.logs.is_offline(topic, partition_id):
                return LocalReplica(ErrorCode.KAFKA_STORAGE_ERROR, partition)
            return LocalReplica(ErrorCode.NOT_LEADER_OR_FOLLOWER, partition)
        if current_leader_epoch != -1 and current_leader_epoch != partition.leader_epoch:
            epoch_error = ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < partition.leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
            return LocalReplica(epoch_error, partition, plog)
        leader = self.leader_for(topic, partition_id)
        if leader is None and require_leader:
            return LocalReplica(ErrorCode.NOT_LEADER_OR_FOLLOWER, partition, plog)
        return LocalReplica(ErrorCode.NONE, partition, plog, leader)

    def hosted(self) -> HostedPartitions:
        """Partitions this broker hosts and those it leads, as the metadata gives them,
        whether or not their logs are open yet: after a restart a single-replica log
        is opened on first use, and until then it is still hosted and led here (the
        state of a leadership taken up, where there is one, is the more current)."""
        image = self.broker.image
        cached = self._hosted_cache
        if cached is None or cached[0] is not image:
            count = 0
            led: list[tuple[Key, PartitionImage, int]] = []
            for topic in image.topics.values():
                min_insync_replicas = None
                for partition in topic.partitions.values():
                    if self.node_id not in partition.replicas:
                        continue
                    count += 1
                    if partition.leader == self.node_id:
                        if min_insync_replicas is None:
                            min_insync_replicas = int(self.broker.topic_config(topic).get("min.insync.replicas", 1))
                        led.append(((topic.name, partition.partition_id), partition, min_insync_replicas))
            cached = self._hosted_cache = (image, count, led)
        _, count, led = cached
        leaders = under = under_min = 0
        if self.may_lead:
            for key, partition, min_insync_replicas in led:
                if self.is_superseded(key, partition.leader_epoch):
                    continue
                leaders += 1
                state = self.leaders.get(key)
                if state is not None:
                    isr, replicas, min_insync_replicas = state.isr, state.replicas, state.min_insync_replicas
                else:
                    isr, replicas = partition.isr, partition.replicas
                under += len(isr) < len(replicas)
                under_min += len(isr) < min_insync_replicas
        return HostedPartitions(count, leaders, under, under_min)

    def is_superseded(self, key: Key, leader_epoch: int) -> bool:
        """Whether the controller said ``leader_epoch`` of ``key`` is over (see ``superseded``)."""
        return leader_epoch <= self.superseded.get(key, -1)

    def is_follower(self, topic: str, partition_id: int) -> bool:
        return (topic, partition_id) in self.followers

    def leader_appended(self, key: Key, leader: LeaderPartition, plog: PartitionLog) -> None:
        if leader.leader_appended(plog.log_end_offset, _now_ms()):
            self._high_watermark_moved(key, leader)

    def mirror_appended(self, key: Key, records) -> int:
        """Append batches a mirror partition's leader fetched from the link's
        source, exactly as they are (``PartitionLog.append_as_follower``: the
        source's offsets, epochs, timestamps and producer ids), then do what
        the leader's own write does after an append: move the high watermark
        (at once for a single replica) and wake waiting fetches. Returns the
        bytes appended (0: not the leader, or nothing new); AppendError when a
        batch fails its checks (nothing appended)."""
        leader = self.leader_for(*key)
        plog = self._log(key)
        if leader is None or plog is None:
            return 0
        try:
            appended = plog.append_as_follower(records)
        except OSError as exc:
            self.broker.log_dir_failed(plog, exc)  # the dir goes offline (or the broker halts)
            return 0
        if appended:
            self.leader_appended(key, leader, plog)
            self.broker.partition_watch.notify(key)
        return appended

    def follower_fetched(
        self,
        key: Key,
        leader: LeaderPartition,
        plog: PartitionLog,
        replica_id: int,
        fetch_offset: int,
        broker_epoch: int = -1,
        log_start_offset: int = -1,
    ) -> None:
        fetched = on_follower_fetch(leader, plog.log_end_offset, replica_id, fetch_offset, _now_ms(), broker_epoch, log_start_offset)
        if fetched.high_watermark_moved:
            # Every acks=all round trip ends here: the produces waiting on the
            # mark go on, consumers' fetches read again, and the followers'
            # fetches answer with the new mark (FollowerProgress.last_sent_high_watermark).
            self._high_watermark_moved(key, leader)
        elif fetched.log_start_moved:
            self.purgatory.check(key)  # a DeleteRecords may be waiting for this follower
        if fetched.expansion is not None:
            self._propose(key, leader, fetched.expansion)

    def _high_watermark_moved(self, key: Key, leader: LeaderPartition) -> None:
        """The leader state moved the high watermark (in its log, its one home)."""
        self.purgatory.check(key)
        self.broker.partition_watch.notify(key)

    def _leader_in_tenure(self, key: Key, leader: LeaderPartition):
        """What a wait made under ``leader`` asks each time it is tested: the leader
        state of the current epoch while this broker has led the partition
        without a break since (``LeaderPartition.tenure``), else None."""
        tenure = leader.tenure

        def leader_now() -> LeaderPartition | None:
            current = self.leaders.get(key)
            return current if current is not None and current.tenure is tenure else None

        return leader_now

    def wait_for_acks(self, key: Key, leader: LeaderPartition, required_offset: int, timeout_ms: int) -> asyncio.Future:
        """A future resolved with the acks=all outcome of a batch ending before ``required_offset``."""
        future = asyncio.get_running_loop().create_future()
        operation = DelayedProduce(self._leader_in_tenure(key, leader), required_offset, _resolver(future))
        try:
            self.purgatory.add(operation, (key,), timeout_ms)
        except OverflowError:
            future.set_result(ErrorCode.REQUEST_TIMED_OUT)
        return future

    def wait_for_low_watermark(self, key: Key, leader: LeaderPartition, plog: PartitionLog, required_offset: int, timeout_ms: int) -> asyncio.Future:
        """A future resolved with ``(error, low watermark)`` once every live replica's
        log start offset reached ``required_offset`` (REQUEST_TIMED_OUT after
        ``timeout_ms``; NOT_LEADER_OR_FOLLOWER when leadership moves first)."""
        future = asyncio.get_running_loop().create_future()
        operation = DelayedDeleteRecords(
            self._leader_in_tenure(key, leader), lambda: plog.log_start_offset, required_offset, _resolver(future)
        )
        try:
            self.purgatory.add(operation, (key,), timeout_ms)
        except OverflowError:
            future.set_result((ErrorCode.REQUEST_TIMED_OUT, -1))
        return future

    # ----------------------------------------------------------------- ISR changes

    async def _isr_check_loop(self) -> None:
        interval_s = max(self.lag_max_ms / 2, 50) / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = _now_ms()
            for key, leader in list(self.leaders.items()):
                shrunk = isr_shrink(leader, leader.log_end_offset, now_ms)  # read from its log
                if shrunk is not None:
                    self._propose(key, leader, shrunk)

    def _propose(self, key: Key, leader: LeaderPartition, new_isr: tuple[int, ...]) -> None:
        log.info("%s-%d: asking the controller to change the isr from %s to %s", key[0], key[1], list(leader.isr), list(new_isr))
        self._alter_queue[key] = (leader, leader.begin_change(new_isr))
        if self._alter_wakeup is not None:
            self._alter_wakeup.set()

    async def _alter_partition_loop(self) -> None:
        """Sends queued ISR changes, all pending partitions in one AlterPartition
        (Kafka's AlterPartitionManager batches the same way)."""
        backoff_s = 0.1
        while True:
            await self._alter_wakeup.wait()
            self._alter_wakeup.clear()
            batch, self._alter_queue = self._alter_queue, {}
            if not batch:
                continue
            response = await self._send_alter_partition(batch)
            retry = {}
            now_ms = _now_ms()
            if response is None or response.error_code != ErrorCode.NONE:
                if response is not None:
                    log.info("AlterPartition failed: %s", ErrorCode(response.error_code).name)
                retry = batch
            else:
                answered = self._apply_alter_response(batch, response, now_ms)
                retry = {k: v for k, v in batch.items() if k not in answered}
            for key, entry in retry.items():
                leader, proposal = entry
                if should_resend(leader, self.leaders.get(key) is leader, proposal):
                    self._alter_queue.setdefault(key, entry)
            if retry:
                await asyncio.sleep(backoff_s)
                self._alter_wakeup.set()

    async def _send_alter_partition(self, batch):
        image = self.broker.image
        registration = image.brokers.get(self.node_id)
        broker_epoch = registration.epoch if registration is not None else -1
        topics: dict = {}
        for (name, partition_id), (leader, proposal) in batch.items():
            topic = image.topics.get(name)
            if topic is None:
                continue
            topics.setdefault(topic.topic_id, []).append(
                _AP.PartitionData(
                    partition_index=partition_id,
                    leader_epoch=leader.leader_epoch,
                    new_isr_with_epochs=[
                        _AP.BrokerState(
                            broker_id=b,
                            broker_epoch=proposal.broker_epoch(b, broker_epoch),
                        )
                        for b in proposal.isr
                    ],
                    leader_recovery_state=0,
                    partition_epoch=proposal.partition_epoch,
                )
            )
        request = _AP.AlterPartitionRequest(
            broker_id=self.node_id,
            broker_epoch=broker_epoch,
            topics=[_AP.TopicData(topic_id=topic_id, partitions=parts) for topic_id, parts in topics.items()],
        )
        controller = self.broker.controller
        try:
            if self.broker.raft.is_leader:
                return await controller.alter_partition(request, ALTER_PARTITION_VERSION)
            return await self.broker.controller_channel.send(ALTER_PARTITION, ALTER_PARTITION_VERSION, request)
        except Exception as exc:  # a failover or a broken connection: try again later
            log.info("AlterPartition could not be sent: %s", exc)
            return None

    def _apply_alter_response(self, batch, response, now_ms: int) -> set[Key]:
        image = self.broker.image
        answered = set()
        for topic_response in response.topics:
            name = image.topic_names_by_id.get(topic_response.topic_id)
            for p in topic_response.partitions:
                key = (name, p.partition_index)
                entry = batch.get(key)
                if entry is None:
                    continue
                leader = entry[0]
                error = ErrorCode(p.error_code)
                committed = (p.leader_epoch, p.isr, p.partition_epoch) if error == ErrorCode.NONE else None
                outcome = apply_alter_partition_answer(leader, self.leaders.get(key) is leader, error, committed, now_ms)
                if outcome.answered:
                    answered.add(key)
                    self._alter_unsettled.pop(key, None)
                if outcome.refused is not None and outcome.answered:
                    log.info("%s-%d: AlterPartition refused: %s", key[0], key[1], outcome.refused.name)
                elif outcome.refused is not None and self._alter_unsettled.get(key) != outcome.refused:
                    self._alter_unsettled[key] = outcome.refused
                    log.info(
                        "%s-%d: the controller answered the isr change %s with %s: sending it again",
                        key[0], key[1], list(entry[1].isr), outcome.refused.name,
                    )
                if outcome.high_watermark_moved:
                    self._high_watermark_moved(key, leader)
                self.isr_shrinks += outcome.isr_change < 0
                self.isr_expands += outcome.isr_change > 0
                if outcome.superseded:
                    self._superseded_leader(key, leader)
        return answered

    def _superseded_leader(self, key: Key, leader: LeaderPartition) -> None:
        """The controller holds a newer leader epoch than ours: someone else may lead
        now. Stop answering as leader (producers and consumers get
        NOT_LEADER_OR_FOLLOWER and look again; a coordinator on the partition
        unloads its groups) until the metadata tells who leads."""
        log.info(
            "%s-%d: the controller is past leader epoch %d: not leading until the metadata catches up",
            key[0], key[1], leader.leader_epoch,
        )
        self.superseded[key] = leader.leader_epoch
        self._resign(key)
        self.broker.leadership_lost(key)

    # ----------------------------------------------------------------- follower side

    def fetch_state(self, key: Key):
        """(follower state, log) of a partition this broker follows, or None."""
        state = self.followers.get(key)
        if state is None:
            return None
        plog = self._log(key)
        if plog is None:
            return None
        return state, plog

    def follower_response(self, key: Key, state: FollowerState, partition_data) -> bool:
        """Carry out the leader's answer for one partition (the decisions are
        replication.replica_core's); False when the partition should back off (an
        error the metadata must resolve)."""
        if self.followers.get(key) is not state:
            return True  # the role changed while the fetch was out
        plog = self._log(key)
        if plog is None:
            return False
        diverging = partition_data.diverging_epoch
        step = on_fetch_response(
            ErrorCode(partition_data.error_code),
            None if diverging is None else (diverging.epoch, diverging.end_offset),
            partition_data.high_watermark,
            partition_data.log_start_offset,
            partition_data.records,
            plog,
        )
        if isinstance(step, Backoff):
            if step.error != ErrorCode.OFFSET_OUT_OF_RANGE:
                log.debug("%s-%d: fetch from %d: %s", key[0], key[1], state.leader_id, step.error.name)
            return False
        if isinstance(step, Truncate):
            log.info("%s-%d: leader %d: %s: truncating to %d", key[0], key[1], state.leader_id, step.reason, step.offset)
            plog.truncate_to(step.offset)
            return True
        if isinstance(step, StartOver):
            log.info("%s-%d: behind the leader's log start %d: starting over there", key[0], key[1], step.offset)
            plog.truncate_fully_and_start_at(step.offset)  # the high watermark starts there too
            return True
        appended = False
        if step.records:
            try:
                appended = plog.append_as_follower(step.records) > 0
            except OSError as exc:
                # The dir goes offline (or the broker halts): this replica stops following.
                self.broker.log_dir_failed(plog, exc)
                return False
            except AppendError as exc:
                # Kafka's fetcher keeps such a partition and asks again after
                # replica.fetch.backoff.ms (a batch spoiled on the way, or a leader
                # that has since cut its log, answers well the next time).
                log.error(
                    "%s-%d: a batch fetched from leader %d failed its checks (%s); nothing of it was appended, "
                    "fetching it again after replica.fetch.backoff.ms",
                    key[0], key[1], state.leader_id, exc,
                )
                return False
        # Caught up when nothing below the leader's high watermark is missing (Kafka's
        # fetch state lag), what the follower throttle asks.
        state.caught_up = plog.log_end_offset >= partition_data.high_watermark
        marks = adopt_leader_marks(partition_data.high_watermark, partition_data.log_start_offset, plog)
        if marks.high_watermark is not None:
            plog.high_watermark = marks.high_watermark
            appended = True
        if marks.delete_records_to is not None:
            plog.delete_records(marks.delete_records_to)
        if appended:
            self.broker.partition_watch.notify(key)
        return True

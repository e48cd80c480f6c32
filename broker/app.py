"""Wiring: the one place that picks concrete classes and connects them.

:class:`Broker` owns the log manager, the metadata controller and the
listeners; handlers receive it and read cluster state from its current
metadata image.

A little past 700 lines: every service a node runs is made, started,
told of metadata changes and stopped here, in the order they depend on each
other, and that order is easiest to check in one place.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import time

from broker.config import (
    BrokerConfig,
    ConfigError,
    format_broker_value,
)
from broker.controller_node.forwarding import FORWARDED_API_KEYS, ControllerChannel
from broker.controller_node.listener import build_controller_dispatcher
from broker.controller_node.quorum_controller import QuorumController
from broker.controller_node.raft_driver import RaftDriver
from broker.coordinators.groups.service import GroupService
from broker.coordinators.share_groups.service import SharePartitionService
from broker.coordinators.transactions.service import TransactionService
from broker.schemas.service import SchemaRegistryService
from broker.schemas.validation import SchemaValidator
from broker.http.endpoints import EndpointUnavailable, HttpEndpoints
from broker.lifecycle import BrokerLifecycleManager
from broker.replica.log_dirs import LogDirs
from broker.links.failback import apply_failback_cuts
from broker.links.mirrors import MirrorManager
from broker.links.multi_master import MultiMasterCopier
from broker.links.offset_sync import ConsumerOffsetSync
from broker.links.topic_watch import UPDATE_MIRROR_TOPIC, SourceTopicWatcher
from broker.loop_monitor import LoopMonitor
from broker.net.connection import KafkaConnection, RequestMemoryBudget
from broker.net.dispatch import Dispatcher
from broker.net.gate import ConnectionGate
from broker.net.in_process_client import InProcessClient
from broker.net.limits import ConnectionLimits
from broker.net.node_client import KafkaClientConnection
from broker.net.sasl_listener import sasl_listeners
from broker.net.security_setup import ListenerTls, node_security_of
from broker.net.tls import TLSAcceptor
from broker.replica.corruption import CorruptionHandler
from broker.replica.flusher import GroupFlusher
from broker.replica.manager import ReplicaManager
from broker.replica.partition_watch import PartitionWatch
from controller.authorizer import StandardAuthorizer, parse_super_users
from controller.balancer.driver import BalancerSettings
from controller.metadata.image import MetadataImage, TopicImage
from controller.metadata.records import RESOURCE_BROKER
from controller.raft.disk_log import DiskRaftLog
from controller.raft.quorum_state_store import QuorumStateStore
from controller.topic_commands import METADATA_TOPIC, ClusterDefaults
from replication.fetch_session import FetchSessionCache
from storage.dir_lock import lock_dirs
from storage.log import PartitionLog
from storage.manager import LogManager
from storage.meta_properties import MetaPropertiesError, ensure_meta_properties, require_formatted
from storage.topic_config import effective_topic_config, log_config_from, topic_defaults_from

log = logging.getLogger(__name__)

METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-0"

# How long a sliced job (see run_in_slices) may hold the event loop at a time.
SLICE_BUDGET_S = 0.005
# New partitions whose files a worker thread makes at a time (_create_new_logs).
NEW_LOGS_PER_CHUNK = 64


async def run_in_slices(steps, budget_s: float = SLICE_BUDGET_S) -> int:
    """Run an iterator of small steps, letting the event loop serve requests
    whenever a slice has run ``budget_s``; returns the sum of what the steps yield."""
    total = 0
    slice_started = time.perf_counter()
    for value in steps:
        total += value or 0
        if time.perf_counter() - slice_started >= budget_s:
            await asyncio.sleep(0)
            slice_started = time.perf_counter()
    return total


class _RecoveryProgress:
    """Start-up progress over the partition logs found on disk, logged every
    PROGRESS_EVERY_S while logs are recovered after an unclean shutdown."""

    PROGRESS_EVERY_S = 5.0

    def __init__(self, total: int, *, clean: bool):
        self.total = total
        self.clean = clean
        self.count = 0
        self.started_s = self.logged_s = time.monotonic()
        if not clean and total:
            log.info("recovering %d partition logs after an unclean shutdown", total)

    def step(self) -> None:
        self.count += 1
        now_s = time.monotonic()
        if not self.clean and now_s - self.logged_s >= self.PROGRESS_EVERY_S:
            self.logged_s = now_s
            log.info(
                "recovered %d of %d partition logs (%.0f%%, %.0f s)",
                self.count, self.total, 100.0 * self.count / self.total, now_s - self.started_s,
            )

    def done(self) -> None:
        if not self.clean and self.total:
            log.info("recovered %d partition logs in %.1f s", self.count, time.monotonic() - self.started_s)


class ListenerUnavailable(ConfigError):
    """A listener's address cannot be bound (in use, not on this host, no
    permission): reported, like a bad config value, as one line."""


def _bootstrap_records(config: BrokerConfig) -> list:
    from controller.metadata.bootstrap import BootstrapError, read_bootstrap_file

    try:
        return read_bootstrap_file(config.metadata_log_dir)
    except BootstrapError as exc:
        raise MetaPropertiesError(f"{exc}; format the node again, or remove the file to start without it") from None


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id = config.node_id
        # First: a bad certificate, key password or TLS key stops the node before it touches its data.
        # Rebuilt from this broker's dynamic listener TLS keys as the image changes (_apply_dynamic_tls).
        self.listener_tls = ListenerTls(config)
        # And the client side of the listeners it reaches other nodes on.
        self.node_security = node_security_of(config)
        # SCRAM users are read from the current metadata image at each authentication.
        self.listener_sasl = sasl_listeners(config, lambda: self.image.scram_credentials)
        # The ACL authorizer, None without authorizer.class.name (everything allowed,
        # the ACL APIs answer SECURITY_DISABLED). It follows the image: rebuilt from
        # the caught-up image at start, then on each change (_on_metadata_change).
        # Client listeners open only after that (_start_metadata).
        self.authorizer = (
            StandardAuthorizer(
                super_users=parse_super_users(config["super.users"]),
                allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"],
            )
            if config["authorizer.class.name"]
            else None
        )
        formatted_dirs = list(dict.fromkeys([*config.log_dirs, config.metadata_log_dir]))
        # Before anything is read: a second process on the same data is refused.
        self._dir_locks = lock_dirs(formatted_dirs)
        if not config.single_node_quorum and config["cluster.id"] is None:
            # Every node of a cluster must carry the same id: it cannot be made up here.
            require_formatted(formatted_dirs)
        self.cluster_id = ensure_meta_properties(formatted_dirs, config.node_id, config["cluster.id"])
        self.logs = LogManager(
            config.log_dirs,
            max_open_files=self._open_files_budget(),
            producer_id_expiration_ms=config["producer.id.expiration.ms"],
        )
        # The log dirs' ids, the failed ones, and which holds each replica (JBOD).
        self.log_dirs = LogDirs(self)
        self.is_broker = "broker" in config.roles
        self.is_controller = "controller" in config.roles
        # The metadata log and the quorum-state file live in __cluster_metadata-0
        # of metadata.log.dir (by default the first log dir), as Kafka's do.
        metadata_dir = config.metadata_log_dir / METADATA_PARTITION_DIR
        self.raft_log = DiskRaftLog(metadata_dir, segment_bytes=config["metadata.log.segment.bytes"])
        self.controller = QuorumController(
            self.raft_log,
            ClusterDefaults(
                # Until brokers register, a combined node places replicas on itself;
                # a controller-only node has nowhere to put them.
                broker_ids=(config.node_id,) if self.is_broker else (),
                num_partitions=config["num.partitions"],
                replication_factor=config["default.replication.factor"],
            ),
            snapshot_bytes_between=config["metadata.log.max.record.bytes.between.snapshots"],
            snapshot_interval_ms=config["metadata.log.max.snapshot.interval.ms"],
            cluster_id=self.cluster_id,
            broker_session_timeout_ms=config["broker.session.timeout.ms"],
            leader_rebalance_interval_ms=(
                config["leader.imbalance.check.interval.seconds"] * 1000 if config["auto.leader.rebalance.enable"] else None
            ),
            leader_imbalance_percentage=config["leader.imbalance.per.broker.percentage"],
            unclean_leader_election=config["unclean.leader.election.enable"],
            origin_id=config["cluster.link.origin.id"],
            balancer=BalancerSettings(
                mode=config["balancer.mode"],
                broker_failure_threshold_ms=config["balancer.broker.failure.threshold.ms"],
                throttle_bytes_per_second=config["balancer.throttle.bytes.per.second"],
                max_moves_per_broker=config["balancer.max.moves.per.broker"],
                imbalance_threshold_percent=config["balancer.imbalance.threshold.percent"],
                disk_threshold_percent=config["balancer.disk.threshold.percent"],
            ),
            # `storage format --add-scram`: only a controller ever writes it to the log.
            bootstrap_records=_bootstrap_records(config) if self.is_controller else (),
        )
        self.raft = RaftDriver(
            config.node_id,
            config.quorum_voters,
            self.raft_log,
            QuorumStateStore(metadata_dir),
            config.raft_config,
            self.cluster_id,
            self.controller,
            security=self.node_security.get("controller"),
        )
        self.controller.attach(self.raft)
        self.partition_watch = PartitionWatch()
        self.dispatcher = Dispatcher()
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[KafkaConnection] = set()
        # Connection limits on the client listeners; ip quotas from the image.
        limits = ConnectionLimits(config.connection_limits, [l.name for l in config.broker_listeners], lambda: self.image.client_quotas)
        self.connection_gate = ConnectionGate(limits, self._connections)
        # queued.max.request.bytes: one budget per dispatcher, as Kafka's broker
        # and controller socket servers each have their own memory pool.
        self.request_budgets: dict[Dispatcher, RequestMemoryBudget] = {}
        self.bound_ports: dict[str, int] = {}
        self.stopping = False
        self._tasks: list[asyncio.Task] = []
        self._new_logs_registered = asyncio.Event()
        self._logs_deleted = asyncio.Event()
        self.topic_defaults = self._topic_defaults()
        self.groups = GroupService(self)
        self.transactions = TransactionService(self)
        # Share-partitions (KIP-932) of the partitions led here, their state in __share_group_state.
        self.shares = SharePartitionService(self)
        # The schema registry's _schemas (its HTTP API is an endpoint: schema.registry.listener).
        self.schemas = SchemaRegistryService(self)
        self.schema_validator = SchemaValidator(self.schemas)
        self.replicas = ReplicaManager(self)
        # Batches gone bad on this broker's disk: found by the follower read path and the scrubber.
        self.corruption = CorruptionHandler(self)
        # Cluster links: the mirror partitions led here copy from their link's source.
        self.mirrors = MirrorManager(self)
        # The fsyncs produce requests wait for (flush.messages), off the event loop.
        self.flusher = GroupFlusher(self.log_dir_failed)
        # Incremental fetch sessions (KIP-227) of consumers and followers.
        self.fetch_sessions = FetchSessionCache(self.config["max.incremental.fetch.session.cache.slots"])
        from broker.handlers import register_all

        register_all(self.dispatcher, self)
        self.controller_dispatcher = build_controller_dispatcher(self)
        self.controller_channel = ControllerChannel(self)
        if not config.single_node_quorum:
            self.dispatcher.forwarder = self.controller_channel
            self.dispatcher.forwarded_keys = FORWARDED_API_KEYS
            self.controller.channel = self.controller_channel
        self.lifecycle = BrokerLifecycleManager(self)
        # Cluster links: the mirrors' source topics, and consumer offsets synced from sources.
        self.mirror_watcher = SourceTopicWatcher(self, lambda body: self.controller_channel.to_active_controller(UPDATE_MIRROR_TOPIC, 0, body))
        link_principal = getattr(self.node_security.get("broker"), "principal", None) or "User:ANONYMOUS"
        self.offset_sync = ConsumerOffsetSync(self, InProcessClient(self, "pybroker-cluster-link"), link_principal)
        # Cluster links: the multi-master topics' batches written in other clusters, copied in.
        self.multi_master = MultiMasterCopier(self, InProcessClient(self, "pybroker-cluster-link-multi-master"), link_principal)
        # The event loop's lag: what every request waits on top of its own work.
        self.loop_monitor = LoopMonitor()
        # metrics.listener, console.listener, rest.listener (each None, nothing bound, when unset).
        self.endpoints = HttpEndpoints(self)

    def _open_files_budget(self) -> int:
        """log.open.files.max, by default at most half of the process's file limit,
        so segments never starve sockets, however many partitions there are."""
        configured = self.config["log.open.files.max"]
        if "log.open.files.max" in self.config.explicit:
            return configured
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft_limit == resource.RLIM_INFINITY:
            return configured
        return max(16, min(configured, soft_limit // 2))

    # ----------------------------------------------------------------- metadata

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def alive_brokers(self, listener_name: str | None = None) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of the unfenced brokers on ``listener_name`` (the
        listener a client came in on: a client outside a container network and one
        inside are each told addresses they can reach), else on the first
        advertised listener; this broker alone until the image has registrations."""
        advertised = [listener.name for listener in self.config.advertised_listeners]
        name = listener_name if listener_name in advertised else (advertised[0] if advertised else None)
        alive = []
        for broker_id, registration in sorted(self.image.brokers.items()):
            endpoint = registration.endpoint(name) if name else None
            if registration.fenced or endpoint is None:
                continue
            alive.append((broker_id, endpoint.host, endpoint.port, registration.rack))
        if not any(b[0] == self.node_id for b in alive) and self.is_broker:
            host, port = self.advertised_endpoint(name)
            alive.append((self.node_id, host, port, self.config["broker.rack"]))
            alive.sort()
        return alive

    def node_connection(self, host: str, port: int, client_id: str, *, to: str, connect_timeout_ms: int = 5000) -> KafkaClientConnection:
        """A connection to another node's inter-broker (``to="broker"``) or controller
        (``to="controller"``) listener, with that listener's security protocol."""
        return KafkaClientConnection(
            host, port, client_id, connect_timeout_ms=connect_timeout_ms, security=self.node_security.get(to)
        )

    @property
    def controller_id(self) -> int:
        """The controller clients are told of (Metadata, DescribeCluster): this broker,
        as a KRaft broker does, because it forwards admin requests to the active controller."""
        return self.node_id

    async def _start_metadata(self) -> None:
        """Join the quorum and wait until the image holds the committed metadata;
        only then are partition logs opened and client requests served."""
        self.raft.start()
        if not self.is_broker:
            return
        timeout_ms = 60_000
        if not await self.controller.wait_caught_up(timeout_ms):
            raise RuntimeError(f"the metadata quorum did not elect a leader within {timeout_ms} ms")
        await self._open_partition_logs()
        # A replica that was down during a failback cuts its log back now, before its role starts.
        apply_failback_cuts(self, None, self.image)
        self.replicas.apply_image(MetadataImage(), self.image)
        self.mirrors.apply_image(MetadataImage(), self.image)
        if self.authorizer is not None:
            self.authorizer = self.authorizer.with_acls(self.image.acls)
        self.controller.subscribe(self._on_metadata_change)
        self.groups.follow_leadership()
        self.transactions.follow_leadership()
        self.shares.follow_leadership()
        self.schemas.follow_leadership()
        self._tasks.append(asyncio.get_running_loop().create_task(self._create_new_logs(), name="new partition logs"))
        self._tasks.append(asyncio.get_running_loop().create_task(self._remove_deleted_logs(), name="deleted partition logs"))

    def _topic_defaults(self, image: MetadataImage | None = None) -> dict[str, str]:
        """Topic config defaults from broker keys: per key this broker's dynamic
        value, else the cluster-wide dynamic one (both from ``image``), else
        server.properties (storage.topic_config.topic_defaults_from)."""
        static = {
            name: format_broker_value(self.config[name]) for name in self.config.explicit if self.config[name] is not None
        }
        if image is None:
            return topic_defaults_from([static])
        return topic_defaults_from([image.configs_of(RESOURCE_BROKER, str(self.node_id)), image.broker_configs, static])

    def _apply_dynamic_tls(self, image: MetadataImage) -> None:
        """This broker's dynamic listener TLS keys (per broker only, as Kafka) -> new contexts (broker/net/security_setup.py)."""
        self.listener_tls.apply_dynamic(image.configs_of(RESOURCE_BROKER, str(self.node_id)))

    def topic_config(self, topic: TopicImage) -> dict:
        return effective_topic_config(self.topic_defaults, dict(topic.configs))

    async def _open_partition_logs(self) -> None:
        """Register this broker's partition logs. After a crash every log is
        recovered here, which may take minutes: it runs in slices, so that a
        combined node keeps answering its quorum meanwhile, with progress in the log."""
        self.topic_defaults = self._topic_defaults(self.image)  # the caught-up image's dynamic configs
        self._apply_dynamic_tls(self.image)  # before the client listeners open
        on_disk = self.logs.existing_partitions()
        # The metadata log may share a log dir but is no partition log: Raft's
        # disk log reads it. Counted, it made a first start (a freshly formatted
        # dir: no clean-shutdown marker yet) announce a recovery of one log.
        on_disk.pop((METADATA_TOPIC, 0), None)
        progress = _RecoveryProgress(len(on_disk), clean=self.logs.all_dirs_clean)

        def register_all(image: MetadataImage):
            for topic in image.topics.values():
                log_config = None
                for partition in topic.partitions.values():
                    key = (topic.name, partition.partition_id)
                    if self.node_id not in partition.replicas or key in registered:
                        continue
                    log_config = log_config or log_config_from(self.topic_config(topic))
                    existing = on_disk.pop(key, None)
                    self.logs.register(topic.name, partition.partition_id, log_config, existing)
                    self.log_dirs.assign_later(key)
                    registered.add(key)
                    if existing is not None:
                        progress.step()
                    yield 1

        registered: set[tuple[str, int]] = set()
        # After a crash: one syncfs per file system after every log is
        # recovered instead of an fsync per log (most of a start with 100,000).
        deferred = not self.logs.all_dirs_clean and self.logs.begin_deferred_recovery_syncs()
        await run_in_slices(register_all(self.image))
        # The image may have moved on meanwhile: partitions it added are
        # registered now (at once: they are new, or few), ...
        for _ in register_all(self.image):
            pass
        if deferred:
            synced = False
            try:
                await asyncio.to_thread(self.logs.recovered_logs_sync())
                synced = True
            finally:
                # Not synced (the sync raised, and so does the start): no
                # recovery point moves, and the next start recovers them again.
                self.logs.end_deferred_recovery_syncs(synced)
        progress.done()
        # ... and those it no longer gives this broker are removed below.
        for key in registered - self._replica_keys(self.image):
            log.info("deleting the log of removed partition %s-%d", *key)
            self.logs.delete(*key)
        for (topic, partition), path in on_disk.items():
            # A topic deleted while we were down (or by a crash mid-delete).
            log.info("deleting the log of removed partition %s-%d", topic, partition)
            self.logs.delete(topic, partition, path)

    async def _create_new_logs(self) -> None:
        """Make the directories and files of new partitions on a worker thread, a
        chunk at a time (a topic of 20,000 partitions takes seconds to minutes
        of file work, and one mkdir may wait long on a busy disk), then open
        those logs in slices of the event loop's time; a partition used before
        its turn gets its files at its first use, on the loop."""
        while True:
            self._new_logs_registered.clear()
            if not self.logs.creations_pending:
                await self._new_logs_registered.wait()
                continue
            batch = self.logs.next_creations(NEW_LOGS_PER_CHUNK)
            try:
                await asyncio.to_thread(self.logs.make_log_files, batch)
                await run_in_slices(self.logs.open_created_steps(batch))
            except OSError as exc:
                log.error("cannot create partition logs (will retry): %s", exc)
                await asyncio.sleep(1)
            if self.logs.dir_deleter.waiting:
                self._logs_deleted.set()

    async def _remove_deleted_logs(self) -> None:
        """Remove the directories of deleted partitions on a worker thread (a
        topic of 20,000 partitions is seconds of file work); their logs are gone
        from memory already, and a partition made again under the same name
        moves its old directory out of the way first (storage/deferred_io.py)."""
        while True:
            self._logs_deleted.clear()
            if self.logs.dir_deleter.waiting:
                try:
                    await asyncio.to_thread(self.logs.delete_pending_dirs)
                except OSError as exc:
                    log.error("cannot remove the directories of deleted partitions (will retry): %s", exc)
                    await asyncio.sleep(1)
                continue
            await self._logs_deleted.wait()

    def _replica_keys(self, image: MetadataImage) -> set[tuple[str, int]]:
        return {
            (topic.name, partition.partition_id)
            for topic in image.topics.values()
            for partition in topic.partitions.values()
            if self.node_id in partition.replicas
        }

    def _on_metadata_change(self, old: MetadataImage, new: MetadataImage) -> None:
        if self.authorizer is not None:
            self.authorizer = self.authorizer.with_acls(new.acls)
        deleted_topics = set()
        for name, topic in old.topics.items():
            current = new.topics.get(name)
            if current is None or current.topic_id != topic.topic_id:
                deleted_topics.add(name)
                for partition in topic.partitions:
                    self.logs.delete(name, partition)
                    self.partition_watch.notify((name, partition))
        if deleted_topics:
            self.groups.run(self.groups.coordinator.remove_offsets_of_topics, self.groups.now_ms(), deleted_topics)
        removed = []
        # Dynamic broker configs (this broker's or cluster-wide) may change the
        # defaults of every topic without its own override: all logs then follow.
        defaults_changed = False
        if new.resource_configs is not old.resource_configs:  # copied on write: untouched, same object
            defaults = self._topic_defaults(new)
            defaults_changed = defaults != self.topic_defaults
            self.topic_defaults = defaults
            self._apply_dynamic_tls(new)
        for name, topic in new.topics.items():
            previous = old.topics.get(name)
            if previous is topic and not defaults_changed:
                continue
            same_topic = previous is not None and previous.topic_id == topic.topic_id
            configs_changed = defaults_changed or not same_topic or previous.configs != topic.configs
            if same_topic and configs_changed:
                self.replicas.topic_config_changed(topic)
            log_config = None
            for partition in topic.partitions.values():
                before = previous.partitions.get(partition.partition_id) if same_topic else None
                was_replica = before is not None and self.node_id in before.replicas
                is_replica = self.node_id in partition.replicas
                if is_replica and (not was_replica or configs_changed):
                    log_config = log_config or log_config_from(self.topic_config(topic))
                    if was_replica:
                        # A config change reaches the log at once (opened or not).
                        self.logs.set_config(name, partition.partition_id, log_config)
                    else:
                        self.logs.register(name, partition.partition_id, log_config)
                        self.log_dirs.assign_later((name, partition.partition_id))
                        self._new_logs_registered.set()
                elif was_replica and not is_replica:
                    removed.append((name, partition.partition_id))
        if new.mirror_topics is not old.mirror_topics:
            apply_failback_cuts(self, old, new)
        self.replicas.apply_image(old, new)
        self.mirrors.apply_image(old, new)
        self.groups.follow_leadership()
        self.transactions.follow_leadership()
        self.shares.follow_leadership()
        self.schemas.follow_leadership()
        if new.mirror_topics or old.mirror_topics:
            self.mirror_watcher.metadata_changed()
            self.offset_sync.metadata_changed()
        if new.cluster_links or old.cluster_links:
            self.multi_master.metadata_changed()
        for name, partition_id in removed:
            # Reassigned away: this broker's replica stopped above; its data goes.
            log.info("deleting the log of %s-%d: this broker is no longer one of its replicas", name, partition_id)
            self.logs.delete(name, partition_id)
            self.partition_watch.notify((name, partition_id))
        if self.logs.dir_deleter.waiting:
            self._logs_deleted.set()

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get(topic, partition)

    def leadership_lost(self, key: tuple[str, int]) -> None:
        """The replica manager learned, ahead of the metadata, that this broker no
        longer leads ``key``: coordinators on it stop too."""
        self.groups.follow_leadership()
        self.transactions.follow_leadership()
        self.shares.follow_leadership()
        self.schemas.follow_leadership()
        self.partition_watch.notify(key)

    def log_dir_failed(self, plog: PartitionLog, exc: OSError) -> None:
        """A write to a log dir failed (ENOSPC, EIO, ...). The segment may now end in a
        torn batch that memory does not know of, and nothing written there can be
        acknowledged any more: the dir goes offline (its partitions' leaderships
        move, the other dirs keep serving), or, when it holds the metadata log or
        is the last one online, the broker halts at once without the
        clean-shutdown marker, as Kafka's does (broker/replica/log_dirs.py)."""
        self.log_dirs.failed(plog.directory.parent, exc)

    # ----------------------------------------------------------------- serving

    def _now_ms(self) -> int:
        return int(time.time() * 1000)

    def _start_housekeeping(self) -> None:
        """Kafka's log manager schedule: flush by time, checkpoints, retention."""
        jobs = [
            ("log flusher", self.config["log.flush.scheduler.interval.ms"], self._flush_by_time),
            ("checkpoint writer", self.config["log.flush.offset.checkpoint.interval.ms"], self._write_checkpoints),
            # The high watermarks, which a restarted replica starts from, more often,
            # written on a worker thread so that their fsyncs never stall requests.
            ("high watermark checkpoint", self.config["replica.high.watermark.checkpoint.interval.ms"], self._checkpoint_high_watermarks),
            ("retention", self.config["log.retention.check.interval.ms"], self._apply_retention),
            (
                "producer id expiration",
                self.config["producer.id.expiration.check.interval.ms"],
                lambda: self.logs.remove_expired_producers(self._now_ms()),
            ),
            ("offsets expiry", self.config["offsets.retention.check.interval.ms"], self.groups.expire_offsets),
            (
                "transaction timeouts",
                self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                self.transactions.abort_timed_out_transactions,
            ),
            (
                "transactional id expiration",
                self.config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                self.transactions.expire_transactional_ids,
            ),
        ]
        if self.config["log.cleaner.enable"]:
            # In slices of the loop's time: a compaction may read gigabytes.
            jobs.append(
                ("log cleaner", self.config["log.cleaner.backoff.ms"], lambda: run_in_slices(self.logs.clean_compacted_steps(self._now_ms())))
            )
        for name, interval_ms, job in jobs:
            if 0 < interval_ms < 2**62:
                self._tasks.append(asyncio.get_running_loop().create_task(self._every(interval_ms, job, name), name=name))
        scrub_rate = self.config["log.scrub.bytes.per.second"]
        if scrub_rate > 0:
            scrubbing = self.corruption.scrub_forever(scrub_rate, self.config["log.scrub.interval.ms"])
            self._tasks.append(asyncio.get_running_loop().create_task(scrubbing, name="log scrubber"))

    def _close_idle_connections(self, idle_ms: int) -> None:
        """connections.max.idle.ms: close connections idle that long."""
        now_s = time.monotonic()
        for connection in list(self._connections):
            if connection.idle_s(now_s) * 1000 > idle_ms:
                log.debug("closing %s: idle for more than %d ms (connections.max.idle.ms)", connection.peer, idle_ms)
                connection.close_when_idle()

    async def _every(self, interval_ms: int, job, name: str) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:  # keep serving; the next round may succeed
                log.exception("%s failed", name)

    async def _flush_by_time(self) -> int:
        """flush.ms: the logs due are synced by the group flusher, off the event loop."""
        due = self.logs.due_for_flush_by_time(self._now_ms())
        if due:
            await asyncio.gather(*(self.flusher.flush(plog) for plog in due))
        return len(due)

    async def _apply_retention(self) -> int:
        """A retention pass in slices of the event loop's time, then the deleted
        segments' files unlinked on a worker thread."""
        deleted = await run_in_slices(self.logs.apply_retention_steps(self._now_ms()))
        if self.logs.file_deleter.waiting:
            await asyncio.to_thread(self.logs.delete_pending_files)
        return deleted

    async def _write_checkpoints(self) -> None:
        """The offset checkpoints: the offsets taken in slices of the loop's time,
        the files written on a worker thread."""
        await run_in_slices(self.logs.take_checkpoint_steps())
        await asyncio.to_thread(self.logs.checkpoint_writer())

    async def _checkpoint_high_watermarks(self) -> None:
        """The high watermarks taken in slices of the loop's time, the file written
        on a worker thread, when any moved."""
        changed: list[bool] = []
        await run_in_slices(self.logs.take_high_watermark_steps(changed))
        if changed and changed[-1]:
            await asyncio.to_thread(self.logs.high_watermark_writer())

    async def start(self) -> None:
        self.loop_monitor.start()
        idle_ms = self.config["connections.max.idle.ms"]
        if idle_ms > 0:
            # Swept a few times per idle period, so a connection goes within ~1.25x of it.
            sweep_ms = max(min(idle_ms // 4, 30_000), 10)
            self._tasks.append(
                asyncio.get_running_loop().create_task(
                    self._every(sweep_ms, lambda: self._close_idle_connections(idle_ms), "idle connections"), name="idle connections"
                )
            )
        # Every address is bound before anything starts, so a port in use stops
        # the node at once, before it joins the quorum; a bound socket refuses
        # connections until it serves.
        controller_servers = [(l, await self._bind(l, self.controller_dispatcher)) for l in self.config.controller_listeners]
        broker_servers = [(l, await self._bind(l, self.dispatcher)) for l in self.config.broker_listeners]
        try:
            await self.endpoints.start()
        except EndpointUnavailable as exc:
            raise ListenerUnavailable(str(exc)) from None
        # Controllers serve first: the other voters need us to elect a leader.
        for listener, server in controller_servers:
            await self._serve(listener, server)
        await self._start_metadata()
        if not self.is_broker:
            return
        self._start_housekeeping()
        self.flusher.start()
        self.replicas.start()
        # A checkpoint write that fails on a worker thread takes its dir offline on the loop.
        self.logs.on_dir_failure = self.log_dirs.failed_from_thread(asyncio.get_running_loop())
        self.log_dirs.start()
        self.mirrors.start()
        self.groups.start()
        self.transactions.start()
        self.shares.start()
        self.mirror_watcher.start()
        self.offset_sync.start()
        self.multi_master.start()
        for listener, server in broker_servers:
            await self._serve(listener, server)
        # Registered (with the ports just bound) and unfenced before we count as started.
        self.lifecycle.start()
        timeout_ms = self.config["initial.broker.registration.timeout.ms"]
        if not await self.lifecycle.wait_unfenced(timeout_ms):
            raise RuntimeError(f"the active controller did not unfence this broker within {timeout_ms} ms")
        await self._wait_waiting_partitions_led(timeout_ms)

    async def _wait_waiting_partitions_led(self, timeout_ms: int) -> None:
        """The partitions that waited for this broker (no leader, this broker in
        their ISR) get it as leader in the controller's proposals after the
        unfence, 1,000 a proposal (controller/broker_lifecycle.py): the start
        counts as done once none is still without a leader, as when the
        unfence elected them all at once, so that "listening" still means
        every partition this broker can lead is served. Bounded by
        ``timeout_ms``; after it the start goes on with a warning. Only the
        partitions still waiting are looked at again."""
        node_id = self.node_id
        waiting = [
            (name, partition.partition_id)
            for name, topic in self.image.topics.items()
            for partition in topic.partitions.values()
            if partition.leader < 0 and node_id in partition.isr
        ]
        deadline = time.monotonic() + timeout_ms / 1000
        while waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            image = self.image
            still = []
            for name, partition_id in waiting:
                topic = image.topics.get(name)
                partition = topic.partitions.get(partition_id) if topic is not None else None
                if partition is not None and partition.leader < 0 and node_id in partition.isr:
                    still.append((name, partition_id))
            waiting = still
        if waiting:
            log.warning(
                "%d partitions this broker is in sync for still have no leader %d ms after its unfence; serving anyway",
                len(waiting), timeout_ms,
            )

    async def _bind(self, listener, dispatcher) -> asyncio.base_events.Server:
        """A server bound to ``listener``'s address, not serving yet."""
        max_frame_bytes = self.config["socket.request.max.bytes"]
        if self.config["queued.max.request.bytes"] > 0 and dispatcher not in self.request_budgets:
            self.request_budgets[dispatcher] = RequestMemoryBudget(self.config["queued.max.request.bytes"])
        budget = self.request_budgets.get(dispatcher)
        tls = self.listener_tls.get(listener.name)
        sasl = self.listener_sasl.get(listener.name)
        def new() -> KafkaConnection:
            # The listener's TLS as it is now: a dynamic change reaches the connections accepted after it.
            mapper = self.listener_tls[listener.name][1] if tls else None
            return KafkaConnection(dispatcher, max_frame_bytes, self._connections, listener.name, budget, mapper, sasl)

        def context():
            return self.listener_tls[listener.name][0]

        if dispatcher is self.dispatcher:  # client listeners: connection limits first (broker/net/gate.py)
            factory = self.connection_gate.protocol_factory(listener.name, new, tls and context)
        else:
            factory = new if tls is None else lambda: TLSAcceptor(new(), context())
        try:
            server = await asyncio.get_running_loop().create_server(
                factory,
                host=listener.host or None,
                port=listener.port,
                reuse_address=True,
                start_serving=False,
            )
        except OSError as exc:
            raise self._listener_unavailable(listener, exc) from None
        self._servers.append(server)
        self.bound_ports[listener.name] = server.sockets[0].getsockname()[1]
        return server

    async def _serve(self, listener, server: asyncio.base_events.Server) -> None:
        try:
            await server.start_serving()
        except OSError as exc:
            # Linux lets two SO_REUSEADDR sockets bind one port while neither
            # listens: a node starting at the same moment is only found here.
            raise self._listener_unavailable(listener, exc) from None
        log.info("listening on %s://%s:%d", listener.name, listener.host, self.bound_ports[listener.name])

    def _listener_unavailable(self, listener, exc: OSError) -> ListenerUnavailable:
        key = "listeners"  # where every listener's address is set, controllers' included
        address = f"{listener.host or '0.0.0.0'}:{listener.port}"
        advice = {
            errno.EADDRINUSE: f"another process uses that port: stop it or give {key} another port",
            errno.EADDRNOTAVAIL: f"that address is not one of this host's: give {key} one that is (or 0.0.0.0)",
            errno.EACCES: f"ports below 1024 need privileges: give {key} a higher port",
        }.get(exc.errno, f"check {key}")
        reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or exc)
        return ListenerUnavailable(f"cannot listen on {listener.name}://{address} ({key}): {reason}; {advice}")

    def advertised_endpoint(self, listener_name: str | None = None) -> tuple[str, int]:
        if not self.is_broker:
            listener = self.config.controller_listeners[0]
            return listener.host, self.bound_ports.get(listener.name, listener.port)
        listener = next(
            (l for l in self.config.advertised_listeners if l.name == listener_name), self.config.advertised_listeners[0]
        )
        # Port 0 binds an ephemeral port; advertise the one we got.
        port = listener.port or self.bound_ports.get(listener.name, listener.port)
        return listener.host, port

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let connections answer what they have, flush and close files."""
        self.stopping = True
        if self.is_broker:
            # Leaderships move to other brokers before this one goes.
            await self.lifecycle.controlled_shutdown(int(grace_s * 1000))
            self.lifecycle.close()
        for server in self._servers:
            server.close()
        await self.endpoints.stop()
        self.groups.stop()  # requests waiting for a rebalance are answered NOT_COORDINATOR
        self.transactions.stop()  # and those waiting for a transaction state change too
        self.shares.stop()
        self.schemas.stop()
        for connection in list(self._connections):
            connection.close_when_idle()
        self.partition_watch.wake_all()  # long-polling fetches answer now
        deadline = time.monotonic() + grace_s
        while self._connections and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self._connections):
            connection.abort()
        self.connection_gate.close()  # sockets still waiting to be admitted
        log.info("client listeners: %s", self.connection_gate.limits.summary())
        for server in self._servers:
            await server.wait_closed()
        for dispatcher, budget in self.request_budgets.items():
            log.info("%s listeners: %s", "client" if dispatcher is self.dispatcher else "controller", budget.summary())
        for task in self._tasks:
            task.cancel()
        if self.is_broker:
            await self.mirror_watcher.stop()
            await self.offset_sync.stop()
            await self.multi_master.stop()
            await self.flusher.stop()
            log.info("group flushes: %d logs synced in %d passes", self.flusher.logs_synced, self.flusher.passes)
            await self.mirrors.stop()
            await self.log_dirs.stop()
            await self.replicas.stop()
        await self.raft.stop()
        self.controller_channel.close()
        self.loop_monitor.stop()
        log.info("event loop lag while running: %s", self.loop_monitor.histogram.summary())
        self.close_storage()

    def close_storage(self) -> None:
        self.logs.close()
        self.controller.close()
        self.raft_log.close()
        for lock in self._dir_locks:
            lock.release()  # last: the files are closed

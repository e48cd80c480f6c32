"""The metadata state machine on top of the Raft log, and the active controller.

Every node that runs the quorum (voters and observers) keeps a
:class:`QuorumController`: it turns committed batches of the
``__cluster_metadata`` log into the node's metadata image (the broker reads
only that image) and writes snapshots as the log grows. On the Raft leader it
is also the active controller: a command is planned against the image as the
already proposed records will leave it, its records are proposed as one batch,
and the request is answered only once that batch is committed. Only committed
records ever reach the image.

A new leader takes no command until its state machine has applied everything
up to the start of its own epoch: records a previous leader proposed may still
be uncommitted in its log and would otherwise be invisible to the planner
(Kafka's controller waits for the same reason).

Past 700 lines on purpose: the commands and the active controller's own
duties (broker sessions, the leader rebalance, electing preferred replicas that
came back, the balancer's ticks) all plan against ``_planned`` and wait on
``_in_flight``, which only this class may touch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable

from broker.clock import monotonic_ms
from controller import metadata_commands as commands
from controller.acl_commands import plan_create_acls, plan_delete_acls
from controller.alter_partition import alter_partition_error, plan_alter_partition
from controller.balancer.driver import BalancerDriver, BalancerSettings, distribution, placement_summary
from controller.balancer.load_reports import BrokerLoadReport, LoadReports
from controller.balancer.placement_commands import PlacementResult, plan_alter_broker_placements
from controller.broker_lifecycle import (
    ELECTIONS_PER_PROPOSAL_MAX,
    UNCLEAN_LEADER_ELECTION_CONFIG,
    BrokerHeartbeatTracker,
    HeartbeatResult,
    RegistrationResult,
    plan_broker_heartbeat,
    plan_fence_brokers,
    iter_unfinished_partitions,
    plan_partition_fixes,
    plan_register_broker,
    rack_alternating_order,
    usable_broker_ids,
)
from controller.config_commands import AlterConfigsResult, ConfigChange
from controller.errors import NotControllerError
from controller.features import plan_update_features, with_bootstrap_features
from controller.leader_election import (
    plan_auto_rebalance,
    plan_elect_leaders,
    plan_preferred_elections,
    preferred_leaders_returned,
)
from controller.log_dirs import plan_assign_replicas_to_dirs, plan_directories_offline
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import RESOURCE_BROKER, decode_record, encode_record, record_api_key
from controller.metadata.snapshot_file import decode_snapshot_file, encode_snapshot_file
from controller.producer_origins import ProducerIdOriginError
from controller.quota_commands import plan_alter_client_quotas
from controller.raft.log import Batch, RaftLog, SnapshotId
from controller.reassignment import list_partition_reassignments, plan_alter_partition_reassignments
from controller.scram_commands import plan_alter_user_scram_credentials
from controller.topic_commands import (
    ClusterDefaults,
    CreatePartitionsResult,
    CreatePartitionsSpec,
    CreateTopicResult,
    CreateTopicSpec,
)
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)
_SCRAM_ALTER = struct_classes(APIS_BY_NAME["AlterUserScramCredentials"].response)
_ACL_CREATE = struct_classes(APIS_BY_NAME["CreateAcls"].response)
_QUOTA_ALTER = struct_classes(APIS_BY_NAME["AlterClientQuotas"].response)
_ACL_DELETE = struct_classes(APIS_BY_NAME["DeleteAcls"].response)

ImageListener = Callable[[MetadataImage, MetadataImage], None]
# How long a command waits for this node to be able to write (a fresh leader
# catching up) before it is answered NOT_CONTROLLER.
WRITE_READY_WAIT_MS = 5000
# How long a topic creation (or partition addition) that cannot be placed on the
# brokers heard from so far waits for the others' first heartbeats after a
# failover; bounded below a forwarding broker's request timeout.
PLACEMENT_HEARTBEAT_WAIT_MS = 5000
# With auto.leader.rebalance.enable, how long after a preferred replica came back
# (unfenced, or in the ISR again) its partition's preferred election waits: long
# enough to gather the partitions that come back together (a restarted broker
# rejoins its ISRs one AlterPartition at a time) into one batch, short enough
# that leadership is spread again long before the imbalance check.
PREFERRED_RETURN_DELAY_MS = 1000
# At most this many of those elections per batch.
PREFERRED_RETURN_BATCH = 1000
# How often the balancer (controller/balancer/driver.py) looks at the cluster:
# often enough that a plan's next step follows its last move's completion
# within a second, cheap because a tick that finds nothing new plans nothing.
BALANCER_TICK_MS = 1000
# Looking for partitions that fencings and unfences left (see
# _finish_partition_changes), the loop serves others after this many
# partitions; and a burst of fencings is followed at most this many times.
PARTITION_SCAN_SLICE = 10_000
PARTITION_FIX_PASSES_MAX = 100


class QuorumController:
    def __init__(
        self,
        raft_log: RaftLog,
        defaults: ClusterDefaults,
        *,
        snapshot_bytes_between: int = 20 << 20,
        snapshot_interval_ms: int = 3_600_000,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
        clock_ms: Callable[[], int] | None = None,
        monotonic_clock_ms: Callable[[], int] = monotonic_ms,
        cluster_id: str = "",
        broker_session_timeout_ms: int = 9000,
        leader_rebalance_interval_ms: int | None = None,
        leader_imbalance_percentage: int = 10,
        unclean_leader_election: bool = False,
        bootstrap_records: tuple = (),
        origin_id: int = 0,
        balancer: BalancerSettings | None = None,
    ):
        self.log = raft_log
        # Records from bootstrap.checkpoint (controller/metadata/bootstrap.py) after
        # the finalized feature levels of a new cluster (controller/features.py):
        # proposed first by an active controller whose log holds no metadata record yet.
        self.bootstrap_records = tuple(with_bootstrap_features(bootstrap_records))
        self._log_has_records = False
        self.defaults = defaults
        # unclean.leader.election.enable of this node's own config: the cluster
        # default while no dynamic one is set (Kafka's controller does the same).
        self.unclean_leader_election = unclean_leader_election
        # cluster.link.origin.id: the range producer ids are handed out in (controller/producer_origins.py).
        self.origin_id = origin_id
        self.snapshot_bytes_between = snapshot_bytes_between
        # metadata.log.max.snapshot.interval.ms: also snapshot this long after the last one (0: never by time).
        self.snapshot_interval_ms = snapshot_interval_ms
        self._new_uuid = new_uuid
        # The wall clock: the balancer's times, which it reports as instants.
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        # Broker sessions and the snapshot interval are durations: a stepped wall
        # clock must neither fence every broker at once nor keep a silent one
        # unfenced for as long as the clock went back.
        self._monotonic_ms = monotonic_clock_ms
        self.driver = None  # set by attach(); the driver proposes and reports back
        # Set on brokers: how a node that is not the leader reaches the active controller.
        self.channel = None
        self.image = MetadataImage()
        self.applied_end_offset = 0
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self._monotonic_ms()
        self._listeners: list[ImageListener] = []
        self._caught_up = asyncio.Event()
        # Leader state.
        self._is_leader = False
        self._leader_epoch = -1
        self._write_from_offset = 0  # commands wait until everything below is applied
        self._write_ready = asyncio.Event()
        self._planned: MetadataImage | None = None
        self._in_flight: list[tuple[int, asyncio.Future]] = []
        # The active controller's own proposals by base offset: (the image they
        # were planned on, the image they made, their end offset, their size).
        # When one commits on top of exactly that image (the same object), the
        # image it made is the committed one: it is neither read back from the
        # log nor decoded and applied again, which for a topic of 20,000
        # partitions held the event loop for most of a second.
        self._proposed: dict[int, tuple[MetadataImage, MetadataImage, int, int]] = {}
        self.leader_id: int | None = None
        self.cluster_id = cluster_id
        self._sessions = BrokerHeartbeatTracker(broker_session_timeout_ms)
        # Set by every heartbeat or registration this controller takes in.
        self._heartbeat_seen = asyncio.Event()
        self._session_task: asyncio.Task | None = None
        # auto.leader.rebalance.enable: None when off.
        self.leader_rebalance_interval_ms = leader_rebalance_interval_ms
        self.leader_imbalance_percentage = leader_imbalance_percentage
        self._rebalance_task: asyncio.Task | None = None
        # Partitions whose preferred replica came back while this node was active
        # (see _watch_preferred_returns), and the task electing them.
        self._preferred_due: set[tuple[str, int]] = set()
        self._preferred_task: asyncio.Task | None = None
        # Finishing the partition changes that fencings, re-registrations and
        # unfences left beyond one proposal's worth (plan_partition_fixes), one
        # proposal at a time: the task, whether it must look again once done,
        # and the brokers that may still be named by partitions they left, each
        # with the generation of its marking. Those are not unfenced until a
        # pass that started after their marking has ended; a newly active
        # controller does not know what its predecessor left, so it unfences
        # nobody until its first pass has ended.
        self._leaderless_task: asyncio.Task | None = None
        self._leaderless_again = False
        self._leave_pending: dict[int, int] = {}
        self._leave_generation = 0
        self._leave_pending_all = False
        # The balancer's settings (balancer.*; None: off), and while this node is
        # active its driver and the task ticking it. A new driver per activation:
        # which running moves the previous one started is not in the log (the
        # throttles it set are: BalancerThrottleRecord).
        self.balancer_settings = balancer
        self._balancer: BalancerDriver | None = None
        # The brokers' measurements from their heartbeats (controller/balancer/load_reports.py):
        # the active controller's only, in memory; emptied when it becomes active.
        self._load_reports = LoadReports()
        self._balancer_task: asyncio.Task | None = None
        self._load_latest_snapshot()

    def attach(self, driver) -> None:
        self.driver = driver

    def subscribe(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    # -- the state machine (RaftStateMachine) -----------------------------------

    def _load_latest_snapshot(self) -> None:
        snapshot_id = self.log.latest_snapshot
        if snapshot_id is None or snapshot_id.end_offset < self.log.start_offset:
            return
        self._install(snapshot_id)

    def _install(self, snapshot_id: SnapshotId) -> None:
        data = self.log.snapshot_data(snapshot_id)
        image = decode_snapshot_file(data, snapshot_id.end_offset - 1)
        self._log_has_records = self._log_has_records or not image.is_empty
        old, self.image = self.image, image
        self.applied_end_offset = snapshot_id.end_offset
        self._bytes_since_snapshot = 0
        log.info("metadata: loaded snapshot %s, %d topics", snapshot_id, len(image.topics))
        self._notify(old, image)

    def raft_snapshot_installed(self, snapshot_id: SnapshotId) -> None:
        self._install(snapshot_id)

    def raft_committed(self, high_watermark: int) -> None:
        offset = self.applied_end_offset
        image = self.image
        applied_bytes = 0
        while offset < high_watermark:
            proposed = self._proposed.pop(offset, None)
            if proposed is not None and proposed[0] is image and proposed[2] <= high_watermark:
                _, image, offset, size_bytes = proposed
                applied_bytes += size_bytes
                self._log_has_records = True
                continue
            batches = self.log.read(offset, 1 << 20)
            if not batches or batches[0].end_offset > high_watermark:
                raise RuntimeError(f"metadata: no whole batch at {offset} below the high watermark {high_watermark}")
            decoded = []
            for batch in batches:
                if batch.end_offset > high_watermark:
                    break
                if not batch.control:
                    decoded.extend(decode_record(value) for value in batch.records)
                applied_bytes += batch.size_bytes
                offset = batch.end_offset
            if decoded:
                self._log_has_records = True
                image = apply_records(image, decoded, offset - 1)
            else:
                # Control batches only (a new leader): the image has still read up to here.
                image = dataclasses.replace(image, offset=offset - 1)
        if self._proposed:
            # Proposals committed through the log read above are done with too.
            for base_offset in [b for b in self._proposed if b < offset]:
                del self._proposed[base_offset]
        if offset == self.applied_end_offset:
            # Nothing new, but a leader's high watermark says the image is
            # current: after a restart that loaded a snapshot ending at the
            # high watermark, this is what lets the broker start serving.
            self._caught_up.set()
            return
        old, self.image = self.image, image
        self.applied_end_offset = offset
        self._bytes_since_snapshot += applied_bytes
        self._notify(old, image)
        self._watch_preferred_returns(old, image)
        self._caught_up.set()
        # Commands waiting for their batch.
        still: list[tuple[int, asyncio.Future]] = []
        for end_offset, future in self._in_flight:
            if end_offset <= offset:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((end_offset, future))
        self._in_flight = still
        if not still:
            self._planned = None  # the committed image is the planning base again
        if self._is_leader and offset >= self._write_from_offset and not self._write_ready.is_set():
            self._maybe_write_bootstrap()
            self._write_ready.set()
        self._maybe_snapshot()

    def raft_leadership(self, is_leader: bool, epoch: int, leader_id: int | None) -> None:
        was_leader = self._is_leader
        self._is_leader = is_leader
        self._leader_epoch = epoch
        self.leader_id = leader_id
        if is_leader and not was_leader:
            self._write_from_offset = self.log.end_offset
            self._write_ready.clear()
            log.info("metadata: this node is the active controller (epoch %d)", epoch)
            self._sessions.activate(self._planned or self.image, self._monotonic_ms())
            self._load_reports.clear()  # a predecessor's are not ours to trust: fresh ones come in seconds
            self._session_task = asyncio.get_running_loop().create_task(self._expire_sessions(), name="broker sessions")
            # A predecessor may have stopped between the proposals of a bounded
            # fencing or unfence: nobody is unfenced before the first pass ends.
            self._leave_pending_all = True
            self._start_leaderless_elections()
            if self.leader_rebalance_interval_ms is not None:
                self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_leaders(), name="leader rebalance")
            if self.balancer_settings is not None and self.balancer_settings.mode != "off":
                self._balancer = BalancerDriver(self.balancer_settings)
                self._balancer_task = asyncio.get_running_loop().create_task(self._run_balancer(), name="balancer")
        elif not is_leader:
            self._write_ready.clear()
            if was_leader:
                log.info("metadata: no longer the active controller (epoch %d, leader %s)", epoch, leader_id)
            if self._session_task is not None:
                self._session_task.cancel()
                self._session_task = None
            if self._rebalance_task is not None:
                self._rebalance_task.cancel()
                self._rebalance_task = None
            self._stop_balancer()
            self._stop_preferred_returns()
            if self._leaderless_task is not None:
                self._leaderless_task.cancel()
                self._leaderless_task = None
            self._fail_in_flight()

    def _maybe_write_bootstrap(self) -> None:
        """On a log with no metadata record (everything below this leader's epoch
        is applied by now), propose the bootstrap records as the first batch,
        before any command is planned; otherwise they are ignored, as Kafka
        ignores the bootstrap of a quorum that already has metadata. Commands
        plan on top of them at once, so nothing can slip in before."""
        if not self.bootstrap_records:
            return
        if self._log_has_records or not self.image.is_empty:
            log.info("metadata: the log already has metadata; the bootstrap metadata (feature levels, bootstrap.checkpoint) is not written")
            self.bootstrap_records = ()
            return
        records = [record for _, record in self.bootstrap_records]
        encoded = tuple(encode_record(r) for r in records)
        result = self.driver.propose(list(encoded))
        if result.error != ErrorCode.NONE:
            log.warning("metadata: bootstrap records not proposed (%s); tried again at the next leadership", result.error.name)
            return
        base = self.image
        self._planned = apply_records(base, list(self.bootstrap_records), result.end_offset - 1)
        self._proposed[result.base_offset] = (base, self._planned, result.end_offset, Batch(result.base_offset, result.epoch, encoded).size_bytes)
        future = asyncio.get_running_loop().create_future()
        # Nobody awaits it: it only keeps the planning base until the batch commits.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._in_flight.append((result.end_offset, future))
        log.info("metadata: writing the bootstrap metadata (%d records) as the log's first", len(records))

    def _fail_in_flight(self) -> None:
        for _, future in self._in_flight:
            if not future.done():
                future.set_exception(NotControllerError("leadership moved before the command committed"))
        self._in_flight = []
        self._planned = None
        self._proposed.clear()

    def _notify(self, old: MetadataImage, new: MetadataImage) -> None:
        for listener in self._listeners:
            listener(old, new)

    def _maybe_snapshot(self) -> None:
        if self.driver is None or self._bytes_since_snapshot == 0:
            return
        now_ms = self._monotonic_ms()
        by_time = self.snapshot_interval_ms > 0 and now_ms - self._last_snapshot_ms >= self.snapshot_interval_ms
        if self._bytes_since_snapshot < self.snapshot_bytes_between and not by_time:
            return
        end = self.applied_end_offset
        snapshot_id = SnapshotId(end, self.log.epoch_at(end - 1))
        latest = self.log.latest_snapshot
        if latest is not None and latest.end_offset >= end:
            return
        self.log.create_snapshot(snapshot_id, encode_snapshot_file(self.image, now_ms, now_ms))
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now_ms
        log.info("metadata: wrote snapshot %s", snapshot_id)
        self.driver.snapshot_created(snapshot_id)

    async def wait_caught_up(self, timeout_ms: int) -> bool:
        """Wait until this node has applied committed metadata it learned from a leader."""
        try:
            await asyncio.wait_for(self._caught_up.wait(), timeout_ms / 1000)
            return True
        except TimeoutError:
            return False

    # -- the active controller ----------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._is_leader

    async def _wait_active(self) -> None:
        """Return once this node is the active controller and has applied its
        predecessor's log; NotControllerError when it is not (or not in time)."""
        if not self._is_leader:
            raise NotControllerError("this node is not the active controller")
        if not self._write_ready.is_set():
            try:
                await asyncio.wait_for(self._write_ready.wait(), WRITE_READY_WAIT_MS / 1000)
            except TimeoutError:
                raise NotControllerError("the active controller is still catching up") from None

    async def _submit(self, plan):
        """Plan against the image the proposed records will leave, propose, await the commit."""
        await self._wait_active()
        results, records = plan(self._planned or self.image)
        if not records:
            return results
        encoded = tuple(encode_record(r) for r in records)
        result = self.driver.propose(list(encoded))
        if result.error != ErrorCode.NONE:
            raise NotControllerError(f"proposal refused: {result.error.name}")
        base = self._planned or self.image
        self._planned = apply_records(base, [(record_api_key(r), r) for r in records], result.end_offset - 1)
        self._proposed[result.base_offset] = (base, self._planned, result.end_offset, Batch(result.base_offset, result.epoch, encoded).size_bytes)
        future = asyncio.get_running_loop().create_future()
        self._in_flight.append((result.end_offset, future))
        await future
        return results

    async def create_topics(
        self, specs: list[CreateTopicSpec], *, validate_only: bool = False, internal: bool = False
    ) -> list[CreateTopicResult]:
        if not self._is_leader and self.channel is not None and not validate_only:
            forwarded = await self.channel.create_topics(specs)
            if forwarded is not None:
                return forwarded
        try:
            await self._wait_placeable(
                # A fixed id: the dry run must not draw from the id source.
                lambda image, defaults: commands.create_topics(
                    image, specs, defaults, lambda: uuid.UUID(int=1), validate_only=True, internal=internal
                )[0]
            )
            return await self._submit(
                lambda image: commands.create_topics(
                    image, specs, self._placement_defaults(image), self._new_uuid, validate_only=validate_only, internal=internal
                )
            )
        except NotControllerError as exc:
            return [CreateTopicResult(name, ErrorCode.NOT_CONTROLLER, str(exc)) for name in dict.fromkeys(s.name for s in specs)]

    async def create_partitions(
        self, specs: list[CreatePartitionsSpec], *, validate_only: bool = False
    ) -> list[CreatePartitionsResult]:
        try:
            await self._wait_placeable(
                lambda image, defaults: commands.create_partitions(image, specs, defaults, validate_only=True)[0]
            )
            return await self._submit(
                lambda image: commands.create_partitions(image, specs, self._placement_defaults(image), validate_only=validate_only)
            )
        except NotControllerError as exc:
            names = dict.fromkeys(spec.name for spec in specs)
            return [CreatePartitionsResult(name, ErrorCode.NOT_CONTROLLER, str(exc)) for name in names]

    async def delete_topics(self, targets: list[tuple[str | None, uuid.UUID | None]]):
        try:
            return await self._submit(lambda image: commands.delete_topics(image, targets))
        except NotControllerError as exc:
            return [(ErrorCode.NOT_CONTROLLER, str(exc), name, topic_id) for name, topic_id in dict.fromkeys(targets)]

    async def alter_configs(
        self, changes: list[ConfigChange], *, incremental: bool, validate_only: bool = False, local_node_id: int | None
    ) -> list[AlterConfigsResult]:
        try:
            return await self._submit(
                lambda image: commands.alter_configs(
                    image, changes, incremental=incremental, validate_only=validate_only, local_node_id=local_node_id
                )
            )
        except NotControllerError as exc:
            return [AlterConfigsResult(c.resource_type, c.resource_name, ErrorCode.NOT_CONTROLLER, str(exc)) for c in changes]

    async def alter_user_scram_credentials(self, request):
        """AlterUserScramCredentialsResponse for a decoded request, planned by
        controller/scram_commands.py (every user NOT_CONTROLLER when this node cannot act)."""
        try:
            return await self._submit(lambda image: plan_alter_user_scram_credentials(image, request))
        except NotControllerError as exc:
            users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
            return _SCRAM_ALTER.AlterUserScramCredentialsResponse(
                throttle_time_ms=0,
                results=[
                    _SCRAM_ALTER.AlterUserScramCredentialsResult(user=name, error_code=ErrorCode.NOT_CONTROLLER, error_message=str(exc))
                    for name in users
                ],
            )

    async def update_features(self, updates, *, validate_only: bool, local_node_id: int):
        """UpdateFeatures: None once the FeatureLevelRecords are committed (or
        validated), else the FeatureUpdateError refusing the whole request
        (controller/features.py); NotControllerError when this node cannot act."""
        return await self._submit(
            lambda image: plan_update_features(image, updates, local_node_id=local_node_id, validate_only=validate_only)
        )

    async def alter_client_quotas(self, request):
        """AlterClientQuotasResponse for a decoded request, planned by controller/quota_commands.py
        (every entry NOT_CONTROLLER when this node cannot act)."""
        try:
            return await self._submit(lambda image: plan_alter_client_quotas(image, request))
        except NotControllerError as exc:
            return _QUOTA_ALTER.AlterClientQuotasResponse(
                throttle_time_ms=0,
                entries=[
                    _QUOTA_ALTER.EntryData(
                        error_code=ErrorCode.NOT_CONTROLLER,
                        error_message=str(exc),
                        entity=[_QUOTA_ALTER.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity],
                    )
                    for entry in request.entries
                ],
            )

    async def create_acls(self, request):
        """CreateAclsResponse for a decoded request, planned by controller/acl_commands.py
        (every creation NOT_CONTROLLER when this node cannot act)."""
        try:
            return await self._submit(lambda image: plan_create_acls(image, request))
        except NotControllerError as exc:
            return _ACL_CREATE.CreateAclsResponse(
                throttle_time_ms=0,
                results=[
                    _ACL_CREATE.AclCreationResult(error_code=ErrorCode.NOT_CONTROLLER, error_message=str(exc))
                    for _ in request.creations
                ],
            )

    async def delete_acls(self, request):
        """DeleteAclsResponse for a decoded request, planned by controller/acl_commands.py
        (every filter NOT_CONTROLLER when this node cannot act)."""
        try:
            return await self._submit(lambda image: plan_delete_acls(image, request))
        except NotControllerError as exc:
            return _ACL_DELETE.DeleteAclsResponse(
                throttle_time_ms=0,
                filter_results=[
                    _ACL_DELETE.DeleteAclsFilterResult(error_code=ErrorCode.NOT_CONTROLLER, error_message=str(exc), matching_acls=[])
                    for _ in request.filters
                ],
            )

    async def link_command(self, plan, refused):
        """A cluster link or mirror topic command (controller/link_commands.py):
        ``plan(image, defaults, new_uuid)`` gives (answer, records); the answer
        comes once the records are committed, ``refused(message)`` when this
        node cannot act (NOT_CONTROLLER)."""
        try:
            return await self._submit(lambda image: plan(image, self._placement_defaults(image), self._new_uuid))
        except NotControllerError as exc:
            return refused(str(exc))

    async def mirror_report(self, api, request, plan, refused):
        """MirrorPartitionsStopped or UpdateMirrorTopic from this node's own
        partition leaders and watchers: planned here on the active controller,
        else sent to it over the controller listener (``refused(message)``
        when no controller answers)."""
        if not self._is_leader and self.channel is not None:
            response = await self.channel.send_to_leader(api, api.versions.high, request)
            if response is not None:
                return response
            if not self._is_leader:
                return refused("no active controller answered")
        return await self.link_command(lambda image, defaults, _: plan(image, request, defaults), refused)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int, block_size: int) -> range:
        """Raises NotControllerError when this node cannot allocate."""
        if not self._is_leader and self.channel is not None:
            block = await self.channel.allocate_producer_ids(broker_id, broker_epoch)
            if block is None:
                raise NotControllerError("the active controller did not allocate producer ids")
            return block
        holder: list[range] = []

        def plan(image):
            block, records = commands.allocate_producer_ids(image, broker_id, broker_epoch, block_size, self.origin_id)
            holder.append(block)
            return block, records

        try:
            return await self._submit(plan)
        except ProducerIdOriginError as exc:
            # Misconfigured: no ids rather than another cluster's; callers see no controller.
            log.error("refusing to allocate producer ids: %s", exc)
            raise NotControllerError(f"refusing to allocate producer ids: {exc}") from None

    # -- brokers: registration, heartbeats, sessions ------------------------------

    def _placement_defaults(self, image: MetadataImage, *, also_live: frozenset[int] = frozenset()) -> ClusterDefaults:
        """New replicas go to the usable registered brokers this controller has heard
        from (plus ``also_live``), rack-aware (this node until any registered)."""
        usable = usable_broker_ids(image)
        if not usable:
            return self.defaults
        live = self._sessions.live_brokers(image, self._monotonic_ms()) | also_live if self._is_leader else None
        return dataclasses.replace(
            self.defaults, broker_ids=usable, placement_order=rack_alternating_order(image, usable), live_broker_ids=live
        )

    async def _wait_placeable(self, dry_run) -> None:
        """Right after a failover this controller has heard from few brokers yet.
        While ``dry_run(image, defaults)`` (the command's results, planned without
        writing) fails on the brokers heard from but would succeed if those not
        heard from yet were alive, wait for their heartbeats: until the plan
        succeeds, their sessions run out (they are dead: the plan's error
        stands), or ``PLACEMENT_HEARTBEAT_WAIT_MS`` passes."""
        await self._wait_active()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + PLACEMENT_HEARTBEAT_WAIT_MS / 1000
        while True:
            image = self._planned or self.image
            now_ms = self._monotonic_ms()
            awaited = self._sessions.awaited_brokers(image, now_ms)
            if not awaited:
                return
            errors = [r.error_code for r in dry_run(image, self._placement_defaults(image))]
            if all(error == ErrorCode.NONE for error in errors):
                return
            hoped = [r.error_code for r in dry_run(image, self._placement_defaults(image, also_live=frozenset(awaited)))]
            if hoped == errors:
                return  # not a matter of who is alive
            wait_s = min(give_up - loop.time(), (min(awaited.values()) - now_ms) / 1000)
            if wait_s <= 0:
                return
            self._heartbeat_seen.clear()
            try:
                await asyncio.wait_for(self._heartbeat_seen.wait(), wait_s)
            except TimeoutError:
                pass

    def _election_view(self, image: MetadataImage) -> MetadataImage:
        """The image as plans that may elect leaders read it: with this node's
        static unclean.leader.election.enable as the cluster default when no
        dynamic cluster default is set. Only those plans see it, so it is never
        reported or written as a dynamic config."""
        broker_configs = image.broker_configs
        if not self.unclean_leader_election or UNCLEAN_LEADER_ELECTION_CONFIG in broker_configs:
            return image
        configs = dict(image.resource_configs)
        configs[(RESOURCE_BROKER, "")] = {**broker_configs, UNCLEAN_LEADER_ELECTION_CONFIG: "true"}
        return dataclasses.replace(image, resource_configs=configs)

    async def register_broker(self, request) -> RegistrationResult:
        now_ms = self._monotonic_ms()

        def plan(image):
            # The record is the first of the batch proposed right after this
            # plan, so the log end is its offset: Kafka's broker epoch.
            result, records = plan_register_broker(
                self._election_view(image),
                request,
                cluster_id=self.cluster_id,
                broker_epoch=self.log.end_offset,
                session_alive=self._sessions.heard_alive(request.broker_id, now_ms),
                changes_max=ELECTIONS_PER_PROPOSAL_MAX,
            )
            if len(records) > ELECTIONS_PER_PROPOSAL_MAX:  # the registration and a bounded leave
                self._mark_leave_pending([request.broker_id])
            return result, records

        try:
            result = await self._submit(plan)
        except NotControllerError:
            return RegistrationResult(ErrorCode.NOT_CONTROLLER)
        if result.error == ErrorCode.NONE:
            self._sessions.touch(request.broker_id, self._monotonic_ms())
            self._heartbeat_seen.set()
        return result

    async def broker_heartbeat(self, request) -> HeartbeatResult:
        if self._is_leader:
            # Renewed before anything else: a heartbeat proves the broker alive
            # even when the answer has to wait for a commit.
            broker = (self._planned or self.image).brokers.get(request.broker_id)
            if broker is not None and broker.epoch == request.broker_epoch:
                self._sessions.touch(request.broker_id, self._monotonic_ms())
                self._heartbeat_seen.set()
                self._load_reports.received(request.broker_id, getattr(request, "balancer_load", None), self._clock_ms())
        def plan(image):
            view = self._election_view(image)
            offline_records: list = []
            if getattr(request, "offline_log_dirs", None):
                # JBOD: a failed log dir's replicas leave ISRs and leaderships
                # first; the rest of the heartbeat is planned as that leaves the image.
                offline_records, view, offline_left = plan_directories_offline(
                    view, request.broker_id, request.broker_epoch, request.offline_log_dirs, ELECTIONS_PER_PROPOSAL_MAX
                )
                if offline_records:
                    log.warning(
                        "metadata: broker %d reports log dir(s) %s offline: %d partition change(s)%s",
                        request.broker_id, ", ".join(map(str, request.offline_log_dirs)), len(offline_records) - 1,
                        ", more to follow" if offline_left else "",
                    )
                if offline_left:
                    self._start_leaderless_elections()
            result, records = plan_broker_heartbeat(
                view,
                request,
                elections_max=ELECTIONS_PER_PROPOSAL_MAX,
                leave_pending=self._leave_pending_all or request.broker_id in self._leave_pending,
            )
            return result, offline_records + records

        try:
            result = await self._submit(plan)
        except NotControllerError:
            return HeartbeatResult(ErrorCode.NOT_CONTROLLER)
        if result.elections_left:
            self._start_leaderless_elections()
        return result

    def _mark_leave_pending(self, broker_ids) -> None:
        """A bounded fencing or re-registration of ``broker_ids`` was planned:
        they stay fenced until a pass that starts after now has ended."""
        self._leave_generation += 1
        for broker_id in broker_ids:
            self._leave_pending[broker_id] = self._leave_generation
        self._start_leaderless_elections()

    def _start_leaderless_elections(self) -> None:
        if self._leaderless_task is None or self._leaderless_task.done():
            self._leaderless_task = asyncio.get_running_loop().create_task(
                self._finish_partition_changes(), name="unfinished partition changes"
            )
        else:
            self._leaderless_again = True

    async def _finish_partition_changes(self) -> None:
        """Passes over the image until one ends with nothing new asked of it: each
        looks at the image a few topics at a time for partitions a fenced broker
        still leads or shares an ISR in, and partitions without a leader
        (iter_unfinished_partitions), then proposes their changes
        ELECTIONS_PER_PROPOSAL_MAX at a time, each committed before the next is
        planned (plan_partition_fixes): the loop serves in between, and the
        brokers apply the changes in the same slices."""
        await self._write_ready.wait()
        changed = 0
        for _ in range(PARTITION_FIX_PASSES_MAX):
            self._leaderless_again = False
            generations = dict(self._leave_pending)
            pending_all = self._leave_pending_all
            keys: list = []
            visited = 0
            for topic_visited, topic_keys in iter_unfinished_partitions(self._election_view(self._planned or self.image)):
                keys += topic_keys
                visited += topic_visited
                if visited >= PARTITION_SCAN_SLICE:
                    visited = 0
                    await asyncio.sleep(0)
                    if not self._is_leader:
                        return
            start = 0
            # Bounded: every proposal but the last makes ELECTIONS_PER_PROPOSAL_MAX changes.
            for _ in range(len(keys) // max(ELECTIONS_PER_PROPOSAL_MAX, 1) + 2):
                if start >= len(keys):
                    break
                made: list = []

                def plan(image, start=start):
                    records, end = plan_partition_fixes(self._election_view(image), keys, start, ELECTIONS_PER_PROPOSAL_MAX)
                    made.append((len(records), end))
                    return None, records

                try:
                    await self._submit(plan)
                except NotControllerError:
                    return
                except Exception:  # a bug of ours: log it; the next fencing, unfence or activation tries again
                    log.exception("metadata: finishing partition leaves and elections failed")
                    return
                changed += made[-1][0]
                start = made[-1][1]
            for broker_id, generation in generations.items():
                if self._leave_pending.get(broker_id) == generation:
                    del self._leave_pending[broker_id]
            if pending_all:
                self._leave_pending_all = False
            if not self._leaderless_again:
                break
        if changed:
            log.info("metadata: %d partition changes that fencings or unfences left were made", changed)


    async def assign_replicas_to_dirs(self, request) -> dict:
        """AssignReplicasToDirs from a JBOD broker: the error per (directory id,
        topic id, partition), or under the key None a top-level error, once the
        records are committed (controller/log_dirs.py)."""
        try:
            return await self._submit(lambda image: plan_assign_replicas_to_dirs(self._election_view(image), request))
        except NotControllerError:
            return {None: ErrorCode.NOT_CONTROLLER}

    async def alter_partition(self, request, api_version: int):
        """AlterPartition from a partition leader: the AlterPartitionResponse, once
        its records (if any) are committed; NOT_CONTROLLER (top level) when this
        node is not, or stops being, the active controller."""
        wrote: list[bool] = []

        def plan(image):
            response, records = plan_alter_partition(image, request, api_version)
            wrote.append(bool(records))
            return response, records

        try:
            response = await self._submit(plan)
            if not wrote[-1] and self._in_flight:
                # Answered from the planned image, whose latest records are not
                # committed yet: a leader must never act on an ISR that a failover
                # could still lose (Kafka's controller waits the same way).
                await asyncio.shield(self._in_flight[-1][1])
        except NotControllerError:
            return alter_partition_error(ErrorCode.NOT_CONTROLLER)
        return response

    async def _expire_sessions(self) -> None:
        """The active controller fences brokers whose heartbeats stopped."""
        timeout_ms = self._sessions.session_timeout_ms
        interval_s = max(min(timeout_ms / 4, 1000), 10) / 1000
        await self._write_ready.wait()
        # Brokers registered by the predecessor's last records, applied since activation.
        self._sessions.grant_missing(self.image, self._monotonic_ms())
        last_ms = self._monotonic_ms()
        while self._is_leader:
            # Wake when the first session runs out (not up to a whole interval
            # later: that delay is part of every failover), checking at least
            # every interval in case a heartbeat arrives meanwhile.
            due_ms = self._sessions.next_expiry_ms(self._planned or self.image)
            sleep_s = interval_s
            if due_ms is not None:
                sleep_s = min(interval_s, max(due_ms - self._monotonic_ms() + 1, 10) / 1000)
            await asyncio.sleep(sleep_s)
            now_ms = self._monotonic_ms()
            if now_ms - last_ms > timeout_ms // 2:
                # This loop itself was stalled: it cannot tell a silent broker
                # from heartbeats it did not get to see, so nobody is fenced for it.
                self._sessions.reset_all(self._planned or self.image, now_ms)
            last_ms = now_ms
            expired = self._sessions.expired(self._planned or self.image, now_ms)
            if not expired:
                continue
            log.info("metadata: fencing broker(s) %s: no heartbeat for %d ms", expired, timeout_ms)
            try:
                await self._submit(lambda image: (None, self._plan_fence(image, expired)))
            except NotControllerError:
                return

    def _plan_fence(self, image: MetadataImage, broker_ids: list[int]) -> list:
        records = plan_fence_brokers(self._election_view(image), broker_ids, changes_max=ELECTIONS_PER_PROPOSAL_MAX)
        if len(records) >= ELECTIONS_PER_PROPOSAL_MAX:  # possibly bounded: the rest must follow first
            self._mark_leave_pending(broker_ids)
        return records

    async def _rebalance_leaders(self) -> None:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds,
        preferred elections for the brokers over leader.imbalance.per.broker.percentage."""
        await self._write_ready.wait()
        while self._is_leader:
            await asyncio.sleep(self.leader_rebalance_interval_ms / 1000)
            percentage = self.leader_imbalance_percentage
            try:
                moved = await self._submit(lambda image: (len(records := plan_auto_rebalance(image, percentage)), records))
            except NotControllerError:
                return
            except Exception:  # a bug of ours: log it, try again next round
                log.exception("metadata: leader rebalance round failed")
                continue
            if moved:
                log.info("metadata: leader rebalance moved %d leaderships back to preferred replicas", moved)

    def _watch_preferred_returns(self, old: MetadataImage, new: MetadataImage) -> None:
        """On the active controller with auto.leader.rebalance.enable: partitions
        whose preferred replica just came back (unfenced, or in the ISR again)
        get their preferred election after PREFERRED_RETURN_DELAY_MS, not at the
        next imbalance check (controller/leader_election.py)."""
        if not self._is_leader or self.leader_rebalance_interval_ms is None:
            return
        returned = preferred_leaders_returned(old, new)
        if not returned:
            return
        self._preferred_due.update(returned)
        if self._preferred_task is None or self._preferred_task.done():
            self._preferred_task = asyncio.get_running_loop().create_task(
                self._elect_returned_preferred(), name="preferred leaders back"
            )

    async def _elect_returned_preferred(self) -> None:
        while self._preferred_due and self._is_leader:
            await asyncio.sleep(PREFERRED_RETURN_DELAY_MS / 1000)
            targets = sorted(self._preferred_due)[:PREFERRED_RETURN_BATCH]
            self._preferred_due.difference_update(targets)
            try:
                moved = await self._submit(lambda image: (len(records := plan_preferred_elections(image, targets)), records))
            except NotControllerError:
                return
            except Exception:  # a bug of ours: log it; the imbalance check still runs
                log.exception("metadata: electing returned preferred leaders failed")
                continue
            if moved:
                log.info("metadata: %d preferred replica(s) back in sync lead their partitions again", moved)

    def _stop_preferred_returns(self) -> None:
        self._preferred_due.clear()
        if self._preferred_task is not None:
            self._preferred_task.cancel()
            self._preferred_task = None

    async def elect_leaders(self, election_type: int, targets):
        """ElectLeaders on the active controller: {(topic, partition): (error, message)}
        once the elections are committed (see plan_elect_leaders)."""
        return await self._submit(lambda image: plan_elect_leaders(image, election_type, targets))

    async def alter_partition_reassignments(self, topics, allow_replication_factor_change: bool = True):
        """AlterPartitionReassignments on the active controller: per topic, a result
        per partition (see plan_alter_partition_reassignments), once the changes
        are committed. Raises NotControllerError when this node cannot act."""
        wrote: list[bool] = []

        def plan(image):
            results, records = plan_alter_partition_reassignments(
                self._election_view(image), topics, allow_replication_factor_change=allow_replication_factor_change
            )
            wrote.append(bool(records))
            return results, records

        results = await self._submit(plan)
        if not wrote[-1] and self._in_flight:
            # Answered from the planned image: wait until what it was planned
            # against is committed, so that a success (nothing to do) is true
            # even across a failover.
            await asyncio.shield(self._in_flight[-1][1])
        return results

    async def list_partition_reassignments(self, topics):
        """ListPartitionReassignments on the active controller, from the committed
        image (as Kafka reads it); raises NotControllerError elsewhere."""
        await self._wait_active()
        return list_partition_reassignments(self.image, topics)

    # -- the balancer -------------------------------------------------------------

    async def _run_balancer(self) -> None:
        """Tick the balancer's driver: its records are planned and proposed like a
        command's, against the image the proposed records will leave."""
        await self._write_ready.wait()
        while self._is_leader and self._balancer is not None:
            await asyncio.sleep(BALANCER_TICK_MS / 1000)
            driver = self._balancer
            if driver is None:
                return
            if self._leaderless_task is not None and not self._leaderless_task.done():
                # Fencings or unfences are still being finished, a proposal at a
                # time: the leaderships move under any plan, and each tick of a
                # big cluster is a walk over every partition.
                continue

            def plan(image):
                now_ms = self._clock_ms()
                live = self._sessions.live_brokers(image, self._monotonic_ms())
                loads = {b: r for b, r in self._load_reports.snapshot().items() if b in image.brokers}
                return None, driver.tick(self._election_view(image), now_ms, live, loads)

            try:
                await self._submit(plan)
            except NotControllerError:
                return
            except Exception:  # a bug of ours: log it, try again next tick
                log.exception("metadata: balancer tick failed")
            finally:
                for level, message in driver.take_events():
                    log.log(logging.WARNING if level == "warning" else logging.INFO, "balancer: %s", message)

    def _stop_balancer(self) -> None:
        self._balancer = None
        if self._balancer_task is not None:
            self._balancer_task.cancel()
            self._balancer_task = None

    async def balancer_status(self, *, with_plan: bool):
        """(the balancer's status, None when it is configured off; the plan it
        would make now, when asked; the brokers cordoned or draining, see
        placement_summary). Raises NotControllerError off the active controller."""
        await self._wait_active()
        image = self._planned or self.image
        placements = placement_summary(image)
        driver = self._balancer
        if driver is None:
            return None, None, placements
        plan = driver.plan(image, failed=driver.failed_brokers(image, self._clock_ms())) if with_plan else None
        return driver.status(), plan, placements

    def balancer_view(self):
        """(the balancer's status, None when it is configured off; every broker's
        replicas and leaders now; this controller's clock in ms; the brokers'
        latest load reports by broker id), without waiting:
        for a metrics scrape. None off the active controller (or while it catches
        up): only the active controller knows the balancer's state."""
        if not self._is_leader or not self._write_ready.is_set():
            return None
        driver = self._balancer
        image = self._planned or self.image
        reports = {b: report for b in image.brokers if (report := self._load_reports.get(b)) is not None}
        return (driver.status() if driver is not None else None), distribution(image), self._clock_ms(), reports

    async def balancer_broker_loads(self) -> list[tuple[int, int, int, BrokerLoadReport | None]]:
        """(broker id, replicas held, partitions led, latest measurements or None)
        of every registered broker, and of any other broker still named as a replica
        (controller.balancer.driver.distribution); NotControllerError off the active controller."""
        await self._wait_active()
        return [(b, held, led, self._load_reports.get(b)) for b, held, led in distribution(self._planned or self.image)]

    def balancer_estimates(self, plan) -> tuple[int, int]:
        """(bytes, estimated ms) of a plan ``balancer_status`` gave, -1 when unknown."""
        driver = self._balancer
        return driver.estimates(plan) if driver is not None else (-1, -1)

    async def alter_broker_placements(self, changes) -> list[PlacementResult]:
        """Cordon, drain or uncordon brokers: [(broker id, state name)] in, a result
        each once the records are committed; NotControllerError off the active controller."""
        balancer_on = self.balancer_settings is not None and self.balancer_settings.mode != "off"
        return await self._submit(lambda image: plan_alter_broker_placements(image, changes, balancer_on=balancer_on))

    def close(self) -> None:
        self._stop_balancer()
        self._stop_preferred_returns()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
        if self._session_task is not None:
            self._session_task.cancel()
        self._fail_in_flight()

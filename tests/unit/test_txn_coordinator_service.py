"""The transaction coordinator's asyncio shell against a fake broker: real
``__transaction_state`` partition logs, a fake replica manager whose
replication the test decides, a fake local marker writer, and for the
requests to other brokers a real TCP peer served by a Dispatcher with stub
handlers."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import replace
from types import SimpleNamespace

import pytest

from broker.coordinators.transactions.service import TXN_TOPIC, TransactionService
from broker.handlers import api_versions
from broker.net.connection import KafkaConnection
from broker.net.dispatch import Dispatcher
from controller.metadata.image import BrokerRegistration, Endpoint, MetadataImage, PartitionImage, TopicImage
from controller.topic_commands import CreateTopicResult
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from protocol.transaction_state import TxnState, partition_for
from storage.log import LogConfig, PartitionLog

TXN_PARTITIONS = 2
NODE = 1
OTHER = 2
TIMEOUT_MS = 60_000


class FakeConfig(dict):
    inter_broker_listener_name = "INTERNAL"
    single_node_quorum = False  # one of several brokers: more may still register


class FakeLeader:
    def __init__(self, leader_epoch: int):
        self.leader_epoch = leader_epoch
        self.isr = (NODE,)
        self.min_insync_replicas = 1
        self.enough = ErrorCode.NONE
        self.outcome: ErrorCode | None = ErrorCode.NONE  # None: wait for wait_for_acks

    def check_enough_replicas(self):
        return self.enough

    def produce_outcome(self, required_offset):
        return self.outcome


class FakeReplicas:
    def __init__(self):
        self.may_lead = True
        self.leaders: dict[tuple[str, int], FakeLeader] = {}
        self.waits: list[asyncio.Future] = []

    def leader_for(self, topic, partition):
        return self.leaders.get((topic, partition))

    def is_superseded(self, key, epoch):
        return False

    def leader_appended(self, key, leader, plog):
        pass

    def wait_for_acks(self, key, leader, required_offset, timeout_ms):
        future = asyncio.get_running_loop().create_future()
        self.waits.append(future)
        return future


def topic_image(name: str, partitions: dict[int, tuple[int, int]]) -> TopicImage:
    """``partitions``: partition -> (leader, leader epoch)."""
    return TopicImage(
        name,
        uuid.uuid5(uuid.NAMESPACE_DNS, name),
        {p: PartitionImage(p, (leader,), (leader,), leader, epoch, epoch) for p, (leader, epoch) in partitions.items()},
    )


class FakeBroker:
    def __init__(self, tmp_path, *, txn_epoch: int = 3):
        self.node_id = NODE
        self.config = FakeConfig(
            {
                "transaction.state.log.num.partitions": TXN_PARTITIONS,
                "offsets.topic.num.partitions": 3,
                "transaction.max.timeout.ms": 900_000,
                "transactional.id.expiration.ms": 3_600_000,
                "transaction.state.log.replication.factor": 1,
                "transaction.state.log.min.isr": 1,
                "transaction.state.log.segment.bytes": 1 << 20,
            }
        )
        self.tmp_path = tmp_path
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        for p in range(TXN_PARTITIONS):
            self.logs[(TXN_TOPIC, p)] = PartitionLog(tmp_path / f"{TXN_TOPIC}-{p}", LogConfig())
        self.replicas = FakeReplicas()
        for p in range(TXN_PARTITIONS):
            self.replicas.leaders[(TXN_TOPIC, p)] = FakeLeader(txn_epoch)
        self.image = MetadataImage(
            topics={
                TXN_TOPIC: topic_image(TXN_TOPIC, {p: (NODE, txn_epoch) for p in range(TXN_PARTITIONS)}),
                "data": topic_image("data", {0: (NODE, 0), 1: (OTHER, 0)}),
            },
            brokers={
                NODE: BrokerRegistration(NODE, uuid.uuid4(), 1, (Endpoint("INTERNAL", "127.0.0.1", 1, 0),), fenced=False),
            },
        )
        self.created = []
        self.create_error = ErrorCode.NONE
        self.lease = True
        self.lifecycle = SimpleNamespace(may_serve_as_leader=lambda: self.lease)
        self.partition_watch = SimpleNamespace(notify=lambda key: None)
        self.controller = SimpleNamespace(create_topics=self._create_topics)
        self.markers_here: list = []
        self.marker_errors: list[dict] = []  # per call, errors to answer (NONE when absent)

    async def _create_topics(self, specs, internal=False):
        assert internal
        self.created.extend(specs)
        return [CreateTopicResult(spec.name, self.create_error) for spec in specs]

    def partition_log(self, topic, partition):
        return self.logs.get((topic, partition))

    def log_dir_failed(self, plog, exc):  # pragma: no cover
        raise AssertionError(exc)

    async def write_markers_here(self, broker, marker):
        self.markers_here.append(marker)
        errors = self.marker_errors.pop(0) if self.marker_errors else {}
        return {key: errors.get(key, ErrorCode.NONE) for key in marker.partitions}

    def set_peer(self, port: int):
        registration = BrokerRegistration(OTHER, uuid.uuid4(), 1, (Endpoint("INTERNAL", "127.0.0.1", port, 0),), fenced=False)
        self.image = MetadataImage(topics=self.image.topics, brokers={**self.image.brokers, OTHER: registration})

    def close(self):
        for plog in self.logs.values():
            plog.close()


def make_service(broker: FakeBroker) -> TransactionService:
    ids = itertools.count(4000)

    async def allocate():
        return next(ids)

    service = TransactionService(broker, allocate_producer_id=allocate, write_markers_here=broker.write_markers_here)
    service.follow_leadership()
    return service


def run(coroutine_function):
    return asyncio.run(asyncio.wait_for(coroutine_function(), 20))


async def settle(service: TransactionService, rounds: int = 50):
    """Let the service's tasks run until none is left (or a bound)."""
    for _ in range(rounds):
        await asyncio.sleep(0.01)
        if not service._marker_tasks and not any(not t.done() for t in service._tasks):
            return


# --------------------------------------------------------------------------- the internal topic and ownership


def test_the_topic_is_created_with_kafkas_configs(tmp_path):
    broker = FakeBroker(tmp_path)
    broker.image = MetadataImage()
    service = make_service(broker)

    async def scenario():
        assert await service.ensure_topic() == ErrorCode.NONE
        [spec] = broker.created
        assert (spec.name, spec.num_partitions, spec.replication_factor) == (TXN_TOPIC, TXN_PARTITIONS, 1)
        assert spec.configs == {
            "cleanup.policy": "compact",
            "min.insync.replicas": "1",
            "segment.bytes": str(1 << 20),
            "unclean.leader.election.enable": "false",
            "compression.type": "uncompressed",
        }
        broker.create_error = ErrorCode.INVALID_REPLICATION_FACTOR
        assert await service.ensure_topic() == ErrorCode.COORDINATOR_NOT_AVAILABLE
        result = await service.init_producer_id("txn", TIMEOUT_MS)
        assert result.error == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(scenario)
    broker.close()


def test_who_coordinates(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    assert service.coordinator_of("txn") == (ErrorCode.NONE, NODE)
    assert service.not_coordinator("txn") is None
    broker.lease = False
    assert service.not_coordinator("txn") == ErrorCode.NOT_COORDINATOR
    broker.lease = True
    partition = partition_for("txn", TXN_PARTITIONS)
    topics = dict(broker.image.topics)
    topics[TXN_TOPIC] = topic_image(TXN_TOPIC, {p: (OTHER if p == partition else NODE, 4) for p in range(TXN_PARTITIONS)})
    broker.image = MetadataImage(topics=topics, brokers=broker.image.brokers)
    assert service.coordinator_of("txn") == (ErrorCode.NONE, OTHER)
    assert service.not_coordinator("txn") == ErrorCode.NOT_COORDINATOR
    broker.close()


# --------------------------------------------------------------------------- a transaction end to end


def test_a_committed_transaction_survives_a_restart(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)

    async def scenario():
        result = await service.init_producer_id("txn", TIMEOUT_MS)
        assert (result.error, result.producer_id, result.producer_epoch) == (ErrorCode.NONE, 4000, 0)
        assert await service.add_partitions("txn", 4000, 0, [("data", 0)]) == ErrorCode.NONE
        assert await service.add_offsets("txn", 4000, 0, "group") == ErrorCode.NONE
        assert service.verify("txn", 4000, 0, [("data", 0), ("data", 1)]) == {
            ("data", 0): ErrorCode.NONE,
            ("data", 1): ErrorCode.INVALID_TXN_STATE,
        }
        assert await service.end_txn("txn", 4000, 0, True) == ErrorCode.NONE
        await settle(service)
        # __consumer_offsets is not in this image: its marker is not needed.
        [marker] = broker.markers_here
        assert (marker.producer_id, marker.producer_epoch, marker.commit, marker.coordinator_epoch) == (4000, 0, True, 3)
        assert marker.partitions == (("data", 0),)
        assert service.describe("txn")[1].state == TxnState.COMPLETE_COMMIT
        service.stop()

    run(scenario)
    again = make_service(broker)
    error, description = again.describe("txn")
    assert (error, description.state, description.producer_id) == (ErrorCode.NONE, TxnState.COMPLETE_COMMIT, 4000)
    broker.close()


def test_a_prepared_transaction_resumes_its_markers_after_a_restart(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    # The markers cannot be written: the leader is always elsewhere.
    broker.marker_errors = [{("data", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}] * 1000

    async def first():
        await service.init_producer_id("txn", TIMEOUT_MS)
        await service.add_partitions("txn", 4000, 0, [("data", 0)])
        assert await service.end_txn("txn", 4000, 0, False) == ErrorCode.NONE
        await asyncio.sleep(0.3)
        assert len(broker.markers_here) >= 2  # retried with backoff
        assert service.describe("txn")[1].state == TxnState.PREPARE_ABORT
        service.stop()

    run(first)
    broker.marker_errors = []
    broker.markers_here.clear()
    for leader in broker.replicas.leaders.values():
        leader.leader_epoch = 4  # a new leader epoch: a new coordinator epoch
    broker.image = MetadataImage(
        topics={**broker.image.topics, TXN_TOPIC: topic_image(TXN_TOPIC, {p: (NODE, 4) for p in range(TXN_PARTITIONS)})},
        brokers=broker.image.brokers,
    )

    async def second():
        again = make_service(broker)
        await settle(again)
        [marker] = broker.markers_here
        assert (marker.commit, marker.coordinator_epoch) == (False, 4)
        assert again.describe("txn")[1].state == TxnState.COMPLETE_ABORT

    run(second)
    broker.close()


def test_markers_for_a_deleted_topic_are_dropped_and_a_fenced_coordinator_stops(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)

    async def scenario():
        await service.init_producer_id("a", TIMEOUT_MS)
        await service.add_partitions("a", 4000, 0, [("data", 0)])
        broker.image = MetadataImage(topics={TXN_TOPIC: broker.image.topics[TXN_TOPIC]}, brokers=broker.image.brokers)
        await service.end_txn("a", 4000, 0, True)
        await settle(service)
        assert broker.markers_here == []
        assert service.describe("a")[1].state == TxnState.COMPLETE_COMMIT

        broker.image = MetadataImage(
            topics={**broker.image.topics, "data": topic_image("data", {0: (NODE, 0)})}, brokers=broker.image.brokers
        )
        await service.init_producer_id("b", TIMEOUT_MS)
        await service.add_partitions("b", 4001, 0, [("data", 0)])
        broker.marker_errors = [{("data", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}]
        await service.end_txn("b", 4001, 0, True)
        await settle(service)
        assert len(broker.markers_here) == 1
        assert service.describe("b")[1].state == TxnState.PREPARE_COMMIT  # left to the newer coordinator

    run(scenario)
    broker.close()


# --------------------------------------------------------------------------- stores wait for replication


def test_a_state_change_is_answered_only_once_replicated(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    partition = partition_for("txn", TXN_PARTITIONS)
    leader = broker.replicas.leaders[(TXN_TOPIC, partition)]

    async def scenario():
        await service.init_producer_id("txn", TIMEOUT_MS)
        leader.outcome = None
        add = asyncio.ensure_future(service.add_partitions("txn", 4000, 0, [("data", 0)]))
        await asyncio.sleep(0.05)
        assert not add.done()
        assert service.describe("txn")[1].state == TxnState.EMPTY  # not applied before replication
        [wait] = broker.replicas.waits
        wait.set_result(ErrorCode.NONE)
        assert await add == ErrorCode.NONE
        assert service.describe("txn")[1].state == TxnState.ONGOING

        end = asyncio.ensure_future(service.end_txn("txn", 4000, 0, True))
        await asyncio.sleep(0.05)
        broker.replicas.waits[-1].set_result(ErrorCode.REQUEST_TIMED_OUT)
        assert await end == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert service.describe("txn")[1].state == TxnState.ONGOING

        leader.outcome = ErrorCode.NONE
        leader.enough = ErrorCode.NOT_ENOUGH_REPLICAS
        size = broker.logs[(TXN_TOPIC, partition)].log_end_offset
        assert await service.end_txn("txn", 4000, 0, True) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert broker.logs[(TXN_TOPIC, partition)].log_end_offset == size  # nothing appended
        service.stop()

    run(scenario)
    broker.close()


def test_losing_the_partition_answers_waiting_requests_not_coordinator(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    partition = partition_for("txn", TXN_PARTITIONS)

    async def scenario():
        await service.init_producer_id("txn", TIMEOUT_MS)
        broker.replicas.leaders[(TXN_TOPIC, partition)].outcome = None
        add = asyncio.ensure_future(service.add_partitions("txn", 4000, 0, [("data", 0)]))
        await asyncio.sleep(0.05)
        topics = dict(broker.image.topics)
        topics[TXN_TOPIC] = topic_image(TXN_TOPIC, {p: (OTHER if p == partition else NODE, 3) for p in range(TXN_PARTITIONS)})
        broker.image = MetadataImage(topics=topics, brokers=broker.image.brokers)
        service.follow_leadership()
        assert await add == ErrorCode.NOT_COORDINATOR
        assert partition not in service.loaded
        broker.replicas.waits[-1].set_result(ErrorCode.NONE)  # late: changes nothing
        await asyncio.sleep(0.01)
        assert await service.end_txn("txn", 4000, 0, True) == ErrorCode.NOT_COORDINATOR
        service.stop()

    run(scenario)
    broker.close()


# --------------------------------------------------------------------------- other brokers


class Peer:
    """A broker on 127.0.0.1 answering with stub handlers."""

    def __init__(self, marker_versions=(0, 1), marker_error=ErrorCode.NONE, verify_versions=(0, 5)):
        self.dispatcher = Dispatcher()
        # ApiVersions reads the finalized features from the broker's metadata image: none here.
        image = MetadataImage()
        api_versions.register(self.dispatcher, SimpleNamespace(image=image, controller=SimpleNamespace(image=image)))
        self.marker_requests = []
        self.verify_requests = []
        self.marker_error = marker_error
        markers_api, add_api = APIS_BY_NAME["WriteTxnMarkers"], APIS_BY_NAME["AddPartitionsToTxn"]
        M, A = struct_classes(markers_api.response), struct_classes(add_api.response)

        async def write_txn_markers(ctx, request):
            self.marker_requests.append((ctx.api_version, request))
            await asyncio.sleep(0.05)  # markers submitted meanwhile queue for the next request
            return M.WriteTxnMarkersResponse(
                markers=[
                    M.WritableTxnMarkerResult(
                        producer_id=m.producer_id,
                        topics=[
                            M.WritableTxnMarkerTopicResult(
                                name=t.name,
                                partitions=[M.WritableTxnMarkerPartitionResult(partition_index=p, error_code=self.marker_error) for p in t.partition_indexes],
                            )
                            for t in m.topics
                        ],
                    )
                    for m in request.markers
                ]
            )

        async def add_partitions(ctx, request):
            self.verify_requests.append((ctx.api_version, request))
            [txn] = request.transactions
            return A.AddPartitionsToTxnResponse(
                throttle_time_ms=0,
                results_by_transaction=[
                    A.AddPartitionsToTxnResult(
                        transactional_id=txn.transactional_id,
                        topic_results=[
                            A.AddPartitionsToTxnTopicResult(
                                name=t.name,
                                results_by_partition=[
                                    A.AddPartitionsToTxnPartitionResult(
                                        partition_index=p, partition_error_code=ErrorCode.NONE if p == 0 else ErrorCode.TRANSACTION_ABORTABLE
                                    )
                                    for p in t.partitions
                                ],
                            )
                            for t in txn.topics
                        ],
                    )
                ],
            )

        self.dispatcher.register(27, *marker_versions, write_txn_markers)
        self.dispatcher.register(24, *verify_versions, add_partitions)
        self.connections: set = set()

    async def start(self) -> int:
        self.server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(self.dispatcher, 1 << 20, self.connections), "127.0.0.1", 0
        )
        return self.server.sockets[0].getsockname()[1]

    async def stop(self):
        self.server.close()
        for connection in list(self.connections):
            connection.abort()


@pytest.mark.parametrize("versions", [(0, 1), (0, 0)])
def test_markers_to_another_broker_use_the_newest_common_version_and_are_batched(tmp_path, versions):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    peer = Peer(marker_versions=versions)

    async def scenario():
        broker.set_peer(await peer.start())
        for txn_id, producer_id in (("a", 4000), ("b", 4001), ("c", 4002)):
            assert (await service.init_producer_id(txn_id, TIMEOUT_MS)).producer_id == producer_id
            assert await service.add_partitions(txn_id, producer_id, 0, [("data", 1)]) == ErrorCode.NONE
        for txn_id, producer_id in (("a", 4000), ("b", 4001), ("c", 4002)):
            assert await service.end_txn(txn_id, producer_id, 0, txn_id != "b") == ErrorCode.NONE
        await settle(service)
        for txn_id, state in (("a", TxnState.COMPLETE_COMMIT), ("b", TxnState.COMPLETE_ABORT), ("c", TxnState.COMPLETE_COMMIT)):
            assert service.describe(txn_id)[1].state == state
        # Markers submitted while a request (or the version lookup) was out went together.
        sizes = [len(request.markers) for _, request in peer.marker_requests]
        assert sum(sizes) == 3 and len(sizes) < 3, sizes
        assert {version for version, _ in peer.marker_requests} == {versions[1]}
        sent = {m.producer_id: (m.transaction_result, m.coordinator_epoch) for _, r in peer.marker_requests for m in r.markers}
        assert sent == {4000: (True, 3), 4001: (False, 3), 4002: (True, 3)}
        service.stop()
        await peer.stop()

    run(scenario)
    broker.close()


def test_markers_refused_by_another_broker_are_retried(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    peer = Peer(marker_error=ErrorCode.NOT_ENOUGH_REPLICAS)

    async def scenario():
        broker.set_peer(await peer.start())
        await service.init_producer_id("a", TIMEOUT_MS)
        await service.add_partitions("a", 4000, 0, [("data", 1)])
        await service.end_txn("a", 4000, 0, True)
        await asyncio.sleep(0.4)
        assert len(peer.marker_requests) >= 2
        assert service.describe("a")[1].state == TxnState.PREPARE_COMMIT
        peer.marker_error = ErrorCode.NONE
        await settle(service, rounds=200)
        assert service.describe("a")[1].state == TxnState.COMPLETE_COMMIT
        service.stop()
        await peer.stop()

    run(scenario)
    broker.close()


def test_verify_partitions_locally_and_at_a_remote_coordinator(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    peer = Peer()

    async def scenario():
        await service.init_producer_id("local", TIMEOUT_MS)
        await service.add_partitions("local", 4000, 0, [("data", 0)])
        assert await service.verify_partitions("local", 4000, 0, [("data", 0), ("data", 1)]) == {
            ("data", 0): ErrorCode.NONE,
            ("data", 1): ErrorCode.INVALID_TXN_STATE,
        }
        assert await service.verify_partitions("local", 4000, 1, [("data", 0)]) == {("data", 0): ErrorCode.PRODUCER_FENCED}

        partition = partition_for("remote", TXN_PARTITIONS)
        broker.set_peer(await peer.start())
        topics = dict(broker.image.topics)
        topics[TXN_TOPIC] = topic_image(TXN_TOPIC, {p: (OTHER if p == partition else NODE, 3) for p in range(TXN_PARTITIONS)})
        broker.image = MetadataImage(topics=topics, brokers=broker.image.brokers)
        outcome = await service.verify_partitions("remote", 77, 2, [("data", 0), ("data", 1)])
        assert outcome == {("data", 0): ErrorCode.NONE, ("data", 1): ErrorCode.INVALID_TXN_STATE}
        [(version, request)] = peer.verify_requests
        [txn] = request.transactions
        assert (version, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.verify_only) == (5, "remote", 77, 2, True)
        await peer.stop()
        # The coordinator cannot be reached: Kafka's leaders report NETWORK_EXCEPTION.
        registration = BrokerRegistration(OTHER, uuid.uuid4(), 1, (Endpoint("INTERNAL", "127.0.0.1", 1, 0),), fenced=False)
        broker.image = MetadataImage(topics=broker.image.topics, brokers={**broker.image.brokers, OTHER: registration})
        assert await service.verify_partitions("remote", 77, 2, [("data", 0)]) == {("data", 0): ErrorCode.NETWORK_EXCEPTION}
        service.stop()

    run(scenario)
    broker.close()


# --------------------------------------------------------------------------- periodic jobs


def test_timed_out_transactions_are_aborted_and_idle_ids_expire(tmp_path):
    broker = FakeBroker(tmp_path)
    service = make_service(broker)
    start_ms = service.now_ms()

    async def scenario():
        await service.init_producer_id("slow", TIMEOUT_MS)
        await service.add_partitions("slow", 4000, 0, [("data", 0)])
        await service.init_producer_id("idle", TIMEOUT_MS)
        service.now_ms = lambda: start_ms + TIMEOUT_MS + 1000
        broker.lease = False
        service.abort_timed_out_transactions()  # without the lease: not this broker's job
        assert service.coordinator.describe("slow")[1].state == TxnState.ONGOING
        broker.lease = True
        service.abort_timed_out_transactions()
        await settle(service)
        [marker] = broker.markers_here
        assert (marker.producer_id, marker.producer_epoch, marker.commit) == (4000, 1, False)
        assert service.describe("slow")[1].state == TxnState.COMPLETE_ABORT
        assert await service.end_txn("slow", 4000, 0, True) == ErrorCode.PRODUCER_FENCED

        service.coordinator.config = replace(service.coordinator.config, transactional_id_expiration_ms=TIMEOUT_MS)
        service.expire_transactional_ids()
        assert service.describe("idle")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        # Updated by its abort a moment ago: not idle for the expiration time yet.
        assert service.describe("slow")[1].state == TxnState.COMPLETE_ABORT
        service.stop()

    run(scenario)
    # The tombstones are in the log: a restarted coordinator does not bring the ids back.
    again = make_service(broker)
    assert again.describe("idle")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    broker.close()

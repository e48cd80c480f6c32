"""The transaction coordinator's APIs on a real broker, driven with raw requests
(our own codec over TCP): FindCoordinator for transactional ids,
InitProducerId, AddPartitionsToTxn (client and broker forms), AddOffsetsToTxn,
EndTxn, DescribeTransactions and ListTransactions, each over every version the
broker advertises, their errors for out-of-order calls (each changing no
state), and the state surviving a restart. Produce's side of KIP-890 part 1:
a transaction's first batch on a partition is verified with the coordinator
(refused when the partition was never added, the transaction was aborted
meanwhile, or the producer was fenced).

The markers that complete a transaction need the log side (control batches)
and the WriteTxnMarkers path; the checks that depend on them wait for the
transaction to reach CompleteCommit/CompleteAbort (``wait_completed``).
"""

from __future__ import annotations

import time
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from protocol.transaction_state import partition_for
from tests.interop._support import RawConnection, create_topic

TXN_PARTITIONS = 4
OVERRIDES = {"transaction.state.log.num.partitions": str(TXN_PARTITIONS), "offsets.topic.num.partitions": "3"}
TIMEOUT_MS = 60_000
COMPLETE_WITHIN_S = 20

API = {name: APIS_BY_NAME[name] for name in (
    "ApiVersions", "Produce", "FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "DescribeTransactions", "ListTransactions", "Metadata",
)}
REQ = {name: struct_classes(api.request) for name, api in API.items()}


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("txn-api"), OVERRIDES).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def topic(txn_broker):
    name = f"txn-api-{uuid.uuid4().hex[:8]}"
    create_topic(txn_broker.bootstrap, name, partitions=3)
    return name


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Client:
    def __init__(self, broker):
        self.conn = RawConnection(broker.bootstrap, timeout_s=30)

    def call(self, name: str, version: int, **fields):
        return self.conn.request(API[name], version, API[name].request.cls(**fields))

    def advertised(self, name: str) -> range:
        response = self.call("ApiVersions", 0)
        [(low, high)] = [(k.min_version, k.max_version) for k in response.api_keys if k.api_key == API[name].key]
        return range(low, high + 1)

    # Helpers at one version each; the every-version tests vary them.

    def init(self, txn_id, version=4, timeout_ms=TIMEOUT_MS, producer_id=-1, producer_epoch=-1):
        fields = {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms}
        if version >= 3:
            fields.update(producer_id=producer_id, producer_epoch=producer_epoch)
        deadline = time.monotonic() + COMPLETE_WITHIN_S
        while True:
            response = self.call("InitProducerId", version, **fields)
            # The first call creates __transaction_state, and its partitions load.
            retriable = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR)
            if response.error_code not in retriable or time.monotonic() > deadline:
                return response
            time.sleep(0.1)

    def add(self, txn_id, producer_id, epoch, partitions: dict[str, list[int]], version=3):
        R = REQ["AddPartitionsToTxn"]
        response = self.call(
            "AddPartitionsToTxn", version,
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in partitions.items()],
        )
        return {(t.name, r.partition_index): r.partition_error_code for t in response.results_by_topic_v3_and_below for r in t.results_by_partition}

    def verify(self, txn_id, producer_id, epoch, partitions: dict[str, list[int]], version=5, verify_only=True):
        R = REQ["AddPartitionsToTxn"]
        response = self.call(
            "AddPartitionsToTxn", version,
            transactions=[R.AddPartitionsToTxnTransaction(
                transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch, verify_only=verify_only,
                topics=[R.AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in partitions.items()],
            )],
        )
        assert response.error_code == 0
        [result] = response.results_by_transaction
        assert result.transactional_id == txn_id
        return {(t.name, r.partition_index): r.partition_error_code for t in result.topic_results for r in t.results_by_partition}

    def add_offsets(self, txn_id, producer_id, epoch, group, version=3):
        return self.call("AddOffsetsToTxn", version, transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch, group_id=group).error_code

    def end(self, txn_id, producer_id, epoch, commit, version=3):
        return self.call("EndTxn", version, transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch, committed=commit).error_code

    def describe(self, txn_id):
        [state] = self.call("DescribeTransactions", 0, transactional_ids=[txn_id]).transaction_states
        return state

    def listed(self, version=1, **filters):
        response = self.call("ListTransactions", version, state_filters=filters.get("states", []),
                             producer_id_filters=filters.get("producer_ids", []),
                             **({"duration_filter": filters.get("duration_ms", -1)} if version >= 1 else {}))
        assert response.error_code == 0
        return response.unknown_state_filters, {s.transactional_id: (s.producer_id, s.transaction_state) for s in response.transaction_states}

    def wait_completed(self, txn_id, state):
        """Markers are written after EndTxn is answered: wait for the completion."""
        deadline = time.monotonic() + COMPLETE_WITHIN_S
        while True:
            described = self.describe(txn_id)
            if described.transaction_state == state or time.monotonic() > deadline:
                assert described.transaction_state == state, described
                return described
            time.sleep(0.05)

    def close(self):
        self.conn.close()


@pytest.fixture
def client(txn_broker):
    c = Client(txn_broker)
    yield c
    c.close()


def ready(client, txn_id, version=4):
    response = client.init(txn_id, version=version)
    assert response.error_code == 0, response
    return response.producer_id, response.producer_epoch


# --------------------------------------------------------------------------- FindCoordinator


def test_find_coordinator_for_transactional_ids_every_version(client, txn_broker):
    for version in client.advertised("FindCoordinator"):
        if version == 0:
            continue  # no key type before v1: always a group
        deadline = time.monotonic() + COMPLETE_WITHIN_S
        while True:
            if version < 4:
                response = client.call("FindCoordinator", version, key="txn-find", key_type=1)
                found = [(response.error_code, response.host, response.port)]
            else:
                response = client.call("FindCoordinator", version, key_type=1, coordinator_keys=["txn-find", "txn-other"])
                found = [(c.error_code, c.host, c.port) for c in response.coordinators]
            if all(error == 0 for error, _, _ in found) or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # the first lookup creates __transaction_state
        assert set(found) == {(0, txn_broker.host, txn_broker.port)}, (version, found)
    M = REQ["Metadata"]
    metadata = client.call("Metadata", 12, topics=[M.MetadataRequestTopic(name="__transaction_state")], allow_auto_topic_creation=False)
    [topic] = metadata.topics
    assert (topic.error_code, topic.is_internal, len(topic.partitions)) == (0, True, TXN_PARTITIONS)


# --------------------------------------------------------------------------- InitProducerId


def test_init_producer_id_every_version_bumps_the_epoch(client):
    txn_id = unique("init")
    epochs = []
    producer_ids = set()
    for version in client.advertised("InitProducerId"):
        response = client.init(txn_id, version=version)
        assert response.error_code == 0, (version, response)
        producer_ids.add(response.producer_id)
        epochs.append(response.producer_epoch)
    assert len(producer_ids) == 1
    assert epochs == list(range(len(epochs)))
    # v3+: with the current id and epoch (KIP-360) it bumps too.
    producer_id = producer_ids.pop()
    response = client.init(txn_id, version=5, producer_id=producer_id, producer_epoch=epochs[-1])
    assert (response.error_code, response.producer_epoch) == (0, epochs[-1] + 1)


def test_init_producer_id_errors(client):
    txn_id = unique("init-errors")
    producer_id, epoch = ready(client, txn_id)
    ready(client, txn_id)  # epoch + 1: the old epoch is now stale
    for version in client.advertised("InitProducerId"):
        assert client.init(txn_id, version=version, timeout_ms=0).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert client.init(txn_id, version=version, timeout_ms=900_001).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        if version >= 3:
            stale = client.init(txn_id, version=version, producer_id=producer_id, producer_epoch=epoch)
            # PRODUCER_FENCED from v4; older versions get the error they know.
            expected = ErrorCode.PRODUCER_FENCED if version >= 4 else ErrorCode.INVALID_PRODUCER_EPOCH
            assert (stale.error_code, stale.producer_id, stale.producer_epoch) == (expected, -1, -1), version
            assert client.init(txn_id, version=version, producer_id=-1, producer_epoch=3).error_code == ErrorCode.INVALID_REQUEST
    assert client.describe(txn_id).producer_epoch == epoch + 1  # nothing changed


def test_init_fences_an_ongoing_transaction(client, topic):
    txn_id = unique("fence")
    producer_id, epoch = ready(client, txn_id)
    assert client.add(txn_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): 0}
    response = client.init(txn_id)
    # The ongoing transaction is aborted with a bumped epoch; the new producer retries.
    assert response.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert client.end(txn_id, producer_id, epoch, True) == ErrorCode.PRODUCER_FENCED
    client.wait_completed(txn_id, "CompleteAbort")
    deadline = time.monotonic() + COMPLETE_WITHIN_S
    while (response := client.init(txn_id)).error_code == ErrorCode.CONCURRENT_TRANSACTIONS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, producer_id, epoch + 2)


# --------------------------------------------------------------------------- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn


def test_a_transaction_every_version(client, topic):
    for version in client.advertised("EndTxn"):
        txn_id = unique(f"txn-v{version}")
        producer_id, epoch = ready(client, txn_id)
        add_version = min(version, 3)
        assert client.add(txn_id, producer_id, epoch, {topic: [0, 1]}, version=add_version) == {(topic, 0): 0, (topic, 1): 0}
        assert client.add_offsets(txn_id, producer_id, epoch, "txn-group", version=min(version, max(client.advertised("AddOffsetsToTxn")))) == 0
        described = client.describe(txn_id)
        assert (described.error_code, described.transaction_state, described.producer_id, described.producer_epoch) == (
            0, "Ongoing", producer_id, epoch,
        )
        assert sorted((t.topic, sorted(t.partitions)) for t in described.topics) == sorted(
            [(topic, [0, 1]), ("__consumer_offsets", [partition_for("txn-group", 3)])]
        )
        assert described.transaction_timeout_ms == TIMEOUT_MS and described.transaction_start_time_ms > 0
        commit = version % 2 == 0
        assert client.end(txn_id, producer_id, epoch, commit, version=version) == 0
        done = client.wait_completed(txn_id, "CompleteCommit" if commit else "CompleteAbort")
        assert done.topics == []
        # A retried end after completion: the same way NONE, the other INVALID_TXN_STATE.
        assert client.end(txn_id, producer_id, epoch, commit, version=version) == 0
        assert client.end(txn_id, producer_id, epoch, not commit, version=version) == ErrorCode.INVALID_TXN_STATE
    for version in client.advertised("AddPartitionsToTxn"):
        if version >= 4:
            continue  # the broker form: test_verify_only
        txn_id = unique(f"add-v{version}")
        producer_id, epoch = ready(client, txn_id)
        assert client.add(txn_id, producer_id, epoch, {topic: [2]}, version=version) == {(topic, 2): 0}
        assert client.describe(txn_id).transaction_state == "Ongoing"
    for version in client.advertised("AddOffsetsToTxn"):
        txn_id = unique(f"offsets-v{version}")
        producer_id, epoch = ready(client, txn_id)
        assert client.add_offsets(txn_id, producer_id, epoch, f"g-{version}", version=version) == 0
        assert client.describe(txn_id).transaction_state == "Ongoing"


def test_out_of_order_calls_get_kafkas_errors_and_change_nothing(client, topic):
    txn_id = unique("bad")
    ready(client, txn_id)
    producer_id, epoch = ready(client, txn_id)  # epoch 1
    assert client.add(txn_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): 0}
    before = client.describe(txn_id)
    never = unique("never")
    cases = [
        ("EndTxn without InitProducerId", lambda: client.end(never, producer_id, 0, True), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("AddPartitionsToTxn without InitProducerId", lambda: client.add(never, producer_id, 0, {topic: [0]})[(topic, 0)], ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("AddOffsetsToTxn without InitProducerId", lambda: client.add_offsets(never, producer_id, 0, "g"), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("another producer id", lambda: client.end(txn_id, producer_id + 1, epoch, True), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("a stale epoch, v2+", lambda: client.add(txn_id, producer_id, epoch - 1, {topic: [1]}, version=2)[(topic, 1)], ErrorCode.PRODUCER_FENCED),
        ("a stale epoch, v0-1", lambda: client.add(txn_id, producer_id, epoch - 1, {topic: [1]}, version=1)[(topic, 1)], ErrorCode.INVALID_PRODUCER_EPOCH),
        ("EndTxn with a stale epoch, v2+", lambda: client.end(txn_id, producer_id, epoch - 1, True, version=2), ErrorCode.PRODUCER_FENCED),
        ("EndTxn with a stale epoch, v0-1", lambda: client.end(txn_id, producer_id, epoch - 1, True, version=0), ErrorCode.INVALID_PRODUCER_EPOCH),
        ("AddOffsetsToTxn with a stale epoch, v0-1", lambda: client.add_offsets(txn_id, producer_id, epoch - 1, "g", version=1), ErrorCode.INVALID_PRODUCER_EPOCH),
        ("an empty transactional id", lambda: client.end("", producer_id, epoch, True), ErrorCode.INVALID_REQUEST),
    ]
    for name, call, expected in cases:
        assert call() == expected, name
        assert client.describe(txn_id) == before, name
        assert client.describe(never).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, name


def test_add_partitions_refuses_unknown_and_internal_topics_whole(client, topic):
    txn_id = unique("refused")
    producer_id, epoch = ready(client, txn_id)
    outcome = client.add(txn_id, producer_id, epoch, {topic: [0, 99], "no-such-topic": [0]})
    assert outcome == {
        (topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        (topic, 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    outcome = client.add(txn_id, producer_id, epoch, {topic: [0], "__transaction_state": [0]})
    assert outcome == {(topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED, ("__transaction_state", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert client.describe(txn_id).transaction_state == "Empty"


def test_end_txn_on_an_empty_transaction(client):
    txn_id = unique("empty")
    producer_id, epoch = ready(client, txn_id)
    for version in client.advertised("EndTxn"):
        assert client.end(txn_id, producer_id, epoch, True, version=version) == ErrorCode.INVALID_TXN_STATE


def test_verify_only_the_broker_form(client, topic):
    txn_id = unique("verify")
    producer_id, epoch = ready(client, txn_id)
    assert client.add(txn_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): 0}
    versions = [v for v in client.advertised("AddPartitionsToTxn") if v >= 4]
    assert versions == [4, 5]
    for version in versions:
        outcome = client.verify(txn_id, producer_id, epoch, {topic: [0, 1]}, version=version)
        missing = ErrorCode.TRANSACTION_ABORTABLE if version >= 5 else ErrorCode.INVALID_TXN_STATE
        assert outcome == {(topic, 0): 0, (topic, 1): missing}
        assert client.verify(txn_id, producer_id, epoch + 1, {topic: [0]}, version=version) == {(topic, 0): ErrorCode.PRODUCER_FENCED}
    assert client.describe(txn_id).topics[0].partitions == [0]  # verification adds nothing
    # Without verify_only, v4+ adds like the client form.
    assert client.verify(txn_id, producer_id, epoch, {topic: [2]}, verify_only=False) == {(topic, 2): 0}
    assert sorted(client.describe(txn_id).topics[0].partitions) == [0, 2]


# --------------------------------------------------------------------------- DescribeTransactions and ListTransactions


def test_describe_and_list_transactions(client, topic):
    ongoing, empty = unique("list-ongoing"), unique("list-empty")
    producer_id, epoch = ready(client, ongoing)
    other_id, _ = ready(client, empty)
    client.add(ongoing, producer_id, epoch, {topic: [1]})
    assert client.describe(unique("missing")).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    described = client.describe(empty)
    assert (described.transaction_state, described.transaction_start_time_ms, described.topics) == ("Empty", -1, [])
    for version in client.advertised("ListTransactions"):
        unknown, listed = client.listed(version=version)
        assert listed[ongoing] == (producer_id, "Ongoing") and listed[empty] == (other_id, "Empty")
        unknown, listed = client.listed(version=version, states=["Ongoing", "Nonsense"])
        assert unknown == ["Nonsense"] and ongoing in listed and empty not in listed
        _, listed = client.listed(version=version, producer_ids=[other_id])
        assert set(listed) == {empty}
    # v1: only transactions running longer than the duration (Empty ones have no start: listed).
    _, listed = client.listed(duration_ms=3_600_000)
    assert ongoing not in listed and empty in listed
    time.sleep(0.05)
    _, listed = client.listed(duration_ms=1)
    assert ongoing in listed


# --------------------------------------------------------------------------- restart


def test_transactional_state_survives_a_restart(broker_factory, tmp_path):
    broker = broker_factory(OVERRIDES)
    name = unique("restart-topic")
    create_topic(broker.bootstrap, name, partitions=1)
    c = Client(broker)
    ongoing, committed = unique("restart-ongoing"), unique("restart-committed")
    producer_id, epoch = ready(c, ongoing)
    assert c.add(ongoing, producer_id, epoch, {name: [0]}) == {(name, 0): 0}
    other_id, other_epoch = ready(c, committed)
    c.add(committed, other_id, other_epoch, {name: [0]})
    assert c.end(committed, other_id, other_epoch, True) == 0
    c.wait_completed(committed, "CompleteCommit")
    c.close()
    broker.stop()
    restarted = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    c = Client(restarted)
    try:
        deadline = time.monotonic() + COMPLETE_WITHIN_S
        while (described := c.describe(ongoing)).error_code != 0 and time.monotonic() < deadline:
            time.sleep(0.1)  # the partitions load after the restart
        assert (described.transaction_state, described.producer_id, described.producer_epoch) == ("Ongoing", producer_id, epoch)
        assert [(t.topic, t.partitions) for t in described.topics] == [(name, [0])]
        assert c.describe(committed).transaction_state == "CompleteCommit"
        # The producer carries on where it was.
        assert c.end(ongoing, producer_id, epoch, False) == 0
        c.wait_completed(ongoing, "CompleteAbort")
        response = c.init(committed)
        assert (response.error_code, response.producer_id, response.producer_epoch) == (0, other_id, other_epoch + 1)
    finally:
        c.close()


# --------------------------------------------------------------------------- Produce and the coordinator (KIP-890 part 1)


def produce_txn(client, txn_id, topic, producer_id, epoch, sequence=0, transactional=True, version=9):
    from protocol.records import build_batch

    batch = build_batch([(b"k", b"v", [], int(time.time() * 1000))], producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence, is_transactional=transactional)
    R = REQ["Produce"]
    response = client.call("Produce", version, transactional_id=txn_id, acks=-1, timeout_ms=30000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=0, records=batch)])])
    return response.responses[0].partition_responses[0].error_code


def test_produce_verifies_a_transactions_first_batch_with_the_coordinator(client, topic):
    txn_id = unique("verify-produce")
    producer_id, epoch = ready(client, txn_id)
    # Never added to the transaction: refused, nothing written.
    assert produce_txn(client, txn_id, topic, producer_id, epoch) == ErrorCode.INVALID_TXN_STATE
    # No transactional id on the request: refused whole.
    assert produce_txn(client, None, topic, producer_id, epoch) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert client.add(txn_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
    assert produce_txn(client, txn_id, topic, producer_id, epoch, sequence=0) == ErrorCode.NONE
    assert produce_txn(client, txn_id, topic, producer_id, epoch, sequence=1) == ErrorCode.NONE
    # Inside its transaction the producer may not write outside it.
    assert produce_txn(client, txn_id, topic, producer_id, epoch, sequence=2, transactional=False) == ErrorCode.INVALID_TXN_STATE
    assert client.end(txn_id, producer_id, epoch, False) == ErrorCode.NONE
    client.wait_completed(txn_id, "CompleteAbort")
    # Aborted: a late batch of that transaction cannot start a new one here.
    assert produce_txn(client, txn_id, topic, producer_id, epoch, sequence=2) == ErrorCode.INVALID_TXN_STATE


def test_produce_of_a_fenced_producer_is_refused(client, topic):
    txn_id = unique("fenced-produce")
    producer_id, epoch = ready(client, txn_id)
    newer_id, newer_epoch = ready(client, txn_id)
    assert (newer_id, newer_epoch) == (producer_id, epoch + 1)
    assert produce_txn(client, txn_id, topic, producer_id, epoch) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_clients_may_not_write_control_batches(client, topic):
    from protocol.records import ControlType, build_control_batch

    batch = build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0)
    R = REQ["Produce"]
    response = client.call("Produce", 9, transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=0, records=batch)])])
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD

"""Transactions version 2 (KIP-890 part 2) on a real broker, driven with raw
requests (our own codec over TCP) as a Kafka 4 producer sends them:
InitProducerId, Produce v12 with no AddPartitionsToTxn (the leader adds the
partition), TxnOffsetCommit v5 with no AddOffsetsToTxn, EndTxn v5 answering
the bumped epoch, the markers written at it, a retried EndTxn whose answer
was lost, and a zombie with the old epoch fenced.

A new cluster finalizes ``transaction.version`` 2; the version 2 checks
finalize it with UpdateFeatures if it is not (and skip when the broker
cannot). Below that level (checked after a safe downgrade to 1) v12 and v5
are served as v11 and v4: no epoch bump, partitions verified, not added.
"""

from __future__ import annotations

import time

import pytest

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import create_topic
from tests.interop.test_txn_coordinator_api import OVERRIDES, Client, ready, unique

FEATURE = "transaction.version"
RETRY_WITHIN_S = 20
DESCRIBE_PRODUCERS = APIS_BY_NAME["DescribeProducers"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    process = BrokerProcess(tmp_path_factory.mktemp("txn-v2"), OVERRIDES).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def topic(broker):
    name = unique("txn-v2")
    create_topic(broker.bootstrap, name, partitions=2)
    return name


@pytest.fixture
def client(broker):
    c = Client(broker)
    yield c
    c.close()


def finalized_level(client: Client) -> int:
    response = client.call("ApiVersions", 3, client_software_name="tests", client_software_version="1")
    return next((f.max_version_level for f in response.finalized_features if f.name == FEATURE), 0)


def set_level(client: Client, level: int) -> bool:
    """Finalize transaction.version at ``level`` (UpdateFeatures, an upgrade or a safe downgrade)."""
    current = finalized_level(client)
    if current == level:
        return True
    api = APIS_BY_NAME["UpdateFeatures"]
    advertised = {k.api_key: k.max_version for k in client.call("ApiVersions", 0).api_keys}
    if api.key not in advertised:
        return False
    R = struct_classes(api.request)
    version = min(advertised[api.key], api.versions.high)
    upgrade_type = 1 if level > current else 2  # UPGRADE, SAFE_DOWNGRADE
    update = R.FeatureUpdateKey(
        feature=FEATURE, max_version_level=level, allow_downgrade=level < current, upgrade_type=upgrade_type
    )
    client.conn.request(api, version, api.request.cls(timeout_ms=30_000, feature_updates=[update], validate_only=False))
    deadline = time.monotonic() + RETRY_WITHIN_S
    while time.monotonic() < deadline:
        if finalized_level(client) == level:
            return True
        time.sleep(0.1)
    return False


def try_finalize_v2(client: Client) -> bool:
    """Finalize transaction.version 2 if the broker lets us (a new cluster finalizes it by itself)."""
    return finalized_level(client) >= 2 or set_level(client, 2)


@pytest.fixture
def v2(client):
    if not try_finalize_v2(client):
        pytest.skip("transaction.version 2 cannot be finalized on this broker")
    return client


def produce(client, txn_id, topic, producer_id, epoch, *, partition=0, sequence=0, version=12):
    from protocol.records import build_batch

    batch = build_batch([(b"k", b"v", [], int(time.time() * 1000))], producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence, is_transactional=True)
    R = struct_classes(APIS_BY_NAME["Produce"].request)
    response = client.call("Produce", version, transactional_id=txn_id, acks=-1, timeout_ms=30000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=partition, records=batch)])])
    return response.responses[0].partition_responses[0].error_code


def produce_retrying(client, *args, **kwargs):
    """As a producer does: NOT_ENOUGH_REPLICAS (the last transaction still completing) is retried."""
    deadline = time.monotonic() + RETRY_WITHIN_S
    while True:
        error = produce(client, *args, **kwargs)
        if error != ErrorCode.NOT_ENOUGH_REPLICAS or time.monotonic() > deadline:
            return error
        time.sleep(0.05)


def end5(client, txn_id, producer_id, epoch, commit):
    response = client.call("EndTxn", 5, transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch, committed=commit)
    return response.error_code, response.producer_id, response.producer_epoch


def txn_offset_commit(client, txn_id, group, producer_id, epoch, topic, offset, version=5):
    api = APIS_BY_NAME["TxnOffsetCommit"]
    R = struct_classes(api.request)
    deadline = time.monotonic() + RETRY_WITHIN_S
    while True:
        # The group's coordinator loads __consumer_offsets first.
        response = client.conn.request(api, version, api.request.cls(
            transactional_id=txn_id, group_id=group, producer_id=producer_id, producer_epoch=epoch,
            topics=[R.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                R.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata="")])],
        ))
        error = response.topics[0].partitions[0].error_code
        retriable = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR)
        if error not in retriable or time.monotonic() > deadline:
            return error
        time.sleep(0.1)


def init_fencing(client, txn_id):
    """InitProducerId of a new producer instance: CONCURRENT_TRANSACTIONS while it
    aborts the open transaction, retried as a producer does."""
    deadline = time.monotonic() + RETRY_WITHIN_S
    while True:
        response = client.init(txn_id)
        if response.error_code != ErrorCode.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
            assert response.error_code == ErrorCode.NONE, response
            return response.producer_id, response.producer_epoch
        time.sleep(0.05)


def producer_epoch_on(client, topic, partition, producer_id) -> int | None:
    """The epoch the partition's log knows for the producer: the last marker's or batch's."""
    R = struct_classes(DESCRIBE_PRODUCERS.request)
    response = client.conn.request(DESCRIBE_PRODUCERS, 0, DESCRIBE_PRODUCERS.request.cls(
        topics=[R.TopicRequest(name=topic, partition_indexes=[partition])]))
    [p] = response.topics[0].partitions
    return next((s.producer_epoch for s in p.active_producers if s.producer_id == producer_id), None)


def test_advertised_versions(client):
    assert client.advertised("Produce")[-1] == 12
    assert client.advertised("EndTxn")[-1] == 5
    assert client.advertised("AddPartitionsToTxn")[-1] == 5
    advertised = {k.api_key: k.max_version for k in client.call("ApiVersions", 0).api_keys}
    assert advertised[APIS_BY_NAME["TxnOffsetCommit"].key] == 5


def test_below_transaction_version_2_v12_and_v5_are_served_as_before(client, topic):
    # A new cluster finalizes level 2: go down to 1 (a safe downgrade) for this test, and back.
    assert set_level(client, 1), "transaction.version could not be set to 1"
    try:
        served_as_before(client, topic)
    finally:
        assert set_level(client, 2), "transaction.version could not be set back to 2"


def served_as_before(client, topic):
    txn_id = unique("v1-level")
    producer_id, epoch = ready(client, txn_id)
    # Produce v12 is verified as v11: a partition never added is refused.
    assert produce(client, txn_id, topic, producer_id, epoch) == ErrorCode.INVALID_TXN_STATE
    assert client.add(txn_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
    assert produce(client, txn_id, topic, producer_id, epoch) == ErrorCode.NONE
    # EndTxn v5 ends it without a bump and says so.
    assert end5(client, txn_id, producer_id, epoch, True) == (ErrorCode.NONE, producer_id, epoch)
    client.wait_completed(txn_id, "CompleteCommit")
    assert client.describe(txn_id).producer_epoch == epoch


def test_a_version_2_transaction_commits_with_an_epoch_bump(v2, topic):
    client = v2
    txn_id = unique("v2-commit")
    producer_id, epoch = ready(client, txn_id)
    # No AddPartitionsToTxn: the leader adds the partitions itself.
    assert produce(client, txn_id, topic, producer_id, epoch, partition=0) == ErrorCode.NONE
    assert produce(client, txn_id, topic, producer_id, epoch, partition=1) == ErrorCode.NONE
    described = client.describe(txn_id)
    assert described.transaction_state == "Ongoing"
    assert sorted((t.topic, p) for t in described.topics for p in t.partitions) == [(topic, 0), (topic, 1)]
    # Offsets sent to the transaction without AddOffsetsToTxn.
    group = unique("v2-group")
    assert txn_offset_commit(client, txn_id, group, producer_id, epoch, topic, 1) == ErrorCode.NONE
    described = client.describe(txn_id)
    assert any(t.topic == "__consumer_offsets" for t in described.topics)
    assert end5(client, txn_id, producer_id, epoch, True) == (ErrorCode.NONE, producer_id, epoch + 1)
    client.wait_completed(txn_id, "CompleteCommit")
    # The markers carry the bumped epoch.
    assert producer_epoch_on(client, topic, 0, producer_id) == epoch + 1
    assert producer_epoch_on(client, topic, 1, producer_id) == epoch + 1
    # The answer was lost: the retry with the old epoch gets the same identity again.
    assert end5(client, txn_id, producer_id, epoch, True) == (ErrorCode.NONE, producer_id, epoch + 1)
    assert end5(client, txn_id, producer_id, epoch, False)[0] == ErrorCode.INVALID_TXN_STATE


def test_the_next_transaction_starts_at_once_at_the_new_epoch(v2, topic):
    client = v2
    txn_id = unique("v2-next")
    producer_id, epoch = ready(client, txn_id)
    for round_ in range(3):
        assert produce_retrying(client, txn_id, topic, producer_id, epoch + round_) == ErrorCode.NONE
        error, answered_id, answered_epoch = end5(client, txn_id, producer_id, epoch + round_, round_ % 2 == 0)
        assert (error, answered_id, answered_epoch) == (ErrorCode.NONE, producer_id, epoch + round_ + 1)
    client.wait_completed(txn_id, "CompleteCommit")


def test_a_zombie_with_the_old_epoch_is_fenced(v2, topic):
    client = v2
    txn_id = unique("v2-zombie")
    producer_id, epoch = ready(client, txn_id)
    assert produce(client, txn_id, topic, producer_id, epoch) == ErrorCode.NONE
    assert end5(client, txn_id, producer_id, epoch, False) == (ErrorCode.NONE, producer_id, epoch + 1)
    client.wait_completed(txn_id, "CompleteAbort")
    assert produce(client, txn_id, topic, producer_id, epoch + 1, partition=1) == ErrorCode.NONE
    # The old epoch: its batch is refused, its EndTxn fenced.
    assert produce(client, txn_id, topic, producer_id, epoch, partition=1, sequence=5) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert end5(client, txn_id, producer_id, epoch - 1 if epoch else 7, True)[0] == ErrorCode.PRODUCER_FENCED
    # A new producer instance (InitProducerId) fences the one at epoch + 1.
    newer_id, newer_epoch = init_fencing(client, txn_id)
    assert newer_id == producer_id and newer_epoch > epoch + 1
    assert end5(client, txn_id, producer_id, epoch + 1, True)[0] == ErrorCode.PRODUCER_FENCED
    assert produce(client, txn_id, topic, producer_id, epoch + 1, partition=0, sequence=9) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_an_abort_with_nothing_written_bumps_and_a_commit_is_refused(v2):
    client = v2
    txn_id = unique("v2-empty")
    producer_id, epoch = ready(client, txn_id)
    assert end5(client, txn_id, producer_id, epoch, True)[0] == ErrorCode.INVALID_TXN_STATE
    assert end5(client, txn_id, producer_id, epoch, False) == (ErrorCode.NONE, producer_id, epoch + 1)
    client.wait_completed(txn_id, "CompleteAbort")

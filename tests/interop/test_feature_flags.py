"""Feature flags end to end (controller/features.py): what a new cluster
finalizes, ApiVersions' feature fields seen by a raw client, UpdateFeatures
through kafka-python's admin client (its describe_features/update_features),
the group.version gate of the consumer protocol as confluent-kafka meets it,
``storage format --feature`` and ``pybroker features``.

One broker for the module: every test that changes a level puts it back
(``restored``), and each asserts the levels it starts from.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from controller.features import (
    GROUP_VERSION,
    SHARE_VERSION,
    SUPPORTED_FEATURE_LEVELS,
    TRANSACTION_VERSION,
    default_feature_levels,
)
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.conftest import PROJECT_ROOT, BrokerProcess
from tests.interop._support import RawConnection, create_topic, unique_topic

kafka_admin = pytest.importorskip("kafka.admin")
kafka_errors = pytest.importorskip("kafka.errors")
confluent_kafka = pytest.importorskip("confluent_kafka")

API_VERSIONS = APIS_BY_NAME["ApiVersions"]
HEARTBEAT = APIS_BY_NAME["ConsumerGroupHeartbeat"]
UPDATE = APIS_BY_NAME["UpdateFeatures"]
AV = struct_classes(API_VERSIONS.request)
CGH = struct_classes(HEARTBEAT.request)
UF = struct_classes(UPDATE.request)
WAIT_S = 30
ALL_FAILED = "The update failed for all features since the following feature had an error: "


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("features")).start()
    yield process
    process.stop()


@pytest.fixture
def admin(broker):
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    yield client
    client.close()


def api_versions(bootstrap: str, version: int):
    with RawConnection(bootstrap) as conn:
        fields = {"client_software_name": "features-test", "client_software_version": "1"} if version >= 3 else {}
        return conn.request(API_VERSIONS, version, AV.ApiVersionsRequest(**fields))


def finalized(bootstrap: str) -> dict[str, int]:
    response = api_versions(bootstrap, 4)
    return {f.name: f.max_version_level for f in response.finalized_features}


def update_features(bootstrap: str, version: int, *updates, validate_only: bool = False):
    """Raw UpdateFeatures; each update (name, level, upgrade type)."""
    items = [
        UF.FeatureUpdateKey(feature=name, max_version_level=level, allow_downgrade=kind != 1, upgrade_type=kind)
        for name, level, kind in updates
    ]
    with RawConnection(bootstrap) as conn:
        return conn.request(UPDATE, version, UF.UpdateFeaturesRequest(timeout_ms=20000, feature_updates=items, validate_only=validate_only))


@pytest.fixture
def restored(broker):
    """Whatever a test changes, the defaults are finalized again afterwards."""
    assert finalized(broker.bootstrap) == default_feature_levels()
    yield
    for name, level in default_feature_levels().items():
        if finalized(broker.bootstrap).get(name, 0) < level:
            assert update_features(broker.bootstrap, 1, (name, level, 1)).error_code == 0
    assert finalized(broker.bootstrap) == default_feature_levels()


def pybroker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False
    )


# --------------------------------------------------------------------------- a new cluster


def test_a_new_broker_finalizes_the_defaults_and_says_so_in_api_versions(broker):
    v4 = api_versions(broker.bootstrap, 4)
    assert {f.name: f.max_version_level for f in v4.finalized_features} == default_feature_levels()
    assert all(f.min_version_level == f.max_version_level for f in v4.finalized_features)
    assert default_feature_levels()[GROUP_VERSION] == 1  # KIP-848 is on in a new cluster
    # The epoch is the metadata offset of the image: past the feature records at least.
    assert v4.finalized_features_epoch >= len(default_feature_levels())
    supported = {f.name: (f.min_version, f.max_version) for f in v4.supported_features}
    expected = {name: levels for name, levels in SUPPORTED_FEATURE_LEVELS.items() if levels[1] > 0}
    assert supported == expected
    assert all(high > 0 for _, high in supported.values())  # a feature supported at level 0 only is not claimed
    # v3: a supported minimum of 0 reads as 1 (KAFKA-17011), the rest alike.
    v3 = api_versions(broker.bootstrap, 3)
    assert {f.name: (f.min_version, f.max_version) for f in v3.supported_features} == {
        name: (max(low, 1), high) for name, (low, high) in expected.items()
    }
    assert {f.name for f in v3.finalized_features} == set(default_feature_levels())
    # v0-v2 have no feature fields at all.
    assert api_versions(broker.bootstrap, 2).error_code == 0


def test_kafka_python_describes_the_features(broker, admin):
    described = admin.describe_features()
    assert described[GROUP_VERSION]["finalized"] == (1, 1)
    assert described[GROUP_VERSION]["supported"] == SUPPORTED_FEATURE_LEVELS[GROUP_VERSION]
    assert described[TRANSACTION_VERSION]["finalized"] == (2, 2)


# --------------------------------------------------------------------------- UpdateFeatures and the group.version gate


def consumer_protocol_outcome(bootstrap: str, topic: str, group: str) -> tuple[list[bytes], list[str]]:
    """What a group.protocol=consumer consumer gets within the bound: (values, errors)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
    })
    values: list[bytes] = []
    errors: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not values and not errors:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                errors.append(str(message.error()))
            else:
                values.append(message.value())
    finally:
        consumer.close()
    return values, errors


def produce_one(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"hello")
    assert producer.flush(WAIT_S) == 0


def test_group_version_0_refuses_the_consumer_protocol_and_1_serves_it_again(broker, admin, restored):
    topic = unique_topic("features-gate")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_one(broker.bootstrap, topic)
    assert admin.update_features({GROUP_VERSION: ("SAFE_DOWNGRADE", 0)}) == {GROUP_VERSION: "OK"}
    assert GROUP_VERSION not in finalized(broker.bootstrap)
    # Still listed, as in Kafka 4; answered UNSUPPORTED_VERSION.
    listed = {k.api_key for k in api_versions(broker.bootstrap, 3).api_keys}
    assert {HEARTBEAT.key, APIS_BY_NAME["ConsumerGroupDescribe"].key} <= listed
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.request(HEARTBEAT, 0, CGH.ConsumerGroupHeartbeatRequest(
            group_id="gated", member_id="", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=[topic], topic_partitions=[],
        ))
    assert (answer.error_code, answer.member_epoch) == (ErrorCode.UNSUPPORTED_VERSION, -1)
    # confluent-kafka (librdkafka) stops with the fatal error it raises against Kafka 4 then.
    values, errors = consumer_protocol_outcome(broker.bootstrap, topic, "gated")
    assert values == [] and errors and "API version not supported" in errors[0], errors
    # Classic groups are untouched by group.version.
    classic = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic-while-gated",
                                        "auto.offset.reset": "earliest"})
    try:
        classic.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        got = None
        while got is None and time.monotonic() < deadline:
            got = classic.poll(0.2)
        assert got is not None and got.error() is None and got.value() == b"hello"
    finally:
        classic.close()
    # Upgraded again: the consumer protocol is served.
    assert admin.update_features({GROUP_VERSION: 1}) == {GROUP_VERSION: "OK"}
    assert finalized(broker.bootstrap)[GROUP_VERSION] == 1
    values, errors = consumer_protocol_outcome(broker.bootstrap, topic, "served-again")
    assert (values, errors) == ([b"hello"], [])


def test_validate_only_changes_nothing(broker, admin, restored):
    before = api_versions(broker.bootstrap, 4)
    assert admin.update_features({GROUP_VERSION: ("SAFE_DOWNGRADE", 0)}, validate_only=True) == {GROUP_VERSION: "OK"}
    after = api_versions(broker.bootstrap, 4)
    assert after.finalized_features == before.finalized_features
    assert after.finalized_features_epoch == before.finalized_features_epoch
    # Refusals are refusals under validate_only too.
    refused = update_features(broker.bootstrap, 1, (GROUP_VERSION, 2, 1), validate_only=True)
    assert refused.error_code == ErrorCode.INVALID_UPDATE_VERSION


def test_refused_updates_are_invalid_update_version_for_the_whole_request(broker, admin, restored):
    epoch = api_versions(broker.bootstrap, 4).finalized_features_epoch
    cases = [
        ((GROUP_VERSION, 2, 1), "Invalid update version 2 for feature group.version. Local controller 1 only supports versions 0-1"),
        ((SHARE_VERSION, 2, 1), "Invalid update version 2 for feature share.version. Local controller 1 only supports versions 0-1"),
        ((GROUP_VERSION, 0, 1), ("Invalid update version 0 for feature group.version. Can't downgrade the version of this "
                                 "feature without setting the upgrade type to either safe or unsafe downgrade.")),
        (("no.such.feature", 1, 1), "Local controller 1 does not support this feature."),
    ]
    for update, message in cases:
        for version in (0, 1, 2):
            # One valid update with it: nothing of the request is applied.
            response = update_features(broker.bootstrap, version, (TRANSACTION_VERSION, 2, 1), update)
            assert response.error_code == ErrorCode.INVALID_UPDATE_VERSION, (version, update, response)
            assert response.error_message.startswith(ALL_FAILED) and response.error_message.endswith(message), response
            assert not getattr(response, "results", None)
    with pytest.raises(kafka_errors.InvalidUpdateVersionError):
        admin.update_features({GROUP_VERSION: 2})
    assert api_versions(broker.bootstrap, 4).finalized_features_epoch == epoch  # nothing was written


def test_per_feature_results_only_below_v2(broker, restored):
    for version in (0, 1, 2):
        response = update_features(broker.bootstrap, version, (GROUP_VERSION, 1, 1))
        assert (response.error_code, response.error_message) == (0, None)
        results = [(r.feature, r.error_code) for r in getattr(response, "results", None) or []]
        assert results == ([(GROUP_VERSION, 0)] if version <= 1 else [])


# --------------------------------------------------------------------------- pybroker features


def test_pybroker_features_describe_upgrade_downgrade_disable(broker, restored):
    described = pybroker("features", "--bootstrap-server", broker.bootstrap, "describe")
    assert described.returncode == 0, described.stderr
    epoch = api_versions(broker.bootstrap, 4).finalized_features_epoch
    assert described.stdout.splitlines() == [
        f"Feature: {name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: {high}\t"
        f"FinalizedVersionLevel: {default_feature_levels().get(name, 0)}\tEpoch: {epoch}"
        for name, (low, high) in sorted(SUPPORTED_FEATURE_LEVELS.items())
        if high > 0
    ]
    dry = pybroker("features", "--bootstrap-server", broker.bootstrap, "downgrade", "--feature", "group.version=0", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "DRY RUN: no change was made.\ngroup.version can be downgraded to 0.\n")
    assert finalized(broker.bootstrap)[GROUP_VERSION] == 1
    disabled = pybroker("features", "disable", "--bootstrap-server", broker.bootstrap, "--feature", "group.version")
    assert (disabled.returncode, disabled.stdout) == (0, "group.version was disabled.\n"), disabled.stderr
    assert GROUP_VERSION not in finalized(broker.bootstrap)
    refused = pybroker("features", "--bootstrap-server", broker.bootstrap, "upgrade",
                       "--feature", "group.version=1", "--feature", "transaction.version=3")
    assert refused.returncode == 1
    lines = refused.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("Could not upgrade group.version to 1. " + ALL_FAILED)
    assert lines[1].endswith("Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2")
    assert refused.stderr == "2 out of 2 operation(s) failed.\n"
    assert GROUP_VERSION not in finalized(broker.bootstrap)  # all or nothing
    upgraded = pybroker("features", "--bootstrap-server", broker.bootstrap, "upgrade", "--feature", "group.version=1")
    assert (upgraded.returncode, upgraded.stdout) == (0, "group.version was upgraded to 1.\n"), upgraded.stderr
    usage = pybroker("features", "--bootstrap-server", broker.bootstrap, "upgrade")
    assert (usage.returncode, usage.stderr) == (2, "pybroker features: You must specify at least one feature to upgrade\n")


# --------------------------------------------------------------------------- storage format --feature


def test_a_cluster_formatted_with_a_feature_level_starts_at_it(tmp_path):
    from tests.cluster.test_scram_bootstrap import format_node

    result = format_node(tmp_path, {"listeners": "PLAINTEXT://127.0.0.1:0"}, "--feature", "group.version=0")
    assert result.returncode == 0, result.stderr
    process = BrokerProcess(tmp_path, {"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    try:
        levels = finalized(process.bootstrap)
        assert GROUP_VERSION not in levels
        assert levels == {n: v for n, v in default_feature_levels().items() if n != GROUP_VERSION}
    finally:
        process.stop()

"""controller/features.py: supported levels, a new cluster's levels, and
UpdateFeatures' validation as Kafka 4's FeatureControlManager has it."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from controller.features import (
    BALANCER_VERSION,
    GROUP_VERSION,
    SHARE_VERSION,
    SUPPORTED_FEATURE_LEVELS,
    TRANSACTION_VERSION,
    FeatureUpdate,
    UpgradeType,
    bootstrap_feature_records,
    check_level_supported,
    default_feature_levels,
    finalized_level,
    plan_update_features,
    registration_refusal,
    with_bootstrap_features,
)
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    BROKER_FEATURE,
    FEATURE_LEVEL_RECORD,
    REGISTER_BROKER_RECORD,
    USER_SCRAM_CREDENTIAL_RECORD,
    record_api_key,
)
from protocol.errors import ErrorCode

NODE = 1


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def broker(broker_id, ranges):
    return REGISTER_BROKER_RECORD(
        broker_id=broker_id,
        is_migrating_zk_broker=False,
        incarnation_id=uuid.UUID(int=broker_id),
        broker_epoch=broker_id,
        end_points=[],
        features=[BROKER_FEATURE.cls(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in ranges.items()],
        rack=None,
        fenced=False,
        in_controlled_shutdown=False,
        log_dirs=[],
    )


def cluster(levels, *brokers):
    records = [FEATURE_LEVEL_RECORD(name=n, feature_level=lvl) for n, lvl in levels.items()]
    records += [broker(i, ranges) for i, ranges in enumerate(brokers, start=1)]
    return apply(MetadataImage(), records)


def update(image, *updates, validate_only=False):
    return plan_update_features(image, list(updates), local_node_id=NODE, validate_only=validate_only)


def test_supported_levels_and_what_a_new_cluster_finalizes():
    assert SUPPORTED_FEATURE_LEVELS[GROUP_VERSION][0] == 0 and SUPPORTED_FEATURE_LEVELS[SHARE_VERSION][0] == 0
    defaults = default_feature_levels()
    for name, (_, high) in SUPPORTED_FEATURE_LEVELS.items():
        assert defaults.get(name, 0) == high
    assert 0 not in defaults.values()  # a level 0 is simply not written
    records = bootstrap_feature_records()
    assert {r.name: r.feature_level for r in records} == defaults
    # storage format --feature overrides a default; level 0 leaves the feature out.
    overridden = {r.name: r.feature_level for r in bootstrap_feature_records({GROUP_VERSION: 0})}
    assert GROUP_VERSION not in overridden
    assert overridden.get(TRANSACTION_VERSION, 0) == defaults.get(TRANSACTION_VERSION, 0)


def test_the_bootstrap_batch_puts_the_feature_levels_first():
    scram = USER_SCRAM_CREDENTIAL_RECORD(name="alice", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096)
    file_records = [(record_api_key(scram), scram), (FEATURE_LEVEL_RECORD.api_key, FEATURE_LEVEL_RECORD(name=GROUP_VERSION, feature_level=0))]
    batch = with_bootstrap_features(file_records)
    assert batch[-1] == (record_api_key(scram), scram)
    names = [r.name for key, r in batch if key == FEATURE_LEVEL_RECORD.api_key]
    assert GROUP_VERSION not in names
    assert len(with_bootstrap_features([])) == len(default_feature_levels())


def test_format_refuses_a_level_outside_the_supported_range():
    assert check_level_supported(GROUP_VERSION, 1) is None
    assert check_level_supported(GROUP_VERSION, 0) is None
    assert "outside the supported levels 0-1" in check_level_supported(GROUP_VERSION, 2)
    assert "outside the supported levels 0-1" in check_level_supported(SHARE_VERSION, 2)
    assert "unknown feature" in check_level_supported("metadata.version", 20)


def test_an_upgrade_writes_one_record_per_feature():
    image = cluster({}, {GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 1)})
    error, records = update(image, FeatureUpdate(GROUP_VERSION, 1), FeatureUpdate(TRANSACTION_VERSION, 1))
    assert error is None
    after = apply(image, records)
    assert (finalized_level(after, GROUP_VERSION), finalized_level(after, TRANSACTION_VERSION)) == (1, 1)
    # Validate only: the same answer, nothing written.
    assert update(image, FeatureUpdate(GROUP_VERSION, 1), validate_only=True) == (None, [])


@pytest.mark.parametrize("upgrade_type", [UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE])
def test_group_and_transaction_version_go_down_with_either_downgrade_type(upgrade_type):
    image = cluster({GROUP_VERSION: 1, TRANSACTION_VERSION: 1}, {GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 1)})
    error, records = update(image, FeatureUpdate(GROUP_VERSION, 0, upgrade_type), FeatureUpdate(TRANSACTION_VERSION, 0, upgrade_type))
    assert error is None
    after = apply(image, records)
    assert GROUP_VERSION not in after.features and TRANSACTION_VERSION not in after.features


@pytest.mark.parametrize("upgrade_type", [UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE])
def test_balancer_version_never_goes_down(upgrade_type):
    # Its records may be in the log, where a build that supports level 0 only would meet them.
    image = cluster({BALANCER_VERSION: 1}, {BALANCER_VERSION: (0, 1)})
    error, records = update(image, FeatureUpdate(BALANCER_VERSION, 0, upgrade_type))
    assert records == [] and error.error == ErrorCode.INVALID_UPDATE_VERSION
    assert error.message.startswith("Invalid update version 0 for feature balancer.version. Refusing to lower")
    # Raising it needs every node to support it, as any feature does.
    older = cluster({}, {GROUP_VERSION: (0, 1)})
    assert message(older, FeatureUpdate(BALANCER_VERSION, 1)).endswith("broker 1 does not support this feature.")
    assert update(cluster({}, {BALANCER_VERSION: (0, 1)}), FeatureUpdate(BALANCER_VERSION, 1))[0] is None


def message(image, *updates):
    error, records = update(image, *updates)
    assert records == [] and error.error == ErrorCode.INVALID_UPDATE_VERSION
    return error.message


def test_the_direction_must_match_the_upgrade_type():
    image = cluster({GROUP_VERSION: 1}, {GROUP_VERSION: (0, 1)})
    assert message(image, FeatureUpdate(GROUP_VERSION, 0)) == (
        "Invalid update version 0 for feature group.version. Can't downgrade the version of this feature without "
        "setting the upgrade type to either safe or unsafe downgrade."
    )
    lower = cluster({}, {GROUP_VERSION: (0, 1)})
    assert message(lower, FeatureUpdate(GROUP_VERSION, 1, UpgradeType.SAFE_DOWNGRADE)).endswith("Can't downgrade to a newer version.")
    # The level it already has passes with any type (and is written again, as Kafka does).
    assert update(image, FeatureUpdate(GROUP_VERSION, 1, UpgradeType.SAFE_DOWNGRADE))[0] is None
    assert message(image, FeatureUpdate(GROUP_VERSION, 1, UpgradeType.UNKNOWN)).endswith(
        "The controller does not support the given upgrade type."
    )
    assert message(image, FeatureUpdate(GROUP_VERSION, -1, UpgradeType.SAFE_DOWNGRADE)).endswith(
        "A feature version cannot be less than 0."
    )


def test_a_level_outside_a_node_range_is_an_invalid_update_version():
    image = cluster({}, {GROUP_VERSION: (0, 1), SHARE_VERSION: (0, 0)})
    assert message(image, FeatureUpdate(GROUP_VERSION, 2)) == (
        "Invalid update version 2 for feature group.version. Local controller 1 only supports versions 0-1"
    )
    # The local controller supports share.version 1; broker 1 does not list a level above 0.
    assert message(image, FeatureUpdate(SHARE_VERSION, 1)).endswith("broker 1 does not support this feature.")
    assert message(image, FeatureUpdate("metadata.version", 0)).endswith("Local controller 1 does not support this feature.")
    # A broker that supports less than this controller, or does not list the feature at all.
    old = cluster({}, {GROUP_VERSION: (0, 1)}, {GROUP_VERSION: (0, 0), TRANSACTION_VERSION: (0, 1)})
    assert message(old, FeatureUpdate(GROUP_VERSION, 1)).endswith("broker 2 does not support this feature.")
    unlisted = cluster({}, {GROUP_VERSION: (0, 1)}, {})
    assert message(unlisted, FeatureUpdate(TRANSACTION_VERSION, 1)).endswith("broker 1 does not support this feature.")
    narrower = cluster({}, {GROUP_VERSION: (1, 1)})
    assert message(narrower, FeatureUpdate(GROUP_VERSION, 0, UpgradeType.SAFE_DOWNGRADE)).endswith("broker 1 only supports versions 1")


def test_one_invalid_update_refuses_the_whole_request():
    image = cluster({}, {GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 1)})
    error, records = update(image, FeatureUpdate(TRANSACTION_VERSION, 1), FeatureUpdate(GROUP_VERSION, 5))
    assert (error.name, records) == (GROUP_VERSION, [])


def test_registration_needs_every_finalized_level_in_the_node_range():
    image = cluster({GROUP_VERSION: 1})
    ok = [SimpleNamespace(name=GROUP_VERSION, min_supported_version=0, max_supported_version=1)]
    assert registration_refusal(image, ok) is None
    assert registration_refusal(image, []) == (
        "Unable to register because the broker does not support finalized version 1 of group.version. "
        "The broker wants a version between 0 and 0, inclusive."
    )
    # A feature not finalized is at level 0, which a node needing at least 1 cannot run.
    needs_one = [SimpleNamespace(name=TRANSACTION_VERSION, min_supported_version=1, max_supported_version=2)] + ok
    assert "finalized version 0 of transaction.version" in registration_refusal(image, needs_one)

"""Feature flags (KIP-584, KIP-778): what this node supports, what a new cluster
finalizes, and whether an UpdateFeatures request may change a level. Pure.

A feature's *finalized level* is cluster-wide: FeatureLevelRecords in the
metadata log set it, the image holds it (``image.features``), and a level of 0
is not finalized and so not written (a record at level 0 removes the feature).
Every node registers the range of levels it can run at (RegisterBrokerRecord's
``features``); the controller finalizes only a level every registered node
supports, and refuses to register a node that cannot run at a finalized level.

Behaviour is gated on ``finalized_level(image, name)``, never on the supported
range: a cluster upgraded from a pybroker that finalized nothing runs at level
0 until an operator raises it (``pybroker features upgrade``).

The checks are those of Kafka 4's FeatureControlManager and QuorumFeatures:

* the upgrade type: UPGRADE may only raise a level, SAFE_DOWNGRADE and
  UNSAFE_DOWNGRADE may only lower it (an unchanged level passes any type);
* the level must be in this controller's range and in the range of every
  registered broker and controller (one that does not list the feature
  supports level 0 only);
* any failure refuses the whole request: INVALID_UPDATE_VERSION with
  "Invalid update version <level> for feature <name>. <reason>".

Kafka lets ``group.version`` and ``transaction.version`` go down with a
SAFE_DOWNGRADE: only ``metadata.version`` has the extra "might delete metadata"
check, and pybroker has no metadata.version. So does pybroker: a lower
group.version stops the consumer protocol for new heartbeats, a lower
transaction.version makes new transactions use the older protocol; nothing
written is lost either way.

``balancer.version`` is pybroker's own and plays metadata.version's part for
the metadata record types it adds: at level 1 the controller writes
BrokerPlacementRecord and BalancerThrottleRecord, which a build supporting
level 0 only cannot read (it would stop applying the metadata log). So those
records are written only once level 1 is finalized, which needs every node
to run a build that reads them, and the level never goes down again: a
record may still be in the log, and an older build would meet it on replay.
Kafka refuses a metadata.version downgrade that might lose metadata for the
same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from controller.metadata.image import MetadataImage
from controller.metadata.records import FEATURE_LEVEL_RECORD
from protocol.errors import ErrorCode

GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"
BALANCER_VERSION = "balancer.version"

# (min, max) level this node runs at, per feature. Raise a max only when what
# the new level means really works end to end.
SUPPORTED_FEATURE_LEVELS: dict[str, tuple[int, int]] = {
    # 0: classic consumer groups only; ConsumerGroupHeartbeat and
    #    ConsumerGroupDescribe answer UNSUPPORTED_VERSION.
    # 1: KIP-848 consumer groups are served as well (group.protocol=consumer).
    GROUP_VERSION: (0, 1),
    # 0 and 1: transactions as in Kafka 3.x (AddPartitionsToTxn, EndTxn up to
    #    v4 behaviour). Kafka's level 1 only lets the coordinator write flexible
    #    __transaction_state values, which no client sees and which pybroker
    #    writes when a tagged field needs it (protocol/transaction_state.py).
    # 2: KIP-890 part 2: EndTxn v5 bumps the epoch at every transaction's end,
    #    Produce v12 and TxnOffsetCommit v5 add the partition to the transaction
    #    on the broker (no AddPartitionsToTxn round trip). Kafka 4 clients use it
    #    when this level is finalized; older clients keep working.
    TRANSACTION_VERSION: (0, 2),
    # 0: no share groups: the KIP-932 APIs are not listed in ApiVersions and
    #    answer UNSUPPORTED_VERSION.
    # 1: KIP-932 share groups (ShareGroupHeartbeat/Describe v1, ShareFetch and
    #    ShareAcknowledge v1, the share-group state APIs between brokers).
    SHARE_VERSION: (0, 1),
    # pybroker's own (see the module doc).
    # 0: no BrokerPlacementRecord or BalancerThrottleRecord is written: cordon
    #    and remove-broker answer UNSUPPORTED_VERSION and the self-balancer
    #    moves nothing (it reports itself stalled, saying why).
    # 1: brokers can be cordoned and drained, and the balancer moves replicas
    #    under throttles it records as its own.
    BALANCER_VERSION: (0, 1),
}

# Features whose level may not be lowered (see the module doc), and why.
NO_DOWNGRADE: dict[str, str] = {
    BALANCER_VERSION: (
        "Its BrokerPlacementRecords and BalancerThrottleRecords may be in the metadata log, "
        "and a node that supports only the lower level cannot read them."
    ),
}


class UpgradeType(IntEnum):
    """FeatureUpdate.UpgradeType's codes (UpdateFeatures v1's ``upgrade_type``)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def of(cls, code: int) -> UpgradeType:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True)
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


@dataclass(frozen=True)
class FeatureUpdateError:
    """The refusal of a whole UpdateFeatures request: the first feature that failed."""

    name: str
    error: ErrorCode
    message: str


def finalized_level(image: MetadataImage, name: str) -> int:
    """The cluster's finalized level of ``name`` (0 when not finalized)."""
    return image.features.get(name, 0)


def consumer_protocol_enabled(image: MetadataImage) -> bool:
    """KIP-848 consumer groups are served (group.version >= 1), as Kafka 4's
    KafkaApis.isConsumerGroupProtocolEnabled has it."""
    return finalized_level(image, GROUP_VERSION) >= 1


def balancer_records_enabled(image: MetadataImage) -> bool:
    """BrokerPlacementRecords and BalancerThrottleRecords may be written (balancer.version >= 1)."""
    return finalized_level(image, BALANCER_VERSION) >= 1


# Why cordon, remove-broker and the self-balancer do nothing at balancer.version 0.
BALANCER_VERSION_NEEDED = (
    f"{BALANCER_VERSION} 1 is not finalized (a cluster formatted by an older pybroker): "
    f"once every node runs this build, raise it (pybroker features --bootstrap-server HOST:PORT upgrade "
    f"--feature {BALANCER_VERSION}=1)"
)


def default_feature_levels() -> dict[str, int]:
    """The levels a new cluster finalizes: each feature's max, level 0 left out."""
    return {name: high for name, (_, high) in SUPPORTED_FEATURE_LEVELS.items() if high > 0}


def supported_range_text(low: int, high: int) -> str:
    # VersionRange.toString in Kafka.
    return str(low) if low == high else f"{low}-{high}"


def check_level_supported(name: str, level: int) -> str | None:
    """Why this node cannot run ``name`` at ``level`` (for ``storage format --feature``), or None."""
    supported = SUPPORTED_FEATURE_LEVELS.get(name)
    if supported is None:
        return f"unknown feature {name!r} (known: {', '.join(sorted(SUPPORTED_FEATURE_LEVELS))})"
    low, high = supported
    if not low <= level <= high:
        return f"{name}={level} is outside the supported levels {supported_range_text(low, high)}"
    return None


def bootstrap_feature_records(given: Mapping[str, int] | None = None) -> list:
    """The FeatureLevelRecords a new metadata log starts with: the defaults,
    overridden by ``given`` (``storage format --feature``); level 0 is not written."""
    levels = default_feature_levels()
    for name, level in (given or {}).items():
        levels[name] = level
    return [FEATURE_LEVEL_RECORD(name=name, feature_level=level) for name, level in sorted(levels.items()) if level > 0]


def _reason_not_supported(level: int, what: str, supported: tuple[int, int]) -> str | None:
    # QuorumFeatures.reasonNotSupported.
    low, high = supported
    if low <= level <= high:
        return None
    if high == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {supported_range_text(low, high)}"


def _node_ranges(features: Mapping, name: str) -> tuple[int, int]:
    # A node that does not list the feature runs at level 0 only (Kafka's DISABLED range).
    supported = features.get(name)
    return (0, 0) if supported is None else (supported.min_version, supported.max_version)


def _reason_invalid(image: MetadataImage, update: FeatureUpdate, local_node_id: int) -> str | None:
    if update.upgrade_type == UpgradeType.UNKNOWN:
        return "The controller does not support the given upgrade type."
    if update.level < 0:
        return "A feature version cannot be less than 0."
    reason = _reason_not_supported(
        update.level, f"Local controller {local_node_id}", SUPPORTED_FEATURE_LEVELS.get(update.name, (0, 0))
    )
    if reason is None and update.name not in SUPPORTED_FEATURE_LEVELS:
        # Kafka 4 knows its release's features and refuses any other name, even at level 0.
        reason = f"Local controller {local_node_id} does not support this feature."
    if reason is not None:
        return reason
    for broker_id in sorted(image.brokers):
        reason = _reason_not_supported(
            update.level, f"broker {broker_id}", _node_ranges(image.brokers[broker_id].features, update.name)
        )
        if reason is not None:
            return reason
    for controller_id in sorted(image.controllers):
        if controller_id == local_node_id:
            continue
        reason = _reason_not_supported(
            update.level, f"controller {controller_id}", _node_ranges(image.controllers[controller_id].features, update.name)
        )
        if reason is not None:
            return reason
    current = finalized_level(image, update.name)
    if update.level < current and update.name in NO_DOWNGRADE:
        return f"Refusing to lower {update.name}. {NO_DOWNGRADE[update.name]}"
    if update.level < current and update.upgrade_type == UpgradeType.UPGRADE:
        return "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
    if update.level > current and update.upgrade_type != UpgradeType.UPGRADE:
        return "Can't downgrade to a newer version."
    return None


def plan_update_features(
    image: MetadataImage, updates: Iterable[FeatureUpdate], *, local_node_id: int, validate_only: bool = False
) -> tuple[FeatureUpdateError | None, list]:
    """UpdateFeatures on the active controller: (None, the FeatureLevelRecords),
    or (the first refusal, []) when any update is invalid, as Kafka 4 applies
    the updates all or nothing. ``validate_only`` checks and writes nothing."""
    records = []
    for update in updates:
        reason = _reason_invalid(image, update, local_node_id)
        if reason is not None:
            return FeatureUpdateError(
                update.name,
                ErrorCode.INVALID_UPDATE_VERSION,
                f"Invalid update version {update.level} for feature {update.name}. {reason}",
            ), []
        records.append(FEATURE_LEVEL_RECORD(name=update.name, feature_level=update.level))
    return None, ([] if validate_only else records)


def registration_refusal(image: MetadataImage, features: Iterable) -> str | None:
    """Why a node registering with these supported ranges (BrokerRegistration's
    ``features``: name, min_supported_version, max_supported_version) cannot run
    at the cluster's finalized levels, or None. A finalized feature the node does
    not list is one it runs at level 0 only, as Kafka's ClusterControlManager has it."""
    listed = {}
    for feature in features:
        listed[feature.name] = (feature.min_supported_version, feature.max_supported_version)
    for name in sorted(set(listed) | set(image.features)):
        level = finalized_level(image, name)
        low, high = listed.get(name, (0, 0))
        if not low <= level <= high:
            return (
                f"Unable to register because the broker does not support finalized version {level} of "
                f"{name}. The broker wants a version between {low} and {high}, inclusive."
            )
    return None


def with_bootstrap_features(bootstrap_records: Iterable[tuple[int, object]]) -> list[tuple[int, object]]:
    """A new metadata log's first batch: the bootstrap file's records (api key,
    record) with the feature levels in front, each the file's FeatureLevelRecord
    (``storage format --feature``, level 0 included to say "not finalized") or
    else the default, as Kafka's bootstrap metadata puts its features first."""
    given: dict[str, int] = {}
    others = []
    for api_key, record in bootstrap_records:
        if api_key == FEATURE_LEVEL_RECORD.api_key:
            given[record.name] = record.feature_level
        else:
            others.append((api_key, record))
    return [(FEATURE_LEVEL_RECORD.api_key, record) for record in bootstrap_feature_records(given)] + others

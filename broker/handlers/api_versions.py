"""ApiVersions (key 18), versions 0-4.

Lists every API the dispatcher has a handler for, with that handler's range.
A request with a version above ours is answered (in v0) by the dispatcher with
UNSUPPORTED_VERSION and the same list.

From v3 the tagged feature fields are filled as Kafka 4's broker fills them
(KIP-584): ``supported_features`` is this broker's range of each feature it
can run above level 0 (controller/features.py; a feature supported at level 0
only is left out, as Kafka leaves it out), ``finalized_features`` the levels of
the metadata image (a feature at level 0 is not finalized and so absent), both
ends of each range the finalized level, and ``finalized_features_epoch`` the
offset of that image. KAFKA-17011: Java clients before 3.9 cannot read a
supported minimum of 0, so below v4 it is sent as 1, as Kafka does.

KIP-848 APIs stay listed whatever ``group.version`` is, as Kafka 4 lists them;
librdkafka (2.12+) uses ``group.protocol=consumer`` when ConsumerGroupHeartbeat
is listed and then meets the UNSUPPORTED_VERSION the handler answers while
group.version is 0 (broker/handlers/consumer_group_heartbeat.py).
The share group APIs (keys 76-79, 83-87, 90-92) are listed only while ``share.version`` >= 1
is finalized, as in Kafka.
"""

from __future__ import annotations

from broker.coordinators.share_groups.service import share_groups_enabled
from controller.features import SUPPORTED_FEATURE_LEVELS
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ApiVersions"]
R = struct_classes(API.response)
# The first version whose clients read a supported minimum of 0 (KAFKA-17011).
ZERO_MIN_VERSION = 4


def supported_features(api_version: int) -> list:
    low_floor = 0 if api_version >= ZERO_MIN_VERSION else 1
    return [
        R.SupportedFeatureKey(name=name, min_version=max(low, low_floor), max_version=high)
        for name, (low, high) in sorted(SUPPORTED_FEATURE_LEVELS.items())
        if high > 0
    ]


def finalized_features(image) -> list:
    return [
        R.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
        for name, level in sorted(image.features.items())
    ]


# ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge, the
# share coordinator's Initialize/Read/Write/DeleteShareGroupState and
# ReadShareGroupStateSummary, and Describe/Alter/DeleteShareGroupOffsets.
SHARE_GROUP_API_KEYS = frozenset({76, 77, 78, 79, 83, 84, 85, 86, 87, 90, 91, 92})


def register(dispatcher, broker) -> None:
    dispatcher.offered = lambda api_key: api_key not in SHARE_GROUP_API_KEYS or share_groups_enabled(broker)

    def handle(ctx, request):
        image = broker.controller.image
        return R.ApiVersionsResponse(
            error_code=ErrorCode.NONE,
            api_keys=[
                R.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, low, high in dispatcher.advertised_versions()
            ],
            throttle_time_ms=0,
            supported_features=supported_features(ctx.api_version),
            finalized_features_epoch=image.offset,
            finalized_features=finalized_features(image),
            zk_migration_ready=False,
        )

    dispatcher.register(API.key, 0, 4, handle)

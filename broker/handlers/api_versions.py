"""ApiVersions (key 18), versions 0-4.

Lists every API the dispatcher has a handler for, with that handler's range.
A request with a version above ours is answered (in v0) by the dispatcher with
UNSUPPORTED_VERSION and the same list. Feature negotiation (supported and
finalized features) is left empty: no feature flags are implemented yet.
KIP-848's ``group.version`` is not claimed either: librdkafka uses
``group.protocol=consumer`` when ConsumerGroupHeartbeat is listed, without it.
The share group APIs (keys 76-79, 84-85) are listed only while ``share.version`` >= 1
is finalized, as in Kafka.
"""

from __future__ import annotations

from broker.coordinators.share_groups.service import share_groups_enabled
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ApiVersions"]
R = struct_classes(API.response)
# ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge,
# ReadShareGroupState, WriteShareGroupState.
SHARE_GROUP_API_KEYS = frozenset({76, 77, 78, 79, 84, 85})


def register(dispatcher, broker) -> None:
    dispatcher.offered = lambda api_key: api_key not in SHARE_GROUP_API_KEYS or share_groups_enabled(broker)

    def handle(ctx, request):
        return R.ApiVersionsResponse(
            error_code=ErrorCode.NONE,
            api_keys=[
                R.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, low, high in dispatcher.advertised_versions()
            ],
            throttle_time_ms=0,
        )

    dispatcher.register(API.key, 0, 4, handle)

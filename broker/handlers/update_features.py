"""UpdateFeatures (key 57), versions 0-2: raise or lower finalized feature levels.

Forwarded to the active controller like the other admin requests that change
metadata (broker/controller_node/forwarding.py), which checks every update as
Kafka 4's FeatureControlManager does (controller/features.py) and writes the
FeatureLevelRecords in one batch, all or nothing. ALTER on the CLUSTER is
needed (CLUSTER_AUTHORIZATION_FAILED otherwise), checked before forwarding.

The answer is Kafka 4's QuorumController's: a refused update fails the whole
request with its error at the top level ("The update failed for all features
since the following feature had an error: ...") and no per-feature results;
a success has a top-level NONE and, in v0 and v1 only, one NONE result per
feature (v2 dropped them). v0 has ``allow_downgrade`` (a SAFE_DOWNGRADE when
set), v1 the ``upgrade_type`` and ``validate_only``. A feature named twice
counts once, the last one, as the request's map does in Kafka.
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.errors import NotControllerError
from controller.features import FeatureUpdate, UpgradeType
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["UpdateFeatures"]
R = struct_classes(API.response)
# Put in front of the refusal of the one feature the controller stopped at (Kafka 4).
ALL_FAILED_PREFIX = "The update failed for all features since the following feature had an error: "
# The last version with per-feature results.
RESULTS_MAX_VERSION = 1


def _top_level(code: ErrorCode, message: str | None):
    return R.UpdateFeaturesResponse(throttle_time_ms=0, error_code=code, error_message=message, results=[])


def feature_updates(request, api_version: int) -> list[FeatureUpdate]:
    updates: dict[str, FeatureUpdate] = {}
    for item in request.feature_updates:
        if api_version == 0:
            upgrade_type = UpgradeType.SAFE_DOWNGRADE if item.allow_downgrade else UpgradeType.UPGRADE
        else:
            upgrade_type = UpgradeType.of(item.upgrade_type)
        updates[item.feature] = FeatureUpdate(item.feature, item.max_version_level, upgrade_type)
    return list(updates.values())


def register(dispatcher, broker) -> None:
    def authorize(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.ALTER)
        if message is None:
            return None
        return refuse_whole(lambda: _top_level(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message))

    async def handle(ctx, request):
        updates = feature_updates(request, ctx.api_version)
        validate_only = bool(request.validate_only) if ctx.api_version >= 1 else False
        try:
            refused = await broker.controller.update_features(
                updates, validate_only=validate_only, local_node_id=broker.node_id
            )
        except NotControllerError as exc:
            return _top_level(ErrorCode.NOT_CONTROLLER, str(exc))
        if refused is not None:
            return _top_level(refused.error, ALL_FAILED_PREFIX + refused.message)
        results = []
        if ctx.api_version <= RESULTS_MAX_VERSION:
            results = [
                R.UpdatableFeatureResult(feature=update.name, error_code=ErrorCode.NONE, error_message=None)
                for update in updates
            ]
        return R.UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)

    dispatcher.register(API.key, API.versions.low, API.versions.high, handle, authorize=authorize)

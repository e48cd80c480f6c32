"""UpdateFeatures (key 57): an admin raises or lowers cluster-wide finalized feature levels."""

from protocol.schema import BOOL, INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        57, "UpdateFeatures", "0-2", flexible="0+",
        request=[
            F("timeout_ms", INT32, default=60000),
            F("feature_updates", Array(Struct("FeatureUpdateKey", [
                F("feature", STRING),
                F("max_version_level", INT16),
                # v1 replaces the flag with an upgrade type (1 = upgrade only).
                F("allow_downgrade", BOOL, "0"),
                F("upgrade_type", INT8, "1+", default=1),
            ]))),
            F("validate_only", BOOL, "1+", default=False),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            # Dropped in v2: the top-level error then covers every feature.
            F("results", Array(Struct("UpdatableFeatureResult", [
                F("feature", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
            ])), "0-1", ignorable=True),
        ],
    ),
]

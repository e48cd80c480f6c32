"""ApiVersions (key 18): which versions of which APIs a broker speaks."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        18, "ApiVersions", "0-4", flexible="3+",
        request=[
            F("client_software_name", STRING, "3+", ignorable=True),
            F("client_software_version", STRING, "3+", ignorable=True),
        ],
        response=[
            F("error_code", INT16),
            F("api_keys", Array(Struct("ApiVersion", [
                F("api_key", INT16),
                F("min_version", INT16),
                F("max_version", INT16),
            ]))),
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("supported_features", Array(Struct("SupportedFeatureKey", [
                F("name", STRING, "3+"),
                F("min_version", INT16, "3+"),
                F("max_version", INT16, "3+"),
            ])), "3+", tagged="3+", tag=0, ignorable=True),
            F("finalized_features_epoch", INT64, "3+", tagged="3+", tag=1, default=-1, ignorable=True),
            F("finalized_features", Array(Struct("FinalizedFeatureKey", [
                F("name", STRING, "3+"),
                F("max_version_level", INT16, "3+"),
                F("min_version_level", INT16, "3+"),
            ])), "3+", tagged="3+", tag=2, ignorable=True),
            F("zk_migration_ready", BOOL, "3+", tagged="3+", tag=3, default=False, ignorable=True),
        ],
    ),
]

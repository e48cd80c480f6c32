"""ControllerRegistration (key 70): a KRaft controller announces its listeners and features."""

from protocol.schema import BOOL, INT16, INT32, STRING, UINT16, UUID, Api, Array, F, Struct

APIS = [
    Api(
        70, "ControllerRegistration", "0", flexible="0+",
        request=[
            F("controller_id", INT32),
            F("incarnation_id", UUID),
            F("zk_migration_ready", BOOL),
            F("listeners", Array(Struct("Listener", [
                F("name", STRING),
                F("host", STRING),
                F("port", UINT16),
                F("security_protocol", INT16),
            ]))),
            F("features", Array(Struct("Feature", [
                F("name", STRING),
                F("min_supported_version", INT16),
                F("max_supported_version", INT16),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
        ],
    ),
]

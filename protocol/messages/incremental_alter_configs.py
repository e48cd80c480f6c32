"""IncrementalAlterConfigs (key 44): set, delete, append to or subtract from individual config entries."""

from protocol.schema import BOOL, INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        44, "IncrementalAlterConfigs", "0-1", flexible="1+",
        request=[
            F("resources", Array(Struct("AlterConfigsResource", [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("configs", Array(Struct("AlterableConfig", [
                    F("name", STRING),
                    F("config_operation", INT8),
                    F("value", STRING, nullable="0+"),
                ]))),
            ]))),
            F("validate_only", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("responses", Array(Struct("AlterConfigsResourceResponse", [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("resource_type", INT8),
                F("resource_name", STRING),
            ]))),
        ],
    ),
]

"""AlterConfigs (key 33): replace a resource's whole set of dynamic configs (legacy, non-incremental)."""

from protocol.schema import BOOL, INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        33, "AlterConfigs", "0-2", flexible="2+",
        request=[
            F("resources", Array(Struct("AlterConfigsResource", [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("configs", Array(Struct("AlterableConfig", [
                    F("name", STRING),
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

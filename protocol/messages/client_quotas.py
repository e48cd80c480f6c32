"""DescribeClientQuotas and AlterClientQuotas (keys 48-49): read and change per-user and per-client quotas."""

from protocol.schema import BOOL, FLOAT64, INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        48, "DescribeClientQuotas", "0-1", flexible="1+",
        request=[
            F("components", Array(Struct("ComponentData", [
                F("entity_type", STRING),
                F("match_type", INT8),
                F("match", STRING, nullable="0+"),
            ]))),
            F("strict", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            # Null (not empty) when the request failed as a whole.
            F("entries", Array(Struct("EntryData", [
                F("entity", Array(Struct("EntityData", [
                    F("entity_type", STRING),
                    # Null names the default entity of this type.
                    F("entity_name", STRING, nullable="0+"),
                ]))),
                F("values", Array(Struct("ValueData", [
                    F("key", STRING),
                    F("value", FLOAT64),
                ]))),
            ])), nullable="0+"),
        ],
    ),
    Api(
        49, "AlterClientQuotas", "0-1", flexible="1+",
        request=[
            F("entries", Array(Struct("EntryData", [
                F("entity", Array(Struct("EntityData", [
                    F("entity_type", STRING),
                    F("entity_name", STRING, nullable="0+"),
                ]))),
                F("ops", Array(Struct("OpData", [
                    F("key", STRING),
                    F("value", FLOAT64),
                    F("remove", BOOL),
                ]))),
            ]))),
            F("validate_only", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("entries", Array(Struct("EntryData", [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("entity", Array(Struct("EntityData", [
                    F("entity_type", STRING),
                    F("entity_name", STRING, nullable="0+"),
                ]))),
            ]))),
        ],
    ),
]

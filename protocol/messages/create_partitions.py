"""CreatePartitions (key 37): add partitions to existing topics."""

from protocol.schema import BOOL, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        37, "CreatePartitions", "0-3", flexible="2+",
        request=[
            F("topics", Array(Struct("CreatePartitionsTopic", [
                F("name", STRING),
                F("count", INT32),
                # null lets the controller place the new partitions.
                F("assignments", Array(Struct("CreatePartitionsAssignment", [
                    F("broker_ids", Array(INT32)),
                ])), nullable="0+"),
            ]))),
            F("timeout_ms", INT32),
            F("validate_only", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("CreatePartitionsTopicResult", [
                F("name", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
]

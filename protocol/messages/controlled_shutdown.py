"""ControlledShutdown (key 7): a broker asks the controller to move leadership away before it stops."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

# v0 requests are sent with request header v0 (no client id): see protocol.headers.
APIS = [
    Api(
        7, "ControlledShutdown", "0-3", flexible="3+",
        request=[
            F("broker_id", INT32),
            F("broker_epoch", INT64, "2+", default=-1, ignorable=True),
        ],
        response=[
            F("error_code", INT16),
            F("remaining_partitions", Array(Struct("RemainingPartition", [
                F("topic_name", STRING),
                F("partition_index", INT32),
            ]))),
        ],
    ),
]

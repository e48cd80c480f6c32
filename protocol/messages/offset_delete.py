"""OffsetDelete (key 47): drop a group's committed offsets for some partitions."""

from protocol.schema import INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        47, "OffsetDelete", "0", flexible="none",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("OffsetDeleteRequestTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("OffsetDeleteRequestPartition", [
                    F("partition_index", INT32),
                ]))),
            ]))),
        ],
        response=[
            F("error_code", INT16),
            F("throttle_time_ms", INT32, ignorable=True),
            F("topics", Array(Struct("OffsetDeleteResponseTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("OffsetDeleteResponsePartition", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                ]))),
            ]))),
        ],
    ),
]

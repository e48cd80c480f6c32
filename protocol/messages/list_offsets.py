"""ListOffsets (key 2): look up partition offsets by timestamp (earliest, latest, or a given time)."""

from protocol.schema import INT8, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        2, "ListOffsets", "0-10", flexible="6+",
        request=[
            F("replica_id", INT32),
            F("isolation_level", INT8, "2+"),
            F("topics", Array(Struct("ListOffsetsTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("ListOffsetsPartition", [
                    F("partition_index", INT32),
                    F("current_leader_epoch", INT32, "4+", default=-1, ignorable=True),
                    F("timestamp", INT64),
                    F("max_num_offsets", INT32, "0", default=1),
                ]))),
            ]))),
            F("timeout_ms", INT32, "10+", ignorable=True),
        ],
        response=[
            F("throttle_time_ms", INT32, "2+", ignorable=True),
            F("topics", Array(Struct("ListOffsetsTopicResponse", [
                F("name", STRING),
                F("partitions", Array(Struct("ListOffsetsPartitionResponse", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("old_style_offsets", Array(INT64), "0"),
                    F("timestamp", INT64, "1+", default=-1),
                    F("offset", INT64, "1+", default=-1),
                    F("leader_epoch", INT32, "4+", default=-1),
                ]))),
            ]))),
        ],
    ),
]

"""OffsetFetch (key 9): read back the offsets a consumer group has committed."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        9, "OffsetFetch", "0-9", flexible="6+",
        request=[
            # Up to v7 one group per request; v8 batches several groups.
            F("group_id", STRING, "0-7"),
            # Null (v2+) asks for every partition the group has offsets for.
            F("topics", Array(Struct("OffsetFetchRequestTopic", [
                F("name", STRING, "0-7"),
                F("partition_indexes", Array(INT32), "0-7"),
            ])), "0-7", nullable="2-7"),
            F("groups", Array(Struct("OffsetFetchRequestGroup", [
                F("group_id", STRING, "8+"),
                F("member_id", STRING, "9+", nullable="9+", default=None, ignorable=True),
                F("member_epoch", INT32, "9+", default=-1, ignorable=True),
                F("topics", Array(Struct("OffsetFetchRequestTopics", [
                    F("name", STRING, "8+"),
                    F("partition_indexes", Array(INT32), "8+"),
                ])), "8+", nullable="8+"),
            ])), "8+"),
            F("require_stable", BOOL, "7+", default=False),
        ],
        response=[
            F("throttle_time_ms", INT32, "3+", ignorable=True),
            F("topics", Array(Struct("OffsetFetchResponseTopic", [
                F("name", STRING, "0-7"),
                F("partitions", Array(Struct("OffsetFetchResponsePartition", [
                    F("partition_index", INT32, "0-7"),
                    F("committed_offset", INT64, "0-7"),
                    F("committed_leader_epoch", INT32, "5-7", default=-1, ignorable=True),
                    F("metadata", STRING, "0-7", nullable="0-7"),
                    F("error_code", INT16, "0-7"),
                ])), "0-7"),
            ])), "0-7"),
            F("error_code", INT16, "2-7", default=0, ignorable=True),
            F("groups", Array(Struct("OffsetFetchResponseGroup", [
                F("group_id", STRING, "8+"),
                F("topics", Array(Struct("OffsetFetchResponseTopics", [
                    F("name", STRING, "8+"),
                    F("partitions", Array(Struct("OffsetFetchResponsePartitions", [
                        F("partition_index", INT32, "8+"),
                        F("committed_offset", INT64, "8+"),
                        F("committed_leader_epoch", INT32, "8+", default=-1, ignorable=True),
                        F("metadata", STRING, "8+", nullable="8+"),
                        F("error_code", INT16, "8+"),
                    ])), "8+"),
                ])), "8+"),
                F("error_code", INT16, "8+", default=0),
            ])), "8+"),
        ],
    ),
]

"""DescribeTopicPartitions (key 75): paginated topic and partition metadata, including ELR."""

from protocol.schema import BOOL, INT16, INT32, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        75, "DescribeTopicPartitions", "0", flexible="0+",
        request=[
            F("topics", Array(Struct("TopicRequest", [
                F("name", STRING),
            ]))),
            F("response_partition_limit", INT32, default=2000),
            # A nullable struct: one marker byte (-1 null, 1 present) precedes it.
            F("cursor", Struct("Cursor", [
                F("topic_name", STRING),
                F("partition_index", INT32),
            ]), nullable="0+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32, ignorable=True),
            F("topics", Array(Struct("DescribeTopicPartitionsResponseTopic", [
                F("error_code", INT16),
                F("name", STRING, nullable="0+"),
                F("topic_id", UUID, ignorable=True),
                F("is_internal", BOOL, default=False, ignorable=True),
                F("partitions", Array(Struct("DescribeTopicPartitionsResponsePartition", [
                    F("error_code", INT16),
                    F("partition_index", INT32),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32, default=-1, ignorable=True),
                    F("replica_nodes", Array(INT32)),
                    F("isr_nodes", Array(INT32)),
                    F("eligible_leader_replicas", Array(INT32), nullable="0+", default=None),
                    F("last_known_elr", Array(INT32), nullable="0+", default=None),
                    F("offline_replicas", Array(INT32), ignorable=True),
                ]))),
                F("topic_authorized_operations", INT32, default=-2147483648),
            ]))),
            F("next_cursor", Struct("Cursor", [
                F("topic_name", STRING),
                F("partition_index", INT32),
            ]), nullable="0+", default=None),
        ],
    ),
]

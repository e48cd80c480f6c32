"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets
(keys 90-92): the admin view of a share group's share-partition start offsets.

Version 0 as Kafka 4.1 made it stable: Alter and Delete carry a top-level error
beside the per-topic results, and Delete works on whole topics. (Kafka 4.2's
DescribeShareGroupOffsets v1 adds a lag per partition.)
"""

from protocol.schema import INT16, INT32, INT64, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        90, "DescribeShareGroupOffsets", "0", flexible="0+",
        request=[
            F("groups", Array(Struct("DescribeShareGroupOffsetsRequestGroup", [
                F("group_id", STRING),
                # Null: every topic partition the group has state of.
                F("topics", Array(Struct("DescribeShareGroupOffsetsRequestTopic", [
                    F("topic_name", STRING),
                    F("partitions", Array(INT32)),
                ])), nullable="0+", default=None),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("groups", Array(Struct("DescribeShareGroupOffsetsResponseGroup", [
                F("group_id", STRING),
                F("topics", Array(Struct("DescribeShareGroupOffsetsResponseTopic", [
                    F("topic_name", STRING),
                    F("topic_id", UUID),
                    F("partitions", Array(Struct("DescribeShareGroupOffsetsResponsePartition", [
                        F("partition_index", INT32),
                        F("start_offset", INT64),
                        F("leader_epoch", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=None),
                    ]))),
                ]))),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
    Api(
        91, "AlterShareGroupOffsets", "0", flexible="0+",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("AlterShareGroupOffsetsRequestTopic", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("AlterShareGroupOffsetsRequestPartition", [
                    F("partition_index", INT32),
                    F("start_offset", INT64),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("responses", Array(Struct("AlterShareGroupOffsetsResponseTopic", [
                F("topic_name", STRING),
                F("topic_id", UUID),
                F("partitions", Array(Struct("AlterShareGroupOffsetsResponsePartition", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                ]))),
            ]))),
        ],
    ),
    Api(
        92, "DeleteShareGroupOffsets", "0", flexible="0+",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("DeleteShareGroupOffsetsRequestTopic", [
                F("topic_name", STRING),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("responses", Array(Struct("DeleteShareGroupOffsetsResponseTopic", [
                F("topic_name", STRING),
                F("topic_id", UUID),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
]

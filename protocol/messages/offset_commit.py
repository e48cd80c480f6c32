"""OffsetCommit (key 8): a consumer group member stores the offsets it has consumed up to."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        8, "OffsetCommit", "0-9", flexible="8+",
        request=[
            F("group_id", STRING),
            # The group generation for classic groups, the member epoch for consumer groups.
            F("generation_id_or_member_epoch", INT32, "1+", default=-1, ignorable=True),
            F("member_id", STRING, "1+", ignorable=True),
            F("group_instance_id", STRING, "7+", nullable="7+", default=None),
            F("retention_time_ms", INT64, "2-4", default=-1, ignorable=True),
            F("topics", Array(Struct("OffsetCommitRequestTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("OffsetCommitRequestPartition", [
                    F("partition_index", INT32),
                    F("committed_offset", INT64),
                    F("committed_leader_epoch", INT32, "6+", default=-1, ignorable=True),
                    F("commit_timestamp", INT64, "1", default=-1),
                    F("committed_metadata", STRING, nullable="0+"),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32, "3+", ignorable=True),
            F("topics", Array(Struct("OffsetCommitResponseTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("OffsetCommitResponsePartition", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                ]))),
            ]))),
        ],
    ),
]

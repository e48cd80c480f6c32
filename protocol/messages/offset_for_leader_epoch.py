"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, used to truncate diverged logs."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        23, "OffsetForLeaderEpoch", "0-4", flexible="4+",
        request=[
            # -2 marks a consumer (debugging) request; followers send their broker id.
            F("replica_id", INT32, "3+", default=-2, ignorable=True),
            F("topics", Array(Struct("OffsetForLeaderTopic", [
                F("topic", STRING),
                F("partitions", Array(Struct("OffsetForLeaderPartition", [
                    F("partition", INT32),
                    F("current_leader_epoch", INT32, "2+", default=-1, ignorable=True),
                    F("leader_epoch", INT32),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32, "2+", ignorable=True),
            F("topics", Array(Struct("OffsetForLeaderTopicResult", [
                F("topic", STRING),
                F("partitions", Array(Struct("EpochEndOffset", [
                    F("error_code", INT16),
                    F("partition", INT32),
                    F("leader_epoch", INT32, "1+", default=-1, ignorable=True),
                    F("end_offset", INT64, default=-1),
                ]))),
            ]))),
        ],
    ),
]

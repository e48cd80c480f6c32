"""TxnOffsetCommit (key 28): stage consumer offsets that become visible only if the transaction commits."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        28, "TxnOffsetCommit", "0-5", flexible="3+",
        request=[
            F("transactional_id", STRING),
            F("group_id", STRING),
            F("producer_id", INT64),
            F("producer_epoch", INT16),
            # v3+: group membership, so the coordinator can fence zombie members.
            F("generation_id", INT32, "3+", default=-1),
            F("member_id", STRING, "3+", default=""),
            F("group_instance_id", STRING, "3+", nullable="3+", default=None),
            F("topics", Array(Struct("TxnOffsetCommitRequestTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("TxnOffsetCommitRequestPartition", [
                    F("partition_index", INT32),
                    F("committed_offset", INT64),
                    F("committed_leader_epoch", INT32, "2+", default=-1, ignorable=True),
                    F("committed_metadata", STRING, nullable="0+"),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("topics", Array(Struct("TxnOffsetCommitResponseTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("TxnOffsetCommitResponsePartition", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                ]))),
            ]))),
        ],
    ),
]

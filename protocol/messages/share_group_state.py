"""InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary (keys 83-87): the share coordinator's durable per-partition delivery state."""

from protocol.schema import INT8, INT16, INT32, INT64, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        83, "InitializeShareGroupState", "0", flexible="0+",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("InitializeStateData", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition", INT32),
                    F("state_epoch", INT32),
                    F("start_offset", INT64),
                ]))),
            ]))),
        ],
        response=[
            F("results", Array(Struct("InitializeStateResult", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionResult", [
                    F("partition", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                ]))),
            ]))),
        ],
    ),
    Api(
        84, "ReadShareGroupState", "0", flexible="0+",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("ReadStateData", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition", INT32),
                    F("leader_epoch", INT32),
                ]))),
            ]))),
        ],
        response=[
            F("results", Array(Struct("ReadStateResult", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionResult", [
                    F("partition", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                    F("state_epoch", INT32),
                    F("start_offset", INT64),
                    F("state_batches", Array(Struct("StateBatch", [
                        F("first_offset", INT64),
                        F("last_offset", INT64),
                        F("delivery_state", INT8),
                        F("delivery_count", INT16),
                    ]))),
                ]))),
            ]))),
        ],
    ),
    Api(
        85, "WriteShareGroupState", "0", flexible="0+",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("WriteStateData", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition", INT32),
                    F("state_epoch", INT32),
                    F("leader_epoch", INT32),
                    F("start_offset", INT64),
                    F("state_batches", Array(Struct("StateBatch", [
                        F("first_offset", INT64),
                        F("last_offset", INT64),
                        F("delivery_state", INT8),
                        F("delivery_count", INT16),
                    ]))),
                ]))),
            ]))),
        ],
        response=[
            F("results", Array(Struct("WriteStateResult", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionResult", [
                    F("partition", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                ]))),
            ]))),
        ],
    ),
    Api(
        86, "DeleteShareGroupState", "0", flexible="0+",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("DeleteStateData", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition", INT32),
                ]))),
            ]))),
        ],
        response=[
            F("results", Array(Struct("DeleteStateResult", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionResult", [
                    F("partition", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                ]))),
            ]))),
        ],
    ),
    Api(
        87, "ReadShareGroupStateSummary", "0", flexible="0+",
        request=[
            F("group_id", STRING),
            F("topics", Array(Struct("ReadStateSummaryData", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition", INT32),
                    F("leader_epoch", INT32),
                ]))),
            ]))),
        ],
        response=[
            F("results", Array(Struct("ReadStateSummaryResult", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionResult", [
                    F("partition", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                    F("state_epoch", INT32),
                    # Kafka 4.1's stable v0 (the draft before it had no leader epoch).
                    F("leader_epoch", INT32),
                    F("start_offset", INT64),
                ]))),
            ]))),
        ],
    ),
]

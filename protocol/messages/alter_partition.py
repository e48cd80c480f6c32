"""AlterPartition (key 56): a partition leader asks the controller to change the ISR."""

from protocol.schema import INT8, INT16, INT32, INT64, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        56, "AlterPartition", "0-3", flexible="0+",
        request=[
            F("broker_id", INT32),
            F("broker_epoch", INT64, default=-1),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING, "0-1", ignorable=True),
                F("topic_id", UUID, "2+", ignorable=True),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("leader_epoch", INT32),
                    # v3 pairs each ISR member with its broker epoch.
                    F("new_isr", Array(INT32), "0-2"),
                    F("new_isr_with_epochs", Array(Struct("BrokerState", [
                        F("broker_id", INT32, "3+"),
                        F("broker_epoch", INT64, "3+", default=-1),
                    ])), "3+"),
                    F("leader_recovery_state", INT8, "1+", default=0),
                    F("partition_epoch", INT32),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING, "0-1", ignorable=True),
                F("topic_id", UUID, "2+", ignorable=True),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32),
                    F("isr", Array(INT32)),
                    F("leader_recovery_state", INT8, "1+", default=0, ignorable=True),
                    F("partition_epoch", INT32),
                ]))),
            ]))),
        ],
    ),
]

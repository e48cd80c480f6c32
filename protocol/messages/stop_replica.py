"""StopReplica (key 5): the controller tells a broker to stop (and maybe delete) replicas."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        5, "StopReplica", "0-4", flexible="2+",
        request=[
            F("controller_id", INT32),
            F("is_kraft_controller", BOOL, "4+", default=False),
            F("controller_epoch", INT32),
            F("broker_epoch", INT64, "1+", default=-1, ignorable=True),
            # Up to v2 one flag covers every partition; v3+ decide per partition.
            F("delete_partitions", BOOL, "0-2"),
            F("ungrouped_partitions", Array(Struct("StopReplicaPartitionV0", [
                F("topic_name", STRING, "0"),
                F("partition_index", INT32, "0"),
            ])), "0"),
            F("topics", Array(Struct("StopReplicaTopicV1", [
                F("name", STRING, "1-2"),
                F("partition_indexes", Array(INT32), "1-2"),
            ])), "1-2"),
            F("topic_states", Array(Struct("StopReplicaTopicState", [
                F("topic_name", STRING, "3+"),
                F("partition_states", Array(Struct("StopReplicaPartitionState", [
                    F("partition_index", INT32, "3+"),
                    F("leader_epoch", INT32, "3+", default=-1),
                    F("delete_partition", BOOL, "3+"),
                ])), "3+"),
            ])), "3+"),
        ],
        response=[
            F("error_code", INT16),
            F("partition_errors", Array(Struct("StopReplicaPartitionError", [
                F("topic_name", STRING),
                F("partition_index", INT32),
                F("error_code", INT16),
            ]))),
        ],
    ),
]

"""AssignReplicasToDirs (key 73): a broker tells the controller which log dir holds each replica."""

from protocol.schema import INT16, INT32, INT64, UUID, Api, Array, F, Struct

APIS = [
    Api(
        73, "AssignReplicasToDirs", "0", flexible="0+",
        request=[
            F("broker_id", INT32),
            F("broker_epoch", INT64, default=-1),
            F("directories", Array(Struct("DirectoryData", [
                F("id", UUID),
                F("topics", Array(Struct("TopicData", [
                    F("topic_id", UUID),
                    F("partitions", Array(Struct("PartitionData", [
                        F("partition_index", INT32),
                    ]))),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("directories", Array(Struct("DirectoryData", [
                F("id", UUID),
                F("topics", Array(Struct("TopicData", [
                    F("topic_id", UUID),
                    F("partitions", Array(Struct("PartitionData", [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                    ]))),
                ]))),
            ]))),
        ],
    ),
]

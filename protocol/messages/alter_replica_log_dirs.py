"""AlterReplicaLogDirs (key 34): move partition replicas between a broker's log directories."""

from protocol.schema import INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        34, "AlterReplicaLogDirs", "0-2", flexible="2+",
        request=[
            F("dirs", Array(Struct("AlterReplicaLogDir", [
                F("path", STRING),
                F("topics", Array(Struct("AlterReplicaLogDirTopic", [
                    F("name", STRING),
                    F("partitions", Array(INT32)),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("AlterReplicaLogDirTopicResult", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("AlterReplicaLogDirPartitionResult", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                ]))),
            ]))),
        ],
    ),
]

"""ElectLeaders (key 43): trigger preferred or unclean leader elections for partitions."""

from protocol.schema import INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        43, "ElectLeaders", "0-2", flexible="2+",
        request=[
            F("election_type", INT8, "1+"),
            # null means every partition.
            F("topic_partitions", Array(Struct("TopicPartitions", [
                F("topic", STRING),
                F("partitions", Array(INT32)),
            ])), nullable="0+"),
            F("timeout_ms", INT32, default=60000),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16, "1+"),
            F("replica_election_results", Array(Struct("ReplicaElectionResult", [
                F("topic", STRING),
                F("partition_result", Array(Struct("PartitionResult", [
                    F("partition_id", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+"),
                ]))),
            ]))),
        ],
    ),
]

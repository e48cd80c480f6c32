"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): start, cancel and list replica moves.

AlterPartitionReassignments v1 (Kafka 4.0, KIP-860) adds
``allow_replication_factor_change`` to the request, echoed in the response.
"""

from protocol.schema import BOOL, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        45, "AlterPartitionReassignments", "0-1", flexible="0+",
        request=[
            F("timeout_ms", INT32, default=60000),
            # False: a target with another replica count than the partition has is refused.
            F("allow_replication_factor_change", BOOL, "1+", default=True),
            F("topics", Array(Struct("ReassignableTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("ReassignablePartition", [
                    F("partition_index", INT32),
                    # null cancels an ongoing reassignment of the partition.
                    F("replicas", Array(INT32), nullable="0+", default=None),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("allow_replication_factor_change", BOOL, "1+", default=True, ignorable=True),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("responses", Array(Struct("ReassignableTopicResponse", [
                F("name", STRING),
                F("partitions", Array(Struct("ReassignablePartitionResponse", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+"),
                ]))),
            ]))),
        ],
    ),
    Api(
        46, "ListPartitionReassignments", "0", flexible="0+",
        request=[
            F("timeout_ms", INT32, default=60000),
            # null lists every ongoing reassignment.
            F("topics", Array(Struct("ListPartitionReassignmentsTopics", [
                F("name", STRING),
                F("partition_indexes", Array(INT32)),
            ])), nullable="0+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("topics", Array(Struct("OngoingTopicReassignment", [
                F("name", STRING),
                F("partitions", Array(Struct("OngoingPartitionReassignment", [
                    F("partition_index", INT32),
                    F("replicas", Array(INT32)),
                    F("adding_replicas", Array(INT32)),
                    F("removing_replicas", Array(INT32)),
                ]))),
            ]))),
        ],
    ),
]

"""Metadata (key 3): brokers, topics, partitions and their leaders."""

from protocol.schema import BOOL, INT16, INT32, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        3, "Metadata", "0-12", flexible="9+",
        request=[
            F("topics", Array(Struct("MetadataRequestTopic", [
                F("topic_id", UUID, "10+", ignorable=True),
                F("name", STRING, nullable="10+"),
            ])), nullable="1+"),
            F("allow_auto_topic_creation", BOOL, "4+", default=True),
            F("include_cluster_authorized_operations", BOOL, "8-10"),
            F("include_topic_authorized_operations", BOOL, "8+"),
        ],
        response=[
            F("throttle_time_ms", INT32, "3+", ignorable=True),
            F("brokers", Array(Struct("MetadataResponseBroker", [
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, "1+", nullable="1+", ignorable=True, default=None),
            ]))),
            F("cluster_id", STRING, "2+", nullable="2+", ignorable=True, default=None),
            F("controller_id", INT32, "1+", default=-1, ignorable=True),
            F("topics", Array(Struct("MetadataResponseTopic", [
                F("error_code", INT16),
                F("name", STRING, nullable="12+"),
                F("topic_id", UUID, "10+", ignorable=True),
                F("is_internal", BOOL, "1+", default=False, ignorable=True),
                F("partitions", Array(Struct("MetadataResponsePartition", [
                    F("error_code", INT16),
                    F("partition_index", INT32),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32, "7+", default=-1, ignorable=True),
                    F("replica_nodes", Array(INT32)),
                    F("isr_nodes", Array(INT32)),
                    F("offline_replicas", Array(INT32), "5+", ignorable=True),
                ]))),
                F("topic_authorized_operations", INT32, "8+", default=-2147483648),
            ]))),
            F("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
        ],
    ),
]

"""CreateTopics (key 19): create topics with a partition count and replication, or explicit assignments."""

from protocol.schema import BOOL, INT8, INT16, INT32, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        19, "CreateTopics", "0-7", flexible="5+",
        request=[
            F("topics", Array(Struct("CreatableTopic", [
                F("name", STRING),
                F("num_partitions", INT32),
                F("replication_factor", INT16),
                F("assignments", Array(Struct("CreatableReplicaAssignment", [
                    F("partition_index", INT32),
                    F("broker_ids", Array(INT32)),
                ]))),
                F("configs", Array(Struct("CreatableTopicConfig", [
                    F("name", STRING),
                    F("value", STRING, nullable="0+"),
                ]))),
            ]))),
            F("timeout_ms", INT32, default=60000),
            F("validate_only", BOOL, "1+", default=False),
        ],
        response=[
            F("throttle_time_ms", INT32, "2+", ignorable=True),
            F("topics", Array(Struct("CreatableTopicResult", [
                F("name", STRING),
                F("topic_id", UUID, "7+", ignorable=True),
                F("error_code", INT16),
                # Nullable from v0 although the field only exists from v1; it is the reference's range.
                F("error_message", STRING, "1+", nullable="0+", ignorable=True),
                F("topic_config_error_code", INT16, "5+", tagged="5+", tag=0, ignorable=True),
                F("num_partitions", INT32, "5+", default=-1, ignorable=True),
                F("replication_factor", INT16, "5+", default=-1, ignorable=True),
                F("configs", Array(Struct("CreatableTopicConfigs", [
                    F("name", STRING, "5+"),
                    F("value", STRING, "5+", nullable="5+"),
                    F("read_only", BOOL, "5+"),
                    F("config_source", INT8, "5+", default=-1, ignorable=True),
                    F("is_sensitive", BOOL, "5+"),
                ])), "5+", nullable="5+", ignorable=True),
            ]))),
        ],
    ),
]

"""UpdateMetadata (key 6): the controller pushes cluster metadata to a broker's cache."""

from protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Api, Array, F, Struct

# Shared by the v0-4 flat list and the v5+ per-topic lists; the topic name
# moves out of it into the enclosing topic from v5.
PARTITION_STATE = Struct("UpdateMetadataPartitionState", [
    F("topic_name", STRING, "0-4", ignorable=True),
    F("partition_index", INT32),
    F("controller_epoch", INT32),
    F("leader", INT32),
    F("leader_epoch", INT32),
    F("isr", Array(INT32)),
    F("zk_version", INT32),
    F("replicas", Array(INT32)),
    F("offline_replicas", Array(INT32), "4+", ignorable=True),
])

APIS = [
    Api(
        6, "UpdateMetadata", "0-8", flexible="6+",
        request=[
            F("controller_id", INT32),
            F("is_kraft_controller", BOOL, "8+", default=False),
            F("type", INT8, "8+", tagged="8+", tag=0, default=0),
            F("controller_epoch", INT32),
            F("broker_epoch", INT64, "5+", default=-1, ignorable=True),
            F("ungrouped_partition_states", Array(PARTITION_STATE), "0-4"),
            F("topic_states", Array(Struct("UpdateMetadataTopicState", [
                F("topic_name", STRING, "5+"),
                F("topic_id", UUID, "7+", ignorable=True),
                F("partition_states", Array(PARTITION_STATE), "5+"),
            ])), "5+"),
            F("live_brokers", Array(Struct("UpdateMetadataBroker", [
                F("id", INT32),
                # v0 knows a single plaintext endpoint; v1+ list them all.
                F("v0_host", STRING, "0", ignorable=True),
                F("v0_port", INT32, "0", ignorable=True),
                F("endpoints", Array(Struct("UpdateMetadataEndpoint", [
                    F("port", INT32, "1+"),
                    F("host", STRING, "1+"),
                    F("listener", STRING, "3+", ignorable=True),
                    F("security_protocol", INT16, "1+"),
                ])), "1+", ignorable=True),
                F("rack", STRING, "2+", nullable="0+", ignorable=True),
            ]))),
        ],
        response=[
            F("error_code", INT16),
        ],
    ),
]

"""LeaderAndIsr (key 4): the controller tells a broker which replicas it leads or follows."""

from protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Api, Array, F, Struct

# Shared by the v0-1 flat list and the v2+ per-topic lists; the topic name
# moves out of it into the enclosing topic from v2.
PARTITION_STATE = Struct("LeaderAndIsrPartitionState", [
    F("topic_name", STRING, "0-1", ignorable=True),
    F("partition_index", INT32),
    F("controller_epoch", INT32),
    F("leader", INT32),
    F("leader_epoch", INT32),
    F("isr", Array(INT32)),
    F("partition_epoch", INT32),
    F("replicas", Array(INT32)),
    F("adding_replicas", Array(INT32), "3+", ignorable=True),
    F("removing_replicas", Array(INT32), "3+", ignorable=True),
    F("is_new", BOOL, "1+", default=False, ignorable=True),
    F("leader_recovery_state", INT8, "6+", default=0),
])

PARTITION_ERROR = Struct("LeaderAndIsrPartitionError", [
    F("topic_name", STRING, "0-4", ignorable=True),
    F("partition_index", INT32),
    F("error_code", INT16),
])

APIS = [
    Api(
        4, "LeaderAndIsr", "0-7", flexible="4+",
        request=[
            F("controller_id", INT32),
            F("is_kraft_controller", BOOL, "7+", default=False),
            F("controller_epoch", INT32),
            F("broker_epoch", INT64, "2+", default=-1, ignorable=True),
            F("type", INT8, "5+"),
            F("ungrouped_partition_states", Array(PARTITION_STATE), "0-1"),
            F("topic_states", Array(Struct("LeaderAndIsrTopicState", [
                F("topic_name", STRING, "2+"),
                F("topic_id", UUID, "5+", ignorable=True),
                F("partition_states", Array(PARTITION_STATE), "2+"),
            ])), "2+"),
            F("live_leaders", Array(Struct("LeaderAndIsrLiveLeader", [
                F("broker_id", INT32),
                F("host_name", STRING),
                F("port", INT32),
            ]))),
        ],
        response=[
            F("error_code", INT16),
            F("partition_errors", Array(PARTITION_ERROR), "0-4"),
            F("topics", Array(Struct("LeaderAndIsrTopicError", [
                F("topic_id", UUID, "5+"),
                F("partition_errors", Array(PARTITION_ERROR), "5+"),
            ])), "5+"),
        ],
    ),
]

"""ShareGroupDescribe (key 77): the state, members and assignments of share groups.

Version 1 (Kafka 4.1, the first stable one) is version 0.
"""

from protocol.schema import BOOL, INT16, INT32, STRING, UUID, Api, Array, F, Struct

TOPIC_PARTITIONS = Struct("TopicPartitions", [
    F("topic_id", UUID),
    F("topic_name", STRING),
    F("partitions", Array(INT32)),
])

ASSIGNMENT = Struct("Assignment", [
    F("topic_partitions", Array(TOPIC_PARTITIONS)),
])

APIS = [
    Api(
        77, "ShareGroupDescribe", "0-1", flexible="0+",
        request=[
            F("group_ids", Array(STRING)),
            F("include_authorized_operations", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("groups", Array(Struct("DescribedGroup", [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                F("group_id", STRING),
                F("group_state", STRING),
                F("group_epoch", INT32),
                F("assignment_epoch", INT32),
                F("assignor_name", STRING),
                F("members", Array(Struct("Member", [
                    F("member_id", STRING),
                    F("rack_id", STRING, nullable="0+", default=None),
                    F("member_epoch", INT32),
                    F("client_id", STRING),
                    F("client_host", STRING),
                    F("subscribed_topic_names", Array(STRING)),
                    F("assignment", ASSIGNMENT),
                ]))),
                # INT32 min means "not requested", distinct from "no operations allowed".
                F("authorized_operations", INT32, default=-2147483648),
            ]))),
        ],
    ),
]

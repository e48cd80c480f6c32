"""ShareGroupHeartbeat (key 76): a share-group member joins, stays alive and learns its assignment.

Version 1 (Kafka 4.1, the first stable one) is version 0.
"""

from protocol.schema import INT16, INT32, STRING, UUID, Api, Array, F, Struct

TOPIC_PARTITIONS = Struct("TopicPartitions", [
    F("topic_id", UUID),
    F("partitions", Array(INT32)),
])

APIS = [
    Api(
        76, "ShareGroupHeartbeat", "0-1", flexible="0+",
        request=[
            F("group_id", STRING),
            F("member_id", STRING),
            F("member_epoch", INT32),
            # Null means "not given, or unchanged since the last heartbeat".
            F("rack_id", STRING, nullable="0+", default=None),
            F("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("member_id", STRING, nullable="0+", default=None),
            F("member_epoch", INT32),
            F("heartbeat_interval_ms", INT32),
            # Nullable struct: an int8 marker (-1 null, 1 present) precedes the fields; null when no assignment is sent.
            F("assignment", Struct("Assignment", [
                F("topic_partitions", Array(TOPIC_PARTITIONS)),
            ]), nullable="0+", default=None),
        ],
    ),
]

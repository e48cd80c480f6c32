"""ConsumerGroupHeartbeat (key 68): membership and assignment for the new (KIP-848) consumer group protocol."""

from protocol.schema import INT16, INT32, STRING, UUID, Api, Array, F, Struct

TOPIC_PARTITIONS = Struct("TopicPartitions", [
    F("topic_id", UUID),
    F("partitions", Array(INT32)),
])

APIS = [
    Api(
        68, "ConsumerGroupHeartbeat", "0-1", flexible="0+",
        request=[
            F("group_id", STRING),
            F("member_id", STRING),
            F("member_epoch", INT32),
            # The nullable fields below are null when unchanged since the last heartbeat.
            F("instance_id", STRING, nullable="0+", default=None),
            F("rack_id", STRING, nullable="0+", default=None),
            F("rebalance_timeout_ms", INT32, default=-1),
            F("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
            F("subscribed_topic_regex", STRING, "1+", nullable="1+", default=None),
            F("server_assignor", STRING, nullable="0+", default=None),
            F("topic_partitions", Array(Struct("TopicPartitions", [
                F("topic_id", UUID),
                F("partitions", Array(INT32)),
            ])), nullable="0+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("member_id", STRING, nullable="0+", default=None),
            F("member_epoch", INT32),
            F("heartbeat_interval_ms", INT32),
            # Null when the assignment has not changed.
            F("assignment", Struct("Assignment", [
                F("topic_partitions", Array(TOPIC_PARTITIONS)),
            ]), nullable="0+", default=None),
        ],
    ),
]

"""DeleteTopics (key 20): delete topics by name or, from v6, by topic id."""

from protocol.schema import INT16, INT32, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        20, "DeleteTopics", "0-6", flexible="4+",
        request=[
            F("topics", Array(Struct("DeleteTopicState", [
                F("name", STRING, "6+", nullable="6+", default=None),
                F("topic_id", UUID, "6+"),
            ])), "6+"),
            F("topic_names", Array(STRING), "0-5", ignorable=True),
            F("timeout_ms", INT32),
        ],
        response=[
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("responses", Array(Struct("DeletableTopicResult", [
                F("name", STRING, nullable="6+"),
                F("topic_id", UUID, "6+", ignorable=True),
                F("error_code", INT16),
                F("error_message", STRING, "5+", nullable="5+", default=None, ignorable=True),
            ]))),
        ],
    ),
]

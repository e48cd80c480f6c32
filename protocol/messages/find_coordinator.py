"""FindCoordinator (key 10): which broker coordinates a consumer group or a transactional id."""

from protocol.schema import INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        10, "FindCoordinator", "0-6", flexible="3+",
        request=[
            # v4 replaced the single key with a batch of coordinator_keys.
            F("key", STRING, "0-3"),
            # 0 = group, 1 = transaction, 2 = share group.
            F("key_type", INT8, "1+", default=0),
            F("coordinator_keys", Array(STRING), "4+"),
        ],
        response=[
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("error_code", INT16, "0-3"),
            F("error_message", STRING, "1-3", nullable="1-3", ignorable=True),
            F("node_id", INT32, "0-3"),
            F("host", STRING, "0-3"),
            F("port", INT32, "0-3"),
            F("coordinators", Array(Struct("Coordinator", [
                F("key", STRING, "4+"),
                F("node_id", INT32, "4+"),
                F("host", STRING, "4+"),
                F("port", INT32, "4+"),
                F("error_code", INT16, "4+"),
                F("error_message", STRING, "4+", nullable="4+", ignorable=True),
            ])), "4+"),
        ],
    ),
]

"""Heartbeat (key 12): a classic group member tells the coordinator it is still alive."""

from protocol.schema import INT16, INT32, STRING, Api, F

APIS = [
    Api(
        12, "Heartbeat", "0-4", flexible="4+",
        request=[
            F("group_id", STRING),
            F("generation_id", INT32),
            F("member_id", STRING),
            F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("error_code", INT16),
        ],
    ),
]

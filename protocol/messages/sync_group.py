"""SyncGroup (key 14): the group leader hands out assignments and every member receives its own."""

from protocol.schema import BYTES, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        14, "SyncGroup", "0-5", flexible="4+",
        request=[
            F("group_id", STRING),
            F("generation_id", INT32),
            F("member_id", STRING),
            F("group_instance_id", STRING, "3+", nullable="3+", default=None),
            F("protocol_type", STRING, "5+", nullable="5+", default=None, ignorable=True),
            F("protocol_name", STRING, "5+", nullable="5+", default=None, ignorable=True),
            F("assignments", Array(Struct("SyncGroupRequestAssignment", [
                F("member_id", STRING),
                F("assignment", BYTES),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("error_code", INT16),
            F("protocol_type", STRING, "5+", nullable="5+", default=None, ignorable=True),
            F("protocol_name", STRING, "5+", nullable="5+", default=None, ignorable=True),
            F("assignment", BYTES),
        ],
    ),
]

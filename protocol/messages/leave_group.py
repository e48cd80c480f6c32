"""LeaveGroup (key 13): one or more members leave a classic consumer group."""

from protocol.schema import INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        13, "LeaveGroup", "0-5", flexible="4+",
        request=[
            F("group_id", STRING),
            # v3 replaced the single member_id with a batch of members.
            F("member_id", STRING, "0-2"),
            F("members", Array(Struct("MemberIdentity", [
                F("member_id", STRING, "3+"),
                F("group_instance_id", STRING, "3+", nullable="3+", default=None),
                F("reason", STRING, "5+", nullable="5+", default=None, ignorable=True),
            ])), "3+"),
        ],
        response=[
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("error_code", INT16),
            F("members", Array(Struct("MemberResponse", [
                F("member_id", STRING, "3+"),
                F("group_instance_id", STRING, "3+", nullable="3+"),
                F("error_code", INT16, "3+"),
            ])), "3+"),
        ],
    ),
]

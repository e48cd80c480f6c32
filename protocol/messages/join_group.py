"""JoinGroup (key 11): a member joins a classic consumer group and a leader is elected."""

from protocol.schema import BOOL, BYTES, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        11, "JoinGroup", "0-9", flexible="6+",
        request=[
            F("group_id", STRING),
            F("session_timeout_ms", INT32),
            # Before v1 the session timeout doubled as the rebalance timeout.
            F("rebalance_timeout_ms", INT32, "1+", default=-1, ignorable=True),
            F("member_id", STRING),
            F("group_instance_id", STRING, "5+", nullable="5+", default=None),
            F("protocol_type", STRING),
            F("protocols", Array(Struct("JoinGroupRequestProtocol", [
                F("name", STRING),
                F("metadata", BYTES),
            ]))),
            F("reason", STRING, "8+", nullable="8+", default=None, ignorable=True),
        ],
        response=[
            F("throttle_time_ms", INT32, "2+", ignorable=True),
            F("error_code", INT16),
            F("generation_id", INT32, default=-1),
            F("protocol_type", STRING, "7+", nullable="7+", default=None, ignorable=True),
            F("protocol_name", STRING, nullable="7+"),
            F("leader", STRING),
            F("skip_assignment", BOOL, "9+", default=False),
            F("member_id", STRING),
            F("members", Array(Struct("JoinGroupResponseMember", [
                F("member_id", STRING),
                F("group_instance_id", STRING, "5+", nullable="5+", default=None, ignorable=True),
                F("metadata", BYTES),
            ]))),
        ],
    ),
]

"""DescribeGroups (key 15): state, protocol and members of classic consumer groups."""

from protocol.schema import BOOL, BYTES, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        15, "DescribeGroups", "0-5", flexible="5+",
        request=[
            F("groups", Array(STRING)),
            F("include_authorized_operations", BOOL, "3+"),
        ],
        response=[
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("groups", Array(Struct("DescribedGroup", [
                F("error_code", INT16),
                F("group_id", STRING),
                F("group_state", STRING),
                F("protocol_type", STRING),
                F("protocol_data", STRING),
                F("members", Array(Struct("DescribedGroupMember", [
                    F("member_id", STRING),
                    F("group_instance_id", STRING, "4+", nullable="4+", default=None, ignorable=True),
                    F("client_id", STRING),
                    F("client_host", STRING),
                    F("member_metadata", BYTES),
                    F("member_assignment", BYTES),
                ]))),
                # INT32_MIN means "not requested".
                F("authorized_operations", INT32, "3+", default=-2147483648),
            ]))),
        ],
    ),
]

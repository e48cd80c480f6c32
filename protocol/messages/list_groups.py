"""ListGroups (key 16): every group a broker coordinates, optionally filtered by state or type."""

from protocol.schema import INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        16, "ListGroups", "0-5", flexible="3+",
        request=[
            F("states_filter", Array(STRING), "4+"),
            F("types_filter", Array(STRING), "5+"),
        ],
        response=[
            F("throttle_time_ms", INT32, "1+", ignorable=True),
            F("error_code", INT16),
            F("groups", Array(Struct("ListedGroup", [
                F("group_id", STRING),
                F("protocol_type", STRING),
                F("group_state", STRING, "4+", ignorable=True),
                F("group_type", STRING, "5+", ignorable=True),
            ]))),
        ],
    ),
]

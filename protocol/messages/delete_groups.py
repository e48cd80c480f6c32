"""DeleteGroups (key 42): remove empty consumer groups and their committed offsets."""

from protocol.schema import INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        42, "DeleteGroups", "0-2", flexible="2+",
        request=[
            F("groups_names", Array(STRING)),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("DeletableGroupResult", [
                F("group_id", STRING),
                F("error_code", INT16),
            ]))),
        ],
    ),
]

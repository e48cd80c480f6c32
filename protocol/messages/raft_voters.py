"""AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter (keys 80-82): changing the KRaft quorum's voter set."""

from protocol.schema import INT16, INT32, STRING, UINT16, UUID, Api, Array, F, Struct

APIS = [
    Api(
        80, "AddRaftVoter", "0", flexible="0+",
        request=[
            F("cluster_id", STRING, nullable="0+"),
            F("timeout_ms", INT32),
            F("voter_id", INT32),
            F("voter_directory_id", UUID),
            F("listeners", Array(Struct("Listener", [
                F("name", STRING),
                F("host", STRING),
                F("port", UINT16),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", ignorable=True),
        ],
    ),
    Api(
        81, "RemoveRaftVoter", "0", flexible="0+",
        request=[
            F("cluster_id", STRING, nullable="0+"),
            F("voter_id", INT32),
            F("voter_directory_id", UUID),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", ignorable=True),
        ],
    ),
    Api(
        82, "UpdateRaftVoter", "0", flexible="0+",
        request=[
            F("cluster_id", STRING, nullable="0+"),
            F("current_leader_epoch", INT32),
            F("voter_id", INT32),
            F("voter_directory_id", UUID),
            F("listeners", Array(Struct("Listener", [
                F("name", STRING),
                F("host", STRING),
                F("port", UINT16),
            ]))),
            F("kraft_version_feature", Struct("KRaftVersionFeature", [
                F("min_supported_version", INT16),
                F("max_supported_version", INT16),
            ])),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("current_leader", Struct("CurrentLeader", [
                F("leader_id", INT32, default=-1),
                F("leader_epoch", INT32, default=-1),
                F("host", STRING),
                F("port", INT32),
            ]), tagged="0+", tag=0),
        ],
    ),
]

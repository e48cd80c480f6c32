"""Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum (keys 52-55): KRaft elections and quorum state."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, UINT16, UUID, Api, Array, F, Struct

REPLICA_STATE = Struct("ReplicaState", [
    F("replica_id", INT32),
    F("replica_directory_id", UUID, "2+"),
    F("log_end_offset", INT64),
    F("last_fetch_timestamp", INT64, "1+", default=-1, ignorable=True),
    F("last_caught_up_timestamp", INT64, "1+", default=-1, ignorable=True),
])

# Each endpoint list has the same shape wherever it appears, so one struct
# serves every API here that carries it.
NODE_ENDPOINT = Struct("NodeEndpoint", [
    F("node_id", INT32, "1+"),
    F("host", STRING, "1+"),
    F("port", UINT16, "1+"),
])

LEADER_ENDPOINT = Struct("LeaderEndpoint", [
    F("name", STRING, "1+"),
    F("host", STRING, "1+"),
    F("port", UINT16, "1+"),
])

APIS = [
    Api(
        52, "Vote", "0-2", flexible="0+",
        request=[
            F("cluster_id", STRING, nullable="0+", default=None),
            F("voter_id", INT32, "1+", default=-1, ignorable=True),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("candidate_epoch", INT32),
                    F("candidate_id", INT32),
                    F("candidate_directory_id", UUID, "1+", ignorable=True),
                    F("voter_directory_id", UUID, "1+", ignorable=True),
                    F("last_offset_epoch", INT32),
                    F("last_offset", INT64),
                    # KIP-996: a pre-vote asks "would you vote for me?" without
                    # making anyone leave its epoch.
                    F("pre_vote", BOOL, "2+"),
                ]))),
            ]))),
        ],
        response=[
            F("error_code", INT16),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32),
                    F("vote_granted", BOOL),
                ]))),
            ]))),
            F("node_endpoints", Array(NODE_ENDPOINT), "1+", tagged="1+", tag=0),
        ],
    ),
    Api(
        53, "BeginQuorumEpoch", "0-1", flexible="1+",
        request=[
            F("cluster_id", STRING, nullable="0+", default=None),
            F("voter_id", INT32, "1+", default=-1, ignorable=True),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("voter_directory_id", UUID, "1+", ignorable=True),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32),
                ]))),
            ]))),
            F("leader_endpoints", Array(LEADER_ENDPOINT), "1+", ignorable=True),
        ],
        response=[
            F("error_code", INT16),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32),
                ]))),
            ]))),
            F("node_endpoints", Array(NODE_ENDPOINT), "1+", tagged="1+", tag=0),
        ],
    ),
    Api(
        54, "EndQuorumEpoch", "0-1", flexible="1+",
        request=[
            F("cluster_id", STRING, nullable="0+", default=None),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32),
                    # v1 replaces the bare ids with (id, directory id) pairs.
                    F("preferred_successors", Array(INT32), "0", ignorable=True),
                    F("preferred_candidates", Array(Struct("ReplicaInfo", [
                        F("candidate_id", INT32, "1+"),
                        F("candidate_directory_id", UUID, "1+"),
                    ])), "1+", ignorable=True),
                ]))),
            ]))),
            F("leader_endpoints", Array(LEADER_ENDPOINT), "1+", ignorable=True),
        ],
        response=[
            F("error_code", INT16),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32),
                ]))),
            ]))),
            F("node_endpoints", Array(NODE_ENDPOINT), "1+", tagged="1+", tag=0),
        ],
    ),
    Api(
        55, "DescribeQuorum", "0-2", flexible="0+",
        request=[
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                ]))),
            ]))),
        ],
        response=[
            F("error_code", INT16),
            F("error_message", STRING, "2+", nullable="2+", ignorable=True),
            F("topics", Array(Struct("TopicData", [
                F("topic_name", STRING),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, "2+", nullable="2+", ignorable=True),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32),
                    F("high_watermark", INT64),
                    F("current_voters", Array(REPLICA_STATE)),
                    F("observers", Array(REPLICA_STATE)),
                ]))),
            ]))),
            F("nodes", Array(Struct("Node", [
                F("node_id", INT32, "2+"),
                F("listeners", Array(Struct("Listener", [
                    F("name", STRING, "2+"),
                    F("host", STRING, "2+"),
                    F("port", UINT16, "2+"),
                ])), "2+"),
            ])), "2+"),
        ],
    ),
]

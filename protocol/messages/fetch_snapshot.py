"""FetchSnapshot (key 59): a KRaft follower downloads the leader's metadata snapshot in chunks."""

from protocol.schema import INT16, INT32, INT64, RECORDS, STRING, UINT16, UUID, Api, Array, F, Struct

APIS = [
    Api(
        59, "FetchSnapshot", "0-1", flexible="0+",
        request=[
            F("cluster_id", STRING, nullable="0+", tagged="0+", tag=0, default=None),
            F("replica_id", INT32, default=-1),
            F("max_bytes", INT32, default=0x7FFFFFFF),
            F("topics", Array(Struct("TopicSnapshot", [
                F("name", STRING),
                F("partitions", Array(Struct("PartitionSnapshot", [
                    F("partition", INT32),
                    F("current_leader_epoch", INT32),
                    F("snapshot_id", Struct("SnapshotId", [
                        F("end_offset", INT64),
                        F("epoch", INT32),
                    ])),
                    F("position", INT64),
                    F("replica_directory_id", UUID, "1+", tagged="1+", tag=0, ignorable=True),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32, ignorable=True),
            F("error_code", INT16),
            F("topics", Array(Struct("TopicSnapshot", [
                F("name", STRING),
                F("partitions", Array(Struct("PartitionSnapshot", [
                    F("index", INT32),
                    F("error_code", INT16),
                    F("snapshot_id", Struct("SnapshotId", [
                        F("end_offset", INT64),
                        F("epoch", INT32),
                    ])),
                    F("current_leader", Struct("LeaderIdAndEpoch", [
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                    ]), tagged="0+", tag=0),
                    F("size", INT64),
                    F("position", INT64),
                    # A chunk of the snapshot file, cut at any byte: not whole batches.
                    F("unaligned_records", RECORDS),
                ]))),
            ]))),
            F("node_endpoints", Array(Struct("NodeEndpoint", [
                F("node_id", INT32, "1+"),
                F("host", STRING, "1+"),
                F("port", UINT16, "1+"),
            ])), "1+", tagged="1+", tag=0),
        ],
    ),
]

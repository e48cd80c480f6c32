"""DescribeLogDirs (key 35): a broker's log directories, their space, and the replicas in each."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        35, "DescribeLogDirs", "0-4", flexible="2+",
        request=[
            # null describes every topic.
            F("topics", Array(Struct("DescribableLogDirTopic", [
                F("topic", STRING),
                F("partitions", Array(INT32)),
            ])), nullable="0+"),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16, "3+", ignorable=True),
            F("results", Array(Struct("DescribeLogDirsResult", [
                F("error_code", INT16),
                F("log_dir", STRING),
                F("topics", Array(Struct("DescribeLogDirsTopic", [
                    F("name", STRING),
                    F("partitions", Array(Struct("DescribeLogDirsPartition", [
                        F("partition_index", INT32),
                        F("partition_size", INT64),
                        F("offset_lag", INT64),
                        F("is_future_key", BOOL),
                    ]))),
                ]))),
                F("total_bytes", INT64, "4+", default=-1, ignorable=True),
                F("usable_bytes", INT64, "4+", default=-1, ignorable=True),
            ]))),
        ],
    ),
]

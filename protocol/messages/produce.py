"""Produce (key 0): append record batches to topic partitions."""

from protocol.schema import INT16, INT32, INT64, RECORDS, STRING, Api, Array, F, Struct

APIS = [
    Api(
        0, "Produce", "0-12", flexible="9+",
        request=[
            F("transactional_id", STRING, "3+", nullable="3+", default=None),
            F("acks", INT16),
            F("timeout_ms", INT32),
            F("topic_data", Array(Struct("TopicProduceData", [
                F("name", STRING),
                F("partition_data", Array(Struct("PartitionProduceData", [
                    F("index", INT32),
                    F("records", RECORDS, nullable="0+"),
                ]))),
            ]))),
        ],
        response=[
            F("responses", Array(Struct("TopicProduceResponse", [
                F("name", STRING),
                F("partition_responses", Array(Struct("PartitionProduceResponse", [
                    F("index", INT32),
                    F("error_code", INT16),
                    F("base_offset", INT64),
                    F("log_append_time_ms", INT64, "2+", default=-1, ignorable=True),
                    F("log_start_offset", INT64, "5+", default=-1, ignorable=True),
                    F("record_errors", Array(Struct("BatchIndexAndErrorMessage", [
                        F("batch_index", INT32, "8+"),
                        F("batch_index_error_message", STRING, "8+", nullable="8+", default=None),
                    ])), "8+", ignorable=True),
                    F("error_message", STRING, "8+", nullable="8+", default=None, ignorable=True),
                    F("current_leader", Struct("LeaderIdAndEpoch", [
                        F("leader_id", INT32, "10+", default=-1),
                        F("leader_epoch", INT32, "10+", default=-1),
                    ]), "10+", tagged="10+", tag=0),
                ]))),
            ]))),
            F("throttle_time_ms", INT32, "1+", default=0, ignorable=True),
            F("node_endpoints", Array(Struct("NodeEndpoint", [
                F("node_id", INT32, "10+"),
                F("host", STRING, "10+"),
                F("port", INT32, "10+"),
                F("rack", STRING, "10+", nullable="10+", default=None),
            ])), "10+", tagged="10+", tag=0),
        ],
    ),
]

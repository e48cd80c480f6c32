"""DescribeProducers (key 61): the active idempotent/transactional producers on some partitions."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        61, "DescribeProducers", "0", flexible="0+",
        request=[
            F("topics", Array(Struct("TopicRequest", [
                F("name", STRING),
                F("partition_indexes", Array(INT32)),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("topics", Array(Struct("TopicResponse", [
                F("name", STRING),
                F("partitions", Array(Struct("PartitionResponse", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                    F("active_producers", Array(Struct("ProducerState", [
                        F("producer_id", INT64),
                        # int32 here although producer epochs are int16 elsewhere.
                        F("producer_epoch", INT32),
                        F("last_sequence", INT32, default=-1),
                        F("last_timestamp", INT64, default=-1),
                        F("coordinator_epoch", INT32),
                        F("current_txn_start_offset", INT64, default=-1),
                    ]))),
                ]))),
            ]))),
        ],
    ),
]

"""AddPartitionsToTxn (key 24): register partitions with an ongoing transaction."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, F, Struct

ADD_PARTITIONS_TO_TXN_TOPIC = Struct("AddPartitionsToTxnTopic", [
    F("name", STRING),
    F("partitions", Array(INT32)),
])

ADD_PARTITIONS_TO_TXN_PARTITION_RESULT = Struct("AddPartitionsToTxnPartitionResult", [
    F("partition_index", INT32),
    F("partition_error_code", INT16),
])

ADD_PARTITIONS_TO_TXN_TOPIC_RESULT = Struct("AddPartitionsToTxnTopicResult", [
    F("name", STRING),
    F("results_by_partition", Array(ADD_PARTITIONS_TO_TXN_PARTITION_RESULT)),
])

APIS = [
    Api(
        24, "AddPartitionsToTxn", "0-5", flexible="3+",
        request=[
            # v4+ batches several transactions (sent broker to coordinator); v0-3 carry
            # one transaction in the v3_and_below_* fields (sent by clients).
            F("transactions", Array(Struct("AddPartitionsToTxnTransaction", [
                F("transactional_id", STRING, "4+"),
                F("producer_id", INT64, "4+"),
                F("producer_epoch", INT16, "4+"),
                F("verify_only", BOOL, "4+", default=False),
                F("topics", Array(ADD_PARTITIONS_TO_TXN_TOPIC), "4+"),
            ])), "4+"),
            F("v3_and_below_transactional_id", STRING, "0-3"),
            F("v3_and_below_producer_id", INT64, "0-3"),
            F("v3_and_below_producer_epoch", INT16, "0-3"),
            F("v3_and_below_topics", Array(ADD_PARTITIONS_TO_TXN_TOPIC), "0-3"),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16, "4+", ignorable=True),
            F("results_by_transaction", Array(Struct("AddPartitionsToTxnResult", [
                F("transactional_id", STRING, "4+"),
                F("topic_results", Array(ADD_PARTITIONS_TO_TXN_TOPIC_RESULT), "4+"),
            ])), "4+"),
            F("results_by_topic_v3_and_below", Array(ADD_PARTITIONS_TO_TXN_TOPIC_RESULT), "0-3"),
        ],
    ),
]

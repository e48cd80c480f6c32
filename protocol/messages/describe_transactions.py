"""DescribeTransactions (key 65): the coordinator's view of some transactional ids."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        65, "DescribeTransactions", "0", flexible="0+",
        request=[
            F("transactional_ids", Array(STRING)),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("transaction_states", Array(Struct("TransactionState", [
                F("error_code", INT16),
                F("transactional_id", STRING),
                F("transaction_state", STRING),
                F("transaction_timeout_ms", INT32),
                F("transaction_start_time_ms", INT64),
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F("topics", Array(Struct("TopicData", [
                    F("topic", STRING),
                    F("partitions", Array(INT32)),
                ]))),
            ]))),
        ],
    ),
]

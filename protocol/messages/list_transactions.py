"""ListTransactions (key 66): the transactions a coordinator knows, optionally filtered."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        66, "ListTransactions", "0-1", flexible="0+",
        request=[
            F("state_filters", Array(STRING)),
            F("producer_id_filters", Array(INT64)),
            # -1: no filter; otherwise only transactions running longer than this many ms.
            F("duration_filter", INT64, "1+", default=-1),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("unknown_state_filters", Array(STRING)),
            F("transaction_states", Array(Struct("TransactionState", [
                F("transactional_id", STRING),
                F("producer_id", INT64),
                F("transaction_state", STRING),
            ]))),
        ],
    ),
]

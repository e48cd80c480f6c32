"""InitProducerId (key 22): allocate a producer id and epoch for idempotent or transactional producing."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, F

APIS = [
    Api(
        22, "InitProducerId", "0-5", flexible="2+",
        request=[
            # Null for an idempotent producer without transactions.
            F("transactional_id", STRING, nullable="0+"),
            F("transaction_timeout_ms", INT32),
            # v3+: the id and epoch the producer already has, so the coordinator can bump the epoch.
            F("producer_id", INT64, "3+", default=-1),
            F("producer_epoch", INT16, "3+", default=-1),
        ],
        response=[
            F("throttle_time_ms", INT32, ignorable=True),
            F("error_code", INT16),
            F("producer_id", INT64, default=-1),
            F("producer_epoch", INT16),
        ],
    ),
]

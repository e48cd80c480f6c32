"""EndTxn (key 26): commit or abort a transaction."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, F

APIS = [
    Api(
        26, "EndTxn", "0-5", flexible="3+",
        request=[
            F("transactional_id", STRING),
            F("producer_id", INT64),
            F("producer_epoch", INT16),
            F("committed", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            # v5+ (KIP-890): the epoch is bumped at every transaction end and returned here.
            F("producer_id", INT64, "5+", default=-1, ignorable=True),
            F("producer_epoch", INT16, "5+", default=-1, ignorable=True),
        ],
    ),
]

"""AddOffsetsToTxn (key 25): tie a consumer group's offset commits to an ongoing transaction."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, F

APIS = [
    Api(
        25, "AddOffsetsToTxn", "0-4", flexible="3+",
        request=[
            F("transactional_id", STRING),
            F("producer_id", INT64),
            F("producer_epoch", INT16),
            F("group_id", STRING),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
        ],
    ),
]

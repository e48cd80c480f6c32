"""AllocateProducerIds (key 67): a broker reserves a block of producer ids from the controller."""

from protocol.schema import INT16, INT32, INT64, Api, F

APIS = [
    Api(
        67, "AllocateProducerIds", "0", flexible="0+",
        request=[
            F("broker_id", INT32),
            F("broker_epoch", INT64, default=-1),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("producer_id_start", INT64),
            F("producer_id_len", INT32),
        ],
    ),
]

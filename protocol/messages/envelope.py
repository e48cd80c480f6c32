"""Envelope (key 58): a broker forwards a client's request to the controller on the client's behalf."""

from protocol.schema import BYTES, INT16, Api, F

APIS = [
    Api(
        58, "Envelope", "0", flexible="0+",
        request=[
            # A whole serialized request (header included), decoded separately.
            F("request_data", BYTES),
            F("request_principal", BYTES, nullable="0+"),
            F("client_host_address", BYTES),
        ],
        response=[
            F("response_data", BYTES, nullable="0+", default=None),
            F("error_code", INT16),
        ],
    ),
]

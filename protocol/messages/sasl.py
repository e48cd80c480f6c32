"""SaslHandshake (key 17) and SaslAuthenticate (key 36): choose a SASL mechanism, then exchange its tokens."""

from protocol.schema import BYTES, INT16, INT64, STRING, Api, Array, F

APIS = [
    Api(
        17, "SaslHandshake", "0-1", flexible="none",
        request=[
            F("mechanism", STRING),
        ],
        response=[
            F("error_code", INT16),
            F("mechanisms", Array(STRING)),
        ],
    ),
    Api(
        36, "SaslAuthenticate", "0-2", flexible="2+",
        request=[
            F("auth_bytes", BYTES),
        ],
        response=[
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("auth_bytes", BYTES),
            F("session_lifetime_ms", INT64, "1+", default=0, ignorable=True),
        ],
    ),
]

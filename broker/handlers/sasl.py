"""SaslHandshake (key 17) v0-1 and SaslAuthenticate (key 36) v0-2 outside an authentication.

As Kafka does, every client listener advertises both. On a SASL listener the
connection's session answers them until it is authenticated, and a
re-authentication's too (broker/net/sasl_listener.py); what reaches these handlers
is a SaslHandshake or SaslAuthenticate the session has no use for: on a
PLAINTEXT or SSL listener, or on an authenticated connection without
re-authentication under way. Both are answered ILLEGAL_SASL_STATE, as Kafka's
request handler answers them (SaslAuthenticate with Kafka's message), and the
connection stays open.
"""

from __future__ import annotations

from broker.security.sasl import AUTHENTICATE_AFTER_SUCCESS_MESSAGE
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME

HANDSHAKE = APIS_BY_NAME["SaslHandshake"]
AUTHENTICATE = APIS_BY_NAME["SaslAuthenticate"]


def register(dispatcher, broker) -> None:
    def handshake(ctx, request):
        return HANDSHAKE.response.cls(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])

    def authenticate(ctx, request):
        return AUTHENTICATE.response.cls(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message=AUTHENTICATE_AFTER_SUCCESS_MESSAGE,
            auth_bytes=b"",
            session_lifetime_ms=0,
        )

    dispatcher.register(HANDSHAKE.key, 0, 1, handshake)
    dispatcher.register(AUTHENTICATE.key, 0, 2, authenticate)

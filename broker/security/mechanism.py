"""What every SASL mechanism server shares: its interface and its one failure.

A mechanism server is a small state machine fed the client's tokens in order
(``evaluate``); it returns the next challenge, or raises
:class:`SaslAuthenticationError` and is then finished. Once ``complete`` is
true the exchange succeeded and ``authorization_id`` names the user.

Kafka separates failures whose message may reach the client (its
SaslAuthenticationException: a malformed PLAIN message, an authorization id
that differs from the user) from those that must not (its SaslException: an
unknown user, a wrong password, a bad proof), which all answer with one fixed
text so that a client cannot learn whether a user exists. Here both are one
exception type: ``client_message`` is None for the second kind, and
:meth:`SaslAuthenticationError.message_for_client` then gives Kafka's fixed
text. ``reason`` is for the broker's log: it may name the user, never a
password. Pure: no IO, no clock.
"""

from __future__ import annotations

from typing import Protocol


def invalid_credentials_message(mechanism_name: str, *, reauthenticating: bool = False) -> str:
    """Kafka's answer to a failure whose detail must stay on the server."""
    during = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism_name}"


class SaslAuthenticationError(Exception):
    """The client failed to authenticate: answer SASL_AUTHENTICATION_FAILED, then close.

    ``str(error)`` is the message the client gets during a first authentication.
    """

    def __init__(self, mechanism_name: str, reason: str, *, client_message: str | None = None):
        self.mechanism_name = mechanism_name
        self.reason = reason
        self.client_message = client_message
        super().__init__(self.message_for_client())

    def message_for_client(self, *, reauthenticating: bool = False) -> str:
        if self.client_message is not None:
            return self.client_message
        return invalid_credentials_message(self.mechanism_name, reauthenticating=reauthenticating)


class MechanismServer(Protocol):
    """The server side of one SASL exchange (one per SaslHandshake)."""

    mechanism_name: str

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        """Take the client's next token, return the challenge to send back.

        Raises SaslAuthenticationError; after that, or after completing, the
        exchange takes no more tokens.
        """
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user's name; only once complete."""
        ...

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the credential used expires (an OAuth token, a delegation token), if it does."""
        ...

    @property
    def token_authenticated(self) -> bool:
        """Whether a delegation token authenticated the user (KafkaPrincipal.tokenAuthenticated)."""
        ...

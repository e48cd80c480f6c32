"""The server side of SASL/PLAIN (RFC 4616), with users from a JAAS config as Kafka's.

The client's one token is ``[authzid] NUL authcid NUL passwd`` in UTF-8 (at
most ``MESSAGE_BYTES_MAX`` bytes). The answer is an empty token and the
exchange is complete; failures carry Kafka's PlainSaslServer messages, which
reach the client:

- not exactly three NUL-separated parts: "Invalid SASL/PLAIN response: expected 3 tokens, got N";
- an empty user or password: "Authentication failed: username not specified" / "password not specified";
- unknown user or wrong password, one message for both:
  "Authentication failed: Invalid username or password";
- an authorization id other than empty or the user name:
  "Authentication failed: Client requested an authorization id that is different from username".

Users are those of the broker's ``PlainLoginModule`` entry: option
``user_<name>="<password>"`` (as ``listener.name.<l>.plain.sasl.jaas.config``
gives them; ``username``/``password`` are the broker's own client identity and
ignored here). Passwords are compared as SHA-256 digests with
``hmac.compare_digest``, so the time taken tells neither the length nor a
prefix of a password, and an unknown user is compared against a dummy digest
so that it costs what a known one does. Pure: no IO, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping

from broker.security.jaas import JaasConfigError, JaasEntry, parse_jaas_entry
from broker.security.mechanism import SaslAuthenticationError

MECHANISM_NAME = "PLAIN"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USER_OPTION_PREFIX = "user_"

# RFC 4616 allows 255 bytes per part; Kafka does not hold clients to it, so this
# is looser, and only there to bound the work an unauthenticated peer can cause.
MESSAGE_BYTES_MAX = 4096

INVALID_CREDENTIALS_MESSAGE = "Authentication failed: Invalid username or password"


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode("utf-8")).digest()


class PlainUsers:
    """A constant-time password check over ``{user: password}``; keeps only digests."""

    def __init__(self, passwords: Mapping[str, str]):
        self._digests = {user: _digest(password) for user, password in passwords.items()}
        self._dummy = _digest("\x00not a password\x00")

    def __len__(self) -> int:
        return len(self._digests)

    def __contains__(self, user: object) -> bool:
        return user in self._digests

    def __repr__(self) -> str:
        return f"PlainUsers({sorted(self._digests)})"

    def authenticate(self, user: str, password: str) -> bool:
        expected = self._digests.get(user)
        matches = hmac.compare_digest(_digest(password), expected if expected is not None else self._dummy)
        return matches and expected is not None

    __call__ = authenticate

    @classmethod
    def from_jaas_entry(cls, entry: JaasEntry) -> PlainUsers:
        if entry.login_module != PLAIN_LOGIN_MODULE:
            raise JaasConfigError(
                f"PLAIN users come from {PLAIN_LOGIN_MODULE}, not {entry.login_module}"
            )
        return cls({
            key[len(USER_OPTION_PREFIX):]: value
            for key, value in entry.options.items()
            if key.startswith(USER_OPTION_PREFIX)
        })

    @classmethod
    def from_jaas_config(cls, text: str) -> PlainUsers:
        """Users of a ``sasl.jaas.config`` value naming Kafka's PlainLoginModule."""
        return cls.from_jaas_entry(parse_jaas_entry(text))


PasswordCheck = Callable[[str, str], bool]


class PlainServer:
    """One PLAIN exchange: a single token, then complete or failed."""

    mechanism_name = MECHANISM_NAME

    def __init__(self, authenticate: PasswordCheck):
        self._authenticate = authenticate
        self._user: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def authorization_id(self) -> str:
        if self._user is None:
            raise RuntimeError("PLAIN exchange has not completed")
        return self._user

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    @property
    def token_authenticated(self) -> bool:
        return False

    def evaluate(self, token: bytes, now_ms: int = 0) -> bytes:
        if self._done:
            raise SaslAuthenticationError(MECHANISM_NAME, "token received after the PLAIN exchange ended")
        self._done = True
        authzid, user, password = _parse(token)
        if not user:
            raise _failure("no user name", "Authentication failed: username not specified")
        if not password:
            raise _failure(f"no password for user {user!r}", "Authentication failed: password not specified")
        if not self._authenticate(user, password):
            raise _failure(f"wrong password or unknown user {user!r}", INVALID_CREDENTIALS_MESSAGE)
        if authzid and authzid != user:
            raise _failure(
                f"authorization id {authzid!r} differs from user {user!r}",
                "Authentication failed: Client requested an authorization id that is different from username",
            )
        self._user = user
        return b""


def _failure(reason: str, message: str) -> SaslAuthenticationError:
    return SaslAuthenticationError(MECHANISM_NAME, reason, client_message=message)


def _parse(token: bytes) -> tuple[str, str, str]:
    if len(token) > MESSAGE_BYTES_MAX:
        raise _failure(
            f"PLAIN message of {len(token)} bytes, more than {MESSAGE_BYTES_MAX}",
            "Invalid SASL/PLAIN response: message too long",
        )
    try:
        text = bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise _failure("PLAIN message is not UTF-8", "Invalid SASL/PLAIN response: not UTF-8") from None
    # Kafka splits at most four times and wants exactly three parts.
    parts = text.split("\x00", 3)
    if len(parts) != 3:
        count = min(len(parts), 4)
        raise _failure(
            f"PLAIN message has {count} parts", f"Invalid SASL/PLAIN response: expected 3 tokens, got {count}"
        )
    return parts[0], parts[1], parts[2]

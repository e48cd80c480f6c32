"""One connection's SASL state, as Kafka's SaslServerAuthenticator and KafkaChannel run it.

The connection layer asks the session about every frame and carries out what
it answers; the session never sees bytes on the wire, only header fields and
decoded bodies, and the time as ``now_ms``.

Before authentication (states INITIAL, HANDSHAKE):

- ApiVersions may come first, once (a second one closes the connection); an
  ApiVersions of a version the broker does not speak is answered by the normal
  UNSUPPORTED_VERSION path and may be retried;
- SaslHandshake v0-1 names a mechanism: an enabled one is answered NONE with
  the enabled list, any other UNSUPPORTED_SASL_MECHANISM with the list, then the
  connection closes (a failed authentication: the connection layer delays the
  close by ``connection.failed.authentication.delay.ms``);
- any other request closes the connection without an answer
  (Kafka: "Unexpected Kafka request of type ... during SASL handshake").

After a v1 handshake the mechanism's tokens travel in SaslAuthenticate v0-2
requests; any other request is answered with its own error response carrying
ILLEGAL_SASL_STATE and the connection closes. After a v0 handshake the client
sends bare size-prefixed tokens without Kafka headers and gets bare tokens back
(``expects_raw_token``; the connection layer frames them, see
:meth:`SaslSession.raw_token`). A failed token is answered
SASL_AUTHENTICATION_FAILED with the mechanism's message (nothing with the raw
framing), then the connection closes. While not authenticated no frame may
exceed ``receive_limit_bytes`` (``sasl.server.max.receive.size``).

On success the principal is ``User:<authorization id>`` and the session may
have a lifetime: ``connections.max.reauth.ms`` (per mechanism if configured),
or the credential's expiry (an OAuth token, a delegation token), whichever is
sooner; SaslAuthenticate v1+ reports it as ``session_lifetime_ms``. Once it is
over, any request other than a re-authenticating SaslHandshake closes the
connection. Re-authentication (KIP-368): a SaslHandshake on an authenticated
connection whose session has a lifetime, at most once a second, starts the
exchange again with the same mechanism (another enabled one is accepted in the
handshake and fails at the next token, as in Kafka) and must end with the same
principal. A SaslHandshake that cannot start one is answered ILLEGAL_SASL_STATE
and a SaslAuthenticate after success ILLEGAL_SASL_STATE with Kafka's message;
the connection stays. Every outcome carries a ``reason`` for the log (never a
password). Pure: no IO, no clock of its own.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from broker.security.mechanism import MechanismServer, SaslAuthenticationError
from protocol.errors import ErrorCode
from protocol.headers import API_VERSIONS_KEY
from protocol.registry import APIS_BY_KEY, APIS_BY_NAME

SASL_HANDSHAKE_KEY = APIS_BY_NAME["SaslHandshake"].key
SASL_AUTHENTICATE_KEY = APIS_BY_NAME["SaslAuthenticate"].key

SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT = 524288  # Kafka's sasl.server.max.receive.size
REAUTH_INTERVAL_MIN_MS = 1000  # KafkaChannel: at most one re-authentication start per second
_INT64_MAX = (1 << 63) - 1

AUTHENTICATE_AFTER_SUCCESS_MESSAGE = "SaslAuthenticate request received after successful authentication"

MechanismFactory = Callable[[], MechanismServer]


class SaslStateError(RuntimeError):
    """The connection layer called the session out of turn (a bug of ours, not the peer's)."""


@dataclass(frozen=True)
class SaslServerConfig:
    """A SASL listener's settings.

    ``mechanisms`` maps each name of ``sasl.enabled.mechanisms``, in order, to
    a factory of a fresh exchange. ``connections_max_reauth_ms`` 0 means no
    lifetime from configuration (Kafka's default).
    """

    mechanisms: Mapping[str, MechanismFactory]
    connections_max_reauth_ms: int = 0
    max_reauth_ms_by_mechanism: Mapping[str, int] = field(default_factory=dict)
    max_receive_bytes: int = SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT

    def __post_init__(self) -> None:
        if not self.mechanisms:
            raise ValueError("No SASL mechanisms are enabled")
        if self.max_receive_bytes <= 0:
            raise ValueError("sasl.server.max.receive.size must be positive")

    def max_reauth_ms(self, mechanism: str) -> int:
        return self.max_reauth_ms_by_mechanism.get(mechanism, self.connections_max_reauth_ms)


class SaslState(enum.Enum):
    INITIAL = "initial"  # ApiVersions or SaslHandshake
    HANDSHAKE = "handshake"  # after ApiVersions: SaslHandshake only
    REAUTH_HANDSHAKE = "reauth-handshake"  # a re-authentication's SaslHandshake admitted
    AUTHENTICATE = "authenticate"  # the mechanism's tokens
    REAUTH_BAD_MECHANISM = "reauth-bad-mechanism"  # the next frame fails the re-authentication
    COMPLETE = "complete"
    FAILED = "failed"


class Action(enum.Enum):
    DISPATCH = "dispatch"  # the broker's normal handling
    HANDSHAKE = "handshake"  # decode SaslHandshake, call handshake()
    AUTHENTICATE = "authenticate"  # decode SaslAuthenticate, call authenticate()
    REFUSE = "refuse"  # answer the request's own error response with ``error``, then close
    CLOSE = "close"  # close without an answer


@dataclass(frozen=True)
class Admission:
    action: Action
    reason: str | None = None
    error: ErrorCode = ErrorCode.NONE
    failed_authentication: bool = False  # close after connection.failed.authentication.delay.ms


@dataclass(frozen=True)
class HandshakeReply:
    error: ErrorCode
    mechanisms: tuple[str, ...]
    close: bool = False
    failed_authentication: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class AuthenticateReply:
    error: ErrorCode
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0  # only SaslAuthenticate v1+ carries it
    close: bool = False
    failed_authentication: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class RawTokenReply:
    token: bytes | None  # send size-prefixed without a Kafka header; None: send nothing
    close: bool = False
    failed_authentication: bool = False
    reason: str | None = None


def _api_name(api_key: int) -> str:
    api = APIS_BY_KEY.get(api_key)
    return api.name if api is not None else f"api key {api_key}"


class SaslSession:
    """The SASL state of one connection; see the module docstring."""

    def __init__(self, config: SaslServerConfig):
        self.config = config
        self.state = SaslState.INITIAL
        self._exchange: MechanismServer | None = None
        self._mechanism: str | None = None  # of the exchange under way
        self._kafka_headers = False
        self._reauthenticating = False
        self._bad_mechanism_message = ""
        self.principal_name: str | None = None
        self.authenticated_mechanism: str | None = None
        self.token_authenticated = False
        self.session_expiry_ms: int | None = None
        self.client_supports_reauthentication = False
        self._last_reauth_start_ms: int | None = None

    # ------------------------------------------------------------ what the connection reads

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def principal(self) -> str | None:
        """``User:<name>`` once authenticated (kept during a re-authentication), else None."""
        return None if self.principal_name is None else f"User:{self.principal_name}"

    @property
    def expects_raw_token(self) -> bool:
        """True after a v0 handshake: the next frame is a bare token, not a Kafka request."""
        return self.state is SaslState.AUTHENTICATE and not self._kafka_headers

    @property
    def receive_limit_bytes(self) -> int | None:
        """The largest frame allowed now; None once authenticated (the broker's own limit applies)."""
        return None if self.state is SaslState.COMPLETE else self.config.max_receive_bytes

    def expired(self, now_ms: int) -> bool:
        return self.session_expiry_ms is not None and now_ms > self.session_expiry_ms

    # ------------------------------------------------------------ frames

    def frame_too_large(self, size_bytes: int) -> Admission:
        """A frame above ``receive_limit_bytes`` arrived: the authentication fails, the connection closes."""
        self._fail()
        return Admission(
            Action.CLOSE,
            reason=f"Failing SASL authentication due to invalid receive size {size_bytes}",
            failed_authentication=True,
        )

    def admit(self, api_key: int, api_version: int, now_ms: int) -> Admission:
        """What to do with a request whose header says ``api_key``/``api_version``."""
        state = self.state
        if state is SaslState.FAILED:
            return Admission(Action.CLOSE, reason="SASL authentication already failed")
        if state in (SaslState.INITIAL, SaslState.HANDSHAKE):
            return self._admit_before_handshake(api_key, api_version)
        if state is SaslState.AUTHENTICATE:
            return self._admit_during_exchange(api_key, api_version)
        if state is SaslState.REAUTH_BAD_MECHANISM:
            self._fail()
            return Admission(Action.CLOSE, reason=self._bad_mechanism_message, failed_authentication=True)
        if state is SaslState.COMPLETE:
            return self._admit_authenticated(api_key, api_version, now_ms)
        raise SaslStateError(f"admit() in state {state.value}")

    def _admit_before_handshake(self, api_key: int, api_version: int) -> Admission:
        if api_key == API_VERSIONS_KEY:
            if self.state is SaslState.HANDSHAKE:
                self._fail()
                return Admission(Action.CLOSE, reason="Unexpected ApiVersions request received twice during SASL handshake")
            if api_version in APIS_BY_KEY[API_VERSIONS_KEY].versions:
                self.state = SaslState.HANDSHAKE
            return Admission(Action.DISPATCH)
        if api_key == SASL_HANDSHAKE_KEY:
            return self._admit_handshake_version(api_version)
        self._fail()
        return Admission(
            Action.CLOSE,
            reason=f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake",
            error=ErrorCode.ILLEGAL_SASL_STATE,
        )

    def _admit_handshake_version(self, api_version: int) -> Admission:
        if api_version not in APIS_BY_KEY[SASL_HANDSHAKE_KEY].versions:
            self._fail()
            return Admission(Action.CLOSE, reason=f"unsupported SaslHandshake version {api_version}")
        return Admission(Action.HANDSHAKE)

    def _admit_during_exchange(self, api_key: int, api_version: int) -> Admission:
        if not self._kafka_headers:
            raise SaslStateError("a raw SASL token is expected: call raw_token()")
        if api_key != SASL_AUTHENTICATE_KEY:
            self._fail()
            return Admission(
                Action.REFUSE,
                reason=f"Unexpected Kafka request of type {_api_name(api_key)} during SASL authentication",
                error=ErrorCode.ILLEGAL_SASL_STATE,
                failed_authentication=True,
            )
        if api_version not in APIS_BY_KEY[SASL_AUTHENTICATE_KEY].versions:
            self._fail()
            return Admission(Action.CLOSE, reason=f"unsupported SaslAuthenticate version {api_version}")
        if api_version > 0:
            self.client_supports_reauthentication = True
        return Admission(Action.AUTHENTICATE)

    def _admit_authenticated(self, api_key: int, api_version: int, now_ms: int) -> Admission:
        if api_key == SASL_HANDSHAKE_KEY and self._may_start_reauthentication(now_ms):
            self._last_reauth_start_ms = now_ms
            self._reauthenticating = True
            self.state = SaslState.REAUTH_HANDSHAKE
            return self._admit_handshake_version(api_version)
        if self.expired(now_ms):
            self._fail()
            return Admission(Action.CLOSE, reason=f"SASL session of {self.principal} expired")
        if api_key == SASL_HANDSHAKE_KEY:
            return self._admit_handshake_version(api_version)
        if api_key == SASL_AUTHENTICATE_KEY:
            if api_version not in APIS_BY_KEY[SASL_AUTHENTICATE_KEY].versions:
                self._fail()
                return Admission(Action.CLOSE, reason=f"unsupported SaslAuthenticate version {api_version}")
            return Admission(Action.AUTHENTICATE)
        return Admission(Action.DISPATCH)

    def _may_start_reauthentication(self, now_ms: int) -> bool:
        if self.session_expiry_ms is None:
            return False
        last = self._last_reauth_start_ms
        return last is None or now_ms - last >= REAUTH_INTERVAL_MIN_MS

    # ------------------------------------------------------------ SASL requests

    def handshake(self, api_version: int, mechanism: str, now_ms: int) -> HandshakeReply:
        """The answer to a SaslHandshake that ``admit`` sent here."""
        state = self.state
        if state is SaslState.COMPLETE:
            return HandshakeReply(
                ErrorCode.ILLEGAL_SASL_STATE, (), reason="SaslHandshake on an authenticated connection"
            )
        if state not in (SaslState.INITIAL, SaslState.HANDSHAKE, SaslState.REAUTH_HANDSHAKE):
            raise SaslStateError(f"handshake() in state {state.value}")
        enabled = tuple(self.config.mechanisms)
        self._kafka_headers = api_version >= 1
        if mechanism not in self.config.mechanisms:
            self._fail()
            return HandshakeReply(
                ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                enabled,
                close=True,
                failed_authentication=True,
                reason=f"Unsupported SASL mechanism {mechanism}",
            )
        if self._reauthenticating and mechanism != self.authenticated_mechanism:
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                f"of mechanism '{self.authenticated_mechanism}'"
            )
            self.state = SaslState.REAUTH_BAD_MECHANISM
            return HandshakeReply(ErrorCode.NONE, enabled, reason=self._bad_mechanism_message)
        self._exchange = self.config.mechanisms[mechanism]()
        self._mechanism = mechanism
        self.state = SaslState.AUTHENTICATE
        return HandshakeReply(ErrorCode.NONE, enabled)

    def authenticate(self, api_version: int, auth_bytes: bytes, now_ms: int) -> AuthenticateReply:
        """The answer to a SaslAuthenticate that ``admit`` sent here."""
        if self.state is SaslState.COMPLETE:
            return AuthenticateReply(
                ErrorCode.ILLEGAL_SASL_STATE,
                AUTHENTICATE_AFTER_SUCCESS_MESSAGE,
                b"",
                reason="SaslAuthenticate on an authenticated connection",
            )
        if self.state is not SaslState.AUTHENTICATE or not self._kafka_headers:
            raise SaslStateError(f"authenticate() in state {self.state.value}")
        try:
            challenge, lifetime_ms = self._evaluate(auth_bytes, now_ms)
        except SaslAuthenticationError as error:
            message = error.message_for_client(reauthenticating=self._reauthenticating)
            self._fail()
            return AuthenticateReply(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                message,
                b"",
                close=True,
                failed_authentication=True,
                reason=error.reason,
            )
        return AuthenticateReply(ErrorCode.NONE, None, challenge, session_lifetime_ms=lifetime_ms)

    def raw_token(self, token: bytes, now_ms: int) -> RawTokenReply:
        """A bare token after a v0 handshake; failures close without an answer, as Kafka does."""
        if not self.expects_raw_token:
            raise SaslStateError(f"raw_token() in state {self.state.value}")
        try:
            challenge, _ = self._evaluate(token, now_ms)
        except SaslAuthenticationError as error:
            self._fail()
            return RawTokenReply(None, close=True, failed_authentication=True, reason=error.reason)
        return RawTokenReply(challenge)

    # ------------------------------------------------------------ inside

    def _evaluate(self, token: bytes, now_ms: int) -> tuple[bytes, int]:
        exchange = self._exchange
        assert exchange is not None and self._mechanism is not None
        challenge = exchange.evaluate(token, now_ms)
        if not exchange.complete:
            return challenge, 0
        return challenge, self._complete(exchange, self._mechanism, now_ms)

    def _complete(self, exchange: MechanismServer, mechanism: str, now_ms: int) -> int:
        name = exchange.authorization_id
        if self._reauthenticating and name != self.principal_name:
            message = (
                f"Cannot change principals during re-authentication from User.{self.principal_name}: User.{name}"
            )
            raise SaslAuthenticationError(mechanism, message, client_message=message)
        credential_expiry_ms = exchange.credential_expiry_ms
        max_reauth_ms = self.config.max_reauth_ms(mechanism)
        if credential_expiry_ms is None and max_reauth_ms <= 0:
            lifetime_ms, self.session_expiry_ms = 0, None
        else:
            candidates = [] if max_reauth_ms <= 0 else [max_reauth_ms]
            if credential_expiry_ms is not None:
                candidates.append(credential_expiry_ms - now_ms)
            lifetime_ms = min(_INT64_MAX, max(0, min(candidates)))
            self.session_expiry_ms = now_ms + lifetime_ms
        self.principal_name = name
        self.authenticated_mechanism = mechanism
        self.token_authenticated = exchange.token_authenticated
        self._exchange = None
        self._mechanism = None
        self._reauthenticating = False
        self.state = SaslState.COMPLETE
        return lifetime_ms

    def _fail(self) -> None:
        self.state = SaslState.FAILED
        self._exchange = None
        self._mechanism = None

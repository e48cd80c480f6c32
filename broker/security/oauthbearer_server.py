"""The server side of SASL/OAUTHBEARER (RFC 7628) with Kafka's unsecured-JWS validator.

The client's initial response is ``n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A...]^A``
(``^A`` is 0x01), at most ``MESSAGE_BYTES_MAX`` bytes, parsed strictly as
Kafka's OAuthBearerClientInitialResponse: GS2 flag ``n`` only, keys
``[A-Za-z]+`` each at most once, values of printable ASCII, space, tab, CR or
LF, ``auth`` required with scheme ``Bearer`` (any case) and a token of
``[-_.a-zA-Z0-9]``. The other keys are SASL extensions, kept and accepted.

The token goes to a validator, a callable ``(token, now_ms) -> OAuthBearerToken``
that raises :class:`TokenValidationError`; :class:`UnsecuredJwsValidator` is
Kafka's default (OAuthBearerUnsecuredValidatorCallbackHandler, for development
only) and a signed-JWT (JWKS) validator can be passed the same way. A token it
refuses is answered, as Kafka answers, with a JSON server challenge such as
``{"status":"invalid_token"}`` (``insufficient_scope`` with the required
``scope`` when scope is missing); the client acknowledges with a single 0x01
and the exchange then fails with that JSON as the error message. Anything else
after the challenge fails too. An authorization id must equal the token's
principal. On success the token's expiry bounds the session
(``credential_expiry_ms``). Pure: no IO, no clock of its own.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.security.mechanism import SaslAuthenticationError

MECHANISM_NAME = "OAUTHBEARER"
SEPARATOR = "\x01"

# Tokens of real identity providers are a few KiB; this bounds parsing and JSON work.
MESSAGE_BYTES_MAX = 64 * 1024

_AUTHZID = re.compile(r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+")
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
_AUTH = re.compile(r"(\w+) +([-_.a-zA-Z0-9]+)", re.ASCII)
_BASE64URL = re.compile(r"[-_A-Za-z0-9]*")

INVALID_STATUS = "invalid_token"
SCOPE_STATUS = "insufficient_scope"

_INT64_MAX = (1 << 63) - 1


# ------------------------------------------------------------------ tokens and validators


@dataclass(frozen=True)
class OAuthBearerToken:
    """A validated token: whose it is, until when, with which scope (Kafka's OAuthBearerToken)."""

    value: str = field(repr=False)
    principal_name: str
    lifetime_ms: int  # when it expires, ms since the epoch
    scope: frozenset = frozenset()
    start_time_ms: int | None = None
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)


class TokenValidationError(Exception):
    """A validator refuses a token: ``status`` and ``scope`` go into the JSON challenge, ``reason`` to the log."""

    def __init__(
        self,
        reason: str,
        *,
        status: str = INVALID_STATUS,
        scope: str | None = None,
        openid_configuration: str | None = None,
    ):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope
        self.openid_configuration = openid_configuration


TokenValidator = Callable[[str, int], OAuthBearerToken]


def _base64url_json(part: str, what: str) -> dict:
    if not _BASE64URL.fullmatch(part) or len(part) % 4 == 1:
        raise TokenValidationError(f"malformed Base64 URL encoded {what}")
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenValidationError(f"malformed Base64 URL encoded {what}") from None
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise TokenValidationError(f"malformed JSON in {what}") from None
    if not isinstance(value, dict):
        raise TokenValidationError(f"{what} is not a JSON object")
    return value


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _number(claims: Mapping[str, Any], name: str) -> float | int | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenValidationError(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    # Seconds since the epoch that fit a signed 64-bit count of milliseconds.
    if not math.isfinite(value) or abs(value) > _INT64_MAX / 1000:
        raise TokenValidationError(f"The '{name}' claim is out of range")
    return value


def _seconds_to_ms(seconds: float) -> int:
    return math.floor(seconds * 1000 + 0.5)  # Java's Math.round


def _scope(claims: Mapping[str, Any], name: str) -> frozenset:
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset([value.strip()]) if value.strip() else frozenset()
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise TokenValidationError(f"The '{name}' claim is not a list of strings")
        return frozenset(item.strip() for item in value if item.strip())
    raise TokenValidationError(f"The '{name}' claim was not of type List: {type(value).__name__}")


class UnsecuredJwsValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: unsigned JWTs (``alg`` ``none``).

    The token must be ``<header>.<claims>.`` in base64url JSON with an empty
    signature; the principal claim (``sub`` unless configured) a non-blank
    string; ``exp`` a number of seconds, not past (``now - skew >= exp`` fails);
    ``iat``, if present, not in the future beyond the skew and before ``exp``;
    every required scope in the scope claim (a string or list of strings).
    Never for production: anyone can mint such a token.
    """

    OPTION_PREFIX = "unsecuredValidator"

    def __init__(
        self,
        *,
        principal_claim_name: str = "sub",
        scope_claim_name: str = "scope",
        required_scope: tuple[str, ...] | list[str] = (),
        allowable_clock_skew_ms: int = 0,
    ):
        if not principal_claim_name.strip() or not scope_claim_name.strip():
            raise ValueError("principal and scope claim names must not be blank")
        if allowable_clock_skew_ms < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {allowable_clock_skew_ms}")
        self.principal_claim_name = principal_claim_name.strip()
        self.scope_claim_name = scope_claim_name.strip()
        self.required_scope = tuple(required_scope)
        self.allowable_clock_skew_ms = allowable_clock_skew_ms

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str]) -> UnsecuredJwsValidator:
        """From the ``unsecuredValidator*`` options of an OAuthBearerLoginModule entry."""

        def option(name: str) -> str:
            return (options.get(cls.OPTION_PREFIX + name) or "").strip()

        skew_text = option("AllowableClockSkewMs")
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise ValueError(f"{cls.OPTION_PREFIX}AllowableClockSkewMs is not an integer: {skew_text!r}") from None
        return cls(
            principal_claim_name=option("PrincipalClaimName") or "sub",
            scope_claim_name=option("ScopeClaimName") or "scope",
            required_scope=tuple(option("RequiredScope").split()),
            allowable_clock_skew_ms=skew,
        )

    def __call__(self, token: str, now_ms: int) -> OAuthBearerToken:
        if ".." in token:
            raise TokenValidationError("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenValidationError(
                "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values"
            )
        header = _base64url_json(parts[0], "JOSE header")
        claims = _base64url_json(parts[1], "claims")
        if header.get("alg") != "none":
            raise TokenValidationError("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise TokenValidationError("Unsecured JWS must not contain a digital signature")
        scope = _scope(claims, self.scope_claim_name)
        expiration = _number(claims, "exp")
        if expiration is None:
            raise TokenValidationError("No expiration time in JWT")
        principal = claims.get(self.principal_claim_name)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenValidationError(f"No principal name in JWT claim: {self.principal_claim_name}")
        issued_at = _number(claims, "iat")
        skew = self.allowable_clock_skew_ms
        if issued_at is not None and 1000 * issued_at > now_ms + skew:
            raise TokenValidationError(
                f"The Issued At value ({issued_at} seconds) was after the indicated time ({now_ms} ms)"
                f" plus allowable clock skew ({skew} ms)"
            )
        if now_ms - skew >= 1000 * expiration:
            raise TokenValidationError(
                f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms)"
                f" was on or after the Expiration Time value ({expiration} seconds)"
            )
        if issued_at is not None and expiration <= issued_at:
            raise TokenValidationError(
                f"The Expiration Time time ({expiration} seconds) was not after the Issued At time"
                f" ({issued_at} seconds)"
            )
        for required in self.required_scope:
            if required not in scope:
                raise TokenValidationError(
                    f"The provided scope ({sorted(scope)}) was missing a required scope ({required})",
                    status=SCOPE_STATUS,
                    scope="[" + ", ".join(self.required_scope) + "]",  # Java's List.toString, as Kafka sends it
                )
        return OAuthBearerToken(
            value=token,
            principal_name=principal,
            lifetime_ms=_seconds_to_ms(expiration),
            scope=scope,
            start_time_ms=None if issued_at is None else _seconds_to_ms(issued_at),
            claims=claims,
        )


# ------------------------------------------------------------------ the client's message


@dataclass(frozen=True)
class ClientInitialResponse:
    authorization_id: str
    token: str = field(repr=False)
    extensions: Mapping[str, str]


class _Malformed(ValueError):
    pass


def parse_client_initial_response(message: bytes) -> ClientInitialResponse:
    """RFC 7628's initial client response, as Kafka accepts it; raises ValueError subclasses."""
    if len(message) > MESSAGE_BYTES_MAX:
        raise _Malformed(f"message of {len(message)} bytes, more than {MESSAGE_BYTES_MAX}")
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed("message is not UTF-8") from None
    if not text.startswith("n,"):
        raise _Malformed("GS2 header must start with 'n,'")
    header_end = text.find(",", 2)
    if header_end < 0:
        raise _Malformed("GS2 header not terminated")
    authzid_field = text[2:header_end]
    if authzid_field == "":
        authorization_id = ""
    elif authzid_field.startswith("a=") and _AUTHZID.fullmatch(authzid_field[2:]):
        authorization_id = authzid_field[2:].replace("=2C", ",").replace("=3D", "=")
    else:
        raise _Malformed("invalid authorization id")
    body = text[header_end + 1 :]
    # SEPARATOR kvpair* SEPARATOR, each kvpair ending in SEPARATOR.
    if not body.startswith(SEPARATOR) or not body.endswith(SEPARATOR + SEPARATOR) or len(body) < 2:
        raise _Malformed("key/value pairs not framed by 0x01")
    pairs = body[1:-1].split(SEPARATOR)
    if pairs[-1] != "":
        raise _Malformed("key/value pairs not framed by 0x01")
    found: dict[str, str] = {}
    for pair in pairs[:-1]:  # bounded by the message size
        key, sep, value = pair.partition("=")
        if not sep or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise _Malformed("invalid key/value pair")
        if key in found:
            raise _Malformed(f"key {key!r} appears twice")
        found[key] = value
    auth = found.pop("auth", None)
    if auth is None:
        raise _Malformed("'auth' not specified")
    matched = _AUTH.fullmatch(auth)
    if not matched:
        raise _Malformed("invalid 'auth' format")
    if matched.group(1).lower() != "bearer":
        raise _Malformed(f"invalid scheme {matched.group(1)!r}")
    return ClientInitialResponse(authorization_id, matched.group(2), found)


# ------------------------------------------------------------------ the exchange


class OAuthBearerState(enum.Enum):
    INITIAL = "initial"
    ERROR_SENT = "error-sent"
    COMPLETE = "complete"
    FAILED = "failed"


def json_error(error: TokenValidationError) -> str:
    """The server challenge for a refused token, in Kafka's exact layout."""
    text = '{"status":' + json.dumps(error.status)
    if error.scope is not None:
        text += ', "scope":' + json.dumps(error.scope)
    if error.openid_configuration is not None:
        text += ', "openid-configuration":' + json.dumps(error.openid_configuration)
    return text + "}"


class OAuthBearerServer:
    """One OAUTHBEARER exchange on the server side; see the module docstring."""

    mechanism_name = MECHANISM_NAME

    def __init__(self, validator: TokenValidator):
        self._validator = validator
        self.state = OAuthBearerState.INITIAL
        self._error_message: str | None = None
        self._token: OAuthBearerToken | None = None
        self._refusal_reason: str | None = None
        self.extensions: Mapping[str, str] = {}

    @property
    def complete(self) -> bool:
        return self.state is OAuthBearerState.COMPLETE

    @property
    def authorization_id(self) -> str:
        if not self.complete or self._token is None:
            raise RuntimeError("OAUTHBEARER exchange has not completed")
        return self._token.principal_name

    @property
    def token(self) -> OAuthBearerToken | None:
        return self._token if self.complete else None

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._token.lifetime_ms if self.complete and self._token is not None else None

    @property
    def token_authenticated(self) -> bool:
        return False

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        state = self.state
        if state is OAuthBearerState.ERROR_SENT:
            self.state = OAuthBearerState.FAILED
            if bytes(token) == SEPARATOR.encode():
                raise SaslAuthenticationError(
                    MECHANISM_NAME, f"token refused: {self._refusal_reason}", client_message=self._error_message
                )
            raise SaslAuthenticationError(MECHANISM_NAME, "client did not acknowledge the error challenge with 0x01")
        if state is not OAuthBearerState.INITIAL:
            self.state = OAuthBearerState.FAILED
            raise SaslAuthenticationError(MECHANISM_NAME, f"token received in state {state.value}")
        try:
            response = parse_client_initial_response(token)
        except _Malformed as error:
            self.state = OAuthBearerState.FAILED
            raise SaslAuthenticationError(
                MECHANISM_NAME, f"Invalid OAUTHBEARER client first message: {error}"
            ) from None
        try:
            validated = self._validator(response.token, now_ms)
        except TokenValidationError as error:
            self._error_message = json_error(error)
            self.state = OAuthBearerState.ERROR_SENT
            self._refusal_reason = error.reason
            return self._error_message.encode("utf-8")
        if response.authorization_id and response.authorization_id != validated.principal_name:
            self.state = OAuthBearerState.FAILED
            message = (
                "Authentication failed: Client requested an authorization id "
                f"({response.authorization_id}) that is different from the token's principal name "
                f"({validated.principal_name})"
            )
            raise SaslAuthenticationError(MECHANISM_NAME, message, client_message=message)
        self._token = validated
        self.extensions = dict(response.extensions)
        self.state = OAuthBearerState.COMPLETE
        return b""

"""SASL listeners: their settings from server.properties, and what a connection does with each frame.

Settings (Kafka's keys): a SASL_PLAINTEXT or SASL_SSL listener serves the
mechanisms of ``listener.name.<listener>.sasl.enabled.mechanisms``, else of
``sasl.enabled.mechanisms``, whose default, GSSAPI (Kerberos), is not served
here: start-up fails naming the key until PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
or OAUTHBEARER are listed. Per mechanism, lower-cased:

- ``listener.name.<listener>.plain.sasl.jaas.config``: Kafka's PlainLoginModule
  with ``user_<name>="<password>"`` options, required for PLAIN;
- ``listener.name.<listener>.oauthbearer.sasl.jaas.config``: optional, the
  ``unsecuredValidator*`` options of Kafka's unsecured-JWT validator, or with
  ``listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class``
  set to Kafka's OAuthBearerValidatorCallbackHandler, tokens verified with the
  keys of ``sasl.oauthbearer.jwks.endpoint.url`` (broker/security/jwks.py; the
  entry's ``ssl.truststore.*`` options for an https URL; any other class is
  refused);
- SCRAM users are the metadata image's credentials (AlterUserScramCredentials),
  looked up at each exchange, so a new password counts at once;
- ``listener.name.<listener>.<mechanism>.connections.max.reauth.ms`` overrides
  ``connections.max.reauth.ms`` (0: sessions last as long as their credential).

``sasl.server.max.receive.size`` bounds every frame before authentication and
``connection.failed.authentication.delay.ms`` delays the close after a failed
one. When the inter-broker or controller listener is a SASL one, the other
nodes authenticate to it too (the client side is broker/net/node_client.py), with
``sasl.mechanism.inter.broker.protocol`` / ``sasl.mechanism.controller.protocol``,
which must then be among the listener's mechanisms (broker/config.py checks).

Frames: :func:`sasl_step` takes one received frame of a connection with a
:class:`SaslSession` and answers a :class:`SaslStep`: hand it to the
dispatcher, or send these bytes (a Kafka response, or a bare size-prefixed
token after a v0 SaslHandshake) and maybe close. A request the session refuses
during an exchange is answered with its own response carrying
ILLEGAL_SASL_STATE where that response has a top-level error code, and closed
unanswered otherwise. Pure: no IO; the connection passes the time in (only
building a listener with a JWKS validator fetches, once, and starts its
refresh thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.config import BrokerConfig, ConfigError
from broker.security.jaas import JaasConfigError, parse_jaas_entry
from broker.security.jwks import VALIDATOR_CLASSES as JWKS_VALIDATOR_CLASSES
from broker.security.jwks import JwksError, JwksKeyCache, JwksSettings, JwksValidator, check_url, truststore_context
from broker.security.oauthbearer_server import OAuthBearerServer, UnsecuredJwsValidator
from broker.security.plain_server import PlainServer, PlainUsers
from broker.security.sasl import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    Action,
    SaslServerConfig,
    SaslSession,
)
from broker.security.scram_server import ScramServer
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.framing import decode_request, encode_response
from protocol.headers import peek_request_header
from protocol.primitives import INT32
from protocol.registry import APIS_BY_KEY
from protocol.scram import ScramCredential, ScramMechanism

log = logging.getLogger(__name__)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"

# (user name, mechanism type code) -> credential: the metadata image's scram_credentials, read at each exchange.
ScramCredentials = Callable[[], Mapping[tuple[str, int], ScramCredential]]


@dataclass(frozen=True)
class SaslListener:
    """What a SASL listener's connections need: a session per connection, and the failure delay."""

    server_config: SaslServerConfig
    failed_authentication_delay_ms: int
    max_frame_bytes: int  # socket.request.max.bytes: the limit once authenticated

    def new_session(self) -> SaslSession:
        return SaslSession(self.server_config)


def _scram_factory(mechanism: ScramMechanism, credentials: ScramCredentials):
    code = mechanism.type_code

    def lookup(user: str) -> ScramCredential | None:
        return credentials().get((user, code))

    return lambda: ScramServer(mechanism, lookup)


def _jaas(config: BrokerConfig, listener: str, mechanism: str):
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.sasl.get(key)
    if text is None:
        return key, None
    try:
        return key, parse_jaas_entry(text)
    except JaasConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _oauthbearer_validator(config: BrokerConfig, listener: str, options, jaas_key: str):
    """Kafka's unsecured validator, or the JWKS-verified one when the listener's
    oauthbearer.sasl.server.callback.handler.class names Kafka's validator
    (its first fetch happens here, at start-up: a failure stops the node)."""
    handler_key = f"listener.name.{listener.lower()}.oauthbearer.sasl.server.callback.handler.class"
    handler = (config.sasl.get(handler_key) or "").strip()
    if not handler:
        if config["sasl.oauthbearer.jwks.endpoint.url"]:
            log.warning(
                "listener %s: OAUTHBEARER uses the unsecured validator (tokens are not verified), although "
                "sasl.oauthbearer.jwks.endpoint.url is set; set %s=%s to verify them",
                listener, handler_key, JWKS_VALIDATOR_CLASSES[0],
            )
        try:
            return UnsecuredJwsValidator.from_jaas_options(options)
        except ValueError as exc:
            raise ConfigError(f"{jaas_key}: {exc}") from None
    if handler not in JWKS_VALIDATOR_CLASSES:
        raise ConfigError(
            f"{handler_key}: {handler} is not supported; use {JWKS_VALIDATOR_CLASSES[0]} (tokens verified with the "
            "keys of sasl.oauthbearer.jwks.endpoint.url) or leave it unset (Kafka's unsecured validator)"
        )
    url = config["sasl.oauthbearer.jwks.endpoint.url"]
    if not url:
        raise ConfigError(f"sasl.oauthbearer.jwks.endpoint.url: required by {handler_key}")
    try:
        url = check_url(url)
    except ValueError as exc:
        raise ConfigError(f"sasl.oauthbearer.jwks.endpoint.url: {exc}") from None
    settings = JwksSettings(
        url=url,
        refresh_ms=config["sasl.oauthbearer.jwks.endpoint.refresh.ms"],
        retry_backoff_ms=config["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"],
        retry_backoff_max_ms=config["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"],
        expected_audience=tuple(config["sasl.oauthbearer.expected.audience"]),
        expected_issuer=config["sasl.oauthbearer.expected.issuer"] or None,
        scope_claim_name=config["sasl.oauthbearer.scope.claim.name"] or "scope",
        sub_claim_name=config["sasl.oauthbearer.sub.claim.name"] or "sub",
        clock_skew_seconds=config["sasl.oauthbearer.clock.skew.seconds"],
    )
    try:
        context = truststore_context(options) if url.startswith("https:") else None
    except ValueError as exc:
        raise ConfigError(f"{jaas_key}: {exc}") from None
    keys = JwksKeyCache(settings, context)
    try:
        keys.load()
    except JwksError as exc:
        raise ConfigError(f"sasl.oauthbearer.jwks.endpoint.url: could not get the JWKS: {exc}") from None
    keys.start()
    return JwksValidator(keys)


def sasl_listener(config: BrokerConfig, listener: str, scram_credentials: ScramCredentials) -> SaslListener:
    """The SASL settings of ``listener`` (a SASL_PLAINTEXT or SASL_SSL one); ConfigError names the key to fix."""
    prefix = f"listener.name.{listener.lower()}."
    own = config.sasl.get(prefix + "sasl.enabled.mechanisms")
    key = prefix + "sasl.enabled.mechanisms" if own is not None else "sasl.enabled.mechanisms"
    names = [n.strip() for n in own.split(",") if n.strip()] if own is not None else list(config["sasl.enabled.mechanisms"])
    if not names:
        raise ConfigError(f"{key}: listener {listener} is {config.security_protocol(listener)} and needs a mechanism")
    factories: dict[str, Callable] = {}
    reauth_by_mechanism: dict[str, int] = {}
    for name in dict.fromkeys(names):
        if name not in SERVED_MECHANISMS:
            what = "GSSAPI (Kerberos, Kafka's default)" if name == "GSSAPI" else repr(name)
            raise ConfigError(
                f"{key}: {what} is not supported on listener {listener}; list some of {', '.join(SERVED_MECHANISMS)}"
            )
        jaas_key, entry = _jaas(config, listener, name)
        if name == "PLAIN":
            if entry is None:
                raise ConfigError(f"{jaas_key}: required for PLAIN on listener {listener} (its user_<name> options are the users)")
            try:
                users = PlainUsers.from_jaas_entry(entry)
            except JaasConfigError as exc:
                raise ConfigError(f"{jaas_key}: {exc}") from None
            factories[name] = lambda users=users: PlainServer(users)
        elif name == "OAUTHBEARER":
            if entry is not None and entry.login_module != OAUTHBEARER_LOGIN_MODULE:
                raise ConfigError(f"{jaas_key}: OAUTHBEARER takes {OAUTHBEARER_LOGIN_MODULE}, not {entry.login_module}")
            options = entry.options if entry is not None else {}
            validator = _oauthbearer_validator(config, listener, options, jaas_key)
            factories[name] = lambda validator=validator: OAuthBearerServer(validator)
        else:
            factories[name] = _scram_factory(ScramMechanism.for_name(name), scram_credentials)
        reauth_key = f"{prefix}{name.lower()}.connections.max.reauth.ms"
        if reauth_key in config.sasl:
            try:
                reauth_by_mechanism[name] = int(config.sasl[reauth_key].strip())
            except ValueError:
                raise ConfigError(f"{reauth_key}: expected an integer, got {config.sasl[reauth_key]!r}") from None
            if reauth_by_mechanism[name] < 0:
                raise ConfigError(f"{reauth_key}: {reauth_by_mechanism[name]} is below the minimum 0")
    server_config = SaslServerConfig(
        mechanisms=factories,
        connections_max_reauth_ms=config["connections.max.reauth.ms"],
        max_reauth_ms_by_mechanism=reauth_by_mechanism,
        max_receive_bytes=config["sasl.server.max.receive.size"],
    )
    return SaslListener(
        server_config, config["connection.failed.authentication.delay.ms"], config["socket.request.max.bytes"]
    )


def sasl_listeners(config: BrokerConfig, scram_credentials: ScramCredentials) -> dict[str, SaslListener]:
    """Every SASL listener of the node by name."""
    return {
        listener.name: sasl_listener(config, listener.name, scram_credentials)
        for listener in config.listeners
        if config.security_protocol(listener.name) in SASL_PROTOCOLS
    }


# ------------------------------------------------------------------ frames


@dataclass(frozen=True)
class SaslStep:
    """What the connection does with a frame: ``dispatch`` it, or send ``response`` (if any) and maybe close.

    ``failed_authentication``: close only after connection.failed.authentication.delay.ms;
    ``reason``: one log line (never a password); ``authenticated``: the session just completed.
    """

    dispatch: bool = False
    response: bytes | None = None
    close: bool = False
    failed_authentication: bool = False
    reason: str | None = None
    authenticated: bool = False


DISPATCH = SaslStep(dispatch=True)


def _error_response(api_key: int, api_version: int, correlation_id: int, error: ErrorCode):
    """The request's own response carrying ``error``, where its body has a top-level error_code."""
    api = APIS_BY_KEY.get(api_key)
    if api is None or not any(f.name == "error_code" for f in api.response.fields):
        return None
    try:
        return bytes(encode_response(api, api_version, correlation_id, api.response.cls(error_code=error)))
    except (ProtocolError, TypeError, ValueError):
        return None


def sasl_step(session: SaslSession, frame, now_ms: int) -> SaslStep:
    """One frame of a connection on a SASL listener; see the module docstring."""
    if session.expects_raw_token:
        raw = session.raw_token(bytes(frame), now_ms)
        response = None if raw.token is None else INT32.pack(len(raw.token)) + raw.token
        return SaslStep(
            response=response,
            close=raw.close,
            failed_authentication=raw.failed_authentication,
            reason=raw.reason,
            authenticated=session.authenticated,
        )
    try:
        api_key, api_version, correlation_id = peek_request_header(frame)
    except ProtocolError as exc:
        return SaslStep(close=True, reason=str(exc))
    admission = session.admit(api_key, api_version, now_ms)
    action = admission.action
    if action is Action.DISPATCH:
        return DISPATCH
    if action is Action.CLOSE:
        return SaslStep(close=True, failed_authentication=admission.failed_authentication, reason=admission.reason)
    if action is Action.REFUSE:
        return SaslStep(
            response=_error_response(api_key, api_version, correlation_id, admission.error),
            close=True,
            failed_authentication=admission.failed_authentication,
            reason=admission.reason,
        )
    api = APIS_BY_KEY[SASL_HANDSHAKE_KEY if action is Action.HANDSHAKE else SASL_AUTHENTICATE_KEY]
    try:
        _, request = decode_request(frame, api)
    except ProtocolError as exc:
        return SaslStep(close=True, failed_authentication=True, reason=f"malformed {api.name} request: {exc}")
    if action is Action.HANDSHAKE:
        hs = session.handshake(api_version, request.mechanism, now_ms)
        body = api.response.cls(error_code=hs.error, mechanisms=list(hs.mechanisms))
        return SaslStep(
            response=bytes(encode_response(api, api_version, correlation_id, body)),
            close=hs.close,
            failed_authentication=hs.failed_authentication,
            reason=hs.reason,
        )
    auth = session.authenticate(api_version, bytes(request.auth_bytes), now_ms)
    body = api.response.cls(
        error_code=auth.error,
        error_message=auth.error_message,
        auth_bytes=auth.auth_bytes,
        session_lifetime_ms=auth.session_lifetime_ms,
    )
    return SaslStep(
        response=bytes(encode_response(api, api_version, correlation_id, body)),
        close=auth.close,
        failed_authentication=auth.failed_authentication,
        reason=auth.reason,
        authenticated=auth.error == ErrorCode.NONE and session.authenticated,
    )

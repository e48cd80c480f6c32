"""The security a node sets up at start: the TLS of its own SSL and SASL_SSL
listeners, and how it connects to other nodes' inter-broker and controller
listeners (TLS context, SASL mechanism and credentials). Built before anything
else so that a bad certificate, key password or JAAS entry stops the node at
once, before it touches its data.

A listener's TLS files may then change at run time (Kafka's KIP-226): the
dynamic ``listener.name.<l>.ssl.*`` keys of this broker
(controller.dynamic_broker_configs.LISTENER_TLS_KEYS), read from the metadata
image, override the same keys of server.properties; a dynamic keystore (a
location, or a chain with a key) replaces the static one of that listener
whichever form either uses, and so does a dynamic trust store.
:class:`ListenerTls` rebuilds a listener's server context when its settings
or the bytes of its files changed (a file rotated at the same path and the key
SET again); accepted connections afterwards use the new context, open ones
keep theirs. A context that cannot be built (missing file, wrong key password,
conflicting keys) is logged in one line and the listener keeps its current
one."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping

from broker.config import CONTROLLER_MECHANISM_KEY, INTER_BROKER_MECHANISM_KEY, BrokerConfig, ConfigError
from broker.net.node_client import ClientSecurity, node_client_security
from broker.net.tls import PrincipalMapper, TlsSettings, server_context, tls_settings
from controller.authorizer import parse_super_users
from controller.dynamic_broker_configs import listener_tls_key

log = logging.getLogger(__name__)

# A dynamic key of one group replaces the static value of every key of its group
# (a keystore given as a file or as PEM strings; a trust store likewise).
_REPLACES = {
    "ssl.keystore.location": ("ssl.keystore.certificate.chain", "ssl.keystore.key"),
    "ssl.keystore.certificate.chain": ("ssl.keystore.location",),
    "ssl.keystore.key": ("ssl.keystore.location",),
    "ssl.truststore.location": ("ssl.truststore.certificates",),
    "ssl.truststore.certificates": ("ssl.truststore.location",),
}
# Bound on what is read to tell whether a TLS file changed (PEM files are a few KiB).
_FILE_DIGEST_MAX_BYTES = 16 * 1024 * 1024


def _tls_listeners(config: BrokerConfig) -> list[str]:
    return [l.name for l in config.listeners if config.security_protocol(l.name) in ("SSL", "SASL_SSL")]


def listener_tls(config: BrokerConfig) -> dict[str, tuple]:
    """(server context, principal mapper) of each SSL and SASL_SSL listener."""
    tls = {}
    for name in _tls_listeners(config):
        settings = tls_settings(config, name)
        tls[name] = (server_context(settings), PrincipalMapper(settings.principal_rules))
    return tls


def with_dynamic_tls(config: BrokerConfig, dynamic: Mapping[str, str]) -> BrokerConfig:
    """``config`` with this broker's dynamic listener TLS keys over its static ones."""
    ssl_keys = dict(config.ssl)
    chosen = {}
    for name, value in dynamic.items():
        parsed = listener_tls_key(name)
        if parsed is not None:
            chosen[f"listener.name.{parsed[0].lower()}.{parsed[1]}"] = (parsed[0].lower(), parsed[1], value)
    # Blank first (an empty value hides the global key too), then set: a conflict among the dynamic keys still shows.
    for listener, key, _ in chosen.values():
        for other in _REPLACES.get(key, ()):
            ssl_keys[f"listener.name.{listener}.{other}"] = ""
    for prefixed, (_, _, value) in chosen.items():
        ssl_keys[prefixed] = value
    return dataclasses.replace(config, ssl=ssl_keys)


def _files_digest(settings: TlsSettings) -> tuple:
    """What the listener's files hold now (None for a file that cannot be read): a rotated file differs."""
    digests = []
    for path in (settings.keystore_location, settings.truststore_location):
        if path is None:
            digests.append(None)
            continue
        try:
            with open(path, "rb") as file:
                digests.append(hashlib.sha256(file.read(_FILE_DIGEST_MAX_BYTES)).hexdigest())
        except OSError:
            digests.append(None)
    return tuple(digests)


class ListenerTls(dict):
    """Listener name -> (server context, principal mapper) of this node's SSL and
    SASL_SSL listeners as they are now: the acceptors read it per connection."""

    def __init__(self, config: BrokerConfig):
        super().__init__(listener_tls(config))
        self._config = config
        # Listener -> (settings, file digests) last built or last refused: each is tried once.
        self._tried: dict[str, tuple] = {}
        for name in self:
            settings = tls_settings(config, name)
            self._tried[name] = (settings, _files_digest(settings))

    def apply_dynamic(self, dynamic: Mapping[str, str]) -> list[str]:
        """Rebuild the contexts whose settings or files changed under ``dynamic``
        (this broker's effective dynamic configs); the listeners rebuilt."""
        config = with_dynamic_tls(self._config, dynamic)
        rebuilt = []
        for name in list(self):
            try:
                settings = tls_settings(config, name)
            except ConfigError as exc:
                attempt = ("settings", str(exc))
                if self._tried.get(name) != attempt:
                    log.error("listener %s keeps its current TLS context: its dynamic TLS config is refused: %s", name, exc)
                self._tried[name] = attempt
                continue
            attempt = (settings, _files_digest(settings))
            if self._tried.get(name) == attempt:
                continue
            self._tried[name] = attempt
            try:
                context = server_context(settings)
            except ConfigError as exc:
                log.error("listener %s keeps its current TLS context: the new one cannot be loaded: %s", name, exc)
                continue
            self[name] = (context, PrincipalMapper(settings.principal_rules))
            rebuilt.append(name)
            log.info("listener %s: new TLS context loaded; connections accepted from now on use it", name)
        return rebuilt


# What a node connects to (Broker.node_connection's ``to``) -> the key of that listener's SASL mechanism.
NODE_LISTENER_KEYS = {"broker": INTER_BROKER_MECHANISM_KEY, "controller": CONTROLLER_MECHANISM_KEY}


def node_security_of(config: BrokerConfig) -> dict[str, ClientSecurity]:
    """How this node connects to other nodes' inter-broker listener ("broker") and
    controller listener ("controller"): the TLS context and SASL credentials of
    each, built at start so that a missing file or JAAS option stops the node
    at once. With an authorizer, a SASL user missing from super.users is
    warned of: the other nodes would refuse this node's requests."""
    listeners = config.node_listener_names
    security = {}
    for to, key in NODE_LISTENER_KEYS.items():
        listener = listeners.get(key)
        if listener is not None:
            security[to] = node_client_security(config, listener, key)
    if config["authorizer.class.name"]:
        super_users = parse_super_users(config["super.users"])
        for node_security in security.values():
            if node_security.principal is not None and node_security.principal not in super_users:
                log.warning(
                    "super.users does not list %s, the principal this node authenticates to other nodes' %s listener "
                    "as: their authorizer will refuse its requests",
                    node_security.principal, node_security.listener,
                )
    return security

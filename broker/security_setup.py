"""The security a node sets up at start: the TLS of its own SSL and SASL_SSL
listeners, and how it connects to other nodes' inter-broker and controller
listeners (TLS context, SASL mechanism and credentials). Built before anything
else so that a bad certificate, key password or JAAS entry stops the node at
once, before it touches its data."""

from __future__ import annotations

import logging

from broker.config import CONTROLLER_MECHANISM_KEY, INTER_BROKER_MECHANISM_KEY, BrokerConfig
from broker.kafka_client import ClientSecurity, node_client_security
from broker.tls import PrincipalMapper, server_context, tls_settings
from controller.authorizer import parse_super_users

log = logging.getLogger(__name__)


def listener_tls(config: BrokerConfig) -> dict[str, tuple]:
    """(server context, principal mapper) of each SSL and SASL_SSL listener."""
    tls = {}
    for listener in config.listeners:
        if config.security_protocol(listener.name) in ("SSL", "SASL_SSL"):
            settings = tls_settings(config, listener.name)
            tls[listener.name] = (server_context(settings), PrincipalMapper(settings.principal_rules))
    return tls


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

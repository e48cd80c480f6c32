"""Node-to-node security: the client side of SASL (broker/security/sasl_client.py),
the start-up checks of the inter-broker and controller listeners' security
(broker/config.py, broker/app.py), and broker/net/node_client.py connecting over
TLS and SASL to a real KafkaConnection in-process."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import STANDARD_AUTHORIZER, ConfigError, load_config
from broker.net.connection import KafkaConnection
from broker.net.dispatch import Dispatcher
from broker.net.node_client import AuthenticationFailed, KafkaClientConnection, node_client_security
from broker.net.sasl_listener import sasl_listeners
from broker.net.security_setup import listener_tls as _listener_tls
from broker.net.security_setup import node_security_of as _node_client_security
from broker.net.tls import TLSAcceptor
from broker.security.jaas import parse_jaas_entry
from broker.security.mechanism import SaslAuthenticationError
from broker.security.sasl_client import PlainClient, SaslClientError, ScramClient, client_factory
from broker.security.scram_server import ScramServer, new_salt
from protocol import scram
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from protocol.scram import ScramMechanism
from tests.tls_certs import make_certs, openssl_or_skip

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
JAAS = f'{PLAIN_MODULE} required username="broker" password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";'
TIMEOUT_S = 20


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


def node(certs=None, **extra) -> dict[str, str]:
    """Node 1 of three combined nodes whose inter-broker and controller listeners speak SASL_SSL with PLAIN."""
    raw = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "controller.quorum.voters": "1@127.0.0.1:9301,2@127.0.0.1:9302,3@127.0.0.1:9303",
        "controller.listener.names": "CONTROLLER",
        "listeners": "INTERNAL://127.0.0.1:9201,CONTROLLER://127.0.0.1:9301",
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "log.dirs": "/tmp/unused",
    }
    if certs is not None:
        raw["ssl.keystore.location"] = str(certs.server_keystore)
        raw["ssl.truststore.location"] = str(certs.ca)
    raw.update(extra)
    return {k: v for k, v in raw.items() if v is not None}


def load(raw: dict[str, str], warnings: list | None = None):
    return load_config(raw, warn=(warnings.append if warnings is not None else lambda _: None))


# --------------------------------------------------------------------------- PLAIN client


def test_plain_sends_one_token_and_completes_on_the_answer():
    client = PlainClient("broker", "s3cret")
    assert client.initial_token() == b"\0broker\0s3cret"
    assert not client.complete
    assert client.evaluate(b"") is None and client.complete
    with pytest.raises(SaslClientError):
        client.evaluate(b"")
    assert "s3cret" not in repr(client)
    with pytest.raises(ValueError):
        PlainClient("bro\0ker", "x")


# --------------------------------------------------------------------------- SCRAM client


def scram_server(mechanism, users: dict[str, str], iterations=4096):
    credentials = {u: scram.credential_from_password(mechanism, p, new_salt(), iterations) for u, p in users.items()}
    return ScramServer(mechanism, credentials.get)


def run_scram(client: ScramClient, server: ScramServer) -> None:
    server_first = server.evaluate(client.initial_token(), 0)
    server_final = server.evaluate(client.evaluate(server_first), 0)
    assert client.evaluate(server_final) is None


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize("user", ["broker", "a,b=c", "jörg"])
def test_scram_client_authenticates_against_our_server(mechanism, user):
    server = scram_server(mechanism, {user: "pw-" + user})
    client = ScramClient(mechanism, user, "pw-" + user)
    run_scram(client, server)
    assert client.complete and server.complete and server.authorization_id == user


def test_scram_wrong_password_is_refused_by_the_server():
    server = scram_server(SHA256, {"broker": "right"})
    client = ScramClient(SHA256, "broker", "wrong")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(client.evaluate(server.evaluate(client.initial_token(), 0)), 0)


def test_scram_client_refuses_a_server_that_does_not_know_the_password():
    """A server holding another password's credential (or a made-up signature) fails at the last step."""
    impostor = scram_server(SHA256, {"broker": "other"})
    client = ScramClient(SHA256, "broker", "right")
    server_first = impostor.evaluate(client.initial_token(), 0)
    client.evaluate(server_first)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(SaslClientError, match="server signature does not match"):
        client.evaluate(forged)
    assert not client.complete


NONCE = "clientnonce"


def started() -> ScramClient:
    client = ScramClient(SHA256, "broker", "pw", nonce=NONCE)
    assert client.initial_token() == f"n,,n=broker,r={NONCE}".encode()
    return client


def server_first_for(client: ScramClient, *, nonce_suffix="srv", salt=b"c2FsdA==", iterations=4096) -> bytes:
    return f"r={NONCE}{nonce_suffix},s={salt.decode()},i={iterations}".encode()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda c: server_first_for(c, nonce_suffix=""), "does not extend"),
        (lambda c: b"r=othernonce,s=c2FsdA==,i=4096", "does not extend"),
        (lambda c: server_first_for(c, iterations=4095), "fewer than the minimum 4096"),
        (lambda c: server_first_for(c, salt=b"not base64!"), "not base64"),
        (lambda c: server_first_for(c, salt=b""), "empty salt"),
        (lambda c: b"s=c2FsdA==,r=x,i=4096", "malformed"),
        (lambda c: b"\xff\xfe", "not UTF-8"),
        (lambda c: b"r=" + b"a" * 9000, "longer than"),
    ],
)
def test_scram_client_refuses_bad_server_first_messages(make, message):
    client = started()
    with pytest.raises(SaslClientError, match=message):
        client.evaluate(make(client))


def test_scram_client_reports_the_servers_error_and_malformed_finals():
    for final, message in [(b"e=invalid-proof", "refused the exchange: invalid-proof"), (b"x=1", "malformed"), (b"v=!!", "not base64")]:
        client = started()
        client.evaluate(server_first_for(client))
        with pytest.raises(SaslClientError, match=message):
            client.evaluate(final)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_scram_client_never_raises_anything_else_on_random_server_messages(data):
    client = started()
    try:
        client.evaluate(data)
    except SaslClientError:
        return
    # Parsed as a server-first-message: then the final one can only fail or complete.
    with pytest.raises(SaslClientError):
        client.evaluate(b"v=" + base64.b64encode(b"\0" * 32))


# --------------------------------------------------------------------------- credentials


def test_client_credentials_come_from_the_jaas_username_and_password():
    factory = client_factory("PLAIN", parse_jaas_entry(JAAS), "key")
    assert factory().initial_token() == b"\0broker\0broker-secret"
    scram_factory = client_factory("SCRAM-SHA-512", parse_jaas_entry(f'{SCRAM_MODULE} required username="n" password="p";'), "key")
    assert isinstance(scram_factory(), ScramClient) and scram_factory().mechanism is SHA512
    refusals = [
        ("PLAIN", f'{PLAIN_MODULE} required user_broker="x";', "username and password missing"),
        ("PLAIN", f'{PLAIN_MODULE} required username="broker";', "password missing"),
        ("SCRAM-SHA-256", JAAS, f"takes {SCRAM_MODULE}"),
        ("PLAIN", None, "required, with username and password"),
        ("GSSAPI", JAAS, "cannot be used between nodes"),
        ("OAUTHBEARER", JAAS, "cannot be used between nodes"),
    ]
    for mechanism, text, message in refusals:
        with pytest.raises(ValueError, match=message):
            client_factory(mechanism, None if text is None else parse_jaas_entry(text), "key")


# --------------------------------------------------------------------------- start-up checks


def test_secure_node_listeners_build_their_client_side(certs):
    config = load(node(certs))
    assert set(_listener_tls(config)) == {"INTERNAL", "CONTROLLER"}
    security = _node_client_security(config)
    assert set(security) == {"broker", "controller"}
    assert security["broker"].listener == "INTERNAL" and security["controller"].listener == "CONTROLLER"
    for side in security.values():
        assert side.protocol == "SASL_SSL" and side.sasl_mechanism == "PLAIN" and side.principal == "User:broker"
        assert side.ssl_context.verify_mode == ssl.CERT_REQUIRED and side.ssl_context.check_hostname
        assert side.sasl_client().initial_token() == b"\0broker\0broker-secret"
        assert "secret" not in repr(side)
    # An empty endpoint identification algorithm: the host name is not checked (the chain still is).
    relaxed = _node_client_security(load(node(certs, **{"ssl.endpoint.identification.algorithm": ""})))
    assert not relaxed["controller"].ssl_context.check_hostname
    assert relaxed["controller"].ssl_context.verify_mode == ssl.CERT_REQUIRED
    # A quorum of one reaches no other node.
    assert _node_client_security(load({"listeners": "PLAINTEXT://127.0.0.1:9092"})) == {}


def test_plaintext_and_ssl_node_listeners(certs):
    config = load(node(certs, **{"listener.security.protocol.map": "INTERNAL:SSL,CONTROLLER:PLAINTEXT"}))
    security = _node_client_security(config)
    assert security["broker"].protocol == "SSL" and security["broker"].sasl_client is None
    assert security["broker"].ssl_context is not None
    assert security["controller"].protocol == "PLAINTEXT" and security["controller"].ssl_context is None


@pytest.mark.parametrize(
    "key, protocols",
    [
        ("sasl.mechanism.inter.broker.protocol", "INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT"),
        ("sasl.mechanism.controller.protocol", "INTERNAL:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"),
    ],
)
def test_gssapi_kafkas_default_is_refused_between_nodes(certs, key, protocols):
    raw = node(certs, **{"listener.security.protocol.map": protocols, key: None})
    with pytest.raises(ConfigError, match=f"{key}: .* GSSAPI \\(Kerberos, Kafka's default\\)"):
        load(raw)
    with pytest.raises(ConfigError, match=f"{key}: .* 'OAUTHBEARER'"):
        load({**raw, key: "OAUTHBEARER"})
    # The mechanism only matters where the listener speaks SASL.
    load(node(certs, **{"listener.security.protocol.map": "INTERNAL:SSL,CONTROLLER:SSL", key: None}))


def test_the_node_mechanism_must_be_enabled_on_the_listeners_this_node_serves(certs):
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol: PLAIN must be among the mechanisms"):
        load(node(certs, **{"listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256"}))
    with pytest.raises(ConfigError, match="sasl.mechanism.controller.protocol: PLAIN must be among .*sasl.enabled.mechanisms: SCRAM-SHA-512"):
        load(node(certs, **{"sasl.enabled.mechanisms": "SCRAM-SHA-512", "listener.name.internal.sasl.enabled.mechanisms": "PLAIN"}))
    # A broker-only node does not serve the controller listener: only its own inter-broker one counts.
    broker_only = node(
        certs,
        **{
            "node.id": "4",
            "process.roles": "broker",
            "listeners": "INTERNAL://127.0.0.1:9204",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        },
    )
    assert set(_node_client_security(load(broker_only))) == {"broker", "controller"}


def test_inter_broker_listener_by_name_or_by_protocol_not_both(certs):
    both = node(certs, **{"security.inter.broker.protocol": "SASL_SSL"})
    with pytest.raises(ConfigError, match="inter.broker.listener.name and security.inter.broker.protocol: set only one"):
        load(both)
    by_protocol = node(
        certs,
        **{
            "inter.broker.listener.name": None,
            "security.inter.broker.protocol": "SASL_SSL",
            "listeners": "PLAINTEXT://127.0.0.1:9200,SASL_SSL://127.0.0.1:9201,CONTROLLER://127.0.0.1:9301",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        },
    )
    config = load(by_protocol)
    assert config.inter_broker_listener_name == "SASL_SSL"
    assert _node_client_security(config)["broker"].listener == "SASL_SSL"
    with pytest.raises(ConfigError, match="security.inter.broker.protocol: there is no broker listener named SSL"):
        load({**by_protocol, "security.inter.broker.protocol": "SSL"})
    with pytest.raises(ConfigError, match="security.inter.broker.protocol: expected one of"):
        load({**by_protocol, "security.inter.broker.protocol": "TLS"})


def test_missing_credentials_stop_the_node_at_start(certs):
    no_username = node(certs, **{"listener.name.controller.plain.sasl.jaas.config": f'{PLAIN_MODULE} required user_broker="x";'})
    with pytest.raises(ConfigError, match="listener.name.controller.plain.sasl.jaas.config: username and password missing"):
        _node_client_security(load(no_username))
    bad = node(certs, **{"listener.name.internal.plain.sasl.jaas.config": f'{PLAIN_MODULE} required username="b" password=;'})
    with pytest.raises(ConfigError, match="listener.name.internal.plain.sasl.jaas.config: Value not specified"):
        _node_client_security(load(bad))
    # A broker-only node has no controller listener of its own: the JAAS entry is still required.
    broker_only = node(
        certs, **{"node.id": "4", "process.roles": "broker", "listeners": "INTERNAL://127.0.0.1:9204",
                  "listener.name.controller.plain.sasl.jaas.config": None},
    )
    with pytest.raises(ConfigError, match="listener.name.controller.plain.sasl.jaas.config: required, with username and password"):
        _node_client_security(load(broker_only))
    # The TLS side too: a trust store that is not there.
    with pytest.raises(ConfigError, match="ssl.truststore.location: no such file"):
        _node_client_security(load(node(certs, **{"ssl.truststore.location": "/nonexistent/ca.pem"})))


def test_an_authorizer_needs_anonymous_only_where_nodes_do_not_authenticate(certs, caplog):
    secured = node(certs, **{"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:broker"})
    load(secured)  # SASL between nodes: the node principal is the operator's to list
    for protocols, client_auth in [
        ("INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT", None),
        ("INTERNAL:PLAINTEXT,CONTROLLER:SASL_SSL", None),
        ("INTERNAL:SSL,CONTROLLER:SASL_SSL", "requested"),
    ]:
        raw = {**secured, "listener.security.protocol.map": protocols}
        if client_auth:
            raw["listener.name.internal.ssl.client.auth"] = client_auth
        with pytest.raises(ConfigError, match="super.users: must include User:ANONYMOUS .* listeners \\((INTERNAL|CONTROLLER)\\)"):
            load(raw)
        load({**raw, "super.users": "User:broker;User:ANONYMOUS"})
    # SSL with client certificates required authenticates the nodes too.
    load({**secured, "listener.security.protocol.map": "INTERNAL:SSL,CONTROLLER:SASL_SSL", "ssl.client.auth": "required"})
    # The node's own SASL user missing from super.users is warned of at start.
    caplog.set_level(logging.WARNING, logger="broker.app")
    _node_client_security(load({**secured, "super.users": "User:admin"}))
    assert "super.users does not list User:broker" in caplog.text


# --------------------------------------------------------------------------- connecting

METADATA = APIS_BY_NAME["Metadata"]
MD = struct_classes(METADATA.request)


def principal_dispatcher() -> Dispatcher:
    """Answers Metadata with the connection's principal as the cluster id."""
    dispatcher = Dispatcher()
    response = METADATA.response.cls

    def handle(ctx, request):
        return response(brokers=[], cluster_id=ctx.principal, controller_id=-1, topics=[])

    dispatcher.register(METADATA.key, 12, 12, handle)
    return dispatcher


@contextlib.asynccontextmanager
async def listener(config, name: str, scram_credentials=None):
    tls = _listener_tls(config).get(name)
    sasl = sasl_listeners(config, lambda: scram_credentials or {}).get(name)
    dispatcher, connections = principal_dispatcher(), set()

    def protocol():
        connection = KafkaConnection(dispatcher, 1 << 20, connections, name, None, tls[1] if tls else None, sasl)
        return connection if tls is None else TLSAcceptor(connection, tls[0])

    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for connection in list(connections):
            connection.abort()


async def principal_over(port: int, security, host="127.0.0.1") -> str:
    connection = KafkaClientConnection(host, port, "node-test", connect_timeout_ms=5000, security=security)
    try:
        body = MD.MetadataRequest(topics=[], allow_auto_topic_creation=False)
        return (await connection.request(METADATA, 12, body, timeout_ms=5000)).cluster_id
    finally:
        connection.close()


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    """Both event loops: nodes run on uvloop unless started with --no-uvloop."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return lambda coroutine: uvloop.run(asyncio.wait_for(coroutine, TIMEOUT_S))
    return lambda coroutine: asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


def test_a_node_connects_over_sasl_ssl_with_plain_as_its_user(certs, caplog, run):
    config = load(node(certs))
    security = _node_client_security(config)

    async def main():
        async with listener(config, "CONTROLLER") as port:
            assert await principal_over(port, security["controller"]) == "User:broker"
            # By host name too: the certificate names localhost and 127.0.0.1.
            assert await principal_over(port, security["controller"], host="localhost") == "User:broker"
            wrong = node(certs, **{"listener.name.controller.plain.sasl.jaas.config": JAAS.replace('password="broker-secret"', 'password="nope"')})
            caplog.set_level(logging.WARNING, logger="broker.net.node_client")
            connection = KafkaClientConnection("127.0.0.1", port, "node-test", security=_node_client_security(load(wrong))["controller"])
            try:
                for _ in range(2):
                    with pytest.raises(AuthenticationFailed, match="authentication failed with 127.0.0.1:.* \\(CONTROLLER, SASL PLAIN\\): Authentication failed"):
                        await connection.request(METADATA, 12, MD.MetadataRequest(topics=[]), timeout_ms=5000)
            finally:
                connection.close()
            # Logged once for the two failures, without the password.
            assert caplog.text.count("authentication failed with") == 1 and "nope" not in caplog.text

    run(main())


def test_a_node_connects_over_sasl_plaintext_with_scram(certs, run):
    credentials = {("broker", SHA512.type_code): scram.credential_from_password(SHA512, "broker-secret", new_salt(), 4096)}
    raw = node(
        certs,
        **{
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_SSL",
            "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": f'{SCRAM_MODULE} required username="broker" password="broker-secret";',
        },
    )
    config = load(raw)
    security = _node_client_security(config)["broker"]
    assert security.ssl_context is None and security.sasl_mechanism == "SCRAM-SHA-512"

    async def main():
        async with listener(config, "INTERNAL", credentials) as port:
            assert await principal_over(port, security) == "User:broker"
        async with listener(config, "INTERNAL", {}) as port:  # no credential stored for the user
            with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
                await principal_over(port, security)

    run(main())


def test_tls_failures_between_nodes_are_authentication_failures(certs, run):
    config = load(node(certs))

    async def main():
        async with listener(config, "CONTROLLER") as port:
            untrusting = _node_client_security(load(node(certs, **{"ssl.truststore.location": str(certs.untrusted_cert)})))
            with pytest.raises(AuthenticationFailed, match="TLS handshake with .* failed: .*certificate"):
                await principal_over(port, untrusting["controller"])
        # A plaintext peer on a TLS node listener: the handshake fails, no request goes out.
        async with listener(load(node(certs, **{"listener.security.protocol.map": "INTERNAL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT"})), "CONTROLLER") as port:
            with pytest.raises(AuthenticationFailed, match="TLS handshake"):
                await principal_over(port, _node_client_security(config)["controller"])

    run(main())


def test_the_mechanism_must_be_enabled_on_the_peer(run):
    raw = node(**{"listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"})
    serving = load({**raw, "listener.name.controller.sasl.enabled.mechanisms": "PLAIN"})
    client_side = node_client_security(
        load({**raw, "process.roles": "broker", "node.id": "4", "listeners": "INTERNAL://127.0.0.1:9204",
              "sasl.mechanism.controller.protocol": "SCRAM-SHA-256",
              "listener.name.controller.scram-sha-256.sasl.jaas.config": f'{SCRAM_MODULE} required username="b" password="p";'}),
        "CONTROLLER",
        "sasl.mechanism.controller.protocol",
    )

    async def main():
        async with listener(serving, "CONTROLLER") as port:
            with pytest.raises(AuthenticationFailed, match="SCRAM-SHA-256 is not enabled there|the mechanism is not enabled there \\(it offers PLAIN\\)"):
                await principal_over(port, client_side)

    run(main())


def test_a_session_with_a_lifetime_is_renewed_on_a_new_connection(certs, run):
    """The peer's connections.max.reauth.ms: a request after the session's end goes
    on a fresh, authenticated connection (on the old one the peer would close)."""
    config = load(node(certs, **{"listener.name.controller.plain.connections.max.reauth.ms": "1000"}))
    security = _node_client_security(config)["controller"]

    async def main():
        async with listener(config, "CONTROLLER") as port:
            connection = KafkaClientConnection("127.0.0.1", port, "node-test", security=security)
            body = MD.MetadataRequest(topics=[], allow_auto_topic_creation=False)
            try:
                assert (await connection.request(METADATA, 12, body, timeout_ms=5000)).cluster_id == "User:broker"
                first = connection._writer
                await asyncio.sleep(1.2)
                assert (await connection.request(METADATA, 12, body, timeout_ms=5000)).cluster_id == "User:broker"
                assert connection._writer is not first
                await asyncio.sleep(0.05)
                assert first.is_closing()  # the old one is closed once its session is over
            finally:
                connection.close()

    run(main())


def test_scram_between_the_controllers_of_several_voters_is_refused(certs):
    scram = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";'
        ),
    }
    with pytest.raises(ConfigError, match="sasl.mechanism.controller.protocol: the controllers of a quorum of several voters"):
        load(node(certs, **scram))
    # SCRAM on the inter-broker listener is fine (the credentials come with the metadata log).
    load(node(certs, **{
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";'
        ),
    }))

"""OAUTHBEARER with JWKS-verified tokens (Kafka's OAuthBearerValidatorCallbackHandler) on a real broker.

The test makes an RSA and an EC key, serves their JWKS from a file:// URL (and
once from a local HTTPS server with a test CA), and hands confluent-kafka
tokens it signs itself through ``oauth_cb`` (``sasl.oauthbearer.method=default``).
A valid token (RS256, PS256, ES256) produces and consumes; an expired one, a
wrong audience, a wrong issuer, an unknown kid, a tampered signature and an
unsigned (``alg: none``) token are each refused: the client reports an
authentication error carrying ``invalid_token``, a raw SaslAuthenticate gets
SASL_AUTHENTICATION_FAILED after the challenge, and the broker logs one line
per refusal. A key added to the JWKS after start is fetched when a token
first names it (the refresh interval is an hour), so the client's next try
gets in.
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import ssl
import threading
import time
import uuid

import pytest

jwt = pytest.importorskip("jwt")
pytest.importorskip("cryptography")
confluent_kafka = pytest.importorskip("confluent_kafka")

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from broker.security.jwks import VALIDATOR_CLASSES
from protocol.errors import ErrorCode
from protocol.framing import decode_response, encode_request
from protocol.primitives import INT32
from protocol.registry import APIS_BY_NAME
from tests.conftest import BrokerProcess
from tests.tls_certs import make_certs, openssl_or_skip

TIMEOUT_S = 20
AUDIENCE = "kafka-brokers"
ISSUER = "https://issuer.test"
HANDSHAKE, AUTHENTICATE = APIS_BY_NAME["SaslHandshake"], APIS_BY_NAME["SaslAuthenticate"]


class Keys:
    def __init__(self):
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self, with_rotated: bool = False) -> dict:
        keys = [
            RSAAlgorithm.to_jwk(self.rsa.public_key(), as_dict=True) | {"kid": "rsa-1", "use": "sig"},
            ECAlgorithm.to_jwk(self.ec.public_key(), as_dict=True) | {"kid": "ec-1", "use": "sig"},
        ]
        if with_rotated:
            keys.append(RSAAlgorithm.to_jwk(self.rotated.public_key(), as_dict=True) | {"kid": "rsa-2"})
        return {"keys": keys}

    def token(self, *, alg="RS256", kid="rsa-1", sub="alice", aud=AUDIENCE, iss=ISSUER, exp_in_s=300, key=None) -> str:
        now = int(time.time())
        claims = {"sub": sub, "aud": aud, "iss": iss, "iat": now, "exp": now + exp_in_s, "scope": "kafka"}
        signing = key or (self.ec if alg.startswith("ES") else self.rsa)
        return jwt.encode(claims, signing, algorithm=alg, headers={"kid": kid})


def unsigned(sub: str = "alice") -> str:
    now = int(time.time())
    return jwt.encode({"sub": sub, "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 300}, None, algorithm="none")


def tampered(token: str) -> str:
    header, claims, signature = token.split(".")
    forged = jwt.utils.base64url_encode(
        json.dumps(json.loads(jwt.utils.base64url_decode(claims)) | {"sub": "admin"}).encode()
    ).decode()
    return f"{header}.{forged}.{signature}"


@pytest.fixture(scope="module")
def keys():
    return Keys()


def _broker(data_dir, url: str, extra: dict | None = None) -> BrokerProcess:
    data_dir.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(
        data_dir,
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR_CLASSES[0],
            "sasl.oauthbearer.jwks.endpoint.url": url,
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
            # An hour: a refresh seen during the test is one a new kid asked for.
            "sasl.oauthbearer.jwks.endpoint.refresh.ms": "3600000",
            **(extra or {}),
        },
    ).start()
    return broker


@pytest.fixture(scope="module")
def jwks_file(tmp_path_factory, keys):
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps(keys.jwks()))
    return path


@pytest.fixture(scope="module")
def broker(tmp_path_factory, jwks_file):
    broker = _broker(tmp_path_factory.mktemp("jwks-broker"), jwks_file.as_uri())
    yield broker
    broker.stop()


def client_settings(broker, token: str, **extra) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "default",
        "oauth_cb": lambda _config: (token, time.time() + 300),
        **extra,
    }


def round_trip(settings: dict, topic: str) -> list[bytes]:
    producer = confluent_kafka.Producer(settings)
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(settings | {"group.id": "g", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def client_auth_error(settings: dict) -> str:
    errors: list = []
    producer = confluent_kafka.Producer(settings | {"error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
    return errors[0].str()


def raw_authenticate(bootstrap: str, token: str) -> tuple[int, bytes, int | None]:
    """SaslHandshake v1 + SaslAuthenticate v2 with ``token``; (first error, first answer, error after 0x01 or None)."""
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:

        def exchange(api, version, **fields):
            sock.sendall(encode_request(api, version, 7, "raw", api.request.cls(**fields)))
            size = INT32.unpack(_exactly(sock, 4))[0]
            return decode_response(api, version, _exactly(sock, size))[1]

        assert exchange(HANDSHAKE, 1, mechanism="OAUTHBEARER").error_code == ErrorCode.NONE
        message = b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"
        first = exchange(AUTHENTICATE, 2, auth_bytes=message)
        if first.error_code != ErrorCode.NONE or not first.auth_bytes:
            return first.error_code, bytes(first.auth_bytes or b""), None
        second = exchange(AUTHENTICATE, 2, auth_bytes=b"\x01")
        return first.error_code, bytes(first.auth_bytes), second.error_code


def _exactly(sock, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def failure_lines(broker) -> list[str]:
    return [line for line in broker.output if "Failed authentication" in line]


@pytest.mark.parametrize("alg", ["RS256", "PS256", "ES256"])
def test_a_signed_token_produces_and_consumes(broker, keys, alg):
    token = keys.token(alg=alg, kid="ec-1" if alg.startswith("ES") else "rsa-1")
    topic = f"jwks-{alg.lower()}-{uuid.uuid4().hex[:6]}"
    assert round_trip(client_settings(broker, token), topic) == [f"v{i}".encode() for i in range(5)]
    assert raw_authenticate(broker.bootstrap, token) == (ErrorCode.NONE, b"", None)


BAD_TOKENS = {
    "expired": lambda k: k.token(exp_in_s=-120),  # past the 30 s of clock skew
    "wrong audience": lambda k: k.token(aud="someone-else"),
    "wrong issuer": lambda k: k.token(iss="https://evil.test"),
    "unknown kid": lambda k: k.token(kid="nobody"),
    "tampered signature": lambda k: tampered(k.token()),
    "unsigned": lambda k: unsigned(),
    "signed by another key under a known kid": lambda k: k.token(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_a_bad_token_is_refused_with_one_log_line(broker, keys, case):
    token = BAD_TOKENS[case](keys)
    message = client_auth_error(client_settings(broker, token))
    assert "invalid_token" in message, message
    # The client may still be closing a last connection it retried: its failure
    # line must land before the count (a CI run counted one such line late).
    before = len(failure_lines(broker))
    quiet_since, deadline = time.monotonic(), time.monotonic() + 5
    while time.monotonic() - quiet_since < 0.5 and time.monotonic() < deadline:
        time.sleep(0.05)
        now = len(failure_lines(broker))
        if now != before:
            before, quiet_since = now, time.monotonic()
    first_error, challenge, final_error = raw_authenticate(broker.bootstrap, token)
    assert (first_error, json.loads(challenge), final_error) == (
        ErrorCode.NONE, {"status": "invalid_token"}, ErrorCode.SASL_AUTHENTICATION_FAILED
    )
    deadline = time.monotonic() + 5
    while len(failure_lines(broker)) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # a second line, if any, would come with the first
    new = failure_lines(broker)[before:]
    assert len(new) == 1, new
    assert "Could not validate" in new[0] or "no key with kid" in new[0], new[0]
    assert token not in "".join(broker.output)


def test_a_new_key_is_fetched_when_a_token_first_names_it(tmp_path, keys):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(keys.jwks()))
    broker = _broker(tmp_path / "broker", path.as_uri())
    try:
        token = keys.token(kid="rsa-2", key=keys.rotated)
        assert raw_authenticate(broker.bootstrap, token)[2] == ErrorCode.SASL_AUTHENTICATION_FAILED
        path.write_text(json.dumps(keys.jwks(with_rotated=True)))  # the provider rotates its key
        # The refused kid asked for a refresh; the next token naming it (another kid's
        # refresh is allowed at once, the same kid's only after a minute) gets in.
        first = raw_authenticate(broker.bootstrap, keys.token(kid="rsa-3", key=keys.rotated))
        assert first[2] == ErrorCode.SASL_AUTHENTICATION_FAILED
        deadline = time.monotonic() + TIMEOUT_S
        while raw_authenticate(broker.bootstrap, token) != (ErrorCode.NONE, b"", None):
            assert time.monotonic() < deadline, broker.log_text()[-2000:]
            time.sleep(0.2)
        assert re.search(r"JWKS: refreshed, 3 keys", broker.log_text())
    finally:
        broker.stop()


class _JwksHandler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def test_keys_from_an_https_endpoint_trusted_through_the_jaas_truststore(tmp_path, keys):
    openssl_or_skip()
    certs = make_certs(tmp_path / "certs")
    handler = type("Handler", (_JwksHandler,), {"body": json.dumps(keys.jwks()).encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certs.server_keystore))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}/jwks.json"
    jaas = f'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ssl.truststore.location="{certs.ca}";'
    broker = _broker(tmp_path / "broker", url, {"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": jaas})
    try:
        assert raw_authenticate(broker.bootstrap, keys.token()) == (ErrorCode.NONE, b"", None)
        assert raw_authenticate(broker.bootstrap, keys.token(aud="x"))[2] == ErrorCode.SASL_AUTHENTICATION_FAILED
    finally:
        broker.stop()
        server.shutdown()
        server.server_close()

"""The SASL parsers and state machines under fuzzing: only the defined failures escape.

* Every mechanism fed random, truncated or corrupted tokens raises only
  SaslAuthenticationError, and never succeeds on a corrupted credential.
* The unsecured-JWS validator raises only TokenValidationError on any string.
* The JAAS parser raises only JaasConfigError on any text, and reads back
  what a generator of valid configs wrote.
* A SASL session driven by a connection that obeys its answers, with random
  requests and tokens, raises nothing; a failed session stays failed, and a
  principal appears only through a completed exchange.
"""

from __future__ import annotations

import base64
import json

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.security.jaas import JaasConfigError, parse_jaas_config
from broker.security.mechanism import SaslAuthenticationError
from broker.security.oauthbearer_server import OAuthBearerServer, TokenValidationError, UnsecuredJwsValidator
from broker.security.plain_server import PlainServer, PlainUsers
from broker.security.sasl import (
    API_VERSIONS_KEY,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    Action,
    SaslServerConfig,
    SaslSession,
    SaslState,
)
from broker.security.scram_server import ScramServer, ScramState
from protocol import scram
from protocol.scram import ScramMechanism
from tests.unit.test_scram_server import ScramClient

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SHA256 = ScramMechanism.SCRAM_SHA_256
CREDENTIALS = {"alice": scram.credential_from_password(SHA256, "alice-secret", b"fixed-salt", 4096)}
USERS = PlainUsers({"alice": "alice-secret"})
NOW_MS = 1_700_000_000_000

scram_like = st.one_of(
    st.binary(max_size=200),
    st.text(alphabet="nyparsicm=,2CD3 \x00\x01é", max_size=60).map(str.encode),
)


def corruptions(data: bytes):
    """Truncations and single-byte changes of ``data``."""
    return st.one_of(
        st.integers(0, max(0, len(data) - 1)).map(lambda end: data[:end]),
        st.tuples(st.integers(0, max(0, len(data) - 1)), st.integers(0, 255)).map(
            lambda change: data[: change[0]] + bytes([change[1]]) + data[change[0] + 1 :]
        ),
    )


@SETTINGS
@given(first=scram_like, final=scram_like)
def test_scram_random_tokens_only_fail_as_defined(first, final):
    server = ScramServer(SHA256, CREDENTIALS.get, server_nonce=lambda: "S")
    try:
        server.evaluate(first, 0)
        server.evaluate(final, 0)
    except SaslAuthenticationError:
        assert server.state is ScramState.FAILED
        return
    raise AssertionError("random tokens authenticated")


VALID_FIRST = ScramClient(SHA256, "alice", "alice-secret").first()


@SETTINGS
@given(data=st.data())
def test_scram_corrupted_final_messages_fail(data):
    client = ScramClient(SHA256, "alice", "alice-secret")
    server = ScramServer(SHA256, CREDENTIALS.get, server_nonce=lambda: "S")
    final = client.final(server.evaluate(client.first(), 0))
    corrupted = data.draw(corruptions(final))
    if corrupted == final:
        return
    try:
        server.evaluate(corrupted, 0)
    except SaslAuthenticationError:
        return
    # A change that keeps the message valid must not be one that matters.
    raise AssertionError(f"corrupted final message accepted: {corrupted!r}")


@SETTINGS
@given(data=st.data())
def test_scram_corrupted_first_messages_fail_or_parse(data):
    corrupted = data.draw(corruptions(VALID_FIRST))
    server = ScramServer(SHA256, CREDENTIALS.get)
    try:
        answer = server.evaluate(corrupted, 0)
    except SaslAuthenticationError:
        assert server.state is ScramState.FAILED
    else:
        assert answer.startswith(b"r=") and server.state is ScramState.CLIENT_FINAL


@SETTINGS
@given(token=st.one_of(st.binary(max_size=120), st.text(alphabet="\x00aliceAL-secrt\xff", max_size=40).map(str.encode)))
def test_plain_random_tokens_only_fail_as_defined(token):
    server = PlainServer(USERS)
    try:
        server.evaluate(token, 0)
    except SaslAuthenticationError:
        assert not server.complete
    else:
        assert token in (b"\x00alice\x00alice-secret", b"alice\x00alice\x00alice-secret")


def unsecured(claims) -> str:
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


VALID_OAUTH = f"n,,\x01auth=Bearer {unsecured({'sub': 'alice', 'exp': NOW_MS // 1000 + 60})}\x01\x01".encode()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@SETTINGS
@given(message=st.one_of(st.binary(max_size=200), st.text(alphabet="n,a=\x01authBearer .-_xyz", max_size=60).map(str.encode)))
def test_oauthbearer_random_messages_only_fail_as_defined(message):
    server = OAuthBearerServer(UnsecuredJwsValidator())
    try:
        challenge = server.evaluate(message, NOW_MS)
    except SaslAuthenticationError:
        return
    assert not server.complete and json.loads(challenge)["status"] == "invalid_token"


@SETTINGS
@given(data=st.data())
def test_oauthbearer_corrupted_messages_fail_or_are_refused(data):
    corrupted = data.draw(corruptions(VALID_OAUTH))
    server = OAuthBearerServer(UnsecuredJwsValidator())
    try:
        challenge = server.evaluate(corrupted, NOW_MS)
    except SaslAuthenticationError:
        return
    if server.complete:  # e.g. "bearer" for "Bearer", or another valid extension
        assert challenge == b"" and server.authorization_id
    else:
        assert json.loads(challenge)["status"] == "invalid_token"


@SETTINGS
@given(
    header=json_values,
    claims=json_values,
    signature=st.sampled_from(["", "c2ln"]),
    raw=st.text(alphabet="abcXYZ019-_.", max_size=80),
)
def test_unsecured_validator_only_raises_token_validation_error(header, claims, signature, raw):
    validator = UnsecuredJwsValidator(required_scope=("s",))

    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    for token in (f"{part(header)}.{part(claims)}.{signature}", raw):
        try:
            validated = validator(token, NOW_MS)
        except TokenValidationError:
            continue
        assert isinstance(claims, dict) and validated.principal_name == claims["sub"]


@SETTINGS
@given(text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=120))
def test_jaas_parser_only_raises_its_error(text):
    try:
        entries = parse_jaas_config(text)
    except JaasConfigError:
        return
    assert entries and all(entry.login_module for entry in entries) and ";" in text


option_values = st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x2FF, exclude_characters="\n\r"), max_size=20)


def java_quote(value: str) -> str:
    """Quote as a Kafka user would for StreamTokenizer: escape backslash and the quote."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@SETTINGS
@given(
    options=st.dictionaries(st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$.\-]{0,10}", fullmatch=True), option_values, max_size=5),
    flag=st.sampled_from(["required", "Requisite", "SUFFICIENT", "optional"]),
)
def test_jaas_round_trip(options, flag):
    text = "org.example.Module " + flag + " " + " ".join(f"{k}={java_quote(v)}" for k, v in options.items()) + ";"
    (entry,) = parse_jaas_config(text)
    assert entry.options == options and entry.control_flag.value == flag.lower()


# ------------------------------------------------------------------ the session


def session_config():
    return SaslServerConfig(
        mechanisms={
            "PLAIN": lambda: PlainServer(USERS),
            "SCRAM-SHA-256": lambda: ScramServer(SHA256, CREDENTIALS.get, server_nonce=lambda: "S"),
            "OAUTHBEARER": lambda: OAuthBearerServer(UnsecuredJwsValidator()),
        },
        connections_max_reauth_ms=2_000,
    )


PLAIN_TOKEN = b"\x00alice\x00alice-secret"
_client = ScramClient(SHA256, "alice", "alice-secret")
VALID_FINAL = _client.final(ScramServer(SHA256, CREDENTIALS.get, server_nonce=lambda: "S").evaluate(VALID_FIRST, 0))


def handshake(mechanism, version=1):
    return ("request", SASL_HANDSHAKE_KEY, version, mechanism)


def auth(token, version=2):
    return ("request", SASL_AUTHENTICATE_KEY, version, token)


# Whole client conversations, so that random sequences often get somewhere.
LOGINS = [
    [handshake("PLAIN"), auth(PLAIN_TOKEN)],
    [("request", API_VERSIONS_KEY, 3, None), handshake("PLAIN", 0), ("raw", PLAIN_TOKEN)],
    [handshake("SCRAM-SHA-256"), auth(VALID_FIRST), auth(VALID_FINAL)],
    [handshake("SCRAM-SHA-256", 0), ("raw", VALID_FIRST), ("raw", VALID_FINAL)],
    [handshake("OAUTHBEARER"), auth(VALID_OAUTH, 1)],
    [handshake("OAUTHBEARER"), auth(VALID_OAUTH.replace(b"Bearer", b"Bearer x")), auth(b"\x01")],
]

single_step = st.one_of(
    st.tuples(
        st.just("request"),
        st.sampled_from([0, 3, API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY]),
        st.integers(-1, 3),
        st.one_of(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI"]), st.binary(max_size=30)),
    ),
    st.tuples(st.just("raw"), st.one_of(st.sampled_from([PLAIN_TOKEN, b"\x01", VALID_FIRST]), st.binary(max_size=30))),
    st.tuples(st.just("wait"), st.integers(0, 3_000)),
)
conversation = st.one_of(st.sampled_from(LOGINS), st.lists(single_step, min_size=1, max_size=3))


@SETTINGS
@given(conversations=st.lists(conversation, max_size=6))
def test_session_obeyed_by_its_connection_never_breaks(conversations):
    session = SaslSession(session_config())
    now = NOW_MS
    closed = False
    steps = [step for part in conversations for step in part]
    for step in steps:
        if closed:
            break
        kind = step[0]
        if kind == "wait":
            now += step[1]
            continue
        payload = step[-1]
        was_failed = session.state is SaslState.FAILED
        if session.expects_raw_token:
            token = payload if isinstance(payload, bytes) else b""
            closed = session.raw_token(token, now).close
        elif kind == "request":
            _, api_key, version, payload = step
            admission = session.admit(api_key, version, now)
            if was_failed:
                assert admission.action is Action.CLOSE
            if admission.action is Action.HANDSHAKE:
                mechanism = payload if isinstance(payload, str) else "PLAIN"
                closed = session.handshake(version, mechanism, now).close
            elif admission.action is Action.AUTHENTICATE:
                token = payload if isinstance(payload, bytes) else b""
                closed = session.authenticate(version, token, now).close
            elif admission.action in (Action.CLOSE, Action.REFUSE):
                closed = True
        if session.principal is not None:
            assert session.principal == "User:alice"
        if session.state is SaslState.COMPLETE:
            assert session.principal == "User:alice" and session.receive_limit_bytes is None
        else:
            assert session.receive_limit_bytes == 524288
    event(f"ended {session.state.value}, {'with' if session.principal else 'without'} a principal")

"""SASL listener settings from server.properties, and the frame steps a SASL connection takes (broker/net/sasl_listener.py)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import ConfigError, load_config
from broker.net.sasl_listener import sasl_listener, sasl_listeners, sasl_step
from broker.security.sasl import SaslState
from protocol.errors import ErrorCode
from protocol.framing import decode_response, encode_request
from protocol.primitives import INT32
from protocol.registry import APIS_BY_NAME
from protocol.scram import ScramMechanism, credential_from_password

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="b0b";'
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
HANDSHAKE, AUTHENTICATE, API_VERSIONS = APIS_BY_NAME["SaslHandshake"], APIS_BY_NAME["SaslAuthenticate"], APIS_BY_NAME["ApiVersions"]
METADATA, PRODUCE, FIND_COORDINATOR = APIS_BY_NAME["Metadata"], APIS_BY_NAME["Produce"], APIS_BY_NAME["FindCoordinator"]
NOW_MS = 1_700_000_000_000


def load(extra: dict[str, str], warnings: list | None = None):
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9092", "log.dirs": "/tmp/unused"}
    return load_config(base | extra, warn=(warnings.append if warnings is not None else None))


def listener(extra: dict[str, str], credentials=None, name="SASL_PLAINTEXT"):
    return sasl_listener(load(extra), name, lambda: credentials or {})


PLAIN_ONLY = {"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}


# --------------------------------------------------------------------------- settings


def test_defaults_are_kafkas():
    config = load(PLAIN_ONLY)
    assert config["connections.max.reauth.ms"] == 0
    assert config["sasl.server.max.receive.size"] == 524288
    assert config["connection.failed.authentication.delay.ms"] == 100
    settings_ = listener(PLAIN_ONLY)
    assert list(settings_.server_config.mechanisms) == ["PLAIN"]
    assert settings_.failed_authentication_delay_ms == 100
    assert settings_.server_config.max_receive_bytes == 524288
    assert settings_.max_frame_bytes == config["socket.request.max.bytes"]


@pytest.mark.parametrize("mechanisms", ["GSSAPI", "PLAIN,GSSAPI"])
def test_gssapi_kafkas_default_is_refused_in_one_line(mechanisms):
    extra = {} if mechanisms == "GSSAPI" else {"sasl.enabled.mechanisms": mechanisms}
    with pytest.raises(ConfigError) as error:
        listener(extra | {"listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS})
    assert "GSSAPI (Kerberos, Kafka's default) is not supported on listener SASL_PLAINTEXT" in str(error.value)
    assert str(error.value).startswith("sasl.enabled.mechanisms:") and "\n" not in str(error.value)


def test_unknown_and_empty_mechanism_lists_are_refused():
    with pytest.raises(ConfigError, match="'DIGEST-MD5' is not supported"):
        listener({"sasl.enabled.mechanisms": "DIGEST-MD5"})
    with pytest.raises(ConfigError, match="needs a mechanism"):
        listener({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": " , "})


def test_the_listener_list_wins_over_the_global_one():
    settings_ = listener({"sasl.enabled.mechanisms": "GSSAPI", "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256"})
    assert list(settings_.server_config.mechanisms) == ["SCRAM-SHA-512", "SCRAM-SHA-256"]


def test_plain_needs_its_jaas_entry_and_errors_never_show_passwords():
    with pytest.raises(ConfigError, match=r"listener\.name\.sasl_plaintext\.plain\.sasl\.jaas\.config: required for PLAIN"):
        listener({"sasl.enabled.mechanisms": "PLAIN"})
    broken = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="s3cret'
    with pytest.raises(ConfigError) as error:
        listener({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": broken})
    assert "s3cret" not in str(error.value)
    wrong_module = f'{OAUTH_MODULE} required user_alice="s3cret";'
    with pytest.raises(ConfigError) as error:
        listener({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": wrong_module})
    assert "PlainLoginModule" in str(error.value) and "s3cret" not in str(error.value)


def test_jaas_and_listener_keys_stay_out_of_the_described_values():
    config = load(PLAIN_ONLY)
    assert "alice-secret" not in repr(config.values)
    assert config.sasl == {"listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}


def test_unprefixed_jaas_and_keys_naming_no_listener_warn():
    warnings: list[str] = []
    load(PLAIN_ONLY | {"sasl.jaas.config": PLAIN_JAAS, "listener.name.other.plain.sasl.jaas.config": PLAIN_JAAS}, warnings)
    assert any("sasl.jaas.config: a broker reads JAAS entries per listener" in w for w in warnings)
    assert any("listener.name.other.plain.sasl.jaas.config names no listener" in w for w in warnings)
    assert not any("alice-secret" in w for w in warnings)


def test_reauth_per_mechanism_and_oauthbearer_options():
    settings_ = listener(
        {
            "sasl.enabled.mechanisms": "OAUTHBEARER,SCRAM-SHA-256",
            "connections.max.reauth.ms": "60000",
            "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms": "5000",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f'{OAUTH_MODULE} required unsecuredValidatorPrincipalClaimName="user";',
        }
    )
    assert settings_.server_config.max_reauth_ms("OAUTHBEARER") == 5000
    assert settings_.server_config.max_reauth_ms("SCRAM-SHA-256") == 60000
    exchange = settings_.server_config.mechanisms["OAUTHBEARER"]()
    assert exchange._validator.principal_claim_name == "user"
    with pytest.raises(ConfigError, match="expected an integer"):
        listener({"sasl.enabled.mechanisms": "SCRAM-SHA-256", "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "soon"})
    with pytest.raises(ConfigError, match="takes .*OAuthBearerLoginModule"):
        listener({"sasl.enabled.mechanisms": "OAUTHBEARER", "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": PLAIN_JAAS})


def test_only_sasl_listeners_get_settings():
    config = load(
        PLAIN_ONLY
        | {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        }
    )
    assert sorted(sasl_listeners(config, dict)) == ["SASL_PLAINTEXT", "SASL_SSL"]


# --------------------------------------------------------------------------- frames


def request(api, version, body_fields: dict, correlation_id=7) -> bytes:
    frame = encode_request(api, version, correlation_id, "test", api.request.cls(**body_fields))
    return frame[4:]  # the receiver hands out frames without their size prefix


def response(api, version, step):
    assert step.response is not None
    correlation_id, body = decode_response(api, version, step.response[4:])
    assert correlation_id == 7
    return body


def session_for(extra=PLAIN_ONLY, credentials=None):
    return listener(extra, credentials).new_session()


def handshake(session, mechanism="PLAIN", version=1):
    step = sasl_step(session, request(HANDSHAKE, version, {"mechanism": mechanism}), NOW_MS)
    return step, response(HANDSHAKE, version, step)


def authenticate(session, token: bytes, version=2):
    step = sasl_step(session, request(AUTHENTICATE, version, {"auth_bytes": token}), NOW_MS)
    return step, response(AUTHENTICATE, version, step)


def test_plain_over_v1_then_requests_are_dispatched():
    session = session_for()
    assert sasl_step(session, request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}), NOW_MS).dispatch
    step, body = handshake(session)
    assert body.error_code == ErrorCode.NONE and body.mechanisms == ["PLAIN"] and not step.close
    step, body = authenticate(session, b"\x00alice\x00alice-secret")
    assert body.error_code == ErrorCode.NONE and step.authenticated and not step.close
    assert session.principal == "User:alice"
    assert sasl_step(session, request(METADATA, 12, {"topics": None}), NOW_MS).dispatch
    # Once authenticated, SASL requests go to the broker's handlers (ILLEGAL_SASL_STATE there).
    assert sasl_step(session, request(AUTHENTICATE, 2, {"auth_bytes": b""}), NOW_MS).response is not None


def test_wrong_password_fails_with_kafkas_error_and_closes_after_the_delay():
    session = session_for()
    handshake(session)
    step, body = authenticate(session, b"\x00alice\x00Xy9-not-it")
    assert body.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert body.error_message == "Authentication failed: Invalid username or password"
    assert step.close and step.failed_authentication and "Xy9-not-it" not in (step.reason or "")
    assert session.principal is None


def test_unknown_mechanism_answers_the_enabled_list_and_closes():
    session = session_for()
    step, body = handshake(session, "SCRAM-SHA-256")
    assert body.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and body.mechanisms == ["PLAIN"]
    assert step.close and step.failed_authentication


def test_requests_before_authentication_close_the_connection():
    session = session_for()
    step = sasl_step(session, request(METADATA, 12, {"topics": None}), NOW_MS)
    assert step.close and step.response is None and not step.dispatch
    # SaslAuthenticate before any handshake is no exception.
    session = session_for()
    step = sasl_step(session, request(AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00alice-secret"}), NOW_MS)
    assert step.close and not step.dispatch and session.state is SaslState.FAILED


def test_another_request_during_the_exchange_is_refused_with_its_own_error():
    session = session_for()
    handshake(session)
    step = sasl_step(session, request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}), NOW_MS)
    assert step.close and step.failed_authentication
    assert response(FIND_COORDINATOR, 3, step).error_code == ErrorCode.ILLEGAL_SASL_STATE
    # A request whose response has no top-level error code is closed without an answer.
    session = session_for()
    handshake(session)
    step = sasl_step(session, request(METADATA, 12, {"topics": None}), NOW_MS)
    assert step.close and step.response is None


def test_v0_handshake_then_bare_tokens():
    session = session_for()
    handshake(session, version=0)
    assert session.expects_raw_token
    step = sasl_step(session, b"\x00alice\x00alice-secret", NOW_MS)
    assert step.response == INT32.pack(0) and step.authenticated and not step.close
    session = session_for()
    handshake(session, version=0)
    step = sasl_step(session, b"\x00alice\x00nope", NOW_MS)
    assert step.response is None and step.close and step.failed_authentication


def test_scram_reads_the_credentials_at_each_exchange():
    credentials: dict = {}
    settings_ = listener({"sasl.enabled.mechanisms": "SCRAM-SHA-256"}, credentials)
    server = settings_.server_config.mechanisms["SCRAM-SHA-256"]()
    assert server._credentials("carol") is None
    credential = credential_from_password(ScramMechanism.SCRAM_SHA_256, "pw", salt=b"salt", iterations=4096)
    credentials[("carol", ScramMechanism.SCRAM_SHA_256.type_code)] = credential
    assert server._credentials("carol") is credential
    assert settings_.server_config.mechanisms["SCRAM-SHA-256"]()._credentials("carol") is credential


def unsecured_jwt(claims: dict) -> bytes:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}.".encode()


def test_oauthbearer_session_lifetime_is_the_tokens():
    session = session_for({"sasl.enabled.mechanisms": "OAUTHBEARER"})
    handshake(session, "OAUTHBEARER")
    token = unsecured_jwt({"sub": "alice", "exp": (NOW_MS + 30_000) / 1000, "iat": NOW_MS / 1000})
    step, body = authenticate(session, b"n,,\x01auth=Bearer " + token + b"\x01\x01", version=1)
    assert body.error_code == ErrorCode.NONE and body.session_lifetime_ms == 30_000 and step.authenticated
    # After the session's end the next request closes the connection.
    later = sasl_step(session, request(METADATA, 12, {"topics": None}), NOW_MS + 31_000)
    assert later.close and not later.dispatch


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_frames_never_raise_and_never_authenticate(frame):
    session = session_for()
    step = sasl_step(session, frame, NOW_MS)
    assert not step.authenticated and session.principal is None
    if not step.dispatch:
        assert step.close or step.response is not None


def test_frame_decoding_the_declared_apis():
    assert APIS_BY_NAME["SaslHandshake"] is HANDSHAKE and PRODUCE.key == 0

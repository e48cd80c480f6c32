"""broker/security/sasl.py: one connection's SASL state, driven request by request as Kafka's clients drive it."""

from __future__ import annotations

import base64
import json

import pytest

from broker.security.oauthbearer_server import OAuthBearerServer, UnsecuredJwsValidator
from broker.security.plain_server import PlainServer, PlainUsers
from broker.security.sasl import (
    API_VERSIONS_KEY,
    AUTHENTICATE_AFTER_SUCCESS_MESSAGE,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    Action,
    SaslServerConfig,
    SaslSession,
    SaslState,
    SaslStateError,
)
from broker.security.scram_server import DelegationTokenCredential, ScramServer, new_salt
from protocol import scram
from protocol.errors import ErrorCode
from protocol.scram import ScramMechanism
from tests.unit.test_scram_server import ScramClient

METADATA_KEY, PRODUCE_KEY = 3, 0
NOW = 1_700_000_000_000
SHA256 = ScramMechanism.SCRAM_SHA_256

PLAIN_USERS = PlainUsers({"alice": "alice-secret", "bob": "bob-secret"})
SCRAM_CREDENTIALS = {
    user: scram.credential_from_password(SHA256, password, new_salt(), 4096)
    for user, password in {"alice": "alice-secret", "bob": "bob-secret"}.items()
}
TOKEN_CREDENTIAL = scram.credential_from_password(SHA256, "token-hmac", new_salt(), 4096)
TOKENS = {"tok1": DelegationTokenCredential("alice", TOKEN_CREDENTIAL, NOW + 30_000)}


def config(**options) -> SaslServerConfig:
    mechanisms = {
        "PLAIN": lambda: PlainServer(PLAIN_USERS),
        "SCRAM-SHA-256": lambda: ScramServer(SHA256, SCRAM_CREDENTIALS.get, tokens=TOKENS.get),
        "OAUTHBEARER": lambda: OAuthBearerServer(UnsecuredJwsValidator()),
    }
    return SaslServerConfig(mechanisms=mechanisms, **options)


def plain(user="alice", password=None) -> bytes:
    return f"\x00{user}\x00{password or user + '-secret'}".encode()


def jwt(sub="alice", exp_s=None) -> str:
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'exp': exp_s or NOW // 1000 + 3600})}."


def oauth(sub="alice", exp_s=None) -> bytes:
    return f"n,,\x01auth=Bearer {jwt(sub, exp_s)}\x01\x01".encode()


def handshake(session, mechanism, now=NOW, version=1):
    assert session.admit(SASL_HANDSHAKE_KEY, version, now).action is Action.HANDSHAKE
    return session.handshake(version, mechanism, now)


def authenticate(session, token, now=NOW, version=2):
    assert session.admit(SASL_AUTHENTICATE_KEY, version, now).action is Action.AUTHENTICATE
    return session.authenticate(version, token, now)


def login_plain(session, user="alice", now=NOW):
    reply = handshake(session, "PLAIN", now)
    assert reply.error is ErrorCode.NONE
    return authenticate(session, plain(user), now)


def login_scram(session, user="alice", password=None, now=NOW, **client_options):
    client = ScramClient(SHA256, user, password or user + "-secret", **client_options)
    assert handshake(session, "SCRAM-SHA-256", now).error is ErrorCode.NONE
    first = authenticate(session, client.first(), now)
    assert first.error is ErrorCode.NONE and first.session_lifetime_ms == 0 and not session.authenticated
    return authenticate(session, client.final(first.auth_bytes), now)


# ------------------------------------------------------------------ first authentication


def test_api_versions_handshake_authenticate_then_requests_flow():
    session = SaslSession(config())
    assert session.admit(API_VERSIONS_KEY, 3, NOW).action is Action.DISPATCH
    assert session.state is SaslState.HANDSHAKE
    reply = handshake(session, "PLAIN")
    assert reply.error is ErrorCode.NONE and reply.mechanisms == ("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER")
    assert not reply.close and not session.expects_raw_token
    done = authenticate(session, plain())
    assert (done.error, done.error_message, done.auth_bytes, done.session_lifetime_ms) == (ErrorCode.NONE, None, b"", 0)
    assert session.authenticated and session.principal == "User:alice" and session.session_expiry_ms is None
    for key in (METADATA_KEY, PRODUCE_KEY, API_VERSIONS_KEY):
        assert session.admit(key, 0, NOW + 10**9).action is Action.DISPATCH


def test_handshake_may_come_first():
    session = SaslSession(config())
    assert login_scram(session).error is ErrorCode.NONE
    assert session.principal == "User:alice" and session.authenticated_mechanism == "SCRAM-SHA-256"


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes():
    session = SaslSession(config())
    reply = handshake(session, "GSSAPI")
    assert reply.error is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert reply.mechanisms == ("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER")
    assert reply.close and reply.failed_authentication and "GSSAPI" in reply.reason
    assert session.state is SaslState.FAILED
    assert session.admit(API_VERSIONS_KEY, 0, NOW).action is Action.CLOSE


def test_mechanism_names_match_exactly():
    assert handshake(SaslSession(config()), "plain").error is ErrorCode.UNSUPPORTED_SASL_MECHANISM


@pytest.mark.parametrize("api_key", [METADATA_KEY, PRODUCE_KEY, SASL_AUTHENTICATE_KEY, 9999])
def test_other_requests_before_the_handshake_close_without_an_answer(api_key):
    session = SaslSession(config())
    admission = session.admit(api_key, 0, NOW)
    assert admission.action is Action.CLOSE and admission.error is ErrorCode.ILLEGAL_SASL_STATE
    assert "during SASL handshake" in admission.reason
    assert session.state is SaslState.FAILED and session.principal is None


def test_a_second_api_versions_closes():
    session = SaslSession(config())
    session.admit(API_VERSIONS_KEY, 3, NOW)
    assert session.admit(API_VERSIONS_KEY, 3, NOW).action is Action.CLOSE


def test_api_versions_of_an_unsupported_version_may_be_retried():
    session = SaslSession(config())
    assert session.admit(API_VERSIONS_KEY, 99, NOW).action is Action.DISPATCH  # answered UNSUPPORTED_VERSION
    assert session.state is SaslState.INITIAL
    assert session.admit(API_VERSIONS_KEY, 0, NOW).action is Action.DISPATCH
    assert session.state is SaslState.HANDSHAKE
    assert login_plain(session).error is ErrorCode.NONE


@pytest.mark.parametrize("version", [2, -1])
def test_unsupported_handshake_versions_close(version):
    session = SaslSession(config())
    assert session.admit(SASL_HANDSHAKE_KEY, version, NOW).action is Action.CLOSE


def test_a_request_other_than_sasl_authenticate_during_the_exchange_is_refused_and_closes():
    session = SaslSession(config())
    handshake(session, "SCRAM-SHA-256")
    admission = session.admit(METADATA_KEY, 12, NOW)
    assert admission.action is Action.REFUSE and admission.error is ErrorCode.ILLEGAL_SASL_STATE
    assert admission.failed_authentication and "during SASL authentication" in admission.reason
    assert session.admit(SASL_AUTHENTICATE_KEY, 2, NOW).action is Action.CLOSE


def test_a_second_handshake_during_the_exchange_is_refused():
    session = SaslSession(config())
    handshake(session, "PLAIN")
    assert session.admit(SASL_HANDSHAKE_KEY, 1, NOW).action is Action.REFUSE


def test_unsupported_authenticate_version_closes():
    session = SaslSession(config())
    handshake(session, "PLAIN")
    assert session.admit(SASL_AUTHENTICATE_KEY, 3, NOW).action is Action.CLOSE


def test_wrong_scram_password_fails_with_kafkas_generic_message_and_closes():
    session = SaslSession(config())
    reply = login_scram(session, password="wrong")
    assert reply.error is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert reply.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )
    assert reply.close and reply.failed_authentication and reply.auth_bytes == b""
    assert "wrong" in reply.reason and session.principal is None and session.state is SaslState.FAILED


def test_unknown_scram_user_reads_exactly_as_a_wrong_password():
    replies = [login_scram(SaslSession(config()), user, "x") for user in ("alice", "mallory")]
    assert [(r.error, r.error_message, r.close) for r in replies[:1]] == [(r.error, r.error_message, r.close) for r in replies[1:]]


def test_plain_failure_carries_plains_message():
    session = SaslSession(config())
    handshake(session, "PLAIN")
    reply = authenticate(session, plain(password="nope"))
    assert reply.error is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert reply.error_message == "Authentication failed: Invalid username or password"


def test_oauthbearer_refusal_goes_through_the_json_challenge():
    session = SaslSession(config())
    handshake(session, "OAUTHBEARER")
    challenge = authenticate(session, oauth(exp_s=NOW // 1000 - 5))
    assert challenge.error is ErrorCode.NONE and json.loads(challenge.auth_bytes) == {"status": "invalid_token"}
    failure = authenticate(session, b"\x01")
    assert failure.error is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failure.error_message == '{"status":"invalid_token"}' and failure.close


def test_sasl_authenticate_after_success_is_answered_illegal_state_and_the_connection_stays():
    session = SaslSession(config())
    login_plain(session)
    reply = authenticate(session, plain())
    assert reply.error is ErrorCode.ILLEGAL_SASL_STATE and reply.error_message == AUTHENTICATE_AFTER_SUCCESS_MESSAGE
    assert not reply.close and session.authenticated


def test_a_handshake_without_a_session_lifetime_is_answered_illegal_state():
    session = SaslSession(config())
    login_plain(session)
    reply = handshake(session, "PLAIN")
    assert reply.error is ErrorCode.ILLEGAL_SASL_STATE and reply.mechanisms == () and not reply.close
    assert session.authenticated and session.principal == "User:alice"


def test_receive_limit_applies_until_authenticated():
    session = SaslSession(config(max_receive_bytes=1000))
    assert session.receive_limit_bytes == 1000
    login_plain(session)
    assert session.receive_limit_bytes is None
    other = SaslSession(config(max_receive_bytes=1000))
    admission = other.frame_too_large(5000)
    assert admission.action is Action.CLOSE and admission.failed_authentication and "5000" in admission.reason
    assert other.state is SaslState.FAILED


def test_client_supports_reauthentication_from_authenticate_v1():
    session = SaslSession(config())
    handshake(session, "PLAIN")
    authenticate(session, plain(), version=0)
    assert not session.client_supports_reauthentication
    session = SaslSession(config())
    handshake(session, "PLAIN")
    authenticate(session, plain(), version=1)
    assert session.client_supports_reauthentication


# ------------------------------------------------------------------ the v0 handshake: raw tokens


def test_v0_handshake_then_raw_plain_token():
    session = SaslSession(config())
    reply = handshake(session, "PLAIN", version=0)
    assert reply.error is ErrorCode.NONE and session.expects_raw_token
    with pytest.raises(SaslStateError):
        session.admit(SASL_AUTHENTICATE_KEY, 0, NOW)  # the connection must not parse a header now
    answer = session.raw_token(plain(), NOW)
    assert answer.token == b"" and not answer.close  # Kafka sends the empty token, size-prefixed
    assert session.authenticated and not session.expects_raw_token and session.principal == "User:alice"
    assert session.admit(METADATA_KEY, 1, NOW).action is Action.DISPATCH


def test_v0_handshake_then_raw_scram_tokens():
    session = SaslSession(config())
    handshake(session, "SCRAM-SHA-256", version=0)
    client = ScramClient(SHA256, "bob", "bob-secret")
    server_first = session.raw_token(client.first(), NOW)
    assert session.expects_raw_token and server_first.token.startswith(b"r=")
    server_final = session.raw_token(client.final(server_first.token), NOW)
    client.check_server_final(server_final.token)
    assert session.principal == "User:bob"


def test_raw_token_failure_closes_without_an_answer():
    session = SaslSession(config())
    handshake(session, "PLAIN", version=0)
    answer = session.raw_token(plain(password="bad"), NOW)
    assert answer.token is None and answer.close and answer.failed_authentication
    with pytest.raises(SaslStateError):
        session.raw_token(plain(), NOW)


# ------------------------------------------------------------------ session lifetime


def test_lifetime_from_connections_max_reauth_ms():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    reply = login_plain(session)
    assert reply.session_lifetime_ms == 60_000 and session.session_expiry_ms == NOW + 60_000


def test_per_mechanism_lifetime_overrides_the_listeners():
    options = {"connections_max_reauth_ms": 60_000, "max_reauth_ms_by_mechanism": {"PLAIN": 5_000}}
    assert login_plain(SaslSession(config(**options))).session_lifetime_ms == 5_000
    assert login_scram(SaslSession(config(**options))).session_lifetime_ms == 60_000


@pytest.mark.parametrize(
    "max_reauth_ms, expected",
    [(0, 3_600_000), (60_000, 60_000), (10 * 3_600_000, 3_600_000)],
)
def test_oauth_token_expiry_bounds_the_lifetime(max_reauth_ms, expected):
    session = SaslSession(config(connections_max_reauth_ms=max_reauth_ms))
    handshake(session, "OAUTHBEARER")
    reply = authenticate(session, oauth())
    assert reply.error is ErrorCode.NONE and reply.session_lifetime_ms == expected


def test_delegation_token_login_is_its_owner_until_the_token_expires():
    session = SaslSession(config())
    reply = login_scram(session, "tok1", "token-hmac", extensions=",tokenauth=true")
    assert reply.error is ErrorCode.NONE and reply.session_lifetime_ms == 30_000
    assert session.principal == "User:alice" and session.token_authenticated


def test_requests_after_the_session_expired_close_the_connection():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session)
    assert session.admit(METADATA_KEY, 12, NOW + 60_000).action is Action.DISPATCH  # not after it yet
    admission = session.admit(METADATA_KEY, 12, NOW + 60_001)
    assert admission.action is Action.CLOSE and "expired" in admission.reason
    assert session.state is SaslState.FAILED


def test_a_session_without_lifetime_never_expires():
    session = SaslSession(config())
    login_plain(session)
    assert not session.expired(NOW + 10**12)


# ------------------------------------------------------------------ re-authentication (KIP-368)


def test_reauthentication_with_the_same_principal_renews_the_session():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_scram(session)
    later = NOW + 50_000
    reply = login_scram(session, now=later)
    assert reply.error is ErrorCode.NONE and reply.session_lifetime_ms == 60_000
    assert session.session_expiry_ms == later + 60_000 and session.principal == "User:alice"
    assert session.admit(METADATA_KEY, 12, NOW + 70_000).action is Action.DISPATCH


def test_an_expired_session_may_still_reauthenticate():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session)
    reply = login_plain(session, now=NOW + 120_000)
    assert reply.error is ErrorCode.NONE and session.authenticated


def test_during_reauthentication_only_its_frames_pass():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session)
    handshake(session, "PLAIN", now=NOW + 5_000)
    assert session.principal == "User:alice" and not session.authenticated
    assert session.admit(METADATA_KEY, 12, NOW + 5_000).action is Action.REFUSE


def test_reauthentication_as_another_principal_fails_and_closes():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session, "alice")
    reply = login_plain(session, "bob", now=NOW + 5_000)
    assert reply.error is ErrorCode.SASL_AUTHENTICATION_FAILED and reply.close
    assert reply.error_message == "Cannot change principals during re-authentication from User.alice: User.bob"
    assert session.state is SaslState.FAILED


def test_reauthentication_failure_says_re_authentication():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_scram(session)
    reply = login_scram(session, password="wrong", now=NOW + 5_000)
    assert reply.error_message == (
        "Authentication failed during re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )


def test_reauthentication_with_another_enabled_mechanism_fails_at_the_next_frame():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session)
    reply = handshake(session, "SCRAM-SHA-256", now=NOW + 5_000)
    assert reply.error is ErrorCode.NONE and not reply.close  # as Kafka answers it
    admission = session.admit(SASL_AUTHENTICATE_KEY, 2, NOW + 5_000)
    assert admission.action is Action.CLOSE and admission.failed_authentication
    assert admission.reason == (
        "SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for re-authentication of mechanism 'PLAIN'"
    )


def test_reauthentication_with_a_disabled_mechanism_is_unsupported():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session)
    reply = handshake(session, "GSSAPI", now=NOW + 5_000)
    assert reply.error is ErrorCode.UNSUPPORTED_SASL_MECHANISM and reply.close


def test_at_most_one_reauthentication_start_per_second():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session)
    login_plain(session, now=NOW + 10_000)
    too_soon = handshake(session, "PLAIN", now=NOW + 10_999)
    assert too_soon.error is ErrorCode.ILLEGAL_SASL_STATE and not too_soon.close and session.authenticated
    assert login_plain(session, now=NOW + 11_000).error is ErrorCode.NONE


def test_a_handshake_too_soon_after_expiry_closes():
    session = SaslSession(config(connections_max_reauth_ms=500))
    login_plain(session)
    login_plain(session, now=NOW + 100)  # expires at NOW + 600
    assert session.admit(SASL_HANDSHAKE_KEY, 1, NOW + 700).action is Action.CLOSE


def test_reauthentication_over_raw_tokens():
    session = SaslSession(config(connections_max_reauth_ms=60_000))
    login_plain(session)
    handshake(session, "PLAIN", now=NOW + 5_000, version=0)
    assert session.raw_token(plain(), NOW + 5_000).token == b""
    assert session.session_expiry_ms == NOW + 65_000


# ------------------------------------------------------------------ contract


def test_out_of_turn_calls_are_our_bugs():
    session = SaslSession(config())
    with pytest.raises(SaslStateError):
        session.authenticate(2, plain(), NOW)
    with pytest.raises(SaslStateError):
        session.raw_token(plain(), NOW)
    handshake(session, "PLAIN")
    with pytest.raises(SaslStateError):
        session.handshake(1, "PLAIN", NOW)


def test_a_listener_needs_a_mechanism():
    with pytest.raises(ValueError, match="No SASL mechanisms"):
        SaslServerConfig(mechanisms={})
    with pytest.raises(ValueError):
        config(max_receive_bytes=0)

"""broker/security/oauthbearer_server.py: RFC 7628 messages and Kafka's unsecured-JWS validator."""

from __future__ import annotations

import base64
import json

import pytest

from broker.security.mechanism import SaslAuthenticationError
from broker.security.oauthbearer_server import (
    MESSAGE_BYTES_MAX,
    OAuthBearerServer,
    OAuthBearerState,
    OAuthBearerToken,
    TokenValidationError,
    UnsecuredJwsValidator,
    parse_client_initial_response,
)

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"


def b64url(value) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jws(claims, header=None, signature="") -> str:
    return f"{b64url(header if header is not None else {'alg': 'none'})}.{b64url(claims)}.{signature}"


def token(**claims) -> str:
    return jws({"sub": "alice", "exp": NOW_S + 3600, "iat": NOW_S, **claims})


NONE_HEADER = b64url({"alg": "none"})


def initial(token_value: str, *, authzid: str = "", extensions: str = "") -> bytes:
    gs2 = f"n,{'a=' + authzid if authzid else ''},"
    return f"{gs2}\x01auth=Bearer {token_value}{extensions}\x01\x01".encode()


def run(message: bytes, validator=None, now_ms=NOW_MS):
    server = OAuthBearerServer(validator or UnsecuredJwsValidator())
    return server, server.evaluate(message, now_ms)


def refused(message: bytes, validator=None, now_ms=NOW_MS) -> tuple[dict, SaslAuthenticationError]:
    """Kafka's two steps for a refused token: a JSON challenge, 0x01 back, then the failure."""
    server, challenge = run(message, validator, now_ms)
    assert server.state is OAuthBearerState.ERROR_SENT and not server.complete
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(b"\x01", now_ms)
    assert str(caught.value) == challenge.decode()
    assert server.state is OAuthBearerState.FAILED
    return json.loads(challenge), caught.value


def test_a_valid_unsecured_token_authenticates():
    server, challenge = run(initial(token()))
    assert challenge == b"" and server.complete
    assert server.authorization_id == "alice"
    assert server.credential_expiry_ms == (NOW_S + 3600) * 1000
    assert server.token == OAuthBearerToken(
        value=token(),
        principal_name="alice",
        lifetime_ms=(NOW_S + 3600) * 1000,
        start_time_ms=NOW_S * 1000,
        claims={"sub": "alice", "exp": NOW_S + 3600, "iat": NOW_S},
    )


def test_kafka_python_oauth_mechanism_authenticates():
    oauth = pytest.importorskip("kafka.net.sasl.oauth")

    class Provider(oauth.AbstractTokenProvider):
        def token(self):
            return token()

        def extensions(self):
            return {"traceId": "abc 123"}

    mechanism = oauth.SaslMechanismOAuth(sasl_oauth_token_provider=Provider())
    server = OAuthBearerServer(UnsecuredJwsValidator())
    mechanism.receive(server.evaluate(mechanism.auth_bytes(), NOW_MS))
    assert mechanism.is_authenticated() and server.authorization_id == "alice"
    assert server.extensions == {"traceId": "abc 123"}


def test_authzid_equal_to_the_principal_and_extensions():
    server, _ = run(initial(token(), authzid="alice", extensions="\x01ext=v1\x01other=a b"))
    assert server.authorization_id == "alice"
    assert server.extensions == {"ext": "v1", "other": "a b"}


def test_authzid_of_another_principal_is_refused_with_kafkas_message():
    server = OAuthBearerServer(UnsecuredJwsValidator())
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(initial(token(), authzid="bob"), NOW_MS)
    assert str(caught.value) == (
        "Authentication failed: Client requested an authorization id (bob) that is different from "
        "the token's principal name (alice)"
    )


@pytest.mark.parametrize(
    "claims, header, signature",
    [
        ({"sub": "alice", "exp": NOW_S - 1}, None, ""),  # expired
        ({"sub": "alice", "exp": NOW_S}, None, ""),  # expiring now counts as expired
        ({"exp": NOW_S + 60}, None, ""),  # no sub
        ({"sub": "  ", "exp": NOW_S + 60}, None, ""),  # blank sub
        ({"sub": 7, "exp": NOW_S + 60}, None, ""),  # sub not a string
        ({"sub": "alice"}, None, ""),  # no exp
        ({"sub": "alice", "exp": "soon"}, None, ""),
        ({"sub": "alice", "exp": True}, None, ""),
        ({"sub": "alice", "exp": 1e300}, None, ""),
        ({"sub": "alice", "exp": NOW_S + 60, "iat": NOW_S + 30}, None, ""),  # issued in the future
        ({"sub": "alice", "exp": NOW_S + 60, "iat": "x"}, None, ""),
        ({"sub": "alice", "exp": NOW_S + 60, "scope": 5}, None, ""),
        ({"sub": "alice", "exp": NOW_S + 60, "scope": ["a", 1]}, None, ""),
        ({"sub": "alice", "exp": NOW_S + 60}, {"alg": "HS256", "typ": "JWT"}, ""),  # signed: refused
        ({"sub": "alice", "exp": NOW_S + 60}, {"alg": "HS256"}, "c2lnbmF0dXJl"),
        ({"sub": "alice", "exp": NOW_S + 60}, {"alg": "none"}, "c2lnbmF0dXJl"),  # none, yet a signature
        ({"sub": "alice", "exp": NOW_S + 60}, {}, ""),  # no alg
        ({"sub": "alice", "exp": NOW_S + 60}, {"alg": None}, ""),
        (["not", "an", "object"], None, ""),
    ],
)
def test_invalid_tokens_get_the_invalid_token_challenge(claims, header, signature):
    challenge, error = refused(initial(jws(claims, header, signature)))
    assert challenge == {"status": "invalid_token"}
    assert error.reason.startswith("token refused: ")


@pytest.mark.parametrize(
    "token_value",
    [
        "abc",  # not three parts
        "a.b",
        "a.b.c.d",
        "a..b",
        "!!!.e30.",  # not base64url
        "e30.bm90IGpzb24.",  # "not json"
        "e30.e30",  # two parts
        "eyJhbGciOiJub25lIn0.x.",  # base64 of bad length
        "eyJhbGciOiJub25lIn0.//8.",  # '/' is not base64url
        NONE_HEADER + "." + b64url(b'{"sub": "alice", "exp": NaN}') + ".",
        NONE_HEADER + "." + b64url(b"[" * 40000) + ".",  # deep nesting
        NONE_HEADER + "." + b64url(b"{" * 5000) + ".",
        NONE_HEADER + "." + b64url(b'{"exp": 1' + b"0" * 5000 + b"}") + ".",  # past int's digit limit
        NONE_HEADER + "." + b64url(bytes([0xFF, 0xFE])) + ".",
    ],
)
def test_malformed_tokens_are_invalid_tokens(token_value):
    if not all(c.isalnum() or c in "-_." for c in token_value):
        # Not even a token by RFC 6750's grammar: the message itself is malformed.
        server = OAuthBearerServer(UnsecuredJwsValidator())
        with pytest.raises(SaslAuthenticationError):
            server.evaluate(initial(token_value), NOW_MS)
        return
    challenge, _ = refused(initial(token_value))
    assert challenge == {"status": "invalid_token"}


def test_clock_skew_allows_a_just_expired_token_and_a_token_from_the_near_future():
    validator = UnsecuredJwsValidator(allowable_clock_skew_ms=5000)
    server, _ = run(initial(jws({"sub": "alice", "exp": NOW_S - 2})), validator)
    assert server.complete
    server, _ = run(initial(jws({"sub": "alice", "exp": NOW_S + 60, "iat": NOW_S + 4})), validator)
    assert server.complete
    refused(initial(jws({"sub": "alice", "exp": NOW_S - 6})), validator)
    refused(initial(jws({"sub": "alice", "exp": NOW_S + 60, "iat": NOW_S + 6})), validator)


def test_exp_must_follow_iat():
    refused(initial(jws({"sub": "alice", "exp": NOW_S + 10, "iat": NOW_S + 10})),
            UnsecuredJwsValidator(allowable_clock_skew_ms=60_000))


def test_required_scope():
    validator = UnsecuredJwsValidator(required_scope=("LOGIN_TO_KAFKA", "read"))
    server, _ = run(initial(token(scope=["read", " LOGIN_TO_KAFKA ", "x"])), validator)
    assert server.complete and server.token.scope == frozenset({"read", "LOGIN_TO_KAFKA", "x"})
    challenge, _ = refused(initial(token(scope="read")), validator)
    assert challenge == {"status": "insufficient_scope", "scope": "[LOGIN_TO_KAFKA, read]"}
    server, raw = run(initial(token()), validator)
    assert raw == b'{"status":"insufficient_scope", "scope":"[LOGIN_TO_KAFKA, read]"}'  # Kafka's layout


def test_validator_options_from_jaas():
    validator = UnsecuredJwsValidator.from_jaas_options({
        "unsecuredValidatorPrincipalClaimName": " user ",
        "unsecuredValidatorScopeClaimName": "scp",
        "unsecuredValidatorRequiredScope": "a b",
        "unsecuredValidatorAllowableClockSkewMs": "3000",
        "unsecuredLoginStringClaim_sub": "ignored",
    })
    assert validator.principal_claim_name == "user" and validator.scope_claim_name == "scp"
    assert validator.required_scope == ("a", "b") and validator.allowable_clock_skew_ms == 3000
    server, _ = run(initial(jws({"user": "carol", "exp": NOW_S + 60, "scp": ["a", "b"]})), validator)
    assert server.authorization_id == "carol"
    defaults = UnsecuredJwsValidator.from_jaas_options({})
    assert (defaults.principal_claim_name, defaults.scope_claim_name, defaults.required_scope) == ("sub", "scope", ())
    with pytest.raises(ValueError):
        UnsecuredJwsValidator.from_jaas_options({"unsecuredValidatorAllowableClockSkewMs": "-1"})
    with pytest.raises(ValueError):
        UnsecuredJwsValidator.from_jaas_options({"unsecuredValidatorAllowableClockSkewMs": "soon"})


def test_any_validator_callable_can_be_used():
    def signed_only(value: str, now_ms: int) -> OAuthBearerToken:
        if value != "good":
            raise TokenValidationError("bad signature", openid_configuration="https://idp/.well-known")
        return OAuthBearerToken(value=value, principal_name="svc", lifetime_ms=now_ms + 1000)

    server, _ = run(initial("good"), signed_only)
    assert server.authorization_id == "svc" and server.credential_expiry_ms == NOW_MS + 1000
    challenge, error = refused(initial("evil"), signed_only)
    assert challenge == {"status": "invalid_token", "openid-configuration": "https://idp/.well-known"}
    assert "bad signature" in error.reason


def test_anything_but_0x01_after_the_challenge_fails_generically():
    server, _ = run(initial(token(exp=NOW_S - 10)))
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(initial(token()), NOW_MS)  # a second try is not allowed
    assert str(caught.value) == GENERIC


BAD_MESSAGES = [
    b"",
    b"n,,",
    b"n,,\x01\x01",  # no auth
    b"y,,\x01auth=Bearer abc\x01\x01",
    b"p=x,,\x01auth=Bearer abc\x01\x01",
    b"n,a=,\x01auth=Bearer abc\x01\x01",
    b"n,a=x=y,\x01auth=Bearer abc\x01\x01",
    b"n\x01auth=Bearer abc\x01\x01",
    b"n,,auth=Bearer abc\x01\x01",
    b"n,,\x01auth=Bearer abc\x01",
    b"n,,\x01auth=Bearer abc",
    b"n,,\x01auth=Basic abc\x01\x01",
    b"n,,\x01auth=Bearer\x01\x01",
    b"n,,\x01auth=Bearerabc\x01\x01",
    b"n,,\x01auth=Bearer a+b\x01\x01",
    b"n,,\x01auth=Bearer abc\x01auth=Bearer abc\x01\x01",
    b"n,,\x01auth=Bearer abc\x01x\x01\x01",
    b"n,,\x01auth=Bearer abc\x01x=\x01\x01",
    b"n,,\x01auth=Bearer abc\x01x1=y\x01\x01",
    b"n,,\x01auth=Bearer abc\x01x=\x00\x01\x01",
    b"n,,\x01auth=Bearer abc\x01\x01\x01",
    b"n,,\x01auth=Bearer \xff\x01\x01",
    initial("a" * MESSAGE_BYTES_MAX),
]


@pytest.mark.parametrize("message", BAD_MESSAGES)
def test_malformed_client_messages_fail_generically(message):
    server = OAuthBearerServer(UnsecuredJwsValidator())
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(message, NOW_MS)
    assert str(caught.value) == GENERIC
    assert server.state is OAuthBearerState.FAILED
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(initial(token()), NOW_MS)


def test_every_truncation_of_a_valid_message_fails():
    whole = initial(token(), extensions="\x01ext=v")
    for end in range(len(whole)):
        server = OAuthBearerServer(UnsecuredJwsValidator())
        try:
            server.evaluate(whole[:end], NOW_MS)
        except SaslAuthenticationError:
            continue
        # A shorter token is still a token, but not a valid JWS.
        assert server.state is OAuthBearerState.ERROR_SENT


def test_bearer_scheme_is_case_insensitive():
    parsed = parse_client_initial_response(f"n,,\x01auth=BEARER  {token()}\x01\x01".encode())
    assert parsed.token == token() and parsed.authorization_id == "" and parsed.extensions == {}


def test_no_token_after_completion():
    server, _ = run(initial(token()))
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(initial(token()), NOW_MS)

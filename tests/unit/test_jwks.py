"""The JWKS-verified OAUTHBEARER validator and its key cache (broker/security/jwks.py), without a broker.

Tokens are signed by keys the test makes; the JWKS comes from a fetch
function the test controls, so refreshes, failures and retries are counted.
"""

from __future__ import annotations

import json
import time

import pytest

jwt = pytest.importorskip("jwt")
pytest.importorskip("cryptography")

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from broker.config import ConfigError, load_config
from broker.net.sasl_listener import sasl_listener
from broker.security.jwks import (
    VALIDATOR_CLASSES,
    JwksError,
    JwksKeyCache,
    JwksSettings,
    JwksValidator,
    check_url,
    parse_jwks,
)
from broker.security.oauthbearer_server import TokenValidationError

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP384R1())
NOW_S = 1_800_000_000
NOW_MS = NOW_S * 1000


def jwks(*extra) -> bytes:
    keys = [
        RSAAlgorithm.to_jwk(RSA_KEY.public_key(), as_dict=True) | {"kid": "r1"},
        ECAlgorithm.to_jwk(EC_KEY.public_key(), as_dict=True) | {"kid": "e1", "use": "sig"},
        {"kty": "oct", "kid": "h1", "k": "c2VjcmV0"},  # symmetric: never used
        *extra,
    ]
    return json.dumps({"keys": keys}).encode()


def token(alg="RS256", kid="r1", key=None, headers=None, **claims) -> str:
    body = {"sub": "alice", "iat": NOW_S, "exp": NOW_S + 600, "aud": "kafka", "iss": "idp", "scope": "a b"} | claims
    body = {k: v for k, v in body.items() if v is not None}
    signing = key if key is not None else (EC_KEY if alg.startswith("ES") else RSA_KEY)
    return jwt.encode(body, signing, algorithm=alg, headers={"kid": kid, **(headers or {})} if kid else headers)


class Fetcher:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, url, context):
        self.calls += 1
        answer = self.answers[min(self.calls - 1, len(self.answers) - 1)]
        if isinstance(answer, Exception):
            raise answer
        return answer


def validator(fetch=None, **settings) -> JwksValidator:
    base = {"url": "file:///jwks.json", "expected_audience": ("kafka",), "expected_issuer": "idp", "retry_backoff_ms": 1,
            "retry_backoff_max_ms": 20}
    cache = JwksKeyCache(JwksSettings(**(base | settings)), fetch=fetch or Fetcher(jwks()))
    cache.load()
    return JwksValidator(cache)


def refused(v, text: str, contains: str) -> None:
    with pytest.raises(TokenValidationError) as caught:
        v(text, NOW_MS)
    assert contains.lower() in caught.value.reason.lower(), caught.value.reason


def test_valid_tokens_of_each_family():
    v = validator()
    for alg, kid in [("RS256", "r1"), ("RS512", "r1"), ("PS384", "r1"), ("ES384", "e1")]:
        result = v(token(alg, kid), NOW_MS)
        assert (result.principal_name, result.lifetime_ms, result.start_time_ms) == ("alice", (NOW_S + 600) * 1000, NOW_MS)
        assert result.scope == frozenset({"a b"})


def test_times_with_clock_skew():
    v = validator(clock_skew_seconds=30)
    assert v(token(exp=NOW_S - 29), NOW_MS)
    refused(v, token(exp=NOW_S - 30), "expired")
    assert v(token(nbf=NOW_S + 29), NOW_MS)
    refused(v, token(nbf=NOW_S + 31), "not valid before")
    refused(v, token(iat=NOW_S + 31), "issued in the future")
    refused(v, token(iat=None), '"iat"')
    refused(v, token(exp=None), '"exp"')
    refused(v, token(exp="soon"), "'exp' claim was not of type Number")


def test_audience_issuer_and_subject():
    v = validator()
    assert v(token(aud=["other", "kafka"]), NOW_MS)
    refused(v, token(aud="other"), "audience")
    refused(v, token(aud=None), '"aud"')
    refused(v, token(iss="evil"), "issuer")
    refused(v, token(sub=" "), "no principal")
    unchecked = validator(expected_audience=(), expected_issuer=None, sub_claim_name="client_id")
    assert unchecked(token(aud="anyone", iss="anyone", client_id="svc"), NOW_MS).principal_name == "svc"


def test_unsigned_symmetric_and_mismatched_tokens_are_refused():
    v = validator()
    refused(v, jwt.encode({"sub": "alice", "iat": NOW_S, "exp": NOW_S + 60}, None, algorithm="none"), "unsigned")
    # An HMAC token naming an RSA key's kid (algorithm confusion): HMAC is never accepted.
    forged = jwt.api_jws.PyJWS().encode(
        json.dumps({"sub": "admin", "iat": NOW_S, "exp": NOW_S + 60, "aud": "kafka", "iss": "idp"}).encode(),
        b"k" * 32, algorithm="HS256", headers={"kid": "r1"},
    )
    refused(v, forged, "algorithm 'HS256' is not accepted")
    refused(v, token("ES384", kid="r1"), "is not for ES384")  # an RSA key for an EC algorithm
    refused(v, token("RS256", kid="e1", key=RSA_KEY), "is not for RS256")
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused(v, token(key=other), "Signature verification failed")
    header, claims, signature = token().split(".")
    refused(v, f"{header}.{claims[:-2]}AA.{signature}", "Could not validate")
    refused(v, "not-a-jwt", "malformed JWT")


def test_a_token_without_kid_needs_exactly_one_fitting_key():
    v = validator()
    assert v(token("ES384", kid=None), NOW_MS)  # one P-384 key
    two = validator(Fetcher(jwks(RSAAlgorithm.to_jwk(RSA_KEY.public_key(), as_dict=True) | {"kid": "r2"})))
    refused(two, token(kid=None), "has 2 RS256 keys")


def test_an_unknown_kid_asks_for_one_refresh_per_minute():
    fetch = Fetcher(jwks())
    v = validator(fetch)
    assert fetch.calls == 1
    refused(v, token(kid="new"), "refreshing it")
    refused(v, token(kid="new"), "no key with kid 'new' in the JWKS")  # not asked again
    assert v.keys._wake.is_set()
    v.keys._wake.clear()
    refused(v, token(kid="x" * 1001), "no key with kid")
    assert not v.keys._wake.is_set()  # an absurd kid never triggers a fetch
    # The refresh (run here, not on a thread) brings the new key in and forgets the kid.
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    fetch.answers.append(jwks(RSAAlgorithm.to_jwk(rotated.public_key(), as_dict=True) | {"kid": "new"}))
    v.keys.refresh()
    assert v(token(kid="new", key=rotated), NOW_MS).principal_name == "alice"
    assert "new" not in v.keys._missing


def test_failed_fetches_are_retried_then_keep_the_old_keys():
    fetch = Fetcher(JwksError("down"), jwks())
    v = validator(fetch)
    assert fetch.calls == 2  # one retry after the backoff
    fetch.answers = [JwksError("down again")]
    fetch.calls = 0
    started = time.monotonic()
    v.keys.refresh()
    assert fetch.calls >= 2 and time.monotonic() - started < 1.0
    assert v(token(), NOW_MS)  # the keys held before
    with pytest.raises(JwksError):
        validator(Fetcher(JwksError("never")))


def test_the_refresh_thread_runs_off_the_caller_and_stops():
    fetch = Fetcher(jwks())
    v = validator(fetch, refresh_ms=20)
    v.keys.start()
    deadline = time.monotonic() + 5
    while fetch.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    v.close()
    assert fetch.calls >= 3
    assert not v.keys._thread.is_alive()


def test_jwks_documents_and_urls():
    assert [entry["kid"] for entry, _ in parse_jwks(jwks())] == ["r1", "e1"]
    for bad in [b"[]", b"{}", b"not json", json.dumps({"keys": [{"kty": "oct", "k": "AA"}]}).encode()]:
        with pytest.raises(JwksError):
            parse_jwks(bad)
    assert check_url("file:///etc/jwks.json") and check_url("https://idp/keys")
    for bad in ["http://idp/keys", "ftp://x/y", "idp/keys", "file://"]:
        with pytest.raises(ValueError):
            check_url(bad)


def _config(extra):
    return load_config({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        **extra,
    })


def test_listener_settings(tmp_path):
    handler = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"
    with pytest.raises(ConfigError, match="sasl.oauthbearer.jwks.endpoint.url: required"):
        sasl_listener(_config({handler: VALIDATOR_CLASSES[1]}), "SASL_PLAINTEXT", dict)
    with pytest.raises(ConfigError, match="is not supported"):
        sasl_listener(_config({handler: "com.example.MyHandler"}), "SASL_PLAINTEXT", dict)
    with pytest.raises(ConfigError, match="not an https:// or file:// URL"):
        sasl_listener(_config({handler: VALIDATOR_CLASSES[0], "sasl.oauthbearer.jwks.endpoint.url": "http://idp/k"}), "SASL_PLAINTEXT", dict)
    missing = {handler: VALIDATOR_CLASSES[0], "sasl.oauthbearer.jwks.endpoint.url": (tmp_path / "none.json").as_uri(),
               "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "0"}
    with pytest.raises(ConfigError, match="could not get the JWKS"):
        sasl_listener(_config(missing), "SASL_PLAINTEXT", dict)
    (tmp_path / "jwks.json").write_bytes(jwks())
    listener = sasl_listener(
        _config({handler: VALIDATOR_CLASSES[0], "sasl.oauthbearer.jwks.endpoint.url": (tmp_path / "jwks.json").as_uri()}),
        "SASL_PLAINTEXT", dict,
    )
    server = listener.server_config.mechanisms["OAUTHBEARER"]()
    assert isinstance(server._validator, JwksValidator)
    server._validator.close()


def test_a_flood_of_unknown_kids_fetches_at_most_once_a_second():
    fetch = Fetcher(jwks())
    v = validator(fetch, refresh_ms=3_600_000)
    v.keys.start()
    try:
        started = time.monotonic()
        for i in range(50):
            refused(v, token(kid=f"made-up-{i}"), "no key with kid")
        while fetch.calls < 2 and time.monotonic() - started < 5:
            time.sleep(0.01)
        assert fetch.calls == 2 and time.monotonic() - started >= 0.9  # the load, then one early fetch a second later
        time.sleep(0.3)
        assert fetch.calls == 2
    finally:
        v.close()

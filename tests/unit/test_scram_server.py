"""broker/security/scram_server.py: SCRAM exchanges driven as a client drives them, and every way to break one."""

from __future__ import annotations

import base64
import hmac
import re

import pytest

from broker.security import scram_server
from broker.security.mechanism import SaslAuthenticationError
from broker.security.scram_server import (
    AUTHZID_MISMATCH_MESSAGE,
    MESSAGE_BYTES_MAX,
    DelegationTokenCredential,
    ScramServer,
    ScramState,
    new_salt,
)
from protocol import scram
from protocol.scram import ScramMechanism

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
FAILED_256 = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"


class ScramClient:
    """The client side of RFC 5802, small and literal, for driving the server."""

    def __init__(self, mechanism, user, password, *, nonce="clientnonce123", authzid=None, extensions=""):
        self.mechanism = mechanism
        self.password = password
        saslname = user.replace("=", "=3D").replace(",", "=2C")
        self.gs2_header = "n," + ("" if authzid is None else "a=" + authzid.replace("=", "=3D").replace(",", "=2C")) + ","
        self.bare = f"n={saslname},r={nonce}" + extensions
        self.nonce = nonce
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2_header + self.bare).encode("utf-8")

    def final(self, server_first: bytes, *, proof_tamper=None, nonce=None, channel_binding=None) -> bytes:
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        assert fields["r"].startswith(self.nonce)
        salt = base64.b64decode(fields["s"])
        salted = scram.salted_password(self.mechanism, self.password, salt, int(fields["i"]))
        client_key = scram.client_key(self.mechanism, salted)
        cbind = channel_binding if channel_binding is not None else base64.b64encode(self.gs2_header.encode()).decode()
        without_proof = f"c={cbind},r={nonce if nonce is not None else fields['r']}"
        auth_message = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = self.mechanism.hmac(scram.stored_key(self.mechanism, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        if proof_tamper is not None:
            proof = proof_tamper(proof)
        self.server_signature = self.mechanism.hmac(scram.server_key(self.mechanism, salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check_server_final(self, server_final: bytes) -> None:
        assert server_final == b"v=" + base64.b64encode(self.server_signature)


def store(mechanism, users: dict[str, str], iterations=4096):
    credentials = {
        user: scram.credential_from_password(mechanism, password, new_salt(), iterations)
        for user, password in users.items()
    }
    return credentials.get


USERS = {"alice": "alice-secret", "bob": "bob-secret", "a,b=c": "odd-secret", "jörg": "ümlaut"}


def exchange(mechanism, client, *, lookup=None, **server_options):
    server = ScramServer(mechanism, lookup or store(mechanism, USERS), **server_options)
    server_first = server.evaluate(client.first(), 0)
    return server, server_first


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("user", list(USERS))
def test_full_exchange_authenticates_each_user(mechanism, user):
    client = ScramClient(mechanism, user, USERS[user])
    server, server_first = exchange(mechanism, client)
    assert server.state is ScramState.CLIENT_FINAL and not server.complete
    server_final = server.evaluate(client.final(server_first), 0)
    client.check_server_final(server_final)
    assert server.complete and server.authorization_id == user
    assert server.credential_expiry_ms is None and not server.token_authenticated


def test_rfc7677_exchange_byte_for_byte():
    credential = scram.credential_from_password(SHA256, "pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)
    server = ScramServer(SHA256, {"user": credential}.get, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", 0) == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        0,
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.authorization_id == "user"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_kafka_python_scram_client_authenticates(mechanism):
    """A real client's SCRAM code (kafka-python's) against this server."""
    scram_module = pytest.importorskip("kafka.net.sasl.scram")
    client = scram_module.ScramClient("alice", "alice-secret", mechanism.mechanism_name)
    server = ScramServer(mechanism, store(mechanism, USERS))
    client.process_server_first_message(server.evaluate(client.first_message(), 0))
    client.process_server_final_message(server.evaluate(client.final_message(), 0))  # raises on a bad signature
    assert server.authorization_id == "alice"


def test_server_nonce_is_fresh_and_extends_the_client_nonce():
    nonces = set()
    for _ in range(20):
        client = ScramClient(SHA256, "alice", "alice-secret")
        _, server_first = exchange(SHA256, client)
        nonce = re.match(rb"r=([^,]+),", server_first).group(1).decode()
        assert nonce.startswith(client.nonce) and len(nonce) > len(client.nonce)
        nonces.add(nonce)
    assert len(nonces) == 20


def test_authzid_equal_to_the_user_is_accepted():
    client = ScramClient(SHA256, "a,b=c", "odd-secret", authzid="a,b=c")
    server, server_first = exchange(SHA256, client)
    server.evaluate(client.final(server_first), 0)
    assert server.authorization_id == "a,b=c"


def test_authzid_of_another_user_is_refused_with_kafkas_message():
    client = ScramClient(SHA256, "alice", "alice-secret", authzid="bob")
    server = ScramServer(SHA256, store(SHA256, USERS))
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(client.first(), 0)
    assert str(caught.value) == AUTHZID_MISMATCH_MESSAGE
    assert server.state is ScramState.FAILED


# ------------------------------------------------------------------ wrong password vs unknown user


def failure_of(mechanism, user, password, lookup):
    client = ScramClient(mechanism, user, password)
    server = ScramServer(mechanism, lookup)
    server_first = server.evaluate(client.first(), 0)  # both get this far
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(client.final(server_first), 0)
    assert server.state is ScramState.FAILED
    return caught.value, server_first


def test_unknown_user_and_wrong_password_fail_alike_at_the_last_step():
    lookup = store(SHA256, USERS)
    wrong, wrong_first = failure_of(SHA256, "alice", "not-her-password", lookup)
    unknown, unknown_first = failure_of(SHA256, "mallory", "whatever", lookup)
    assert str(wrong) == str(unknown) == FAILED_256
    assert wrong.message_for_client(reauthenticating=True) == unknown.message_for_client(reauthenticating=True)
    assert "re-authentication" in unknown.message_for_client(reauthenticating=True)
    # Same shape of server-first-message: a salt, 4096 iterations.
    shape = re.compile(rb"r=[!-+\--~]+,s=[A-Za-z0-9+/=]+,i=4096")
    assert shape.fullmatch(wrong_first) and shape.fullmatch(unknown_first)
    # The log tells them apart, the client cannot.
    assert "unknown user 'mallory'" in unknown.reason and "wrong proof" in wrong.reason


def test_the_fake_salt_is_stable_per_user_and_differs_between_users():
    def salt_of(user):
        server = ScramServer(SHA256, lambda _user: None)
        server_first = server.evaluate(ScramClient(SHA256, user, "x").first(), 0)
        return re.search(rb",s=([^,]+),", server_first).group(1)

    assert salt_of("mallory") == salt_of("mallory")
    assert salt_of("mallory") != salt_of("eve")
    # Shaped like new_salt(): a base-36 number of up to 130 bits.
    assert re.fullmatch(rb"[0-9a-z]{1,26}", base64.b64decode(salt_of("mallory")))


def test_unknown_user_and_wrong_password_do_the_same_hashing_work(monkeypatch):
    calls = []
    original_hmac, original_digest = ScramMechanism.hmac, ScramMechanism.digest
    monkeypatch.setattr(ScramMechanism, "hmac", lambda self, k, m: calls.append("hmac") or original_hmac(self, k, m))
    monkeypatch.setattr(ScramMechanism, "digest", lambda self, d: calls.append("digest") or original_digest(self, d))
    lookup = store(SHA256, USERS)
    counts = []
    for user in ("alice", "mallory"):
        client = ScramClient(SHA256, user, "wrong")
        server = ScramServer(SHA256, lookup)
        calls.clear()
        server_first = server.evaluate(client.first(), 0)
        first_step = list(calls)
        final = client.final(server_first)  # the client's work is not counted
        calls.clear()
        with pytest.raises(SaslAuthenticationError):
            server.evaluate(final, 0)
        counts.append((first_step, list(calls)))
    assert counts[0] == counts[1]
    assert counts[0][1]  # the final step hashes: the proof is checked even for an unknown user


def test_the_unknown_user_path_goes_through_a_fake_credential(monkeypatch):
    made = []
    real = scram_server.fake_credential
    monkeypatch.setattr(scram_server, "fake_credential", lambda m, u, k: made.append(u) or real(m, u, k))
    error, _ = failure_of(SHA256, "mallory", "x", store(SHA256, USERS))
    assert made == ["mallory"] and "unknown user" in error.reason


def test_a_credential_with_too_few_iterations_fails_like_a_wrong_password():
    lookup = store(SHA256, {"alice": "alice-secret"}, iterations=1024)
    error, server_first = failure_of(SHA256, "alice", "alice-secret", lookup)
    assert str(error) == FAILED_256 and "1024 iterations" in error.reason
    assert server_first.endswith(b",i=4096")  # the fake credential's, not the real one's


# ------------------------------------------------------------------ malformed and replayed messages


def fails(server, token, *, message=FAILED_256):
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(token, 0)
    assert str(caught.value) == message
    assert server.state is ScramState.FAILED
    with pytest.raises(SaslAuthenticationError):  # and nothing more is taken
        server.evaluate(token, 0)
    return caught.value


BAD_FIRST_MESSAGES = [
    b"",
    b"n",
    b"n,",
    b"n,,",
    b"n,,n=",
    b"n,,n=alice",
    b"n,,n=alice,",
    b"n,,n=alice,r=",
    b"n,,r=abc,n=alice",
    b"y,,n=alice,r=abc",  # channel binding supported by the client: refused
    b"p=tls-unique,,n=alice,r=abc",  # channel binding required: refused
    b"n,,m=ext,n=alice,r=abc",  # mandatory extension: refused
    b"x,,n=alice,r=abc",
    b"n,b=alice,n=alice,r=abc",
    b"n,a=,n=alice,r=abc",
    b"n,,n=al=ice,r=abc",  # '=' not escaped
    b"n,,n=al=2cice,r=abc",  # escapes are upper case
    b"n,,n=alice,r=a b",  # nonce not printable
    b"n,,n=alice,r=abc,,",
    b"n,,n=alice,r=abc,1=x",
    b"n,,n=alice,r=abc,x",
    b"n,,n=alice,r=abc,x=",
    b"n,,n=alice,r=abc,x=1,x=2",
    b"n,,n=ali\x00ce,r=abc",
    b"n,,n=\xff\xfe,r=abc",
    b"n,,n=alice,r=" + b"a" * MESSAGE_BYTES_MAX,
]


@pytest.mark.parametrize("token", BAD_FIRST_MESSAGES)
def test_malformed_client_first_messages_fail(token):
    fails(ScramServer(SHA256, store(SHA256, USERS)), token)


@pytest.mark.parametrize(
    "token, reason",
    [
        (b"y,,n=alice,r=abc", "channel binding"),
        (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
        (b"n,,m=ext,n=alice,r=abc", "mandatory extension"),
    ],
)
def test_refusals_of_rfc5802_options_say_why_in_the_log(token, reason):
    error = fails(ScramServer(SHA256, store(SHA256, USERS)), token)
    assert reason in error.reason


def test_every_truncation_of_a_valid_first_message_fails_or_parses_as_another_user():
    whole = ScramClient(SHA256, "alice", "alice-secret").first()
    for end in range(len(whole)):
        server = ScramServer(SHA256, store(SHA256, USERS))
        try:
            server.evaluate(whole[:end], 0)
        except SaslAuthenticationError:
            assert server.state is ScramState.FAILED
        else:  # "n,,n=alice,r=client" is a shorter nonce, still a valid message
            assert whole[:end].startswith(b"n,,n=alice,r=")


def test_every_truncation_of_a_valid_final_message_fails():
    client = ScramClient(SHA256, "alice", "alice-secret")
    lookup = store(SHA256, USERS)

    def fresh():
        server = ScramServer(SHA256, lookup, server_nonce=lambda: "fixed")
        return server, server.evaluate(client.first(), 0)

    server, server_first = fresh()
    whole = client.final(server_first)
    server.evaluate(whole, 0)
    assert server.complete  # the whole message is good for every fresh server
    for end in range(len(whole)):
        probe, _ = fresh()
        fails(probe, whole[:end])


def final_fails(mutate=None, **final_options):
    client = ScramClient(SHA256, "alice", "alice-secret")
    server, server_first = exchange(SHA256, client)
    final = client.final(server_first, **final_options)
    return fails(server, mutate(final) if mutate else final)


def test_wrong_proof_fails():
    final_fails(proof_tamper=lambda proof: bytes([proof[0] ^ 1]) + proof[1:])


def test_proof_of_the_wrong_length_fails():
    final_fails(proof_tamper=lambda proof: proof + b"\x00")


def test_nonce_without_the_server_part_fails():
    final_fails(nonce="clientnonce123")


def test_a_nonce_ending_with_the_exchanges_is_accepted_as_kafka_does():
    # librdkafka before 2.2 (kcat 1.7's 2.0.2) puts its own nonce in front of the whole one again.
    client = ScramClient(SHA256, "alice", "alice-secret")
    server, server_first = exchange(SHA256, client)
    whole = re.match(rb"r=([^,]+),", server_first).group(1).decode()
    client.check_server_final(server.evaluate(client.final(server_first, nonce=client.nonce + whole), 0))
    assert server.complete
    # A nonce that only starts with it is not.
    final_fails(nonce=None, mutate=lambda final: final.replace(b",p=", b"x,p=", 1))


def test_a_nonce_with_a_changed_server_part_fails():
    client = ScramClient(SHA256, "alice", "alice-secret")
    server, server_first = exchange(SHA256, client)
    whole = re.match(rb"r=([^,]+),", server_first).group(1).decode()
    fails(server, client.final(server_first, nonce=whole[:-1] + ("a" if whole[-1] != "a" else "b")))


def test_channel_binding_that_does_not_repeat_the_gs2_header_fails():
    final_fails(channel_binding=base64.b64encode(b"y,,").decode())


@pytest.mark.parametrize(
    "mutate",
    [
        lambda final: final.replace(b"c=biws,", b""),
        lambda final: final.replace(b"c=biws", b"c=biws="),
        lambda final: final.replace(b",p=", b",q="),
        lambda final: final + b"=",
        lambda final: final.replace(b"c=", b"C="),
        lambda final: b"x" * (MESSAGE_BYTES_MAX + 1),
    ],
)
def test_malformed_final_messages_fail(mutate):
    final_fails(mutate)


def test_final_message_extensions_are_part_of_the_signed_text():
    client = ScramClient(SHA256, "alice", "alice-secret")
    server, server_first = exchange(SHA256, client)
    final = client.final(server_first)
    fails(server, final.replace(b",p=", b",x=1,p="))  # the proof covered the text without x=1


def test_a_final_message_replayed_from_another_exchange_fails():
    client = ScramClient(SHA256, "alice", "alice-secret")
    first_server, first_server_first = exchange(SHA256, client)
    recorded = client.final(first_server_first)
    first_server.evaluate(recorded, 0)
    assert first_server.complete
    replay_server, _ = exchange(SHA256, client)  # same client nonce, fresh server nonce
    fails(replay_server, recorded)


def test_the_first_message_replayed_as_the_final_one_fails():
    client = ScramClient(SHA256, "alice", "alice-secret")
    server, _ = exchange(SHA256, client)
    fails(server, client.first())


def test_no_token_is_taken_after_completion():
    client = ScramClient(SHA256, "alice", "alice-secret")
    server, server_first = exchange(SHA256, client)
    final = client.final(server_first)
    server.evaluate(final, 0)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(final, 0)


# ------------------------------------------------------------------ delegation tokens


def token_lookup(expiry_ms=10_000):
    credential = scram.credential_from_password(SHA256, "token-hmac", new_salt(), 4096)
    tokens = {"token-id-1": DelegationTokenCredential("alice", credential, expiry_ms)}
    return tokens.get


def test_delegation_token_authenticates_as_its_owner():
    client = ScramClient(SHA256, "token-id-1", "token-hmac", extensions=",tokenauth=true")
    server, server_first = exchange(SHA256, client, tokens=token_lookup())
    server.evaluate(client.final(server_first), 0)
    assert server.authorization_id == "alice"
    assert server.token_authenticated and server.credential_expiry_ms == 10_000


def test_tokenauth_is_refused_without_a_token_lookup():
    client = ScramClient(SHA256, "token-id-1", "token-hmac", extensions=",tokenauth=TRUE")
    server = ScramServer(SHA256, store(SHA256, USERS))
    error = fails(server, client.first())
    assert "not enabled" in error.reason


@pytest.mark.parametrize("user, expiry_ms", [("token-id-1", 5), ("token-id-2", 10_000)])
def test_expired_or_unknown_token_fails_at_the_last_step(user, expiry_ms):
    client = ScramClient(SHA256, user, "token-hmac", extensions=",tokenauth=true")
    server = ScramServer(SHA256, store(SHA256, USERS), tokens=token_lookup(expiry_ms))
    server_first = server.evaluate(client.first(), 100)
    fails(server, client.final(server_first))


def test_a_token_is_not_a_password():
    """Without tokenauth=true the token id is looked up as a user name, and is not one."""
    client = ScramClient(SHA256, "token-id-1", "token-hmac")
    server, server_first = exchange(SHA256, client, tokens=token_lookup())
    fails(server, client.final(server_first))


def test_unknown_extensions_are_ignored():
    client = ScramClient(SHA256, "alice", "alice-secret", extensions=",foo=bar,tokenauth=false")
    server, server_first = exchange(SHA256, client)
    server.evaluate(client.final(server_first), 0)
    assert server.authorization_id == "alice" and not server.token_authenticated


def test_new_salt_is_kafka_shaped_and_random():
    salts = {new_salt() for _ in range(50)}
    assert len(salts) == 50
    assert all(re.fullmatch(rb"[0-9a-z]{1,26}", salt) for salt in salts)


def test_keys_compare_with_compare_digest(monkeypatch):
    used = []
    real = hmac.compare_digest
    monkeypatch.setattr(scram_server.hmac, "compare_digest", lambda a, b: used.append(1) or real(a, b))
    client = ScramClient(SHA256, "alice", "alice-secret")
    server, server_first = exchange(SHA256, client)
    server.evaluate(client.final(server_first), 0)
    assert len(used) >= 2  # the nonce and the stored key

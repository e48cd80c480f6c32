"""protocol/scram.py: SCRAM key derivation against RFC 7677's vector and the RFC 5802 definitions."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from protocol import scram
from protocol.scram import ScramCredential, ScramMechanism

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)
RFC7677_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def hi_by_definition(hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 section 2.2, written out: U1 = HMAC(p, salt || INT(1)), Ui = HMAC(p, Ui-1), XOR of all."""
    u = hmac.new(password, salt + b"\x00\x00\x00\x01", hash_name).digest()
    result = bytearray(u)
    for _ in range(iterations - 1):
        u = hmac.new(password, u, hash_name).digest()
        result = bytearray(a ^ b for a, b in zip(result, u))
    return bytes(result)


def test_rfc7677_vector_gives_the_proof_and_server_signature():
    salted = scram.salted_password(SHA256, "pencil", RFC7677_SALT, 4096)
    client_key = scram.client_key(SHA256, salted)
    stored = scram.stored_key(SHA256, client_key)
    client_signature = hmac.new(stored, RFC7677_AUTH_MESSAGE, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, client_signature))
    assert proof == RFC7677_PROOF
    server_signature = hmac.new(scram.server_key(SHA256, salted), RFC7677_AUTH_MESSAGE, "sha256").digest()
    assert server_signature == RFC7677_SERVER_SIGNATURE


def test_credential_from_password_matches_the_vector_keys():
    credential = scram.credential_from_password(SHA256, "pencil", RFC7677_SALT, 4096)
    salted = hi_by_definition("sha256", b"pencil", RFC7677_SALT, 4096)
    assert credential == ScramCredential(
        salt=RFC7677_SALT,
        stored_key=hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest(),
        server_key=hmac.new(salted, b"Server Key", "sha256").digest(),
        iterations=4096,
    )


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("password", ["pencil", "", "pässwörd ☃", "x" * 200])
def test_salted_password_is_hi_as_rfc5802_defines_it(mechanism, password):
    salt = b"some salt \x00\xff"
    expected = hi_by_definition(mechanism.hash_name, password.encode("utf-8"), salt, 17)
    assert scram.salted_password(mechanism, password, salt, 17) == expected
    assert len(expected) == mechanism.key_length_bytes


def test_sha512_credential_keys_by_definition():
    salt = b"QSXCR+Q6sek8bf92"
    credential = scram.credential_from_password(SHA512, "pencil", salt, 4096)
    salted = hi_by_definition("sha512", b"pencil", salt, 4096)
    assert credential.stored_key == hashlib.sha512(hmac.new(salted, b"Client Key", "sha512").digest()).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha512").digest()
    assert len(credential.stored_key) == len(credential.server_key) == 64


def test_kafka_facts_of_each_mechanism():
    assert SHA256.mechanism_name == "SCRAM-SHA-256" and SHA256.type_code == 1 and SHA256.key_length_bytes == 32
    assert SHA512.mechanism_name == "SCRAM-SHA-512" and SHA512.type_code == 2 and SHA512.key_length_bytes == 64
    for mechanism in ScramMechanism:
        assert (mechanism.iterations_min, mechanism.iterations_max) == (4096, 16384)
        assert ScramMechanism.for_name(mechanism.mechanism_name) is mechanism
        assert ScramMechanism.for_type_code(mechanism.type_code) is mechanism
    assert ScramMechanism.for_name("scram-sha-256") is None  # Kafka matches names exactly
    assert ScramMechanism.for_name("SCRAM-SHA-1") is None
    assert ScramMechanism.for_type_code(0) is None


@pytest.mark.parametrize("iterations", [0, -1, True, 1.5, "4096"])
def test_iterations_must_be_a_positive_integer(iterations):
    with pytest.raises(ValueError):
        scram.salted_password(SHA256, "pencil", b"salt", iterations)


def test_an_empty_salted_password_is_refused_and_any_other_length_taken():
    with pytest.raises(ValueError):
        scram.credential_from_salted_password(SHA512, b"", b"salt", 4096)
    credential = scram.credential_from_salted_password(SHA512, b"\x01" * 32, b"salt", 4096)
    assert len(credential.stored_key) == len(credential.server_key) == 64


def test_credential_from_salted_password_equals_the_one_from_the_password():
    salted = scram.salted_password(SHA512, "alice-secret", b"salt", 4096)
    assert scram.credential_from_salted_password(SHA512, salted, b"salt", 4096) == scram.credential_from_password(
        SHA512, "alice-secret", b"salt", 4096
    )


def test_repr_of_a_credential_hides_its_keys():
    credential = scram.credential_from_password(SHA256, "pencil", b"salt", 4096)
    text = repr(credential)
    assert credential.stored_key.hex() not in text and repr(credential.stored_key) not in text
    assert repr(credential.server_key) not in text
    assert "iterations=4096" in text

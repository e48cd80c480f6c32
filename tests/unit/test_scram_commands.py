"""controller.scram_commands: SCRAM credentials planned against an image (Kafka's ScramControlManager).

The key derivation is checked against RFC 7677's SCRAM-SHA-256 example: the
stored and server keys made from the salted password must verify the
example's client proof and give its server signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import record_api_key
from controller.scram_commands import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    credential_record,
    describe_user_scram_credentials,
    plan_alter_user_scram_credentials,
)
from protocol.codec import decode_struct, encode_struct
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from protocol.scram import ITERATIONS_MAX as MAX_ITERATIONS
from protocol.scram import ITERATIONS_MIN as MIN_ITERATIONS
from protocol.scram import ScramMechanism, client_key, server_key, stored_key
from protocol.scram import salted_password as hi

ALTER, DESCRIBE = APIS_BY_NAME["AlterUserScramCredentials"], APIS_BY_NAME["DescribeUserScramCredentials"]
AQ, DQ = struct_classes(ALTER.request), struct_classes(DESCRIBE.request)


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def wire(api, response):
    encoded = encode_struct(api.response, 0, True, response)
    assert decode_struct(api.response, 0, True, encoded)[0] == response
    return response


def salted_password(mechanism: int, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hi(ScramMechanism.for_type_code(mechanism), password, salt, iterations)


def upsert(name, mechanism=SCRAM_SHA_256, iterations=4096, password=b"secret", salt=b"salty"):
    salted = salted_password(mechanism, password, salt, max(iterations, 1)) if mechanism in (1, 2) else b"x"
    return AQ.ScramCredentialUpsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted
    )


def delete(name, mechanism=SCRAM_SHA_256):
    return AQ.ScramCredentialDeletion(name=name, mechanism=mechanism)


def alter(image, deletions=(), upsertions=()):
    response, records = plan_alter_user_scram_credentials(
        image, AQ.AlterUserScramCredentialsRequest(deletions=list(deletions), upsertions=list(upsertions))
    )
    wire(ALTER, response)
    return [(r.user, r.error_code, r.error_message) for r in response.results], records


# --------------------------------------------------------------------------- RFC 5802 / 7677


def test_rfc_7677_example_verifies_with_the_recorded_keys():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = salted_password(SCRAM_SHA_256, b"pencil", salt, 4096)
    auth_message = (
        b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    record = credential_record("user", SCRAM_SHA_256, salt, salted, 4096)
    # The server's check: H(ClientProof XOR ClientSignature) == StoredKey.
    signature = hmac.digest(record.stored_key, auth_message, "sha256")
    recovered_client_key = bytes(a ^ b for a, b in zip(proof, signature))
    assert hashlib.sha256(recovered_client_key).digest() == record.stored_key
    assert hmac.digest(record.server_key, auth_message, "sha256") == base64.b64decode(
        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    )
    assert (record.name, record.mechanism, record.salt, record.iterations) == ("user", 1, salt, 4096)


def test_sha_512_records_hold_sha_512_keys():
    salted = salted_password(SCRAM_SHA_512, b"pencil", b"salt", 4096)
    record = credential_record("u", SCRAM_SHA_512, b"salt", salted, 4096)
    mechanism = ScramMechanism.SCRAM_SHA_512
    assert record.stored_key == stored_key(mechanism, client_key(mechanism, salted)) and len(record.stored_key) == 64
    assert record.server_key == server_key(mechanism, salted) and len(record.server_key) == 64


# --------------------------------------------------------------------------- AlterUserScramCredentials


def test_upsert_stores_keys_never_the_password_and_delete_removes():
    results, records = alter(MetadataImage(), upsertions=[upsert("alice"), upsert("bob", SCRAM_SHA_512, 8192)])
    assert results == [("alice", ErrorCode.NONE, None), ("bob", ErrorCode.NONE, None)]
    image = apply(MetadataImage(), records)
    credential = image.scram_credentials[("alice", SCRAM_SHA_256)]
    salted = salted_password(SCRAM_SHA_256, b"secret", b"salty", 4096)
    assert (credential.salt, credential.iterations) == (b"salty", 4096)
    sha256 = ScramMechanism.SCRAM_SHA_256
    assert credential.stored_key == stored_key(
        sha256, client_key(sha256, salted)
    ) and credential.server_key == server_key(sha256, salted)
    assert salted not in (credential.stored_key, credential.server_key)
    assert image.scram_credentials[("bob", SCRAM_SHA_512)].iterations == 8192
    results, records = alter(image, deletions=[delete("alice")], upsertions=[upsert("bob", SCRAM_SHA_256)])
    assert results == [("alice", ErrorCode.NONE, None), ("bob", ErrorCode.NONE, None)]
    image = apply(image, records)
    assert set(image.scram_credentials) == {("bob", SCRAM_SHA_256), ("bob", SCRAM_SHA_512)}


@pytest.mark.parametrize(
    "upsertion,code,message",
    [
        (upsert(""), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        (upsert("u", mechanism=0), ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        (upsert("u", mechanism=3), ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        (upsert("u", iterations=MIN_ITERATIONS - 1), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        (upsert("u", iterations=MAX_ITERATIONS + 1), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        (
            AQ.ScramCredentialUpsertion(name="u", mechanism=1, iterations=4096, salt=b"s", salted_password=b""),
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "Salted password must not be empty",
        ),
    ],
)
def test_invalid_upsertions(upsertion, code, message):
    results, records = alter(MetadataImage(), upsertions=[upsert("ok"), upsertion])
    assert results == [("ok", ErrorCode.NONE, None), (upsertion.name, code, message)]
    assert [r.name for r in records] == ["ok"]


def test_iteration_bounds_are_inclusive():
    results, records = alter(
        MetadataImage(), upsertions=[upsert("a", iterations=MIN_ITERATIONS), upsert("b", iterations=MAX_ITERATIONS)]
    )
    assert [code for _, code, _ in results] == [ErrorCode.NONE, ErrorCode.NONE] and len(records) == 2


def test_invalid_deletions():
    image = apply(MetadataImage(), alter(MetadataImage(), upsertions=[upsert("alice")])[1])
    results, records = alter(
        image, deletions=[delete("alice", SCRAM_SHA_512), delete("bob"), delete("", 1), delete("carol", 9)]
    )
    assert results == [
        ("alice", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("bob", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        ("carol", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
    ]
    assert records == []


def test_a_user_altered_twice_is_refused_whole():
    image = apply(
        MetadataImage(), alter(MetadataImage(), upsertions=[upsert("a", 1), upsert("a2", 2), upsert("b", 1)])[1]
    )
    results, records = alter(
        image,
        deletions=[delete("a", 1), delete("a", 2), delete("b", 1), delete("x", 1)],
        upsertions=[upsert("b", 2), upsert("c"), upsert("d"), upsert("d", 2), upsert("d", 1), upsert("a2", 1)],
    )
    duplicate = "A user credential cannot be altered twice in the same request"
    # Successful deletions, then successful upsertions, then the errors, each in request order.
    assert results == [
        ("c", ErrorCode.NONE, None),
        ("a2", ErrorCode.NONE, None),
        ("a", ErrorCode.DUPLICATE_RESOURCE, duplicate),
        ("x", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("b", ErrorCode.DUPLICATE_RESOURCE, duplicate),
        ("d", ErrorCode.DUPLICATE_RESOURCE, duplicate),
    ]
    assert [(type(r).__name__, r.name) for r in records] == [
        ("UserScramCredentialRecord", "c"),
        ("UserScramCredentialRecord", "a2"),
    ]


# --------------------------------------------------------------------------- DescribeUserScramCredentials


@pytest.fixture
def image():
    records = alter(MetadataImage(), upsertions=[upsert("bob", 2, 8192), upsert("alice", 1, 4096)])[1]
    records += alter(MetadataImage(), upsertions=[upsert("bob", 1, 5000)])[1]
    return apply(MetadataImage(), records)


def described(image, users):
    response = wire(
        DESCRIBE, describe_user_scram_credentials(image, DQ.DescribeUserScramCredentialsRequest(users=users))
    )
    assert (response.error_code, response.error_message) == (ErrorCode.NONE, None)
    return [
        (r.user, r.error_code, r.error_message, [(c.mechanism, c.iterations) for c in r.credential_infos])
        for r in response.results
    ]


@pytest.mark.parametrize("users", [None, []])
def test_describe_everyone(image, users):
    assert described(image, users) == [
        ("alice", ErrorCode.NONE, None, [(1, 4096)]),
        ("bob", ErrorCode.NONE, None, [(1, 5000), (2, 8192)]),
    ]
    assert described(MetadataImage(), users) == []


def test_describe_named_users_duplicates_and_unknown(image):
    users = [DQ.UserName(name=n) for n in ("bob", "nobody", "alice", "bob", "bob")]
    assert described(image, users) == [
        (
            "bob",
            ErrorCode.DUPLICATE_RESOURCE,
            "Cannot describe SCRAM credentials for the same user twice in a single request: bob",
            [],
        ),
        (
            "nobody",
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to describe a user credential that does not exist: nobody",
            [],
        ),
        ("alice", ErrorCode.NONE, None, [(1, 4096)]),
    ]

"""broker/security/plain_server.py: SASL/PLAIN (RFC 4616) with Kafka's messages, users from JAAS."""

from __future__ import annotations

import pytest

from broker.security import plain_server
from broker.security.jaas import JaasConfigError
from broker.security.mechanism import SaslAuthenticationError
from broker.security.plain_server import INVALID_CREDENTIALS_MESSAGE, PlainServer, PlainUsers

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_jörg="ümlaut";'
)
USERS = PlainUsers.from_jaas_config(JAAS)


def server():
    return PlainServer(USERS)


@pytest.mark.parametrize(
    "token, user",
    [
        (b"\x00alice\x00alice-secret", "alice"),
        (b"alice\x00alice\x00alice-secret", "alice"),  # kafka-python sends the user as authzid
        (b"\x00admin\x00admin-secret", "admin"),
        ("\x00jörg\x00ümlaut".encode(), "jörg"),
    ],
)
def test_valid_users_authenticate(token, user):
    exchange = server()
    assert exchange.evaluate(token, 0) == b""
    assert exchange.complete and exchange.authorization_id == user
    assert exchange.credential_expiry_ms is None and not exchange.token_authenticated


def test_kafka_python_plain_token_authenticates():
    plain = pytest.importorskip("kafka.net.sasl.plain")
    mechanism = plain.SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    exchange = server()
    mechanism.receive(exchange.evaluate(mechanism.auth_bytes(), 0))
    assert mechanism.is_authenticated() and exchange.authorization_id == "alice"


@pytest.mark.parametrize(
    "token, message",
    [
        (b"\x00alice\x00wrong", INVALID_CREDENTIALS_MESSAGE),
        (b"\x00mallory\x00alice-secret", INVALID_CREDENTIALS_MESSAGE),
        (b"\x00username\x00admin", INVALID_CREDENTIALS_MESSAGE),  # options are not users
        (b"\x00alice\x00alice-secret ", INVALID_CREDENTIALS_MESSAGE),
        (b"\x00Alice\x00alice-secret", INVALID_CREDENTIALS_MESSAGE),
        (b"\x00\x00alice-secret", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (b"bob\x00alice\x00alice-secret", "Authentication failed: Client requested an authorization id that is different from username"),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"\x00alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\x00alice\x00alice-secret\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\x00a\x00b\x00c\x00d\x00e", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\x00alice\x00\xff\xfe", "Invalid SASL/PLAIN response: not UTF-8"),
        (b"\x00alice\x00" + b"x" * 5000, "Invalid SASL/PLAIN response: message too long"),
    ],
)
def test_failures_carry_kafkas_messages(token, message):
    exchange = server()
    with pytest.raises(SaslAuthenticationError) as caught:
        exchange.evaluate(token, 0)
    assert str(caught.value) == message
    assert caught.value.message_for_client(reauthenticating=True) == message  # PLAIN's are not generic
    assert not exchange.complete
    with pytest.raises(SaslAuthenticationError):
        exchange.evaluate(b"\x00alice\x00alice-secret", 0)  # one token per exchange


def test_wrong_password_and_unknown_user_read_the_same_to_the_client():
    errors = []
    for token in (b"\x00alice\x00wrong", b"\x00mallory\x00wrong"):
        with pytest.raises(SaslAuthenticationError) as caught:
            server().evaluate(token, 0)
        errors.append(caught.value)
    assert str(errors[0]) == str(errors[1])
    assert "wrong" not in errors[0].reason.replace("wrong password", "")  # no password in the log reason


def test_no_token_after_success():
    exchange = server()
    exchange.evaluate(b"\x00alice\x00alice-secret", 0)
    with pytest.raises(SaslAuthenticationError):
        exchange.evaluate(b"\x00alice\x00alice-secret", 0)


def test_passwords_compare_as_digests_in_constant_time(monkeypatch):
    compared = []
    real = plain_server.hmac.compare_digest
    monkeypatch.setattr(plain_server.hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    assert USERS.authenticate("alice", "alice-secret")
    assert not USERS.authenticate("alice", "a")
    assert not USERS.authenticate("mallory", "alice-secret")  # compared against a dummy all the same
    assert len(compared) == 3
    assert all(len(a) == len(b) == 32 for a, b in compared)


def test_users_keep_no_passwords():
    text = repr(USERS) + repr(vars(USERS))
    assert "alice-secret" not in text and "alice" in repr(USERS)
    assert len(USERS) == 3 and "admin" in USERS and "username" not in USERS


def test_users_must_come_from_the_plain_login_module():
    with pytest.raises(JaasConfigError, match="PlainLoginModule"):
        PlainUsers.from_jaas_config('org.apache.kafka.common.security.scram.ScramLoginModule required user_a="b";')


def test_a_callable_password_check_can_replace_the_jaas_users():
    exchange = PlainServer(lambda user, password: (user, password) == ("svc", "pw"))
    exchange.evaluate(b"\x00svc\x00pw", 0)
    assert exchange.authorization_id == "svc"

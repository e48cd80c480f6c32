"""The client side of SASL, for a node's own connections to other nodes.

A node whose inter-broker or controller listener speaks SASL authenticates
like a Kafka client: SaslHandshake names the mechanism, then SaslAuthenticate
carries the tokens of a :class:`MechanismClient` (broker/net/node_client.py
drives the exchange). Two mechanisms, those a node can use without anything
outside the cluster:

- PLAIN (RFC 4616): one token ``<authzid>\\0<user>\\0<password>`` with an empty
  authorization id, as Kafka's PlainSaslClient sends it; the server answers
  with an empty token;
- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, 7677): client-first-message,
  client-final-message with the proof, then the server's signature is checked
  in constant time (a server that does not know the password cannot pass),
  and so are Kafka's client-side rules: the server nonce must extend ours and
  the iteration count be at least the mechanism's minimum (4096).

Credentials come from the JAAS entry of the listener and mechanism
(``listener.name.<listener>.<mechanism>.sasl.jaas.config``), whose
``username`` and ``password`` options are the client side in Kafka's
PlainLoginModule and ScramLoginModule (PLAIN's ``user_<name>`` options are the
server side's users). :func:`client_factory` checks them once, at start, and
returns a factory of fresh exchanges. A failure is :class:`SaslClientError`,
whose message never holds the password. Pure: no IO, no clock; nonces from
``secrets``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable
from typing import Protocol

from broker.security.jaas import JaasEntry
from broker.security.scram_server import random_string
from protocol import scram
from protocol.scram import ScramMechanism

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# A server-first or server-final message longer than this is not SCRAM (the
# server's side bounds what it takes alike).
SERVER_MESSAGE_BYTES_MAX = 8192

_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")


class SaslClientError(Exception):
    """The exchange cannot go on: the server's answer is malformed or fails a check."""


class MechanismClient(Protocol):
    """The client side of one SASL exchange."""

    mechanism_name: str

    def initial_token(self) -> bytes:
        """The first token, sent without a challenge (both mechanisms here start)."""
        ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The server's next token; the answer to send, or None once complete."""
        ...

    @property
    def complete(self) -> bool: ...


class PlainClient:
    """PLAIN: the whole exchange is the first token; any answer completes it."""

    mechanism_name = "PLAIN"

    def __init__(self, username: str, password: str):
        if "\0" in username or "\0" in password:
            raise ValueError("PLAIN user names and passwords cannot hold NUL")
        self._username = username
        self._password = password
        self._sent = False
        self._complete = False

    def __repr__(self) -> str:
        return f"PlainClient(username={self._username!r})"

    def initial_token(self) -> bytes:
        if self._sent:
            raise SaslClientError("PLAIN: the token was already sent")
        self._sent = True
        return b"\0" + self._username.encode("utf-8") + b"\0" + self._password.encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not self._sent or self._complete:
            raise SaslClientError("PLAIN: unexpected server token")
        self._complete = True
        return None

    @property
    def complete(self) -> bool:
        return self._complete


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """SCRAM-SHA-256/512 (RFC 5802) without channel binding (GS2 header ``n,,``)."""

    _GS2_HEADER = "n,,"

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None):
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._username = username
        self._password = password
        self._nonce = nonce if nonce is not None else random_string()
        if not _NONCE.fullmatch(self._nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without commas")
        self._bare = f"n={_saslname(username)},r={self._nonce}"
        self._state = "initial"
        self._server_signature = b""

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism_name}, username={self._username!r}, state={self._state})"

    def initial_token(self) -> bytes:
        if self._state != "initial":
            raise SaslClientError(f"{self.mechanism_name}: the first message was already sent")
        self._state = "first-sent"
        return (self._GS2_HEADER + self._bare).encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._state == "first-sent":
            return self._final_message(challenge)
        if self._state == "final-sent":
            self._verify_server_final(challenge)
            return None
        raise SaslClientError(f"{self.mechanism_name}: unexpected server token")

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def _fail(self, message: str) -> SaslClientError:
        self._state = "failed"
        return SaslClientError(f"{self.mechanism_name}: {message}")

    def _text(self, challenge: bytes, what: str) -> str:
        if len(challenge) > SERVER_MESSAGE_BYTES_MAX:
            raise self._fail(f"{what} longer than {SERVER_MESSAGE_BYTES_MAX} bytes")
        try:
            text = bytes(challenge).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"{what} is not UTF-8") from None
        if "\0" in text:
            raise self._fail(f"{what} holds NUL")
        return text

    def _final_message(self, challenge: bytes) -> bytes:
        server_first = self._text(challenge, "server-first-message")
        fields = server_first.split(",")
        # r=<nonce>,s=<salt>,i=<iterations>[,<extensions>]; m= (mandatory extension) is refused.
        if len(fields) < 3 or not fields[0].startswith("r=") or not fields[1].startswith("s=") or not fields[2].startswith("i="):
            raise self._fail("malformed server-first-message")
        nonce, salt_b64, iterations_text = fields[0][2:], fields[1][2:], fields[2][2:]
        if not _NONCE.fullmatch(nonce) or not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("the server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._fail("the salt is not base64") from None
        if not salt:
            raise self._fail("empty salt")
        if not iterations_text.isdigit() or len(iterations_text) > 9:
            raise self._fail("the iteration count is not a number")
        iterations = int(iterations_text)
        if iterations < self.mechanism.iterations_min:
            # Kafka's client refuses a weak count: a fake server could ask for 1.
            raise self._fail(f"{iterations} iterations, fewer than the minimum {self.mechanism.iterations_min}")
        salted = scram.salted_password(self.mechanism, self._password, salt, iterations)
        client_key = scram.client_key(self.mechanism, salted)
        channel_binding = base64.b64encode(self._GS2_HEADER.encode("ascii")).decode("ascii")
        without_proof = f"c={channel_binding},r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        signature = self.mechanism.hmac(scram.stored_key(self.mechanism, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self.mechanism.hmac(scram.server_key(self.mechanism, salted), auth_message)
        self._state = "final-sent"
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def _verify_server_final(self, challenge: bytes) -> None:
        server_final = self._text(challenge, "server-final-message")
        if server_final.startswith("e="):
            raise self._fail(f"the server refused the exchange: {server_final[2:][:200]}")
        if not server_final.startswith("v="):
            raise self._fail("malformed server-final-message")
        try:
            signature = base64.b64decode(server_final[2:].split(",", 1)[0], validate=True)
        except (binascii.Error, ValueError):
            raise self._fail("the server signature is not base64") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise self._fail("the server signature does not match: the server does not know the password")
        self._state = "complete"


def client_factory(mechanism: str, entry: JaasEntry | None, where: str) -> Callable[[], MechanismClient]:
    """A factory of fresh exchanges of ``mechanism`` with the credentials of ``entry``.

    ValueError (for the caller to report with the config key) when the
    mechanism is not one a node can use or the entry lacks what it needs;
    ``where`` names the JAAS key in messages."""
    if mechanism not in CLIENT_MECHANISMS:
        raise ValueError(f"{mechanism} cannot be used between nodes; use one of {', '.join(CLIENT_MECHANISMS)}")
    expected = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    if entry is None:
        raise ValueError(f"{where}: required, with username and password options ({expected})")
    if entry.login_module != expected:
        raise ValueError(f"{where}: {mechanism} takes {expected}, not {entry.login_module}")
    missing = [name for name in ("username", "password") if not entry.options.get(name)]
    if missing:
        raise ValueError(
            f"{where}: {' and '.join(missing)} missing (the username and password options are the "
            "credentials this node authenticates to other nodes with)"
        )
    username, password = entry.options["username"], entry.options["password"]
    if mechanism == "PLAIN":
        PlainClient(username, password)  # refuses NUL now rather than at each connection
        return lambda: PlainClient(username, password)
    scram_mechanism = ScramMechanism.for_name(mechanism)
    return lambda: ScramClient(scram_mechanism, username, password)

"""The server side of SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka runs it.

One :class:`ScramServer` serves one exchange, in two client tokens:

1. client-first-message ``n,[a=<authzid>],n=<user>,r=<client nonce>[,<ext>=<value>...]``:
   the answer is the server-first-message ``r=<client nonce><server nonce>,s=<salt>,i=<iterations>``;
2. client-final-message ``c=<base64 gs2 header>,r=<nonce>[,<ext>...],p=<base64 proof>``:
   the proof is checked against the stored key in constant time, and the answer
   is the server-final-message ``v=<base64 server signature>``.

Messages are parsed strictly: at most ``MESSAGE_BYTES_MAX`` bytes of UTF-8
without NUL; the GS2 header must be ``n`` (a client asking for channel binding,
``y`` or ``p=``, is refused, since no ``-PLUS`` mechanism is offered, and so is
a mandatory extension ``m=``); user names escape ``,`` and ``=`` as ``=2C``
and ``=3D`` and any other ``=`` fails; nonces are printable ASCII without
commas; the final message must echo the GS2 header in ``c=`` and end its ``r=`` with
the whole nonce (Kafka's check: librdkafka before 2.2 repeats its own nonce in
front), so a final message replayed from another exchange fails.
An authorization id must equal the user name.

Users come from a lookup callable (user -> ScramCredential or None). A user
the lookup does not know gets a fake credential derived from a per-process
secret (same salt and iteration count every time, and a stored key nobody can
match), so the exchange runs to its last step and fails there exactly as a
wrong password does: same message, same work, nothing to tell whether the user
exists. (Kafka itself fails an unknown user at the first message, with the same
text as a wrong password; this server is stricter.) Every failure the client
can cause answers Kafka's fixed text "Authentication failed during
authentication due to invalid credentials with SASL mechanism ..." except an
authorization id that differs from the user, which Kafka reports as such.

Kafka's extension ``tokenauth=true`` asks for delegation-token authentication:
the user name is then a token id, the token's owner becomes the authorization
id and the token's expiry bounds the session. Without a token lookup such
exchanges are refused. Other extensions are ignored, as RFC 5802 requires.
Pure: no IO, no clock (``now_ms`` is passed in); randomness from ``secrets``.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from broker.security.mechanism import SaslAuthenticationError
from protocol.scram import ITERATIONS_MIN, ScramCredential, ScramMechanism

# Far above any real SCRAM message (a user name, two nonces, a 64-byte proof in
# base64) and far below sasl.server.max.receive.size: a bound on parsing work.
MESSAGE_BYTES_MAX = 8192

TOKEN_AUTH_EXTENSION = "tokenauth"

AUTHZID_MISMATCH_MESSAGE = (
    "Authentication failed: Client requested an authorization id that is different from username"
)

_SASLNAME = re.compile(r"(?:[^=,\x00]|=2C|=3D)+")
_SASLNAME_ESCAPE = re.compile(r"=(2C|3D)")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_EXTENSION_NAME = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class DelegationTokenCredential:
    """A delegation token as the SCRAM server needs it: whose it is, its SCRAM credential, its expiry."""

    owner: str
    credential: ScramCredential
    expiry_timestamp_ms: int


CredentialLookup = Callable[[str], "ScramCredential | None"]
TokenLookup = Callable[[str], "DelegationTokenCredential | None"]


# ------------------------------------------------------------------ random strings


def _base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if value == 0:
        return "0"
    out = []
    while value:  # at most 26 rounds for a 130-bit value
        value, digit = divmod(value, 36)
        out.append(digits[digit])
    return "".join(reversed(out))


def random_string() -> str:
    """A random 130-bit number in base 36, the shape of Kafka's SCRAM nonces and salts."""
    return _base36(secrets.randbits(130))


def new_salt() -> bytes:
    """A salt for a new credential, shaped as Kafka's tools make them (so fake ones look alike)."""
    return random_string().encode("ascii")


# A per-process secret: fake credentials are stable for the life of the broker
# (asking twice for the same unknown user gives the same salt) and unguessable.
_PROCESS_FAKE_KEY = secrets.token_bytes(32)


def fake_credential(mechanism: ScramMechanism, username: str, key: bytes = _PROCESS_FAKE_KEY) -> ScramCredential:
    """A credential for a user who does not exist: looks real, matches no password."""
    seed = mechanism.hmac(key, b"salt\x00" + username.encode("utf-8"))
    salt_value = int.from_bytes(seed[:17], "big") >> 6  # 130 bits, as new_salt draws
    return ScramCredential(
        salt=_base36(salt_value).encode("ascii"),
        stored_key=mechanism.hmac(key, b"stored\x00" + username.encode("utf-8")),
        server_key=mechanism.hmac(key, b"server\x00" + username.encode("utf-8")),
        iterations=ITERATIONS_MIN,
    )


# ------------------------------------------------------------------ parsing


class _Malformed(ValueError):
    """A message that breaks RFC 5802's grammar (answered with the generic failure)."""


def _text(token: bytes, what: str) -> str:
    if len(token) > MESSAGE_BYTES_MAX:
        raise _Malformed(f"{what} is {len(token)} bytes, more than {MESSAGE_BYTES_MAX}")
    try:
        text = bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed(f"{what} is not UTF-8") from None
    if "\x00" in text:
        raise _Malformed(f"{what} contains NUL")
    return text


def _saslname(value: str, what: str) -> str:
    if not _SASLNAME.fullmatch(value):
        raise _Malformed(f"invalid {what}")
    return _SASLNAME_ESCAPE.sub(lambda m: "," if m.group(1) == "2C" else "=", value)


def _extensions(fields: list[str], what: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in fields:  # bounded: the message is at most MESSAGE_BYTES_MAX long
        name, sep, value = item.partition("=")
        if not sep or not value or not _EXTENSION_NAME.fullmatch(name):
            raise _Malformed(f"invalid attribute in {what}")
        if name in found:
            raise _Malformed(f"repeated attribute {name!r} in {what}")
        found[name] = value
    return found


def _base64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise _Malformed(f"{what} is not base64") from None


@dataclass(frozen=True)
class ClientFirstMessage:
    gs2_header: str
    authorization_id: str
    username: str
    nonce: str
    extensions: dict
    bare: str  # client-first-message-bare as received: part of the AuthMessage


def parse_client_first(token: bytes) -> ClientFirstMessage:
    """RFC 5802's client-first-message, strictly (see the module docstring); ValueError if not one."""
    text = _text(token, "client-first-message")
    if text.startswith(("y,", "p=")):
        raise _Malformed("client asks for channel binding, which this server does not offer")
    if not text.startswith("n,"):
        raise _Malformed("invalid GS2 header")
    header_end = text.find(",", 2)
    if header_end < 0:
        raise _Malformed("invalid GS2 header")
    authzid_field = text[2:header_end]
    if authzid_field == "":
        authorization_id = ""
    elif authzid_field.startswith("a="):
        authorization_id = _saslname(authzid_field[2:], "authorization id")
    else:
        raise _Malformed("invalid GS2 header")
    bare = text[header_end + 1 :]
    fields = bare.split(",")
    if fields[0].startswith("m="):
        raise _Malformed("mandatory extension not supported")
    if not fields[0].startswith("n="):
        raise _Malformed("user name missing")
    username = _saslname(fields[0][2:], "user name")
    if len(fields) < 2 or not fields[1].startswith("r=") or not _NONCE.fullmatch(fields[1][2:]):
        raise _Malformed("invalid client nonce")
    return ClientFirstMessage(
        gs2_header=text[: header_end + 1],
        authorization_id=authorization_id,
        username=username,
        nonce=fields[1][2:],
        extensions=_extensions(fields[2:], "client-first-message"),
        bare=bare,
    )


@dataclass(frozen=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof: part of the AuthMessage


def parse_client_final(token: bytes) -> ClientFinalMessage:
    """RFC 5802's client-final-message, strictly; ValueError if not one. Checked against the exchange later."""
    text = _text(token, "client-final-message")
    proof_at = text.rfind(",p=")
    if proof_at < 0:
        raise _Malformed("proof missing")
    without_proof = text[:proof_at]
    fields = without_proof.split(",")
    if not fields[0].startswith("c="):
        raise _Malformed("channel binding missing")
    if len(fields) < 2 or not fields[1].startswith("r=") or not _NONCE.fullmatch(fields[1][2:]):
        raise _Malformed("invalid nonce")
    _extensions(fields[2:], "client-final-message")
    return ClientFinalMessage(
        channel_binding=_base64(fields[0][2:], "channel binding"),
        nonce=fields[1][2:],
        proof=_base64(text[proof_at + 3 :], "proof"),
        without_proof=without_proof,
    )


# ------------------------------------------------------------------ the exchange


class ScramState(enum.Enum):
    CLIENT_FIRST = "client-first"
    CLIENT_FINAL = "client-final"
    COMPLETE = "complete"
    FAILED = "failed"


class ScramServer:
    """One SCRAM exchange on the server side; see the module docstring."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: CredentialLookup,
        *,
        tokens: TokenLookup | None = None,
        fake_key: bytes = _PROCESS_FAKE_KEY,
        server_nonce: Callable[[], str] = random_string,
    ):
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._credentials = credentials
        self._tokens = tokens
        self._fake_key = fake_key
        self._server_nonce = server_nonce
        self.state = ScramState.CLIENT_FIRST
        self._first: ClientFirstMessage | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._unusable: str | None = None  # why the proof cannot succeed (unknown user, ...)
        self._authorization_id: str | None = None
        self._expiry_ms: int | None = None
        self._token_authenticated = False

    # -- MechanismServer

    @property
    def complete(self) -> bool:
        return self.state is ScramState.COMPLETE

    @property
    def authorization_id(self) -> str:
        if not self.complete or self._authorization_id is None:
            raise RuntimeError("SCRAM exchange has not completed")
        return self._authorization_id

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._expiry_ms if self.complete else None

    @property
    def token_authenticated(self) -> bool:
        return self.complete and self._token_authenticated

    def evaluate(self, token: bytes, now_ms: int = 0) -> bytes:
        try:
            if self.state is ScramState.CLIENT_FIRST:
                return self._client_first(token, now_ms)
            if self.state is ScramState.CLIENT_FINAL:
                return self._client_final(token)
            raise SaslAuthenticationError(self.mechanism_name, f"token received in state {self.state.value}")
        except _Malformed as error:
            self._fail()
            raise SaslAuthenticationError(self.mechanism_name, f"malformed SCRAM message: {error}") from None
        except SaslAuthenticationError:
            self._fail()
            raise

    # -- steps

    def _client_first(self, token: bytes, now_ms: int) -> bytes:
        first = parse_client_first(token)
        if first.authorization_id and first.authorization_id != first.username:
            raise SaslAuthenticationError(
                self.mechanism_name,
                f"authorization id {first.authorization_id!r} differs from user {first.username!r}",
                client_message=AUTHZID_MISMATCH_MESSAGE,
            )
        credential: ScramCredential | None
        if first.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true":
            if self._tokens is None:
                raise SaslAuthenticationError(
                    self.mechanism_name, "delegation token authentication is not enabled"
                )
            token_credential = self._tokens(first.username)
            if token_credential is not None and token_credential.expiry_timestamp_ms <= now_ms:
                self._unusable = f"delegation token {first.username!r} has expired"
                token_credential = None
            elif token_credential is None:
                self._unusable = f"unknown delegation token {first.username!r}"
            credential = token_credential.credential if token_credential else None
            if token_credential is not None:
                self._authorization_id = token_credential.owner
                self._expiry_ms = token_credential.expiry_timestamp_ms
                self._token_authenticated = True
        else:
            credential = self._credentials(first.username)
            if credential is None:
                self._unusable = f"unknown user {first.username!r}"
            self._authorization_id = first.username
        if credential is not None and self._unusable is None:
            self._unusable = self._credential_problem(first.username, credential)
        # Made for every user, known or not, so both paths do the same work.
        fake = fake_credential(self.mechanism, first.username, self._fake_key)
        if credential is None or self._unusable is not None:
            credential = fake
        self._first = first
        self._credential = credential
        self._nonce = first.nonce + self._server_nonce()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self.state = ScramState.CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _credential_problem(self, username: str, credential: ScramCredential) -> str | None:
        key_length = self.mechanism.key_length_bytes
        if credential.iterations < ITERATIONS_MIN:
            return f"credential of {username!r} has {credential.iterations} iterations, fewer than {ITERATIONS_MIN}"
        if len(credential.stored_key) != key_length or len(credential.server_key) != key_length:
            return f"credential of {username!r} has keys of the wrong length for {self.mechanism_name}"
        return None

    def _client_final(self, token: bytes) -> bytes:
        final = parse_client_final(token)
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        if final.channel_binding != first.gs2_header.encode("utf-8"):
            raise _Malformed("channel binding does not repeat the GS2 header")
        # Kafka only checks that the nonce ends with this exchange's: librdkafka
        # before 2.2 sends its own nonce again in front of it, and the proof
        # covers the final message as sent, so freshness is kept.
        nonce = final.nonce.encode("utf-8")
        expected = self._nonce.encode("utf-8")
        if len(nonce) < len(expected) or not hmac.compare_digest(nonce[len(nonce) - len(expected) :], expected):
            raise SaslAuthenticationError(self.mechanism_name, "nonce of the final message is not this exchange's")
        key_length = self.mechanism.key_length_bytes
        if len(final.proof) != key_length:
            raise _Malformed(f"proof is {len(final.proof)} bytes, not {key_length}")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(final.proof, client_signature))
        proof_matches = hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key)
        if self._unusable is not None:
            raise SaslAuthenticationError(self.mechanism_name, self._unusable)
        if not proof_matches:
            raise SaslAuthenticationError(self.mechanism_name, f"wrong proof for user {first.username!r}")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._first = None
        self._credential = None
        self.state = ScramState.COMPLETE
        return b"v=" + base64.b64encode(server_signature)

    def _fail(self) -> None:
        self.state = ScramState.FAILED
        self._first = None
        self._credential = None
        self._authorization_id = None
        self._expiry_ms = None
        self._token_authenticated = False

"""SCRAM key derivation (RFC 5802, RFC 7677) for SCRAM-SHA-256 and SCRAM-SHA-512.

Only the arithmetic the broker's SCRAM server and the controller share: the
salted password ``Hi(password, salt, i)`` (PBKDF2-HMAC with the mechanism's
hash, its output as long as one digest), the client, stored and server keys,
and the credential kept for a user, which never holds the password itself.

Passwords are encoded as UTF-8 without SASLprep, as Kafka's ScramFormatter
does, so a credential made here matches one made by Kafka's tools for the same
password, salt and iteration count.

Each mechanism carries Kafka's facts: its type byte in UserScramCredentialRecord
and AlterUserScramCredentials (1 and 2), and the iteration bounds Kafka
enforces when credentials are set (4096 to 16384). Pure: stdlib only.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from dataclasses import dataclass, field


class ScramMechanism(enum.Enum):
    """The SCRAM mechanisms Kafka supports, named as in ``sasl.enabled.mechanisms``."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def mechanism_name(self) -> str:
        return self.value

    @property
    def hash_name(self) -> str:
        """The hashlib name of the mechanism's hash function."""
        return _HASH_NAMES[self]

    @property
    def type_code(self) -> int:
        """Kafka's mechanism byte in UserScramCredentialRecord and the SCRAM admin APIs."""
        return _TYPE_CODES[self]

    @property
    def key_length_bytes(self) -> int:
        """Length of every key, proof and signature: one digest of the hash."""
        return hashlib.new(self.hash_name).digest_size

    @property
    def iterations_min(self) -> int:
        return ITERATIONS_MIN

    @property
    def iterations_max(self) -> int:
        return ITERATIONS_MAX

    def digest(self, data: bytes) -> bytes:
        """H(data)."""
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, message: bytes) -> bytes:
        """HMAC(key, message) with the mechanism's hash."""
        return hmac.new(key, message, self.hash_name).digest()

    @classmethod
    def for_name(cls, name: str) -> ScramMechanism | None:
        """The mechanism called ``name`` (exact, case-sensitive, as Kafka matches it), or None."""
        return _BY_NAME.get(name)

    @classmethod
    def for_type_code(cls, code: int) -> ScramMechanism | None:
        return _BY_TYPE_CODE.get(code)


# Kafka's ScramMechanism: the bounds AlterUserScramCredentials and kafka-storage
# enforce, and the least a SCRAM server accepts in a stored credential.
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384

_HASH_NAMES = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}
_TYPE_CODES = {ScramMechanism.SCRAM_SHA_256: 1, ScramMechanism.SCRAM_SHA_512: 2}
_BY_NAME = {m.value: m for m in ScramMechanism}
_BY_TYPE_CODE = {code: m for m, code in _TYPE_CODES.items()}


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps for one user and mechanism (RFC 5802 section 3).

    The keys are left out of ``repr`` so that a credential printed in a log line
    gives nothing an attacker could replay against this server.
    """

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def _password_bytes(password: str | bytes) -> bytes:
    return password.encode("utf-8") if isinstance(password, str) else bytes(password)


def salted_password(mechanism: ScramMechanism, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = Hi(password, salt, iterations).

    Hi is PBKDF2 with HMAC of the mechanism's hash and one digest of output
    (RFC 5802 section 2.2). ``iterations`` must be at least 1; the range Kafka
    accepts for stored credentials is checked by whoever stores them.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"SCRAM iterations must be a positive integer, not {iterations!r}")
    return hashlib.pbkdf2_hmac(mechanism.hash_name, _password_bytes(password), bytes(salt), iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    """ClientKey = HMAC(SaltedPassword, "Client Key")."""
    return mechanism.hmac(salted, b"Client Key")


def stored_key(mechanism: ScramMechanism, client_key_bytes: bytes) -> bytes:
    """StoredKey = H(ClientKey)."""
    return mechanism.digest(client_key_bytes)


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    """ServerKey = HMAC(SaltedPassword, "Server Key")."""
    return mechanism.hmac(salted, b"Server Key")


def credential_from_salted_password(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential for a salted password, as AlterUserScramCredentials carries it.

    Any non-empty length is taken, as Kafka takes it (an HMAC key of any
    length); only an empty one is refused, which Kafka's HMAC cannot use.
    """
    if not salted:
        raise ValueError("SCRAM salted password must not be empty")
    return ScramCredential(
        salt=bytes(salt),
        stored_key=stored_key(mechanism, client_key(mechanism, salted)),
        server_key=server_key(mechanism, salted),
        iterations=iterations,
    )


def credential_from_password(
    mechanism: ScramMechanism, password: str | bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential a server stores for ``password``: salt, StoredKey, ServerKey, iterations."""
    return credential_from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )

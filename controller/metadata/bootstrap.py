"""Bootstrap metadata: the records a new quorum writes before anything else (KIP-900).

``pybroker storage format --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'``
(repeatable, kafka-storage.sh's syntax) turns each argument into a
UserScramCredentialRecord, and the records are written to
``<metadata.log.dir>/bootstrap.checkpoint`` (the name Kafka 3.5-3.9 used) in
the snapshot file layout (``snapshot_file.py``: header, record batches,
footer). Only the salt, StoredKey, ServerKey and iteration count are kept,
never the password nor the salted password.

An argument is ``<mechanism>=[<key>=<value>,...]`` with the mechanism
SCRAM-SHA-256 or SCRAM-SHA-512 and the keys ``name`` (required), ``password``,
or ``saltedpassword`` with ``salt`` (both base64), and ``iterations`` (4096 by
default, 4096..16384 as Kafka's ScramMechanism allows); a value may be in
double quotes. Anything else is a :class:`BootstrapError` with one line saying
what is wrong (never the password). The salt, when not given, is 32 random
bytes.

``--feature name=level`` (repeatable, kafka-storage.sh's flag) becomes a
FeatureLevelRecord in the same file, a level 0 included (it says "not
finalized", where the absence of a record means the default); a feature this
node does not know, or a level outside its supported range, is refused
(controller/features.py).

A controller reads the file at start (:func:`read_bootstrap_file`); the
active controller proposes the feature levels (the file's, else each
feature's default, controller/features.py) and the file's other records as
the first batch only when the metadata log holds no metadata record yet
(``QuorumController``), so a node formatted with ``--add-scram`` or
``--feature`` that joins a quorum with a log, or restarts, changes nothing:
the records are in the log once, as Kafka's bootstrap is. Unlike Kafka's
file, this one holds no ``metadata.version``: pybroker has none.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from pathlib import Path

from controller.features import check_level_supported
from controller.metadata.records import FEATURE_LEVEL_RECORD, USER_SCRAM_CREDENTIAL_RECORD, loggable_record
from controller.metadata.snapshot_file import encode_record_file, iter_record_file
from protocol.exceptions import ProtocolError
from protocol.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    ScramMechanism,
    credential_from_salted_password,
    salted_password,
)
from storage.checkpoint import write_atomically

BOOTSTRAP_FILE = "bootstrap.checkpoint"
ITERATIONS_DEFAULT = 4096
SALT_BYTES = 32
# Record types a bootstrap file may carry (what --add-scram and --feature make).
_ALLOWED_TYPES = {USER_SCRAM_CREDENTIAL_RECORD.api_key, FEATURE_LEVEL_RECORD.api_key}
_KEYS = ("name", "password", "salt", "saltedpassword", "iterations")


class BootstrapError(ValueError):
    """A bad --add-scram or --feature argument or bootstrap file; the message is one line."""


def _decode_base64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BootstrapError(f"--add-scram: {what} is not valid base64") from None


def parse_scram_argument(argument: str, *, random_bytes=os.urandom):
    """One ``--add-scram`` argument -> its UserScramCredentialRecord (see the module docstring)."""
    text = argument.strip()
    mechanism_name, equals, config = text.partition("=")
    if not equals:
        raise BootstrapError(f"--add-scram: no '=' after the mechanism in {mechanism_name[:40]!r}")
    mechanism = ScramMechanism.for_name(mechanism_name.strip())
    if mechanism is None:
        raise BootstrapError(
            f"--add-scram: mechanism {mechanism_name.strip()[:40]!r} is not supported (SCRAM-SHA-256 or SCRAM-SHA-512)"
        )
    if not config.startswith("["):
        raise BootstrapError(f"--add-scram: the {mechanism.value} settings must start with '['")
    if not config.endswith("]"):
        raise BootstrapError(f"--add-scram: the {mechanism.value} settings must end with ']'")
    values: dict[str, str] = {}
    for component in config[1:-1].split(","):
        key, equals, value = component.partition("=")
        key = key.strip()
        if not equals:
            # The component may be part of a password: name only what it is not.
            raise BootstrapError(f"--add-scram: a {mechanism.value} setting has no '=' (expected key=value)")
        if key not in _KEYS:
            raise BootstrapError(f"--add-scram: unknown setting {key[:40]!r} (known: {', '.join(_KEYS)})")
        if key in values:
            raise BootstrapError(f"--add-scram: {key} is given twice")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        values[key] = value
    name = values.get("name")
    if not name:
        raise BootstrapError("--add-scram: 'name' is required and must not be empty")
    iterations_text = values.get("iterations")
    if iterations_text is None:
        iterations = ITERATIONS_DEFAULT
    else:
        try:
            iterations = int(iterations_text)
        except ValueError:
            raise BootstrapError(f"--add-scram: iterations {iterations_text[:20]!r} is not an integer") from None
    if iterations < ITERATIONS_MIN:
        raise BootstrapError(f"--add-scram: iterations must be >= {ITERATIONS_MIN} for {mechanism.value}")
    if iterations > ITERATIONS_MAX:
        raise BootstrapError(f"--add-scram: iterations must be <= {ITERATIONS_MAX} for {mechanism.value}")
    salt = _decode_base64(values["salt"], "salt") if "salt" in values else None
    if "password" in values:
        if "saltedpassword" in values:
            raise BootstrapError("--add-scram: give 'password' or 'saltedpassword', not both")
        if salt is None:
            salt = random_bytes(SALT_BYTES)
        salted = salted_password(mechanism, values["password"], salt, iterations)
    elif "saltedpassword" in values:
        if salt is None:
            raise BootstrapError("--add-scram: 'saltedpassword' needs 'salt'")
        salted = _decode_base64(values["saltedpassword"], "saltedpassword")
        if not salted:
            raise BootstrapError("--add-scram: saltedpassword must not be empty")
    else:
        raise BootstrapError("--add-scram: give 'password' or 'saltedpassword' (with 'salt')")
    if not salt:
        raise BootstrapError("--add-scram: salt must not be empty")
    credential = credential_from_salted_password(mechanism, salted, salt, iterations)
    return USER_SCRAM_CREDENTIAL_RECORD(
        name=name,
        mechanism=mechanism.type_code,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=iterations,
    )


def scram_records(arguments: list[str], *, random_bytes=os.urandom) -> list:
    """The records of every ``--add-scram`` argument; one user and mechanism given twice is refused."""
    records = []
    seen: set[tuple[str, int]] = set()
    for argument in arguments:
        record = parse_scram_argument(argument, random_bytes=random_bytes)
        key = (record.name, record.mechanism)
        if key in seen:
            mechanism = ScramMechanism.for_type_code(record.mechanism).value
            raise BootstrapError(f"--add-scram: {mechanism} credential of {record.name!r} is given twice")
        seen.add(key)
        records.append(record)
    return records


def feature_records(arguments: list[str]) -> list:
    """The FeatureLevelRecord of every ``--feature name=level`` argument; a
    feature given twice, unknown, or at a level this node cannot run is refused."""
    records = []
    seen: set[str] = set()
    for argument in arguments:
        name, equals, level_text = argument.partition("=")
        name = name.strip()
        if not equals or not name:
            raise BootstrapError(f"--feature: expected name=level, not {argument[:60]!r}")
        try:
            level = int(level_text.strip())
        except ValueError:
            raise BootstrapError(f"--feature: the level of {name} is not an integer: {level_text.strip()[:20]!r}") from None
        problem = check_level_supported(name, level)
        if problem is not None:
            raise BootstrapError(f"--feature: {problem}")
        if name in seen:
            raise BootstrapError(f"--feature: {name} is given twice")
        seen.add(name)
        records.append(FEATURE_LEVEL_RECORD(name=name, feature_level=level))
    return records


def write_bootstrap_file(directory: Path, records: list, *, now_ms: int | None = None) -> Path:
    """Write ``records`` as ``<directory>/bootstrap.checkpoint`` (atomically)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    path = Path(directory) / BOOTSTRAP_FILE
    Path(directory).mkdir(parents=True, exist_ok=True)
    write_atomically(path, encode_record_file(records, now_ms, now_ms))
    return path


def read_bootstrap_file(directory: Path) -> list[tuple[int, object]]:
    """The (api key, record) pairs of ``<directory>/bootstrap.checkpoint``; [] without one.
    A damaged file, or one with records --add-scram does not make, is a BootstrapError."""
    path = Path(directory) / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BootstrapError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        records = [record for batch in iter_record_file(data) for record in batch]
    except (ProtocolError, ValueError) as exc:
        raise BootstrapError(f"{path}: not a bootstrap metadata file ({exc})") from None
    for api_key, record in records:
        if api_key not in _ALLOWED_TYPES:
            raise BootstrapError(f"{path}: unexpected record {type(record).__name__} (only SCRAM credentials and feature levels)")
        if api_key == FEATURE_LEVEL_RECORD.api_key:
            # Formatted by a pybroker that supported a level this one does not.
            problem = check_level_supported(record.name, record.feature_level)
            if problem is not None:
                raise BootstrapError(f"{path}: {problem}")
    return records


def describe_records(records: list) -> str:
    """The records for a log line, secrets redacted."""
    return ", ".join(loggable_record(r if not isinstance(r, tuple) else r[1]) for r in records)


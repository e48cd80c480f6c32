"""The ``_schemas`` topic's records in Confluent Schema Registry's own format (pure).

Keys and values are JSON objects, as Confluent's registry (and Karapace) write
them, so a cluster link or MirrorMaker can carry the topic and either registry
can read it:

- SCHEMA: key ``{"keytype": "SCHEMA", "subject", "version", "magic": 1}``, value
  ``{"subject", "version", "id", "schemaType" (absent for AVRO), "schema",
  "references", "deleted"}``; a soft delete rewrites the value with
  ``"deleted": true``.
- CONFIG: key ``{"keytype": "CONFIG", "subject" (null: the global config),
  "magic": 0}``, value ``{"compatibilityLevel"}``; a null value removes a
  subject's config.
- MODE: key ``{"keytype": "MODE", "subject" (null: global), "magic": 0}``,
  value ``{"mode"}``; a null value removes a subject's mode.
- DELETE_SUBJECT: key ``{"keytype": "DELETE_SUBJECT", "subject", "magic": 0}``,
  value ``{"subject", "version"}``: every version up to ``version`` is soft-deleted.
- CLEAR_SUBJECT: key ``{"keytype": "CLEAR_SUBJECT", "subject", "magic": 0}``,
  value ``{"subject"}``: the subject's soft-deleted versions are gone.
- NOOP: key ``{"keytype": "NOOP", "magic": 0}``, no meaning to the state.
- CONTEXT: key ``{"keytype": "CONTEXT", "tenant": "default", "context", "magic": 0}``,
  value ``{"tenant", "context"}``: a context other than the default (``.staging``)
  that has had a schema registered; a null value (DELETE /contexts/{ctx}) ends it.
- The highest id a context gave out, kept past compaction: key ``{"keytype": "NOOP",
  "context", "magic": 0}``, value ``{"context", "maxId"}``. Confluent's registry
  reads any NOOP key as its own (unknown fields ignored) and skips the record, value
  unread: for it the record is a no-op; for pybroker it is a floor under the
  context's next id once the SCHEMA record that held the highest id is tombstoned
  and compacted away (Confluent's own registry keeps no such floor).

Subjects are written as Confluent's registry writes them: a subject of the default
context bare (``orders-value``), one of another context qualified
(``:.staging:orders-value``), in keys and values alike; a context's own CONFIG or
MODE key has the subject ``:.staging:`` (the empty subject of that context).

A null value (a tombstone) on a SCHEMA key deletes that version permanently.
Keys are written with sorted fields and no spaces, so one key always has the
same bytes and compaction keeps only its last record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP, CONTEXT = (
    "SCHEMA", "CONFIG", "MODE", "DELETE_SUBJECT", "CLEAR_SUBJECT", "NOOP", "CONTEXT",
)  # fmt: skip
KEY_TYPES = (SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP, CONTEXT)
# The tenant Confluent's registry writes in CONTEXT records when it serves one tenant.
DEFAULT_TENANT = "default"
# Confluent's SCHEMA keys carry magic 1, the others 0.
SCHEMA_KEY_MAGIC = 1
OTHER_KEY_MAGIC = 0


class RecordUnreadable(ValueError):
    """A ``_schemas`` record that is not one of the shapes above."""


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class SchemaKey:
    subject: str
    version: int


@dataclass(frozen=True)
class SchemaValue:
    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False


@dataclass(frozen=True)
class ConfigKey:
    subject: str | None


@dataclass(frozen=True)
class ModeKey:
    subject: str | None


@dataclass(frozen=True)
class DeleteSubjectKey:
    subject: str


@dataclass(frozen=True)
class ClearSubjectKey:
    subject: str


@dataclass(frozen=True)
class NoopKey:
    pass


@dataclass(frozen=True)
class ContextKey:
    context: str


@dataclass(frozen=True)
class MaxIdKey:
    """The NOOP key carrying a context's highest id (see the module's docstring)."""

    context: str


Key = SchemaKey | ConfigKey | ModeKey | DeleteSubjectKey | ClearSubjectKey | NoopKey | ContextKey | MaxIdKey


def _dump(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def encode_key(key: Key) -> bytes:
    if isinstance(key, SchemaKey):
        return _dump({"keytype": SCHEMA, "subject": key.subject, "version": key.version, "magic": SCHEMA_KEY_MAGIC})
    if isinstance(key, ConfigKey):
        return _dump({"keytype": CONFIG, "subject": key.subject, "magic": OTHER_KEY_MAGIC})
    if isinstance(key, ModeKey):
        return _dump({"keytype": MODE, "subject": key.subject, "magic": OTHER_KEY_MAGIC})
    if isinstance(key, DeleteSubjectKey):
        return _dump({"keytype": DELETE_SUBJECT, "subject": key.subject, "magic": OTHER_KEY_MAGIC})
    if isinstance(key, ClearSubjectKey):
        return _dump({"keytype": CLEAR_SUBJECT, "subject": key.subject, "magic": OTHER_KEY_MAGIC})
    if isinstance(key, NoopKey):
        return _dump({"keytype": NOOP, "magic": OTHER_KEY_MAGIC})
    if isinstance(key, ContextKey):
        return _dump({"keytype": CONTEXT, "tenant": DEFAULT_TENANT, "context": key.context, "magic": OTHER_KEY_MAGIC})
    if isinstance(key, MaxIdKey):
        return _dump({"keytype": NOOP, "context": key.context, "magic": OTHER_KEY_MAGIC})
    raise TypeError(f"not a _schemas key: {key!r}")


def encode_schema_value(value: SchemaValue) -> bytes:
    body = {
        "subject": value.subject,
        "version": value.version,
        "id": value.schema_id,
        "schema": value.schema,
        "references": [{"name": r.name, "subject": r.subject, "version": r.version} for r in value.references],
        "deleted": value.deleted,
    }
    if value.schema_type != "AVRO":
        body["schemaType"] = value.schema_type
    return _dump(body)


def encode_config_value(level: str) -> bytes:
    return _dump({"compatibilityLevel": level})


def encode_mode_value(mode: str) -> bytes:
    return _dump({"mode": mode})


def encode_delete_subject_value(subject: str, version: int) -> bytes:
    return _dump({"subject": subject, "version": version})


def encode_clear_subject_value(subject: str) -> bytes:
    return _dump({"subject": subject})


def encode_context_value(context: str) -> bytes:
    return _dump({"tenant": DEFAULT_TENANT, "context": context})


def encode_max_id_value(context: str, max_id: int) -> bytes:
    return _dump({"context": context, "maxId": max_id})


def _load(raw: bytes, what: str) -> dict:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordUnreadable(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RecordUnreadable(f"{what} is not a JSON object")
    return obj


def _string(obj: dict, name: str, what: str, *, nullable: bool = False) -> str | None:
    value = obj.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise RecordUnreadable(f"{what} has no string {name!r}")
    return value


def _int(obj: dict, name: str, what: str) -> int:
    value = obj.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RecordUnreadable(f"{what} has no integer {name!r}")
    return value


def decode_key(raw: bytes) -> Key:
    obj = _load(raw, "key")
    keytype = obj.get("keytype")
    if keytype == SCHEMA:
        return SchemaKey(_string(obj, "subject", "SCHEMA key"), _int(obj, "version", "SCHEMA key"))
    if keytype == CONFIG:
        return ConfigKey(_string(obj, "subject", "CONFIG key", nullable=True))
    if keytype == MODE:
        return ModeKey(_string(obj, "subject", "MODE key", nullable=True))
    if keytype == DELETE_SUBJECT:
        return DeleteSubjectKey(_string(obj, "subject", "DELETE_SUBJECT key"))
    if keytype == CLEAR_SUBJECT:
        return ClearSubjectKey(_string(obj, "subject", "CLEAR_SUBJECT key"))
    if keytype == NOOP:
        context = obj.get("context")
        return MaxIdKey(context) if isinstance(context, str) else NoopKey()
    if keytype == CONTEXT:
        return ContextKey(_string(obj, "context", "CONTEXT key"))
    raise RecordUnreadable(f"unknown keytype {keytype!r}")


def decode_schema_value(raw: bytes) -> SchemaValue:
    obj = _load(raw, "SCHEMA value")
    references = []
    for ref in obj.get("references") or []:
        if not isinstance(ref, dict):
            raise RecordUnreadable("SCHEMA value has a reference that is not an object")
        references.append(Reference(_string(ref, "name", "reference"), _string(ref, "subject", "reference"), _int(ref, "version", "reference")))
    schema_type = obj.get("schemaType") or "AVRO"
    if not isinstance(schema_type, str):
        raise RecordUnreadable("SCHEMA value has a schemaType that is not a string")
    return SchemaValue(
        subject=_string(obj, "subject", "SCHEMA value"),
        version=_int(obj, "version", "SCHEMA value"),
        schema_id=_int(obj, "id", "SCHEMA value"),
        schema_type=schema_type,
        schema=_string(obj, "schema", "SCHEMA value"),
        references=tuple(references),
        deleted=bool(obj.get("deleted", False)),
    )


def decode_config_value(raw: bytes) -> str:
    return _string(_load(raw, "CONFIG value"), "compatibilityLevel", "CONFIG value")


def decode_mode_value(raw: bytes) -> str:
    return _string(_load(raw, "MODE value"), "mode", "MODE value")


def decode_delete_subject_value(raw: bytes) -> int:
    return _int(_load(raw, "DELETE_SUBJECT value"), "version", "DELETE_SUBJECT value")


def decode_max_id_value(raw: bytes) -> int:
    return _int(_load(raw, "NOOP value"), "maxId", "NOOP value")

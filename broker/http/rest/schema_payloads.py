"""The REST proxy's v3 produce with a schema: keys and values serialized by the registry.

A key or value ``{"type": "AVRO" | "PROTOBUF" | "JSONSCHEMA", "data": ...}``
(or without ``type`` but with one of the schema fields) names its schema as
Confluent's REST proxy reads it:

- ``schema_id``: that schema;
- else ``schema_version`` (a number or ``latest``) of the subject;
- else ``schema`` (the schema text): the version of the subject holding it
  (it must be registered: the proxy registers nothing);
- else the subject's latest version.

The subject is ``subject``, else the one ``subject_name_strategy`` gives
(``TOPIC_NAME``, the default: ``<topic>-key`` / ``<topic>-value``;
``RECORD_NAME`` and ``TOPIC_RECORD_NAME`` need the schema by ``schema_id``).
The data is written by the schema (Avro binary, JSON text checked against its
JSON schema, the first Protobuf message from protobuf's JSON mapping) behind
Confluent's framing, as the serializers write it, so consumers read it with
the deserializers. The registry is this broker's replay of ``_schemas``,
caught up once per POST (broker/schemas/service.py).
"""

from __future__ import annotations

from broker.http.rest.errors import RestError, bad_request
from protocol.schema_formats import formats
from broker.schemas.state import RegistryError
from protocol.schema_formats.framing import frame

# The REST proxy's type names, and the registry's.
REGISTRY_TYPES = {"AVRO": "AVRO", "PROTOBUF": "PROTOBUF", "JSONSCHEMA": "JSON"}
SCHEMA_FIELDS = ("schema_id", "schema_version", "schema", "subject", "subject_name_strategy")
STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")


class SchemaPayload:
    """A key or value to serialize by the registry once it has been caught up."""

    __slots__ = ("data", "kind", "part", "what")

    def __init__(self, kind: str | None, part: dict, what: str):
        self.kind = kind
        self.part = part
        self.what = what
        self.data = part.get("data")


def schema_payload(part: dict, what: str) -> SchemaPayload | None:
    """A SchemaPayload when ``part`` asks for a schema; None when it does not."""
    kind = part.get("type")
    if isinstance(kind, str) and kind.upper() in REGISTRY_TYPES:
        return SchemaPayload(kind.upper(), part, what)
    if kind is None and any(field in part for field in SCHEMA_FIELDS):
        return SchemaPayload(None, part, what)
    return None


def _registry_error(exc: RegistryError, what: str) -> RestError:
    return bad_request(f"'{what}': {exc.message} (schema registry error {exc.code})")


def serialize(state, topic: str, payload: SchemaPayload) -> tuple[bytes, dict]:
    """(the framed bytes, the response's {"type", "size"}) of ``payload``; RestError 400 when it cannot be."""
    part, what = payload.part, payload.what
    is_key = what == "key"
    strategy = part.get("subject_name_strategy", "TOPIC_NAME")
    if not isinstance(strategy, str) or strategy.upper() not in STRATEGIES:
        raise bad_request(f"'{what}.subject_name_strategy' must be one of {', '.join(STRATEGIES)}.")
    strategy = strategy.upper()
    try:
        schema_id, parsed = _schema_of(state, topic, part, what, is_key, strategy, payload.kind)
    except RegistryError as exc:
        raise _registry_error(exc, what) from None
    if payload.kind is not None and REGISTRY_TYPES[payload.kind] != parsed.schema_type:
        raise bad_request(f"'{what}.type' is {payload.kind} but schema {schema_id} is {parsed.schema_type}.")
    try:
        body = formats.serialize(parsed, payload.data)
    except formats.SerializationError as exc:
        raise bad_request(f"'{what}.data' cannot be serialized with schema {schema_id}: {exc}") from None
    encoded = frame(schema_id, body)
    kind = payload.kind or next(k for k, v in REGISTRY_TYPES.items() if v == parsed.schema_type)
    return encoded, {"type": kind, "size": len(encoded)}


def _subject(part: dict, topic: str, is_key: bool, strategy: str, what: str, record_name: str | None) -> str:
    subject = part.get("subject")
    if subject is not None:
        if not isinstance(subject, str) or not subject:
            raise bad_request(f"'{what}.subject' must be a non-empty string.")
        return subject
    if strategy == "TOPIC_NAME":
        return f"{topic}-{'key' if is_key else 'value'}"
    if record_name is None:
        raise bad_request(f"'{what}.subject_name_strategy' {strategy} needs 'schema_id' (a schema with a record name).")
    return record_name if strategy == "RECORD_NAME" else f"{topic}-{record_name}"


def _schema_of(state, topic: str, part: dict, what: str, is_key: bool, strategy: str, kind: str | None):
    schema_id = part.get("schema_id")
    if schema_id is not None:
        if type(schema_id) is not int or schema_id < 0:
            raise bad_request(f"'{what}.schema_id' must be a non-negative integer.")
        state.schema_by_id(schema_id)  # 40403 when unknown
        return schema_id, state.parsed(schema_id)
    subject = _subject(part, topic, is_key, strategy, what, None)
    version = part.get("schema_version")
    text = part.get("schema")
    if version is not None:
        if not (type(version) is int or version == "latest"):
            raise bad_request(f"'{what}.schema_version' must be a version number or \"latest\".")
        value = state.version_of(subject, str(version))
    elif text is not None:
        if not isinstance(text, str):
            raise bad_request(f"'{what}.schema' must be the schema's text.")
        parsed = state.parse(REGISTRY_TYPES[kind or "AVRO"], text, [])
        value = state.lookup(subject, parsed, [])
        if value is None:
            raise bad_request(f"'{what}.schema' is not registered under subject {subject}.")
    else:
        value = state.version_of(subject, "latest")
    return value.schema_id, state.parsed_of(value)


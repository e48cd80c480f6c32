"""Schema formats of the schema registry: parsing, canonical forms, compatibility, payload checks (pure).

The registry (broker/schemas/registry*.py) and validation on produce call
only what this module exports; each format lives in its own module
(``avro_format.py``, ``json_format.py``, ``protobuf_format.py``) behind it.

- :func:`parse_schema` reads a schema text of a type (AVRO, JSON, PROTOBUF)
  with its references already resolved to their schema texts, and raises
  :class:`SchemaInvalid` (Confluent's 42201) when it cannot be read.
- ``ParsedSchema.canonical`` is what two registrations of the same schema
  share (lookups and "already registered" compare it); ``normalized`` is the
  text stored when a client asks for ``normalize=true``.
- :func:`compatibility_errors` checks a new schema against the earlier
  versions a compatibility level names; an empty list means compatible.
- :func:`payload_error` checks a serialized payload (after Confluent's
  magic byte and schema id) against its schema, for ``schema.validation.mode=full``.

Each format module provides ``parse(text, references) -> ParsedSchema``,
``reader_errors(reader, writer) -> list[str]`` (why a consumer using ``reader``
cannot read data written with ``writer``) and ``payload_error(schema, payload)``;
this module turns the levels into reader/writer pairs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from protocol.schema_formats.parsed_schema import ParsedSchema, SchemaInvalid, SerializationError

__all__ = [
    "COMPATIBILITY_LEVELS",
    "DEFAULT_COMPATIBILITY",
    "DEFAULT_SCHEMA_TYPE",
    "SCHEMA_TYPES",
    "ParsedSchema",
    "SchemaInvalid",
    "SchemaReference",
    "compatibility_errors",
    "parse_schema",
    "payload_checker",
    "payload_error",
]

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
DEFAULT_SCHEMA_TYPE = "AVRO"
COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_COMPATIBILITY = "BACKWARD"


@dataclass(frozen=True)
class SchemaReference:
    """A reference of a schema: the ``name`` it is imported by, and the subject and version holding it."""

    name: str
    subject: str
    version: int


def parse_schema(schema_type: str, text: str, references: Mapping[str, str] | None = None) -> ParsedSchema:
    """``text`` read as ``schema_type``; ``references``: import name -> the referenced schema's text."""
    module = _format_module(schema_type)
    try:
        return module.parse(text, dict(references or {}))
    except RecursionError as error:  # the formats' walks recurse once per nesting level
        raise SchemaInvalid(f"Invalid {schema_type} schema: nested too deeply") from error


def compatibility_errors(new: ParsedSchema, earlier: Sequence[ParsedSchema], level: str) -> list[str]:
    """Why ``new`` is not compatible at ``level`` with ``earlier`` (oldest first;
    non-transitive levels look only at the last); [] when it is."""
    if level not in COMPATIBILITY_LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}")
    if level == "NONE" or not earlier:
        return []
    compared = list(earlier) if level.endswith("_TRANSITIVE") else [earlier[-1]]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    errors: list[str] = []
    # Newest first, as Confluent's registry walks them, so the first message names the closest version.
    for position in range(len(compared) - 1, -1, -1):
        old = compared[position]
        # Name the earlier schema only when more than one was compared.
        where = _describe_earlier(len(earlier) - len(compared) + position, len(earlier)) if len(compared) > 1 else ""
        if old.schema_type != new.schema_type:
            errors.append(f"{where}schema type changed from {old.schema_type} to {new.schema_type}")
            continue
        # BACKWARD: a consumer on the new schema reads what producers wrote with the old one.
        # FORWARD: a consumer still on the old schema reads what producers write with the new one.
        pairs = [(new, old)] * backward + [(old, new)] * forward
        for reader, writer in pairs:
            try:
                errors.extend(
                    where + message for message in _format_module(new.schema_type).reader_errors(reader, writer)
                )
            except RecursionError:
                errors.append(f"{where}the schemas are nested too deeply to compare")
    return errors


def payload_error(schema: ParsedSchema, payload: bytes) -> str | None:
    """Why ``payload`` (the bytes after the magic byte and schema id; for
    Protobuf, message indexes first) does not decode as ``schema``; None when it does."""
    try:
        return _format_module(schema.schema_type).payload_error(schema, payload)
    except RecursionError:
        return _TOO_DEEP


def payload_checker(schema: ParsedSchema) -> Callable[[bytes], str | None]:
    """:func:`payload_error` bound to ``schema``, for checking many payloads
    by one schema: what can be prepared once per schema (the format's module,
    Avro's reader) is. A format module's own ``payload_checker`` answers
    RecursionError itself (one call less per payload)."""
    module = _format_module(schema.schema_type)
    prepare = getattr(module, "payload_checker", None)
    if prepare is not None:
        return prepare(schema)

    def checked(payload: bytes) -> str | None:
        try:
            return module.payload_error(schema, payload)
        except RecursionError:
            return _TOO_DEEP

    return checked


_TOO_DEEP = "the payload is nested too deeply to check"


def record_name(schema: ParsedSchema, payload: bytes) -> str | None:
    """The fully qualified record name the subject name strategies
    RecordNameStrategy and TopicRecordNameStrategy use: Avro, the named
    type's full name; JSON Schema, its ``title``; Protobuf, the message the
    payload's message indexes name. None when the schema has none."""
    return _format_module(schema.schema_type).record_name(schema, payload)


def serialize(schema: ParsedSchema, data) -> bytes:
    """``data`` written by ``schema`` (the payload after Confluent's magic byte and
    schema id; for Protobuf, message indexes first, naming the first message):
    Avro binary, JSON text, Protobuf bytes. SerializationError when the data
    does not fit the schema."""
    try:
        return _format_module(schema.schema_type).serialize(schema, data)
    except RecursionError as exc:
        raise SerializationError("the data is nested too deeply") from exc


def _describe_earlier(index: int, count: int) -> str:
    if index == count - 1:
        return "against the latest earlier schema: "
    return f"against earlier schema {index + 1} of {count} (oldest first): "


# Imported on first use: fastavro, jsonschema and protobuf cost a broker that
# never meets a schema some 13 MB of memory at start.
_FORMAT_MODULES = {"AVRO": "avro_format", "JSON": "json_format", "PROTOBUF": "protobuf_format"}


def _format_module(schema_type: str):
    try:
        name = _FORMAT_MODULES[schema_type]
    except KeyError:
        raise SchemaInvalid(f"unknown schema type {schema_type!r}; known: {', '.join(SCHEMA_TYPES)}") from None
    return importlib.import_module(f"protocol.schema_formats.{name}")

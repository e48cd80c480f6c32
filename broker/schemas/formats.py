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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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


class SchemaInvalid(ValueError):
    """A schema text that cannot be read as its type (or an unknown type)."""


@dataclass(frozen=True)
class SchemaReference:
    """A reference of a schema: the ``name`` it is imported by, and the subject and version holding it."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class ParsedSchema:
    """A schema read by its format. ``handle`` is the format's own parsed form."""

    schema_type: str
    text: str
    canonical: str
    normalized: str
    handle: object = field(compare=False, repr=False)


def parse_schema(schema_type: str, text: str, references: Mapping[str, str] | None = None) -> ParsedSchema:
    """``text`` read as ``schema_type``; ``references``: import name -> the referenced schema's text."""
    # Temporary AVRO-only reading (the registry's own tests need one), replaced by the formats' modules.
    import json

    import fastavro
    from fastavro.schema import to_parsing_canonical_form

    if schema_type != "AVRO":
        raise SchemaInvalid(f"schema type {schema_type} is not supported yet")
    try:
        named: dict = {}
        for ref_text in (references or {}).values():
            fastavro.parse_schema(json.loads(ref_text), named_schemas=named)
        handle = fastavro.parse_schema(json.loads(text), named_schemas=named)
        canonical = to_parsing_canonical_form(handle)
    except Exception as exc:  # fastavro raises several kinds for a bad schema
        raise SchemaInvalid(str(exc)) from None
    return ParsedSchema(schema_type, text, canonical, canonical, handle)


def compatibility_errors(new: ParsedSchema, earlier: Sequence[ParsedSchema], level: str) -> list[str]:
    """Why ``new`` is not compatible at ``level`` with ``earlier`` (oldest first;
    non-transitive levels look only at the last); [] when it is."""
    # Temporary: NONE, and a record's new field without a default refused BACKWARD.
    if level == "NONE" or not earlier:
        return []
    against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    errors = []
    new_fields = {f["name"]: f for f in new.handle.get("fields", [])} if isinstance(new.handle, dict) else {}
    for old in against:
        old_fields = {f["name"] for f in old.handle.get("fields", [])} if isinstance(old.handle, dict) else set()
        for name, f in new_fields.items():
            if level.startswith(("BACKWARD", "FULL")) and name not in old_fields and "default" not in f:
                errors.append(f"READER_FIELD_MISSING_DEFAULT_VALUE: {name}")
    return errors


def payload_error(schema: ParsedSchema, payload: bytes) -> str | None:
    """Why ``payload`` (the bytes after the magic byte and schema id; for
    Protobuf, message indexes first) does not decode as ``schema``; None when it does."""
    raise NotImplementedError

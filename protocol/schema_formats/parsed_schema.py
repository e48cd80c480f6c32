"""What every schema format produces (pure): a parsed schema, and the error of a schema that cannot be read.

Apart from :mod:`protocol.schema_formats.formats` (which re-exports both) so that the
format modules can use them without importing the module that dispatches to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class SchemaInvalid(ValueError):
    """A schema text that cannot be read as its type (or an unknown type)."""


@dataclass(frozen=True)
class ParsedSchema:
    """A schema read by its format. ``handle`` is the format's own parsed form."""

    schema_type: str
    text: str
    canonical: str
    normalized: str
    handle: object = field(compare=False, repr=False)


class SerializationError(ValueError):
    """Data that cannot be written by a schema (the REST proxy's produce with a schema)."""

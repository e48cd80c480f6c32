"""Confluent's framing of a serialized key or value (pure).

A serializer of Confluent's (and every client that follows it) writes the
magic byte 0, then the schema's id as a 4-byte big-endian integer, then the
payload in the schema's format (Protobuf adds its message indexes, read by
``protobuf_format.py``). Validation on produce, the REST proxy's produce and
the Spark reader all split or build keys and values through this module.
"""

from __future__ import annotations

MAGIC_BYTE = 0
FRAMING_BYTES = 5


class FramingError(ValueError):
    """Bytes without Confluent's framing (magic byte 0 and a schema id)."""


def split_framing(data: bytes) -> tuple[int, bytes]:
    """(schema id, payload) of a framed key or value."""
    if len(data) < FRAMING_BYTES:
        raise FramingError(f"{len(data)} bytes, fewer than the magic byte and schema id")
    if data[0] != MAGIC_BYTE:
        raise FramingError(f"the first byte is {data[0]}, not the magic byte {MAGIC_BYTE}")
    return int.from_bytes(data[1:FRAMING_BYTES], "big", signed=True), bytes(data[FRAMING_BYTES:])


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` behind Confluent's framing: the magic byte and the 4-byte schema id."""
    return bytes((MAGIC_BYTE,)) + schema_id.to_bytes(FRAMING_BYTES - 1, "big") + payload

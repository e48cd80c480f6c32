"""Readers and writers of Kafka's primitive wire types.

Readers take ``(buf, pos)`` and return ``(value, new_pos)``; writers append to a
``bytearray``. Readers may raise ``struct.error``/``IndexError`` on short input:
the public decode entry points in :mod:`protocol.codec` turn every such failure
into :class:`~protocol.exceptions.ProtocolError`, which keeps the per-field
fast path free of bounds checks that ``struct`` already does.
"""

from __future__ import annotations

import struct
import uuid

from protocol.exceptions import ProtocolError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")

_int8_unpack = INT8.unpack_from
_int16_unpack = INT16.unpack_from
_uint16_unpack = UINT16.unpack_from
_int32_unpack = INT32.unpack_from
_int64_unpack = INT64.unpack_from
_float64_unpack = FLOAT64.unpack_from


# --------------------------------------------------------------------------- fixed width


def read_bool(buf, pos):
    return buf[pos] != 0, pos + 1


def read_int8(buf, pos):
    return _int8_unpack(buf, pos)[0], pos + 1


def read_int16(buf, pos):
    return _int16_unpack(buf, pos)[0], pos + 2


def read_uint16(buf, pos):
    return _uint16_unpack(buf, pos)[0], pos + 2


def read_int32(buf, pos):
    return _int32_unpack(buf, pos)[0], pos + 4


def read_int64(buf, pos):
    return _int64_unpack(buf, pos)[0], pos + 8


def read_float64(buf, pos):
    return _float64_unpack(buf, pos)[0], pos + 8


def read_uuid(buf, pos):
    end = pos + 16
    if end > len(buf):
        raise ProtocolError("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def write_bool(out: bytearray, value) -> None:
    out.append(1 if value else 0)


def write_int8(out, value):
    out += INT8.pack(value)


def write_int16(out, value):
    out += INT16.pack(value)


def write_uint16(out, value):
    out += UINT16.pack(value)


def write_int32(out, value):
    out += INT32.pack(value)


def write_int64(out, value):
    out += INT64.pack(value)


def write_float64(out, value):
    out += FLOAT64.pack(value)


def write_uuid(out, value):
    out += value.bytes


# --------------------------------------------------------------------------- varints


def read_uvarint(buf, pos):
    """Unsigned LEB128 as used for compact lengths and tags (at most 32 bits)."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result > 0xFFFFFFFF:
                raise ProtocolError("unsigned varint exceeds 32 bits")
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(buf, pos, max_shift=28):
    """Zig-zag signed varint (varlong with ``max_shift=63``)."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > max_shift:
            raise ProtocolError("varint too long")


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, (value << 1) ^ (value >> 63))


# --------------------------------------------------------------------------- lengths


def _check_span(buf, pos, length):
    end = pos + length
    if end > len(buf):
        raise ProtocolError(f"length {length} at {pos} runs past the end ({len(buf)} bytes)")
    return end


def read_length(buf, pos, flexible):
    """A string/bytes/array length: int16/int32 classic, uvarint-1 compact."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return _int32_unpack(buf, pos)[0], pos + 4


def read_string(buf, pos, flexible, nullable):
    if flexible:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n = _int16_unpack(buf, pos)[0]
        pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise ProtocolError(f"invalid string length {n}")
    end = _check_span(buf, pos, n)
    return str(buf[pos:end], "utf-8"), end


def _bytes_span(buf, pos, flexible, nullable) -> tuple[int | None, int]:
    """(start, end) of a bytes field's content; (None, end) for a null."""
    n, pos = read_length(buf, pos, flexible)
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise ProtocolError(f"invalid bytes length {n}")
    return pos, _check_span(buf, pos, n)


def read_bytes(buf, pos, flexible, nullable):
    start, end = _bytes_span(buf, pos, flexible, nullable)
    return (None if start is None else bytes(buf[start:end])), end


def read_records(buf, pos, flexible, nullable):
    """A records field: like bytes, but a view instead of a copy when ``buf``
    is a bytearray. Large request frames arrive in a bytearray of their own
    (see protocol.framing.FrameReceiver), and the log patches offsets into the
    batches in place and writes them from there: a megabyte of records is then
    never copied in user space."""
    if type(buf) is not bytearray:
        return read_bytes(buf, pos, flexible, nullable)
    start, end = _bytes_span(buf, pos, flexible, nullable)
    return (None if start is None else memoryview(buf)[start:end]), end


def write_string(out: bytearray, value, flexible):
    if value is None:
        if flexible:
            out.append(0)
        else:
            out += b"\xff\xff"
        return
    data = value.encode("utf-8")
    if flexible:
        write_uvarint(out, len(data) + 1)
    else:
        if len(data) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        out += INT16.pack(len(data))
    out += data


def write_bytes(out: bytearray, value, flexible):
    if value is None:
        if flexible:
            out.append(0)
        else:
            out += b"\xff\xff\xff\xff"
        return
    if flexible:
        write_uvarint(out, len(value) + 1)
    else:
        out += INT32.pack(len(value))
    out += value


def write_length(out: bytearray, length, flexible):
    """Array length; ``length=-1`` writes null."""
    if flexible:
        write_uvarint(out, length + 1)
    else:
        out += INT32.pack(length)

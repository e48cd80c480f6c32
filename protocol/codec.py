"""Encoders and decoders derived from the declarations in :mod:`protocol.schema`.

For each (struct, version, flexible) the first use compiles a reader and a
writer: a flat list of per-field closures with the version logic already
resolved, so decoding a message walks no version checks. Results are cached.

Only :func:`decode_struct`/:func:`decode_request_body` and friends are entry
points for untrusted bytes; they turn every low-level failure into
:class:`ProtocolError`.
"""

from __future__ import annotations

import keyword
import struct as _struct
import uuid
from typing import Any, Callable

from protocol import primitives as p
from protocol.exceptions import ProtocolError
from protocol.schema import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    Array,
    Field,
    Primitive,
    Struct,
    Type,
)

Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]

_FIXED_READERS = {
    BOOL: p.read_bool,
    INT8: p.read_int8,
    INT16: p.read_int16,
    UINT16: p.read_uint16,
    INT32: p.read_int32,
    INT64: p.read_int64,
    FLOAT64: p.read_float64,
    UUID: p.read_uuid,
}
_FIXED_WRITERS = {
    BOOL: p.write_bool,
    INT8: p.write_int8,
    INT16: p.write_int16,
    UINT16: p.write_uint16,
    INT32: p.write_int32,
    INT64: p.write_int64,
    FLOAT64: p.write_float64,
    UUID: p.write_uuid,
}
# Smallest encoding of one array element; used to reject array lengths that
# cannot fit in the bytes that remain before allocating anything.
_FIXED_SIZES = {BOOL: 1, INT8: 1, INT16: 2, UINT16: 2, INT32: 4, INT64: 8, FLOAT64: 8, UUID: 16}

_reader_cache: dict[tuple[int, int, bool], Reader] = {}
_writer_cache: dict[tuple[int, int, bool], Writer] = {}


def _field_flexible(field: Field, version: int, flexible: bool) -> bool:
    return flexible if field.flexible is None else version in field.flexible


# --------------------------------------------------------------------------- readers


def _type_reader(t: Type, version: int, flexible: bool, nullable: bool) -> Reader:
    if isinstance(t, Primitive):
        fixed = _FIXED_READERS.get(t)
        if fixed is not None:
            return fixed
        if t is STRING:
            return lambda buf, pos: p.read_string(buf, pos, flexible, nullable)
        if t is BYTES:
            return lambda buf, pos: p.read_bytes(buf, pos, flexible, nullable)
        if t is RECORDS:
            return lambda buf, pos: p.read_records(buf, pos, flexible, nullable)
        raise TypeError(f"no reader for {t!r}")
    if isinstance(t, Array):
        item_reader = _type_reader(t.item, version, flexible, False)
        min_item_bytes = _FIXED_SIZES.get(t.item, 1) if not isinstance(t.item, Struct) else 0
        read_length = p.read_length

        def read_array(buf, pos):
            n, pos = read_length(buf, pos, flexible)
            if n < 0:
                if n == -1 and nullable:
                    return None, pos
                raise ProtocolError(f"invalid array length {n}")
            # Kafka's own rule: never allocate more elements than bytes left.
            if n > len(buf) - pos or n * min_item_bytes > len(buf) - pos:
                raise ProtocolError(f"array of {n} elements does not fit in {len(buf) - pos} bytes")
            items = []
            append = items.append
            for _ in range(n):
                item, pos = item_reader(buf, pos)
                append(item)
            return items, pos

        return read_array
    if isinstance(t, Struct):
        inner = struct_reader(t, version, flexible)
        if not nullable:
            return inner

        def read_nullable_struct(buf, pos):
            marker = buf[pos]
            if marker == 0xFF:  # int8 -1
                return None, pos + 1
            if marker != 1:
                raise ProtocolError(f"invalid nullable struct marker {marker}")
            return inner(buf, pos + 1)

        return read_nullable_struct
    raise TypeError(f"unknown type {t!r}")


_IMMUTABLE_DEFAULT_TYPES = (int, float, str, bytes, type(None), uuid.UUID)


def struct_reader(st: Struct, version: int, flexible: bool) -> Reader:
    key = (id(st), version, flexible)
    cached = _reader_cache.get(key)
    if cached is not None:
        return cached
    cls = st.cls
    plain: list[tuple[str, Reader, Type]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    defaults: list[Field] = []
    for f in st.fields:
        if version not in f.versions:
            defaults.append(f)
            continue
        fflex = _field_flexible(f, version, flexible)
        reader = _type_reader(f.type, version, fflex, version in f.nullable)
        if flexible and version in f.tagged:
            tagged[f.tag] = (f.name, reader)
            defaults.append(f)
        else:
            plain.append((f.name, reader, f.type))
    set_attr = object.__setattr__
    read_uvarint = p.read_uvarint
    # Immutable defaults are computed once; only lists and structs need a fresh
    # value per decoded struct. (Calling default_value per field per record was
    # most of the cost of decoding small structs such as metadata records.)
    constant_defaults: list[tuple[str, object]] = []
    fresh_defaults: list[tuple[str, object]] = []
    for f in defaults:
        value = f.default_value()
        if f.has_explicit_default or isinstance(value, _IMMUTABLE_DEFAULT_TYPES):
            constant_defaults.append((f.name, value))
        else:
            fresh_defaults.append((f.name, f.default_value))

    def read_tagged(buf, pos, obj):
        count, pos = read_uvarint(buf, pos)
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise ProtocolError(f"tagged field {tag} runs past the end")
            entry = tagged.get(tag)
            if entry is not None:
                value, got = entry[1](buf, pos)
                if got != end:
                    raise ProtocolError(f"tagged field {tag} declared {size} bytes, used {got - pos}")
                set_attr(obj, entry[0], value)
            # Unknown tags are skipped: that is what makes them forward compatible.
            pos = end
        return pos

    read_struct = _compiled_reader(st, cls, constant_defaults, fresh_defaults, plain, read_tagged if flexible else None)
    _reader_cache[key] = read_struct
    return read_struct


# Fixed-size primitives by struct format code: a run of them in a struct is
# read (and written) with one precompiled struct.Struct, not a call per field.
_FIXED_CODES = {BOOL: "?", INT8: "b", INT16: "h", UINT16: "H", INT32: "i", INT64: "q", FLOAT64: "d"}


def _fixed_runs(fields: list[tuple[str, Any]]) -> list[tuple[list[str], Any]]:
    """``fields`` as (name, reader or writer) grouped: runs of fixed-size
    primitives as ([names], format codes), anything else as ([name], its function)."""
    runs: list[tuple[list[str], Any]] = []
    for name, function, type_ in fields:
        code = _FIXED_CODES.get(type_)
        if code is not None and runs and isinstance(runs[-1][1], str):
            runs[-1][0].append(name)
            runs[-1] = (runs[-1][0], runs[-1][1] + code)
        elif code is not None:
            runs.append(([name], code))
        else:
            runs.append(([name], function))
    return runs


def _valid_names(names) -> bool:
    return all(n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("_") for n in names)


def _compiled_reader(st: Struct, cls, constant_defaults, fresh_defaults, plain, read_tagged) -> Reader:
    """A reader written out as straight-line code for one struct version: why
    it exists is the same as for the value classes' ``__init__`` (requests are
    decoded per request; the loops over field lists cost more than the reads)."""
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_read_tagged": read_tagged}
    lines = ["def read_struct(buf, pos):", "    obj = _new(_cls)"]
    if not _valid_names([n for n, _ in constant_defaults] + [n for n, _ in fresh_defaults] + [n for n, _, _ in plain]):
        raise TypeError(f"{st.name}: field names that are not identifiers")
    for i, (name, value) in enumerate(constant_defaults):
        namespace[f"_c{i}"] = value
        lines.append(f"    obj.{name} = _c{i}")
    for i, (name, make_default) in enumerate(fresh_defaults):
        namespace[f"_m{i}"] = make_default
        lines.append(f"    obj.{name} = _m{i}()")
    for i, (names, how) in enumerate(_fixed_runs(plain)):
        if isinstance(how, str):
            layout = _struct.Struct(">" + how)
            namespace[f"_u{i}"] = layout.unpack_from
            targets = ", ".join(f"obj.{n}" for n in names)
            lines.append(f"    {targets}{',' if len(names) == 1 else ''} = _u{i}(buf, pos)")
            lines.append(f"    pos += {layout.size}")
        else:
            namespace[f"_r{i}"] = how
            lines.append(f"    obj.{names[0]}, pos = _r{i}(buf, pos)")
    if read_tagged is not None:
        lines.append("    pos = _read_tagged(buf, pos, obj)")
    lines.append("    return obj, pos")
    exec(compile("\n".join(lines), f"<reader {st.name}>", "exec"), namespace)  # noqa: S102 - our own field names
    return namespace["read_struct"]


# --------------------------------------------------------------------------- writers


def _type_writer(t: Type, version: int, flexible: bool, nullable: bool, where: str) -> Writer:
    if isinstance(t, Primitive):
        fixed = _FIXED_WRITERS.get(t)
        if fixed is not None:
            return fixed
        if t is STRING:
            write_string = p.write_string
            if nullable:
                return lambda out, v: write_string(out, v, flexible)

            def write_nonnull_string(out, v):
                if v is None:
                    raise ValueError(f"{where}: null is not allowed in version {version}")
                write_string(out, v, flexible)

            return write_nonnull_string
        if t is RECORDS:
            return _records_writer(flexible, nullable, where, version)
        if t is BYTES:
            write_bytes = p.write_bytes
            if nullable:
                return lambda out, v: write_bytes(out, v, flexible)

            def write_nonnull_bytes(out, v):
                if v is None:
                    raise ValueError(f"{where}: null is not allowed in version {version}")
                write_bytes(out, v, flexible)

            return write_nonnull_bytes
        raise TypeError(f"no writer for {t!r}")
    if isinstance(t, Array):
        item_writer = _type_writer(t.item, version, flexible, False, where + "[]")
        write_length = p.write_length

        def write_array(out, items):
            if items is None:
                if not nullable:
                    raise ValueError(f"{where}: null is not allowed in version {version}")
                write_length(out, -1, flexible)
                return
            write_length(out, len(items), flexible)
            for item in items:
                item_writer(out, item)

        return write_array
    if isinstance(t, Struct):
        inner = struct_writer(t, version, flexible)
        if not nullable:

            def write_nonnull_struct(out, v):
                if v is None:
                    raise ValueError(f"{where}: null is not allowed in version {version}")
                inner(out, v)

            return write_nonnull_struct

        def write_nullable_struct(out, v):
            if v is None:
                out.append(0xFF)
            else:
                out.append(1)
                inner(out, v)

        return write_nullable_struct
    raise TypeError(f"unknown type {t!r}")


def _records_writer(flexible: bool, nullable: bool, where: str, version: int) -> Writer:
    """Record bytes, or an *external* value: any object with
    ``is_external_bytes = True``, ``__len__`` and ``read_all()`` (a file range).
    An external value is written as its length only, and handed to
    ``out.add_external`` when the output can carry it (so the IO layer can
    send it with sendfile); otherwise its bytes are read in."""
    write_bytes = p.write_bytes
    write_length = p.write_length

    def write_records(out, v):
        if v is None:
            if not nullable:
                raise ValueError(f"{where}: null is not allowed in version {version}")
            write_bytes(out, None, flexible)
        elif getattr(v, "is_external_bytes", False):
            write_length(out, len(v), flexible)
            add_external = getattr(out, "add_external", None)
            if add_external is None:
                out += v.read_all()
            else:
                add_external(v)
        else:
            write_bytes(out, v, flexible)

    return write_records


def struct_writer(st: Struct, version: int, flexible: bool) -> Writer:
    key = (id(st), version, flexible)
    cached = _writer_cache.get(key)
    if cached is not None:
        return cached
    plain: list[tuple[str, Writer, Type]] = []
    tagged: list[tuple[int, str, Writer, object]] = []
    for f in st.fields:
        if version not in f.versions:
            continue
        fflex = _field_flexible(f, version, flexible)
        writer = _type_writer(f.type, version, fflex, version in f.nullable, f"{st.name}.{f.name}")
        if flexible and version in f.tagged:
            # The default is made once: a nested struct's default is a new
            # object per call, and it is only compared with, never handed out.
            tagged.append((f.tag, f.name, writer, f.default_value()))
        else:
            plain.append((f.name, writer, f.type))
    tagged.sort(key=lambda entry: entry[0])
    write_uvarint = p.write_uvarint

    def write_tagged(out, obj):
        if not tagged:
            out.append(0)
            return
        # A tagged field is written only when it differs from its default,
        # as Kafka does; old clients (librdkafka 2.0) mis-skip the others.
        present = []
        for tag, name, writer, default in tagged:
            value = getattr(obj, name)
            if value != default:
                body = bytearray()
                writer(body, value)
                present.append((tag, body))
        write_uvarint(out, len(present))
        for tag, body in present:
            write_uvarint(out, tag)
            write_uvarint(out, len(body))
            out += body

    write_struct = _compiled_writer(st, plain, write_tagged if flexible else None)
    _writer_cache[key] = write_struct
    return write_struct


def _compiled_writer(st: Struct, plain, write_tagged) -> Writer:
    """A writer written out as straight-line code for one struct version (see _compiled_reader)."""
    if not _valid_names([n for n, _, _ in plain]):
        raise TypeError(f"{st.name}: field names that are not identifiers")
    namespace: dict[str, Any] = {"_write_tagged": write_tagged}
    lines = ["def write_struct(out, obj):"]
    for i, (names, how) in enumerate(_fixed_runs(plain)):
        if isinstance(how, str):
            namespace[f"_p{i}"] = _struct.Struct(">" + how).pack
            lines.append(f"    out += _p{i}({', '.join(f'obj.{n}' for n in names)})")
        else:
            namespace[f"_w{i}"] = how
            lines.append(f"    _w{i}(out, obj.{names[0]})")
    if write_tagged is not None:
        lines.append("    _write_tagged(out, obj)")
    if len(lines) == 1:
        lines.append("    pass")
    exec(compile("\n".join(lines), f"<writer {st.name}>", "exec"), namespace)  # noqa: S102 - our own field names
    return namespace["write_struct"]


# --------------------------------------------------------------------------- entry points

_DECODE_FAILURES = (_struct.error, IndexError, ValueError, OverflowError, RecursionError)


def decode_struct(st: Struct, version: int, flexible: bool, buf, pos: int = 0, *, exact: bool = True):
    """Decode ``st`` at ``version`` from ``buf[pos:]``.

    With ``exact`` the struct must use every remaining byte. Returns
    ``(value, end_pos)``. Raises only :class:`ProtocolError` on bad input.
    """
    try:
        value, end = struct_reader(st, version, flexible)(buf, pos)
    except ProtocolError:
        raise
    except _DECODE_FAILURES as exc:
        raise ProtocolError(f"cannot decode {st.name} v{version}: {exc.__class__.__name__}: {exc}") from None
    if exact and end != len(buf):
        raise ProtocolError(f"{st.name} v{version}: {len(buf) - end} unexpected trailing bytes")
    return value, end


def encode_struct(st: Struct, version: int, flexible: bool, value, out: bytearray | None = None) -> bytearray:
    if out is None:
        out = bytearray()
    struct_writer(st, version, flexible)(out, value)
    return out

"""Differential tests of our codec against kio, an independent implementation.

For every (API or data message, side, version) that both our registry and kio
know:

* ours -> kio: a random value from our declarations (``values_for``), encoded
  by our codec, is parsed by kio's reader for that entity (which must consume
  every byte) and written again by kio's writer: the bytes must be identical.
  Before that, our declaration and kio's dataclass are walked side by side:
  the same fields in the same order, the same tags, the same nesting.
* kio -> ours: a random kio entity, generated from kio's own dataclasses
  (independently of our declarations), is written by kio: our codec must
  decode those bytes exactly and encode the result to the same bytes.

kio maps some integers to richer Python types and so cannot represent every
wire value; for those fields the values we draw are narrowed to what kio can
represent (``_kio_domain``). That is kio's limitation, not the wire format's.
Known differences are listed, one reason each, in ``KIO_QUIRKS``; they are
left out of the main tests and checked to still differ (strict xfail), so
the list cannot silently go stale.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import re
import uuid
from types import UnionType
from typing import Union, get_args, get_origin

import pytest

pytest.importorskip("kio")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.strategies import SearchStrategy  # noqa: E402
from kio.index import load_entity_schema  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.schema.index import api_key_map, schema_name_map  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.serial._implicit_defaults import get_tagged_field_default  # noqa: E402
from kio.serial._introspect import (  # noqa: E402
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial.readers import tz_aware_from_i64  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402

from protocol.codec import decode_struct, encode_struct  # noqa: E402
from protocol.exceptions import ProtocolError  # noqa: E402
from protocol.schema import INT8, INT16, INT32, INT64, UINT16, Array, Field, Struct  # noqa: E402
from tests.property.strategies import (  # noqa: E402
    INT_RANGES,
    MAX_BYTES,
    MAX_ITEMS,
    MAX_STRING,
    MessageCase,
    message_cases,
    values_for,
)

# --------------------------------------------------------------------------- kio quirks

# (message, side, version) -> why kio differs. Excluded from the main tests;
# test_known_kio_quirks_still_differ fails once an entry no longer differs.
KIO_QUIRKS: dict[tuple[str, str, int], str] = {}
# Tags from here up are pybroker's own (BrokerHeartbeatRequest.balancer_load:
# protocol/messages/broker_lifecycle.py), far above Apache Kafka's.
PRIVATE_TAG_FLOOR = 10000

# --------------------------------------------------------------------------- which cases

_SIDE_TO_KIO = {"request": EntityType.request, "response": EntityType.response}


def _snake(name: str) -> str:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return name.lower()


def kio_class(case: MessageCase) -> type | None:
    """kio's entity class for one of our cases, or None if kio does not know it."""
    if case.api_key is not None:
        name = api_key_map.get(case.api_key)
        entity_types = [_SIDE_TO_KIO[case.side]]
    else:  # data messages and headers: RequestHeader -> request_header
        name = _snake(case.name)
        entity_types = [EntityType.header, EntityType.data]
    if name is None:
        return None
    by_type = schema_name_map.get(name, {}).get(case.version, {})
    for entity_type in entity_types:
        if entity_type in by_type:
            return load_entity_schema(name, case.version, entity_type)
    return None


def _quirk_key(case: MessageCase) -> tuple[str, str, int]:
    return (case.name, case.side, case.version)


def _shared() -> tuple[dict[str, list[tuple[MessageCase, type]]], list[tuple[MessageCase, type]]]:
    groups: dict[str, list[tuple[MessageCase, type]]] = {}
    quirks: list[tuple[MessageCase, type]] = []
    for case in message_cases():
        cls = kio_class(case)
        if cls is None:
            continue
        if _quirk_key(case) in KIO_QUIRKS:
            quirks.append((case, cls))
        else:
            groups.setdefault(f"{case.name}.{case.side}", []).append((case, cls))
    return groups, quirks


SHARED, QUIRK_CASES = _shared()

# --------------------------------------------------------------------------- settings

_COMMON = dict(
    deadline=None,
    database=None,  # leave no .hypothesis directory in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # One shrunk failure, no explain phase: a schema difference fails in many
    # ways at once, and reporting each of them takes minutes.
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
# Examples per test; each example covers every shared version of its group.
OURS_TO_KIO = settings(max_examples=15, **_COMMON)
KIO_TO_OURS = settings(max_examples=15, **_COMMON)
# Expected to fail: no need to shrink.
QUIRKS = settings(max_examples=15, **{**_COMMON, "phases": [Phase.generate]})

# --------------------------------------------------------------------------- kio's domains

_DATETIME_MS = st.integers(min_value=0, max_value=2**42)  # to 2109: exact through kio's float timestamps
_TIMEDELTA_I64_MS = st.integers(min_value=-(2**43), max_value=2**43)  # datetime.timedelta ends near 2**56 ms
_ERROR_CODES = sorted(int(code.value) for code in ErrorCode)


def _kio_domain(kafka_type: str, optional: bool) -> SearchStrategy | None:
    """The wire integers kio can represent for its kafka_type, or None for "all"."""
    if kafka_type == "error_code":
        # kio maps error codes to an enum and rejects codes it does not know.
        return st.sampled_from(_ERROR_CODES)
    if kafka_type == "datetime_i64":
        # kio maps these to aware datetimes: no negative timestamps (but -1 as
        # null where kio has the field nullable), none past year 9999, and
        # precision lost through float timestamps for far-future values.
        return st.one_of(st.just(-1), _DATETIME_MS) if optional else _DATETIME_MS
    if kafka_type == "timedelta_i64":
        return _TIMEDELTA_I64_MS
    return None


# --------------------------------------------------------------------------- our values, kio-shaped


class SchemaMismatch(AssertionError):
    """Our declaration and kio's dataclass disagree on the fields of a version."""


def _pair(struct: Struct, cls: type, case: MessageCase, narrowed: dict, path: str) -> None:
    """Walk our struct and kio's dataclass side by side (by position; tagged fields by tag).

    Records in ``narrowed`` our fields whose values kio cannot all represent,
    and raises :class:`SchemaMismatch` where the two disagree.
    """
    version, flexible = case.version, case.flexible
    ours = [f for f in struct.fields if version in f.versions]
    ours_plain = [f for f in ours if not (flexible and version in f.tagged)]
    ours_tagged = {f.tag: f for f in ours if flexible and version in f.tagged}
    for tag in [t for t in ours_tagged if t >= PRIVATE_TAG_FLOOR]:
        # pybroker's own tagged fields (between pybroker nodes only): unknown to
        # kio, so left at their default (not sent) in the values kio reads.
        field = ours_tagged.pop(tag)
        narrowed[(id(struct), field.name)] = st.just(field.default_value())
    theirs = dataclasses.fields(cls)
    kio_plain = [f for f in theirs if "tag" not in f.metadata]
    kio_tagged = {f.metadata["tag"]: f for f in theirs if "tag" in f.metadata}
    if len(ours_plain) != len(kio_plain):
        raise SchemaMismatch(
            f"{case.label} {path}: fields differ: ours {[f.name for f in ours_plain]}, "
            f"kio {[f.name for f in kio_plain]}"
        )
    if set(ours_tagged) != set(kio_tagged):
        # kio skips tags it does not know and drops tags we do not know: both
        # would make the bytes differ, so they count as a schema difference.
        raise SchemaMismatch(
            f"{case.label} {path}: tagged fields differ: ours "
            f"{ {t: f.name for t, f in ours_tagged.items()} }, kio { {t: f.name for t, f in kio_tagged.items()} }"
        )
    pairs = list(zip(ours_plain, kio_plain)) + [(ours_tagged[t], kio_tagged[t]) for t in sorted(ours_tagged)]
    for our_field, kio_field in pairs:
        _pair_field(struct, our_field, kio_field, case, narrowed, f"{path}.{our_field.name}")


def _pair_field(struct: Struct, ours: Field, theirs: dataclasses.Field, case: MessageCase, narrowed: dict, path: str) -> None:
    kind = classify_field(theirs)
    our_type = ours.type.item if isinstance(ours.type, Array) else ours.type
    where = f"{case.label} {path} (kio {theirs.name}: {theirs.type})"
    if isinstance(ours.type, Array) != kind.is_array:
        raise SchemaMismatch(f"{where}: an array on one side only (ours {ours.type!r})")
    if isinstance(kind, (EntityField, EntityTupleField)):
        if not isinstance(our_type, Struct):
            raise SchemaMismatch(f"{where}: a struct in kio, {ours.type!r} in ours")
        _pair(our_type, kind.type_, case, narrowed, path)
        return
    if isinstance(our_type, Struct):
        raise SchemaMismatch(f"{where}: a struct in ours only")
    kafka_type = get_schema_field_type(theirs)
    wire_type = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64", "datetime_i64": "int64"}.get(
        kafka_type, kafka_type
    )
    if wire_type != our_type.name:
        raise SchemaMismatch(f"{where}: {our_type.name} in ours, {kafka_type} in kio")
    domain = _kio_domain(kafka_type, is_optional(theirs))
    if domain is not None:
        narrowed[(id(struct), ours.name)] = domain


_ours_cache: dict[tuple[int, int], SearchStrategy] = {}


def ours_for_kio(case: MessageCase, cls: type) -> SearchStrategy:
    """Our random values for ``case``, within what kio can represent."""
    key = (id(case.struct), case.version)
    cached = _ours_cache.get(key)
    if cached is None:
        narrowed: dict[tuple[int, str], SearchStrategy] = {}
        _pair(case.struct, cls, case, narrowed, case.struct.name)
        cached = values_for(
            case.struct,
            case.version,
            case.flexible,
            override=lambda struct, field: narrowed.get((id(struct), field.name)),
            # kio (like Kafka) has non-nullable records fields; our codec is lenient.
            null_records=False,
        )
        _ours_cache[key] = cached
    return cached


# --------------------------------------------------------------------------- kio's values

_KIO_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=MAX_STRING)
_KIO_BYTES = st.binary(max_size=MAX_BYTES)
_NONZERO_UUID = st.integers(min_value=1, max_value=2**128 - 1).map(lambda n: uuid.UUID(int=n))
_KIO_INTS = {
    "int8": INT_RANGES[INT8],
    "int16": INT_RANGES[INT16],
    "uint16": INT_RANGES[UINT16],
    "int32": INT_RANGES[INT32],
    "int64": INT_RANGES[INT64],
}


def _kio_primitive(kafka_type: str) -> SearchStrategy:
    if kafka_type in _KIO_INTS:
        low, high = _KIO_INTS[kafka_type]
        return st.integers(min_value=low, max_value=high)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kafka_type == "string":
        return _KIO_TEXT
    if kafka_type in ("bytes", "records"):
        return _KIO_BYTES
    if kafka_type == "uuid":
        # kio's canonical zero uuid is None (its reader never returns UUID(0)).
        return _NONZERO_UUID
    if kafka_type == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kafka_type == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "timedelta_i64":
        return _TIMEDELTA_I64_MS.map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "datetime_i64":
        return _DATETIME_MS.map(tz_aware_from_i64)
    raise TypeError(f"no strategy for kio kafka_type {kafka_type!r}")


_kio_cache: dict[type, SearchStrategy] = {}


def _nullable_array(f: dataclasses.Field) -> bool:
    """``tuple[X, ...] | None``: kio's is_optional() cannot tell it from ``tuple[X | None, ...]``."""
    return get_origin(f.type) in (Union, UnionType) and type(None) in get_args(f.type)


def kio_values(cls: type) -> SearchStrategy:
    """Random kio entities of ``cls``, derived from kio's dataclass alone."""
    cached = _kio_cache.get(cls)
    if cached is not None:
        return cached
    kwargs: dict[str, SearchStrategy] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if isinstance(kind, (PrimitiveField, PrimitiveTupleField)):
            kafka_type = get_schema_field_type(f)
            values = _kio_primitive(kafka_type)
            if kafka_type == "uuid" or (isinstance(kind, PrimitiveField) and is_optional(f)):
                values = st.one_of(st.none(), values)
        else:
            values = kio_values(kind.type_)
            if isinstance(kind, EntityField) and is_optional(f):
                values = st.one_of(st.none(), values)
        if kind.is_array:
            values = st.lists(values, max_size=MAX_ITEMS).map(tuple)
            if _nullable_array(f):
                values = st.one_of(st.none(), values)
        if "tag" in f.metadata:
            values = st.one_of(st.just(get_tagged_field_default(f)), values)
        kwargs[f.name] = values
    strategy = st.builds(cls, **kwargs)
    _kio_cache[cls] = strategy
    return strategy


# --------------------------------------------------------------------------- checks


def _ours_encode(case: MessageCase, value) -> bytes:
    return bytes(encode_struct(case.struct, case.version, case.flexible, value))


def _kio_write(cls: type, entity) -> bytes:
    with io.BytesIO() as out:
        entity_writer(cls)(out, entity)
        return out.getvalue()


def check_ours_to_kio(data, case: MessageCase, cls: type) -> None:
    value = data.draw(ours_for_kio(case, cls), label=f"ours {case.label}")
    ours = _ours_encode(case, value)
    try:
        entity, size = entity_reader(cls)(ours, 0)
    except Exception as exc:  # noqa: BLE001 - report what kio objected to
        pytest.fail(f"{case.label}: kio cannot parse our bytes {ours.hex()}: {type(exc).__name__}: {exc}")
    assert size == len(ours), f"{case.label}: kio read {size} of our {len(ours)} bytes {ours.hex()}"
    theirs = _kio_write(cls, entity)
    assert theirs == ours, f"{case.label}: kio re-serialised {theirs.hex()}, we wrote {ours.hex()}"


def check_kio_to_ours(data, case: MessageCase, cls: type) -> None:
    entity = data.draw(kio_values(cls), label=f"kio {case.label}")
    theirs = _kio_write(cls, entity)
    try:
        value, end = decode_struct(case.struct, case.version, case.flexible, theirs)
    except ProtocolError as exc:
        pytest.fail(f"{case.label}: we cannot decode kio's bytes {theirs.hex()}: {exc}")
    assert end == len(theirs)
    ours = _ours_encode(case, value)
    assert ours == theirs, f"{case.label}: we re-encoded {ours.hex()}, kio wrote {theirs.hex()}"


# --------------------------------------------------------------------------- tests

groups = pytest.mark.parametrize("group", list(SHARED))


def test_kio_shares_cases_with_us():
    assert SHARED, "no (message, version) known to both kio and our registry"
    assert "Metadata.request" in SHARED and "ApiVersions.response" in SHARED
    # Every listed quirk names a case both sides still have: no stale entries.
    assert set(KIO_QUIRKS) == {_quirk_key(case) for case, _ in QUIRK_CASES}


@groups
def test_field_layouts_match_kio(group):
    """Same fields, order, tags, nesting and wire types as kio, version by version."""
    for case, cls in SHARED[group]:
        _pair(case.struct, cls, case, {}, case.struct.name)


@groups
@OURS_TO_KIO
@given(data=st.data())
def test_ours_to_kio(group, data):
    for case, cls in SHARED[group]:
        check_ours_to_kio(data, case, cls)


@groups
@KIO_TO_OURS
@given(data=st.data())
def test_kio_to_ours(group, data):
    for case, cls in SHARED[group]:
        check_kio_to_ours(data, case, cls)


@pytest.mark.parametrize(
    "case, cls",
    [
        pytest.param(case, cls, id=case.label, marks=pytest.mark.xfail(reason=KIO_QUIRKS[_quirk_key(case)], strict=True))
        for case, cls in QUIRK_CASES
    ],
)
@QUIRKS
@given(data=st.data())
def test_known_kio_quirks_still_differ(case, cls, data):
    check_ours_to_kio(data, case, cls)
    check_kio_to_ours(data, case, cls)

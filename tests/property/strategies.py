"""Hypothesis strategies derived from the message declarations.

``values_for(struct, version, flexible)`` builds random but *valid* value
objects for one version of a declared struct: only the fields that exist in
that version get random values (the others keep their defaults, which is what
the decoder produces for them), ``None`` appears only where the field is
nullable in that version, and tagged fields are sometimes left at their
default (so they are omitted on the wire) and sometimes not.

``message_cases()`` lists every (message, side, version) the registry knows,
so the property tests follow the declarations as they grow.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

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

__all__ = [
    "INT_RANGES",
    "MessageCase",
    "Override",
    "message_cases",
    "message_groups",
    "primitive_values",
    "values_for",
]

# Small sizes keep encodings short: the truncation tests decode every prefix.
MAX_ITEMS = 3
MAX_STRING = 8
MAX_BYTES = 16

INT_RANGES: dict[Primitive, tuple[int, int]] = {
    INT8: (-(2**7), 2**7 - 1),
    INT16: (-(2**15), 2**15 - 1),
    UINT16: (0, 2**16 - 1),
    INT32: (-(2**31), 2**31 - 1),
    INT64: (-(2**63), 2**63 - 1),
}

# Valid unicode only: no surrogates, so every string encodes to UTF-8.
_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=MAX_STRING)
_UUIDS = st.one_of(
    st.just(uuid.UUID(int=0)),
    st.integers(min_value=0, max_value=2**128 - 1).map(lambda n: uuid.UUID(int=n)),
)

# An override receives (struct, field) and may return a strategy for the
# field's non-null primitive values (for an array of primitives: its items).
# It lets a caller narrow a field's domain, e.g. to the values another
# implementation can represent; nullability, arrays and tagged defaults are
# still handled here.
Override = Callable[[Struct, Field], Optional[SearchStrategy]]


def primitive_values(t: Primitive) -> SearchStrategy:
    """Non-null values of a primitive type."""
    if t in INT_RANGES:
        low, high = INT_RANGES[t]
        return st.integers(min_value=low, max_value=high)
    if t is BOOL:
        return st.booleans()
    if t is FLOAT64:
        # Finite only: NaN != NaN would break value equality.
        return st.floats(allow_nan=False, allow_infinity=False, width=64)
    if t is STRING:
        return _TEXT
    if t is BYTES or t is RECORDS:
        return st.binary(max_size=MAX_BYTES)
    if t is UUID:
        return _UUIDS
    raise TypeError(f"no strategy for primitive {t!r}")


def _type_values(
    t: Type,
    version: int,
    flexible: bool,
    nullable: bool,
    override: Override | None,
    null_records: bool,
    owner: Struct,
    field: Field,
) -> SearchStrategy:
    if isinstance(t, Primitive):
        base = None if override is None else override(owner, field)
        if base is None:
            base = primitive_values(t)
        # RECORDS follow their declared nullability, like every other field;
        # ``null_records`` exists only so callers can turn nulls off entirely.
        if nullable and (t is not RECORDS or null_records):
            return st.one_of(st.none(), base)
        return base
    if isinstance(t, Array):
        # Array items are never null.
        items = _type_values(t.item, version, flexible, False, override, null_records, owner, field)
        base = st.lists(items, max_size=MAX_ITEMS)
    elif isinstance(t, Struct):
        # A struct field may be overridden whole (a field a peer implementation does not know).
        base = None if override is None else override(owner, field)
        if base is None:
            base = values_for(t, version, flexible, override=override, null_records=null_records)
    else:
        raise TypeError(f"unknown type {t!r} in {owner.name}.{field.name}")
    if nullable:
        return st.one_of(st.none(), base)
    return base


_cache: dict[tuple[Struct, int, bool, bool], SearchStrategy] = {}


def values_for(
    struct: Struct,
    version: int,
    flexible: bool,
    *,
    override: Override | None = None,
    null_records: bool = True,
) -> SearchStrategy:
    """Random value objects of ``struct.cls`` that are valid at ``version``.

    ``flexible`` is whether that version uses the flexible encoding (only then
    are tagged fields tagged). Nullable RECORDS fields are sometimes ``None``
    unless ``null_records`` is false. Strategies without an ``override`` are cached.
    """
    key = (struct, version, flexible, null_records)
    if override is None:
        cached = _cache.get(key)
        if cached is not None:
            return cached
    kwargs: dict[str, SearchStrategy] = {}
    for f in struct.fields:
        if version not in f.versions:
            continue  # absent in this version: keeps its default, as decoding does
        values = _type_values(f.type, version, flexible, version in f.nullable, override, null_records, struct, f)
        if flexible and version in f.tagged:
            # Sometimes the default (not sent at all), sometimes anything.
            values = st.one_of(st.builds(f.default_value), values)
        kwargs[f.name] = values
    strategy = st.builds(struct.cls, **kwargs)
    if override is None:
        _cache[key] = strategy
    return strategy


# --------------------------------------------------------------------------- enumeration


@dataclass(frozen=True)
class MessageCase:
    """One encodable thing: an API request/response or a data message, at one version."""

    name: str  # "Metadata" or a data message name
    side: str  # "request", "response" or "data"
    api_key: int | None
    struct: Struct
    version: int
    flexible: bool

    @property
    def label(self) -> str:
        return f"{self.name}.{self.side}.v{self.version}"


def _versions(versions) -> range:
    if versions.is_empty:
        return range(0)
    if versions.high is None:
        raise ValueError(f"open-ended version range {versions} for a message")
    return range(versions.low, versions.high + 1)


def message_cases() -> Iterator[MessageCase]:
    """Every (API, side, version) in the registry, then every data message version."""
    from protocol.registry import APIS_BY_KEY, DATA_MESSAGES

    for key in sorted(APIS_BY_KEY):
        api = APIS_BY_KEY[key]
        for side in ("request", "response"):
            struct = getattr(api, side)
            for version in _versions(api.versions):
                yield MessageCase(api.name, side, api.key, struct, version, version in api.flexible)
    for name in sorted(DATA_MESSAGES):
        message = DATA_MESSAGES[name]
        for version in _versions(message.versions):
            yield MessageCase(name, "data", None, message.struct, version, version in message.flexible)


def message_groups() -> dict[str, list[MessageCase]]:
    """``message_cases()`` grouped by "name.side", in registry order."""
    groups: dict[str, list[MessageCase]] = {}
    for case in message_cases():
        groups.setdefault(f"{case.name}.{case.side}", []).append(case)
    return groups

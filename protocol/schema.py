"""The declaration language for Kafka messages.

Every API is declared once as data (fields with version ranges, nullable and
tagged ranges, defaults); :mod:`protocol.codec` derives encoders and decoders
from these declarations, and each :class:`Struct` derives a slotted value class.

A declaration reads like this::

    Api(3, "Metadata", "0-12", flexible="9+",
        request=[
            F("topics", Array(Struct("MetadataRequestTopic", [
                F("topic_id", UUID, "10+"),
                F("name", STRING, "0+", nullable="10+"),
            ])), "0+", nullable="1+"),
            F("allow_auto_topic_creation", BOOL, "4+", default=True),
        ],
        response=[...])
"""

from __future__ import annotations

import uuid as _uuid
import keyword
from dataclasses import dataclass
from typing import Any, Iterable

# --------------------------------------------------------------------------- versions


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``high is None`` means open-ended ("3+")."""

    low: int
    high: int | None

    NONE_LOW = 1 << 30  # a range that contains nothing

    @classmethod
    def parse(cls, spec: "str | Versions | None") -> "Versions":
        if isinstance(spec, Versions):
            return spec
        if spec is None or spec == "none":
            return cls(cls.NONE_LOW, -1)
        spec = spec.strip()
        if spec.endswith("+"):
            return cls(int(spec[:-1]), None)
        if "-" in spec:
            low, high = spec.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(spec), int(spec))

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)

    @property
    def is_empty(self) -> bool:
        return self.high is not None and self.high < self.low

    def __str__(self) -> str:
        if self.is_empty:
            return "none"
        if self.high is None:
            return f"{self.low}+"
        if self.high == self.low:
            return str(self.low)
        return f"{self.low}-{self.high}"


# --------------------------------------------------------------------------- types


class Type:
    """A field type: a primitive, an :class:`Array` or a :class:`Struct`."""

    name: str

    def default_value(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError


class Primitive(Type):
    __slots__ = ("name", "_default")

    def __init__(self, name: str, default: Any):
        self.name = name
        self._default = default

    def default_value(self) -> Any:
        return self._default

    def __repr__(self) -> str:
        return self.name.upper()


ZERO_UUID = _uuid.UUID(int=0)

BOOL = Primitive("bool", False)
INT8 = Primitive("int8", 0)
INT16 = Primitive("int16", 0)
UINT16 = Primitive("uint16", 0)
INT32 = Primitive("int32", 0)
INT64 = Primitive("int64", 0)
FLOAT64 = Primitive("float64", 0.0)
STRING = Primitive("string", "")
BYTES = Primitive("bytes", b"")
# A record batch blob (Produce/Fetch); kept opaque here, parsed by protocol.records.
RECORDS = Primitive("records", None)
UUID = Primitive("uuid", ZERO_UUID)

PRIMITIVES = {p.name: p for p in (BOOL, INT8, INT16, UINT16, INT32, INT64, FLOAT64, STRING, BYTES, RECORDS, UUID)}


class Array(Type):
    __slots__ = ("item",)

    def __init__(self, item: Type):
        self.item = item

    @property
    def name(self) -> str:  # type: ignore[override]
        return "[]" + self.item.name

    def default_value(self) -> Any:
        return []

    def __repr__(self) -> str:
        return f"Array({self.item!r})"


_MISSING = object()


class Field:
    """One field of a struct.

    ``versions``: in which message versions the field exists.
    ``nullable``: versions in which it may be null.
    ``tagged``/``tag``: versions in which it is sent as a tagged field, and its tag.
    ``default``: value when absent (also decides whether a tagged field is sent).
    ``flexible``: overrides the message's flexible versions for this field's
    encoding (the request header's client_id is never compact).
    """

    __slots__ = ("name", "type", "versions", "nullable", "tagged", "tag", "default", "ignorable", "flexible")

    def __init__(
        self,
        name: str,
        type: Type,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        tagged: str | None = None,
        tag: int | None = None,
        default: Any = _MISSING,
        ignorable: bool = False,
        flexible: str | None = None,
    ):
        if not isinstance(type, Type):
            raise TypeError(f"field {name}: {type!r} is not a Type")
        self.name = name
        self.type = type
        self.versions = Versions.parse(versions)
        self.nullable = Versions.parse(nullable)
        self.tagged = Versions.parse(tagged)
        if (tag is None) != self.tagged.is_empty:
            raise ValueError(f"field {name}: tag and tagged versions go together")
        self.tag = tag
        self.default = default
        self.ignorable = ignorable
        self.flexible = None if flexible is None else Versions.parse(flexible)

    @property
    def has_explicit_default(self) -> bool:
        return self.default is not _MISSING

    def default_value(self) -> Any:
        if self.default is not _MISSING:
            # Mutable defaults are never declared, so sharing the object is safe.
            return self.default
        return self.type.default_value()

    def __repr__(self) -> str:
        return f"F({self.name!r}, {self.type!r}, {str(self.versions)!r})"


F = Field


class Struct(Type):
    """A named group of fields; also the value class of decoded messages."""

    __slots__ = ("name", "fields", "_cls")

    def __init__(self, name: str, fields: Iterable[Field]):
        self.name = name
        self.fields = tuple(fields)
        seen = set()
        for f in self.fields:
            if f.name in seen:
                raise ValueError(f"{name}: duplicate field {f.name}")
            seen.add(f.name)
        self._cls = None

    @property
    def cls(self) -> type:
        if self._cls is None:
            self._cls = _make_value_class(self)
        return self._cls

    def __call__(self, **values: Any) -> Any:
        return self.cls(**values)

    def default_value(self) -> Any:
        return self.cls()

    def __repr__(self) -> str:
        return f"Struct({self.name!r})"


def _value_class_init(struct: Struct):
    """The value class's ``__init__(self, *, field=default, ...)``, written out
    for this struct's fields: the handlers build every response from these
    classes, and a loop over the fields with a dict of keywords cost several
    times more per object. Immutable defaults are constants; a list or a nested
    struct is made fresh per object, as the fields' ``default_value`` does."""
    names = [f.name for f in struct.fields]
    if any(keyword.iskeyword(n) or not n.isidentifier() or n.startswith("_") for n in names):
        return None
    namespace: dict[str, Any] = {"_M": _MISSING, "_struct_name": struct.name}
    parameters, lines = [], []
    for i, f in enumerate(struct.fields):
        parameters.append(f"{f.name}=_M")
        if f.has_explicit_default or isinstance(f.type, Primitive):
            namespace[f"_d{i}"] = f.default_value()
            default = f"_d{i}"
        elif isinstance(f.type, Array):
            default = "[]"
        else:
            namespace[f"_t{i}"] = f.type
            default = f"_t{i}.default_value()"
        lines.append(f"    self.{f.name} = {default} if {f.name} is _M else {f.name}")
    source = "\n".join(
        [
            f"def __init__(self, {'*, ' + ', '.join(parameters) + ', ' if parameters else ''}**unknown):",
            "    if unknown:",
            "        raise TypeError(f'{_struct_name}: unknown field(s) {sorted(unknown)}')",
            *lines,
        ]
    )
    exec(compile(source, f"<value class {struct.name}>", "exec"), namespace)  # noqa: S102 - our own field names
    return namespace["__init__"]


def _make_value_class(struct: Struct) -> type:
    names = tuple(f.name for f in struct.fields)
    defaults = tuple((f.name, f) for f in struct.fields)

    def __init__(self, **values):
        for name, field in defaults:
            if name in values:
                object.__setattr__(self, name, values.pop(name))
            else:
                object.__setattr__(self, name, field.default_value())
        if values:
            raise TypeError(f"{struct.name}: unknown field(s) {sorted(values)}")

    __init__ = _value_class_init(struct) or __init__

    def __repr__(self):
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{struct.name}({inner})"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in names)

    def to_dict(self):
        out = {}
        for n in names:
            v = getattr(self, n)
            if isinstance(v, list):
                v = [x.to_dict() if hasattr(x, "to_dict") else x for x in v]
            elif hasattr(v, "to_dict"):
                v = v.to_dict()
            out[n] = v
        return out

    return type(
        struct.name,
        (),
        {
            "__slots__": names,
            "__init__": __init__,
            "__repr__": __repr__,
            "__eq__": __eq__,
            "__hash__": None,
            "to_dict": to_dict,
            "STRUCT": struct,
        },
    )


class Api:
    """One API key: its versions and the request and response declarations."""

    __slots__ = ("key", "name", "versions", "flexible", "request", "response")

    def __init__(self, key: int, name: str, versions: str, *, flexible: str, request: list[Field], response: list[Field]):
        self.key = key
        self.name = name
        self.versions = Versions.parse(versions)
        self.flexible = Versions.parse(flexible)
        self.request = Struct(name + "Request", request)
        self.response = Struct(name + "Response", response)

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name!r}, {str(self.versions)!r})"


class DataMessage:
    """A versioned message that is not an API body (headers, embedded payloads)."""

    __slots__ = ("name", "versions", "flexible", "struct")

    def __init__(self, name: str, versions: str, *, flexible: str, fields: list[Field]):
        self.name = name
        self.versions = Versions.parse(versions)
        self.flexible = Versions.parse(flexible)
        self.struct = Struct(name, fields)


def struct_classes(root: Struct):
    """A namespace of the value classes of ``root`` and every struct nested in it, by struct name.

    ``R = struct_classes(api.response); R.PartitionData(partition_index=0, ...)``
    """
    from types import SimpleNamespace

    found: dict[str, type] = {}

    def walk(st: Struct) -> None:
        if st.name in found:
            return
        found[st.name] = st.cls
        for f in st.fields:
            t = f.type
            while isinstance(t, Array):
                t = t.item
            if isinstance(t, Struct):
                walk(t)

    walk(root)
    return SimpleNamespace(**found)

"""JSON Schemas: checked and applied by ``jsonschema``, ``$ref`` resolved by ``referencing``, compatibility by rules.

Drafts: 4, 6, 7, 2019-09 and 2020-12 (Confluent's), chosen by ``$schema``;
draft 7 without one; any other ``$schema`` is refused. A schema must pass its
draft's metaschema, and every ``$ref`` must resolve: within the schema, or to a
reference by its name (the referenced schema is registered under that name
as its URI, so ``{"$ref": "address.json"}`` finds the reference named
``address.json``). ``$ref`` is followed by the compatibility check, never refused.

``canonical`` is the JSON as written without insignificant whitespace;
``normalized`` also sorts every object's keys.

Compatibility (``reader_errors``): whether everything the writer's schema
accepts, the reader's schema accepts too. Rule names are Confluent's. Checked:

- ``type``: a writer type missing from the reader is TYPE_NARROWED (some types
  left) or TYPE_CHANGED (none); ``integer`` is read by ``number``; adding types
  (TYPE_EXTENDED) is compatible; a reader ``type`` where the writer had none
  is TYPE_NARROWED.
- ``properties`` and the content model (``additionalProperties`` and
  ``patternProperties`` of the writer say what an undeclared property could
  hold): a property added by the reader is PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL
  when the writer's model is open (old data may hold anything under that name),
  PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL when the writer's
  additionalProperties/patternProperties schema allows values the new
  property does not, compatible when the writer's model is closed or covers
  it; a property the reader removed is PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL
  when the reader's model is closed, PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
  when the reader's additional schema does not take the old property's values,
  compatible when open; properties in both are compared recursively.
- ``additionalProperties``: closing it (ADDITIONAL_PROPERTIES_REMOVED) or
  narrowing its schema (ADDITIONAL_PROPERTIES_NARROWED) is incompatible.
- ``required``: a name the reader adds is REQUIRED_ATTRIBUTE_ADDED (or
  REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL when the writer's closed model
  could not have it), compatible when the reader's property has a ``default``
  (Confluent's REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED); removing one is compatible.
- ``enum``: the reader must keep every writer value (ENUM_ARRAY_NARROWED;
  ENUM_ADDED where the writer had none); extending is compatible. ``const``
  added or changed is CONST_ADDED / CONST_CHANGED.
- Bounds: ``maxLength``, ``maxItems``, ``maxProperties``, ``maximum``,
  ``exclusiveMaximum`` may only grow or go (*_ADDED, *_DECREASED otherwise);
  ``minLength``, ``minItems``, ``minProperties``, ``minimum``, ``exclusiveMinimum``
  may only shrink or go (*_ADDED, *_INCREASED); draft 4's boolean exclusive
  bounds may only be turned off. ``multipleOf`` added (MULTIPLE_OF_ADDED) or
  changed to a value the old one is not a multiple of (MULTIPLE_OF_CHANGED).
  ``pattern`` added or changed (PATTERN_ADDED / PATTERN_CHANGED).
  ``uniqueItems`` turned on (UNIQUE_ITEMS_ADDED).
- Arrays: ``items`` compared recursively, tuples (``items`` as a list with
  ``additionalItems``, or 2020-12's ``prefixItems`` with ``items``) position by
  position; closing the rest (ADDITIONAL_ITEMS_REMOVED) is incompatible.
- ``oneOf``/``anyOf``: every writer branch must be read by some reader branch,
  so adding branches is compatible and removing or narrowing one is
  SUM_TYPE_NARROWED (a non-combined schema counts as one branch). ``allOf``:
  each reader branch must accept the writer (PRODUCT_TYPE_EXTENDED when the
  reader adds a constraint). ``not`` added or changed: NOT_TYPE_CHANGED.

Not checked (accepted): ``format``, ``contains``, ``dependencies`` /
``dependentRequired`` / ``dependentSchemas``, ``if``/``then``/``else``,
``propertyNames``, ``unevaluated*``; ``oneOf``'s exactly-one overlap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema

from protocol.schema_formats.parsed_schema import ParsedSchema, SchemaInvalid, SerializationError

# $schema (without a trailing "#") -> validator and referencing specification.
DRAFTS = {
    "http://json-schema.org/draft-04/schema": (jsonschema.Draft4Validator, referencing.jsonschema.DRAFT4),
    "http://json-schema.org/draft-06/schema": (jsonschema.Draft6Validator, referencing.jsonschema.DRAFT6),
    "http://json-schema.org/draft-07/schema": (jsonschema.Draft7Validator, referencing.jsonschema.DRAFT7),
    "https://json-schema.org/draft/2019-09/schema": (
        jsonschema.Draft201909Validator,
        referencing.jsonschema.DRAFT201909,
    ),
    "https://json-schema.org/draft/2020-12/schema": (
        jsonschema.Draft202012Validator,
        referencing.jsonschema.DRAFT202012,
    ),
}
DEFAULT_DRAFT = "http://json-schema.org/draft-07/schema"

_SUM_KEYWORDS = ("oneOf", "anyOf")
# Schemas nested deeper than this are refused by the comparison rather than risking Python's recursion limit.
MAX_COMPARISON_DEPTH = 100
# The instance type a keyword constrains: its change matters only where the writer allows that type.
_KEYWORD_KINDS = {
    "maxLength": "string",
    "minLength": "string",
    "pattern": "string",
    "maximum": "number",
    "minimum": "number",
    "exclusiveMaximum": "number",
    "exclusiveMinimum": "number",
    "multipleOf": "number",
    "maxItems": "array",
    "minItems": "array",
    "uniqueItems": "array",
    "maxProperties": "object",
    "minProperties": "object",
}
# Upper bounds may only grow, lower bounds only shrink, for the reader to take all the writer's values.
_UPPER_BOUNDS = {
    "maxLength": "MAX_LENGTH",
    "maxItems": "MAX_ITEMS",
    "maxProperties": "MAX_PROPERTIES",
    "maximum": "MAXIMUM",
    "exclusiveMaximum": "EXCLUSIVE_MAXIMUM",
}
_LOWER_BOUNDS = {
    "minLength": "MIN_LENGTH",
    "minItems": "MIN_ITEMS",
    "minProperties": "MIN_PROPERTIES",
    "minimum": "MINIMUM",
    "exclusiveMinimum": "EXCLUSIVE_MINIMUM",
}


@dataclass(frozen=True)
class JsonHandle:
    """The schema document, its validator (which knows the references) and a resolver for ``$ref``."""

    document: object
    validator: object
    resolver: referencing.Resolver
    draft: str


def parse(text: str, references: Mapping[str, str]) -> ParsedSchema:
    document = _load(text, "schema")
    if not isinstance(document, (dict, bool)):
        raise SchemaInvalid("Invalid JSON schema: a schema is a JSON object or a boolean")
    draft = _draft_of(document)
    validator_class, specification = DRAFTS[draft]
    try:
        validator_class.check_schema(document)
    except jsonschema.SchemaError as error:
        raise SchemaInvalid(f"Invalid JSON schema: {error.message} at {error.json_path}") from error
    resources = []
    for name, reference_text in references.items():
        reference = _load(reference_text, f"reference {name!r}")
        resources.append((name, referencing.Resource.from_contents(reference, default_specification=specification)))
    root = referencing.Resource.from_contents(document, default_specification=specification)
    base_uri = root.id() or ""
    registry = referencing.Registry().with_resources([*resources, (base_uri, root)])
    resolver = registry.resolver(base_uri=base_uri)
    _check_references_resolve(document, resolver, specification, "$")
    return ParsedSchema(
        schema_type="JSON",
        text=text,
        canonical=json.dumps(document, separators=(",", ":"), ensure_ascii=False),
        normalized=json.dumps(document, separators=(",", ":"), ensure_ascii=False, sort_keys=True),
        handle=JsonHandle(document, validator_class(document, registry=registry), resolver, draft),
    )


def reader_errors(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    comparison = _Comparison(writer.handle.resolver, reader.handle.resolver)
    return comparison.compare(writer.handle.document, reader.handle.document, "#")


def payload_error(schema: ParsedSchema, payload: bytes) -> str | None:
    try:
        instance = json.loads(payload)
    except ValueError as error:  # includes invalid UTF-8
        return f"the payload is not JSON: {error}"
    except RecursionError:
        return "the payload is JSON nested too deeply to check"
    try:
        error = jsonschema.exceptions.best_match(schema.handle.validator.iter_errors(instance))
    except RecursionError:
        return "the payload is nested too deeply to check against its JSON schema"
    if error is None:
        return None
    return f"the payload does not match the JSON schema at {error.json_path}: {error.message}"


def _load(text: str, what: str):
    try:
        return json.loads(text)
    except ValueError as error:
        raise SchemaInvalid(f"Invalid JSON {what}: not JSON: {error}") from error
    except RecursionError as error:
        raise SchemaInvalid(f"Invalid JSON {what}: nested too deeply") from error


def _draft_of(document) -> str:
    if not isinstance(document, dict) or "$schema" not in document:
        return DEFAULT_DRAFT
    declared = document["$schema"]
    draft = declared.rstrip("#") if isinstance(declared, str) else None
    if draft not in DRAFTS:
        raise SchemaInvalid(f"Invalid JSON schema: unsupported $schema {declared!r}; supported: {sorted(DRAFTS)}")
    return draft


def _check_references_resolve(node, resolver: referencing.Resolver, specification, path: str) -> None:
    if isinstance(node, list):
        for index, item in enumerate(node):
            _check_references_resolve(item, resolver, specification, f"{path}[{index}]")
        return
    if not isinstance(node, dict):
        return
    if path != "$" and isinstance(node.get("$id", node.get("id")), str):
        # A nested $id starts a new base URI for the $refs below it.
        resolver = resolver.in_subresource(
            referencing.Resource.from_contents(node, default_specification=specification)
        )
    reference = node.get("$ref")
    if isinstance(reference, str):
        try:
            resolver.lookup(reference)
        except referencing.exceptions.Unresolvable as error:
            raise SchemaInvalid(
                f"Invalid JSON schema: $ref {reference!r} at {path} does not resolve: {error}"
            ) from error
    for key, value in node.items():
        if key in ("enum", "const", "default", "examples"):
            continue  # values, not schemas
        _check_references_resolve(value, resolver, specification, f"{path}.{key}")


def _merge(base: dict, extra: dict) -> dict:
    """``base`` with ``extra``'s keywords: properties joined, required joined, others from ``extra``."""
    merged = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = {**merged[key], **value}
        elif key == "required" and isinstance(merged.get(key), list) and isinstance(value, list):
            merged[key] = [*merged[key], *(name for name in value if name not in merged[key])]
        else:
            merged[key] = value
    return merged


def _types(schema: dict) -> set[str] | None:
    """The JSON types ``schema`` allows (None: any); without ``type``, those of its enum or const values."""
    declared = schema.get("type")
    if declared is not None:
        return {declared} if isinstance(declared, str) else set(declared)
    if "const" in schema:
        return {_json_type(schema["const"])}
    if isinstance(schema.get("enum"), list):
        return {_json_type(value) for value in schema["enum"]}
    return None


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _may_be(schema: dict, kind: str) -> bool:
    """Whether ``schema`` allows instances of JSON type ``kind`` ("number" includes "integer")."""
    types = _types(schema)
    return types is None or kind in types or (kind == "number" and "integer" in types)


def _is_multiple(value: float, divisor: float) -> bool:
    quotient = value / divisor
    return abs(quotient - round(quotient)) < 1e-9


class _Comparison:
    """Compares a writer schema with a reader schema, following ``$ref`` on both sides."""

    def __init__(self, writer_resolver: referencing.Resolver, reader_resolver: referencing.Resolver) -> None:
        self.writer_resolver = writer_resolver
        self.reader_resolver = reader_resolver
        # Pairs under comparison, by content (a $ref with siblings resolves to a new dict each
        # time): a recursive schema meets its pair again and compares it once.
        self._active: set[tuple[str, str]] = set()

    def compare(self, writer, reader, path: str) -> list[str]:
        if len(self._active) >= MAX_COMPARISON_DEPTH:
            return [f"TOO_DEEP at {path}: nested deeper than {MAX_COMPARISON_DEPTH} schemas, not compared"]
        saved = (self.writer_resolver, self.reader_resolver)
        try:
            writer, self.writer_resolver = self._dereference(writer, self.writer_resolver)
            reader, self.reader_resolver = self._dereference(reader, self.reader_resolver)
            key = (json.dumps(writer, sort_keys=True), json.dumps(reader, sort_keys=True))
            if key in self._active:
                return []
            self._active.add(key)
            try:
                return self._compare(writer, reader, path)
            finally:
                self._active.discard(key)
        finally:
            self.writer_resolver, self.reader_resolver = saved

    @staticmethod
    def _dereference(schema, resolver: referencing.Resolver):
        # Bounded: a chain of $ref to $ref ends within this many steps or is a cycle.
        for _ in range(64):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                return schema, resolver
            resolved = resolver.lookup(schema["$ref"])
            siblings = {key: value for key, value in schema.items() if key != "$ref"}
            target = resolved.contents
            schema = _merge(target, siblings) if siblings and isinstance(target, dict) else target
            resolver = resolved.resolver
        raise SchemaInvalid("Invalid JSON schema: a $ref cycle")

    def _compare(self, writer, reader, path: str) -> list[str]:
        if writer is False or reader is True or reader == {}:
            return []
        if reader is False:
            return [f"SCHEMA_CLOSED at {path}: the reader accepts nothing where the writer accepts values"]
        if writer is True:
            writer = {}
        if any(key in writer for key in _SUM_KEYWORDS) or any(key in reader for key in _SUM_KEYWORDS):
            return self._compare_sums(writer, reader, path)
        if "allOf" in writer or "allOf" in reader:
            return self._compare_products(writer, reader, path)
        errors: list[str] = []
        errors.extend(self._compare_types(writer, reader, path))
        errors.extend(self._compare_values(writer, reader, path))
        errors.extend(self._compare_bounds(writer, reader, path))
        if _may_be(writer, "object"):
            errors.extend(self._compare_object(writer, reader, path))
        if _may_be(writer, "array"):
            errors.extend(self._compare_array(writer, reader, path))
        if "not" in reader and reader.get("not") != writer.get("not"):
            errors.append(f"NOT_TYPE_CHANGED at {path}: the reader's 'not' differs from the writer's")
        return errors

    def _compare_sums(self, writer: dict, reader: dict, path: str) -> list[str]:
        writer_keyword = next((key for key in _SUM_KEYWORDS if key in writer), None)
        reader_keyword = next((key for key in _SUM_KEYWORDS if key in reader), None)
        writer_rest = {key: value for key, value in writer.items() if key != writer_keyword}
        reader_rest = {key: value for key, value in reader.items() if key != reader_keyword}
        writer_branches = (
            [self._with_rest(writer_rest, branch) for branch in writer[writer_keyword]]
            if writer_keyword
            else [writer_rest]
        )
        reader_branches = (
            [self._with_rest(reader_rest, branch) for branch in reader[reader_keyword]]
            if reader_keyword
            else [reader_rest]
        )
        errors = []
        for index, branch in enumerate(writer_branches):
            if not any(not self.compare(branch, candidate, path) for candidate in reader_branches):
                where = f"{path}/{writer_keyword}/{index}" if writer_keyword else path
                errors.append(
                    f"SUM_TYPE_NARROWED at {where}: no branch of the reader's {reader_keyword or 'schema'} "
                    f"accepts all values of the writer's {'branch ' + str(index) if writer_keyword else 'schema'}"
                )
        return errors

    def _compare_products(self, writer: dict, reader: dict, path: str) -> list[str]:
        flat_writer = {key: value for key, value in writer.items() if key != "allOf"}
        for branch in writer.get("allOf", ()):
            branch, _ = self._dereference(branch, self.writer_resolver)
            if isinstance(branch, dict):
                flat_writer = _merge(flat_writer, branch)
        reader_rest = {key: value for key, value in reader.items() if key != "allOf"}
        errors = []
        for index, branch in enumerate(reader.get("allOf", ())):
            if self.compare(flat_writer, branch, f"{path}/allOf/{index}"):
                errors.append(
                    f"PRODUCT_TYPE_EXTENDED at {path}/allOf/{index}: the reader's allOf branch {index} "
                    "rejects values the writer accepts"
                )
        errors.extend(self.compare(flat_writer, reader_rest, path))
        return errors

    @staticmethod
    def _with_rest(rest: dict, branch) -> object:
        if not rest:
            return branch
        if branch is True:
            return rest
        if branch is False:
            return False
        # The keywords beside oneOf/anyOf apply to every branch; a $ref branch stays a $ref
        # (resolved later on its own side) under allOf.
        return _merge(rest, branch) if "$ref" not in branch else _merge(rest, {"allOf": [branch]})

    @staticmethod
    def _compare_types(writer: dict, reader: dict, path: str) -> list[str]:
        reader_types = _types(reader)
        if reader_types is None:
            return []
        writer_types = _types(writer)
        if writer_types is None:
            return [f"TYPE_NARROWED at {path}: the reader allows only {sorted(reader_types)}, the writer any type"]
        missing = sorted(
            kind
            for kind in writer_types
            if kind not in reader_types and not (kind == "integer" and "number" in reader_types)
        )
        if not missing:
            return []
        rule = "TYPE_NARROWED" if len(missing) < len(writer_types) else "TYPE_CHANGED"
        return [f"{rule} at {path}: the reader's type {sorted(reader_types)} does not take the writer's {missing}"]

    @staticmethod
    def _compare_values(writer: dict, reader: dict, path: str) -> list[str]:
        errors = []
        if "enum" in reader:
            if "enum" not in writer and "const" not in writer:
                errors.append(f"ENUM_ADDED at {path}: the reader allows only {reader['enum']}")
            else:
                written = writer.get("enum", [writer.get("const")])
                dropped = [value for value in written if value not in reader["enum"]]
                if dropped:
                    errors.append(f"ENUM_ARRAY_NARROWED at {path}: the reader's enum lacks {dropped}")
        if "const" in reader:
            if "const" not in writer and writer.get("enum") != [reader["const"]]:
                errors.append(f"CONST_ADDED at {path}: the reader allows only {reader['const']!r}")
            elif "const" in writer and writer["const"] != reader["const"]:
                errors.append(f"CONST_CHANGED at {path}: {writer['const']!r} -> {reader['const']!r}")
        if "pattern" in reader and writer.get("pattern") != reader["pattern"] and _may_be(writer, "string"):
            rule = "PATTERN_ADDED" if "pattern" not in writer else "PATTERN_CHANGED"
            errors.append(f"{rule} at {path}: the reader's pattern {reader['pattern']!r}")
        if "multipleOf" in reader and _may_be(writer, "number"):
            if "multipleOf" not in writer:
                errors.append(f"MULTIPLE_OF_ADDED at {path}: the reader requires multiples of {reader['multipleOf']}")
            elif not _is_multiple(writer["multipleOf"], reader["multipleOf"]):
                errors.append(
                    f"MULTIPLE_OF_CHANGED at {path}: multiples of {writer['multipleOf']} are not all "
                    f"multiples of {reader['multipleOf']}"
                )
        if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True and _may_be(writer, "array"):
            errors.append(f"UNIQUE_ITEMS_ADDED at {path}: the reader requires unique items")
        return errors

    @staticmethod
    def _compare_bounds(writer: dict, reader: dict, path: str) -> list[str]:
        errors = []
        for bounds, tighter in ((_UPPER_BOUNDS, "DECREASED"), (_LOWER_BOUNDS, "INCREASED")):
            for keyword, rule in bounds.items():
                limit = reader.get(keyword)
                if limit is None or limit is False or not _may_be(writer, _KEYWORD_KINDS[keyword]):
                    continue
                old = writer.get(keyword)
                if isinstance(limit, bool):  # draft 4: exclusiveMaximum/Minimum qualify maximum/minimum
                    if old is not True:
                        errors.append(f"{rule}_ADDED at {path}: the reader makes the bound exclusive")
                    continue
                if old is None or isinstance(old, bool):
                    errors.append(f"{rule}_ADDED at {path}: the reader sets {keyword} {limit}")
                elif (limit < old) if tighter == "DECREASED" else (limit > old):
                    errors.append(f"{rule}_{tighter} at {path}: {keyword} {old} -> {limit}")
        return errors

    def _writer_schema_for(self, writer: dict, name: str):
        """What the writer's schema allows under property ``name``."""
        if name in writer.get("properties", {}):
            return writer["properties"][name]
        return self._undeclared_schema_for(writer, name)

    @staticmethod
    def _undeclared_schema_for(schema: dict, name: str):
        for pattern, subschema in schema.get("patternProperties", {}).items():
            if re.search(pattern, name):
                return subschema
        return schema.get("additionalProperties", True)

    def _compare_object(self, writer: dict, reader: dict, path: str) -> list[str]:
        errors = []
        writer_properties = writer.get("properties", {})
        reader_properties = reader.get("properties", {})
        for name, subschema in reader_properties.items():
            where = f"{path}/properties/{name}"
            if name in writer_properties:
                errors.extend(self.compare(writer_properties[name], subschema, where))
                continue
            undeclared = self._undeclared_schema_for(writer, name)
            if undeclared is False or not self.compare(undeclared, subschema, where):
                continue  # OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL / PROPERTY_ADDED_IS_COVERED...
            if undeclared is True or undeclared == {}:
                errors.append(
                    f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at {where}: the writer's open content model "
                    f"allowed any value under '{name}'"
                )
            else:
                errors.append(
                    f"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at {where}: the writer's "
                    f"additional/pattern properties allow values under '{name}' the reader rejects"
                )
        for name, subschema in writer_properties.items():
            if name in reader_properties:
                continue
            where = f"{path}/properties/{name}"
            undeclared = self._undeclared_schema_for(reader, name)
            if undeclared is False:
                errors.append(
                    f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at {where}: the reader's closed content model "
                    f"rejects '{name}', which the writer allowed"
                )
            elif undeclared is not True and self.compare(subschema, undeclared, where):
                errors.append(
                    f"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at {where}: the reader's "
                    f"additional/pattern properties reject values the writer allowed under '{name}'"
                )
        writer_additional = writer.get("additionalProperties", True)
        reader_additional = reader.get("additionalProperties", True)
        if writer_additional is not False and reader_additional is False:
            errors.append(f"ADDITIONAL_PROPERTIES_REMOVED at {path}: the reader closes the content model")
        elif (
            writer_additional is not False
            and reader_additional is not True
            and self.compare(writer_additional, reader_additional, f"{path}/additionalProperties")
        ):
            errors.append(
                f"ADDITIONAL_PROPERTIES_NARROWED at {path}/additionalProperties: the reader's schema for "
                "undeclared properties rejects values the writer's allowed"
            )
        writer_required = set(writer.get("required", ()))
        for name in reader.get("required", ()):
            if name in writer_required:
                continue
            if isinstance(reader_properties.get(name), dict) and "default" in reader_properties[name]:
                continue  # REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED
            if name not in writer_properties and self._undeclared_schema_for(writer, name) is False:
                errors.append(
                    f"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at {path}/required: '{name}' is required "
                    "and the writer's closed content model never has it"
                )
            else:
                errors.append(f"REQUIRED_ATTRIBUTE_ADDED at {path}/required: the reader requires '{name}'")
        return errors

    @staticmethod
    def _tuple(schema: dict) -> tuple[list, object]:
        """(schemas by position, schema of the items after them)."""
        if "prefixItems" in schema:
            return list(schema["prefixItems"]), schema.get("items", True)
        items = schema.get("items", True)
        if isinstance(items, list):
            return list(items), schema.get("additionalItems", True)
        return [], items

    def _compare_array(self, writer: dict, reader: dict, path: str) -> list[str]:
        if not any(key in schema for schema in (writer, reader) for key in ("items", "prefixItems", "additionalItems")):
            return []
        writer_positions, writer_rest = self._tuple(writer)
        reader_positions, reader_rest = self._tuple(reader)
        errors = []
        for index in range(max(len(writer_positions), len(reader_positions))):
            written = writer_positions[index] if index < len(writer_positions) else writer_rest
            read = reader_positions[index] if index < len(reader_positions) else reader_rest
            errors.extend(self.compare(written, read, f"{path}/items/{index}"))
        if writer_rest is not False and reader_rest is False:
            errors.append(
                f"ADDITIONAL_ITEMS_REMOVED at {path}: the reader allows no items past position {len(reader_positions)}"
            )
        else:
            where = f"{path}/items" if not reader_positions else f"{path}/additionalItems"
            errors.extend(self.compare(writer_rest, reader_rest, where))
        return errors


def record_name(schema: ParsedSchema, payload: bytes) -> str | None:
    """The schema's ``title`` (Confluent's JSON Schema serializers name the record by it)."""
    document = schema.handle.document
    title = document.get("title") if isinstance(document, dict) else None
    return title if isinstance(title, str) else None


def serialize(schema: ParsedSchema, data) -> bytes:
    """``data`` as compact JSON text, once it matches the schema; SerializationError when it does not."""
    try:
        error = jsonschema.exceptions.best_match(schema.handle.validator.iter_errors(data))
    except RecursionError as exc:
        raise SerializationError("the data is nested too deeply to check against its JSON schema") from exc
    if error is not None:
        raise SerializationError(f"the data does not match the JSON schema at {error.json_path}: {error.message}")
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

"""The schema registry's state, replayed from ``_schemas`` records, and the writes it plans (pure).

Every broker keeps one :class:`RegistryState` built by :meth:`RegistryState.apply`
from the topic's records in offset order; the partition's leader also plans
each write here (:meth:`RegistryState.plan_register` and the others) and
appends the planned records: the state changes only when a record is applied,
so a write's effect is the same on every broker.

Ids: a schema (type, canonical text, references) registered anywhere keeps its
id; a new one gets the highest id ever seen plus one, so ids grow and are never
reused while the record that held the highest id is in the log. Versions of a
subject count on from its highest version, soft-deleted ones included.

Errors are :class:`RegistryError` with Confluent's HTTP status and error code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema_formats import formats
from protocol.schema_formats.records import (
    ClearSubjectKey,
    ConfigKey,
    DeleteSubjectKey,
    ModeKey,
    NoopKey,
    Reference,
    SchemaKey,
    SchemaValue,
    decode_config_value,
    decode_delete_subject_value,
    decode_key,
    decode_mode_value,
    decode_schema_value,
    encode_config_value,
    encode_delete_subject_value,
    encode_key,
    encode_mode_value,
    encode_schema_value,
)

MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_MODE = "READWRITE"
# Confluent's bound on a version number (2^31 - 1).
VERSION_MAX = (1 << 31) - 1


class RegistryError(Exception):
    """A refusal as Confluent's registry answers it: HTTP status, error code, message."""

    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id=None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def invalid_schema(reason: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {reason}")


def invalid_version(raw) -> RegistryError:
    return RegistryError(
        422, 42202,
        f"The specified version '{raw}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"",
    )  # fmt: skip


def read_only(subject: str | None) -> RegistryError:
    return RegistryError(422, 42205, f"Subject {subject} is in read-only mode" if subject else "The registry is in read-only mode")


def parse_version(raw: str, *, allow_latest: bool = True) -> int | None:
    """A version path segment: its number, None for ``latest`` (and -1); 42202 otherwise."""
    if allow_latest and raw in ("latest", "-1"):
        return None
    try:
        version = int(raw)
    except ValueError:
        raise invalid_version(raw) from None
    if not 1 <= version <= VERSION_MAX:
        raise invalid_version(raw)
    return version


@dataclass
class IdEntry:
    """What one schema id names, and the (subject, version) pairs registered with it."""

    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    users: set[tuple[str, int]] = field(default_factory=set)


@dataclass(frozen=True)
class Registered:
    """A planned registration: the records to append and the id the client is told."""

    schema_id: int
    records: list[tuple[bytes, bytes | None]]


class RegistryState:
    def __init__(self):
        # subject -> version -> its SCHEMA value (soft-deleted ones included).
        self.subjects: dict[str, dict[int, SchemaValue]] = {}
        self.ids: dict[int, IdEntry] = {}
        self.max_id = 0
        # None: the global setting.
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        # Parsed schemas by id, read when first compared (not at replay).
        self._parsed: dict[int, formats.ParsedSchema] = {}

    # ----------------------------------------------------------------- replay

    def apply(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """One ``_schemas`` record; RecordUnreadable when it is not one."""
        key = decode_key(key_bytes)
        if isinstance(key, SchemaKey):
            self._apply_schema(key, None if value_bytes is None else decode_schema_value(value_bytes))
        elif isinstance(key, ConfigKey):
            if value_bytes is None:
                self.configs.pop(key.subject, None)
            else:
                self.configs[key.subject] = decode_config_value(value_bytes)
        elif isinstance(key, ModeKey):
            if value_bytes is None:
                self.modes.pop(key.subject, None)
            else:
                self.modes[key.subject] = decode_mode_value(value_bytes)
        elif isinstance(key, DeleteSubjectKey):
            if value_bytes is not None:
                up_to = decode_delete_subject_value(value_bytes)
                versions = self.subjects.get(key.subject, {})
                for version, value in list(versions.items()):
                    if version <= up_to and not value.deleted:
                        versions[version] = _with_deleted(value)
        elif isinstance(key, ClearSubjectKey):
            versions = self.subjects.get(key.subject, {})
            for version, value in list(versions.items()):
                if value.deleted:
                    self._apply_schema(SchemaKey(key.subject, version), None)
        elif isinstance(key, NoopKey):
            pass

    def _apply_schema(self, key: SchemaKey, value: SchemaValue | None) -> None:
        versions = self.subjects.setdefault(key.subject, {})
        old = versions.pop(key.version, None)
        if old is not None:
            entry = self.ids.get(old.schema_id)
            if entry is not None:
                entry.users.discard((key.subject, key.version))
                if not entry.users:
                    del self.ids[old.schema_id]
                    self._parsed.pop(old.schema_id, None)
        if value is None:
            if not versions:
                del self.subjects[key.subject]
            return
        versions[key.version] = value
        entry = self.ids.get(value.schema_id)
        if entry is None:
            entry = self.ids[value.schema_id] = IdEntry(value.schema_type, value.schema, value.references)
        entry.users.add((key.subject, key.version))
        self.max_id = max(self.max_id, value.schema_id)

    # ----------------------------------------------------------------- reads

    def subject_names(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(
            s for s, versions in self.subjects.items()
            if s.startswith(prefix) and any(deleted or not v.deleted for v in versions.values())
        )  # fmt: skip

    def live_versions(self, subject: str, *, deleted: bool = False) -> list[SchemaValue]:
        """The subject's versions, oldest first (soft-deleted ones with ``deleted``)."""
        versions = self.subjects.get(subject, {})
        return [versions[v] for v in sorted(versions) if deleted or not versions[v].deleted]

    def version_of(self, subject: str, raw_version: str, *, deleted: bool = False) -> SchemaValue:
        """GET /subjects/{s}/versions/{v}: 40401, 40402, 42202 as Confluent's."""
        version = parse_version(raw_version)
        if subject not in self.subjects or not self.live_versions(subject, deleted=True):
            raise subject_not_found(subject)
        live = self.live_versions(subject, deleted=deleted)
        if version is None:
            if not live:
                raise subject_not_found(subject)
            return live[-1]
        value = self.subjects[subject].get(version)
        if value is None or (value.deleted and not deleted):
            raise version_not_found(version)
        return value

    def schema_by_id(self, schema_id: int) -> IdEntry:
        entry = self.ids.get(schema_id)
        if entry is None:
            raise schema_not_found(schema_id)
        return entry

    def compatibility(self, subject: str | None, *, default_to_global: bool = True) -> str | None:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        if subject is not None and not default_to_global:
            return None
        return self.configs.get(None, formats.DEFAULT_COMPATIBILITY)

    def mode(self, subject: str | None, *, default_to_global: bool = True) -> str | None:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        if subject is not None and not default_to_global:
            return None
        return self.modes.get(None, DEFAULT_MODE)

    def parsed(self, schema_id: int) -> formats.ParsedSchema:
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            entry = self.ids[schema_id]
            parsed = self._parsed[schema_id] = formats.parse_schema(entry.schema_type, entry.schema, self.resolve(entry.references))
        return parsed

    def resolve(self, references) -> dict[str, str]:
        """Import name -> schema text of each reference (42201 when one is not registered)."""
        texts = {}
        for ref in references:
            value = self.subjects.get(ref.subject, {}).get(ref.version)
            if value is None:
                raise invalid_schema(f"reference {ref.name!r} names {ref.subject} version {ref.version}, which is not registered")
            texts[ref.name] = value.schema
        return texts

    def parse(self, schema_type: str, text: str, references) -> formats.ParsedSchema:
        if schema_type not in formats.SCHEMA_TYPES:
            raise invalid_schema(f"unknown schema type {schema_type!r}")
        try:
            return formats.parse_schema(schema_type, text, self.resolve(references))
        except formats.SchemaInvalid as exc:
            raise invalid_schema(str(exc)) from None

    def lookup(self, subject: str, parsed: formats.ParsedSchema, references, *, deleted: bool = False) -> SchemaValue | None:
        """The subject's version holding this schema (newest first), or None."""
        for value in reversed(self.live_versions(subject, deleted=deleted)):
            if value.schema_type == parsed.schema_type and value.references == tuple(references):
                if self.parsed(value.schema_id).canonical == parsed.canonical:
                    return value
        return None

    def compatibility_messages(self, subject: str, parsed: formats.ParsedSchema, against: list[SchemaValue] | None = None) -> list[str]:
        level = self.compatibility(subject)
        if level == "NONE":
            return []
        earlier = against if against is not None else self.live_versions(subject)
        earlier = [v for v in earlier if v.schema_type == parsed.schema_type]
        if not earlier:
            return []
        return formats.compatibility_errors(parsed, [self.parsed(v.schema_id) for v in earlier], level)

    # ----------------------------------------------------------------- writes planned

    def _writable(self, subject: str | None, *, importing: bool = False) -> None:
        mode = self.mode(subject)
        if mode == "READONLY":
            raise read_only(subject)
        if mode == "IMPORT" and not importing:
            raise RegistryError(422, 42205, f"Subject {subject} is in import mode: register with an id")
        if importing and mode != "IMPORT":
            raise RegistryError(422, 42205, "A schema id can only be given in IMPORT mode")

    def plan_register(
        self, subject: str, schema_type: str, text: str, references: tuple[Reference, ...] = (),
        *, schema_id: int | None = None, version: int | None = None, normalize: bool = False,
    ) -> Registered:
        """POST /subjects/{s}/versions: the id (an existing registration's, with no
        records) or the SCHEMA record of a new version."""
        parsed = self.parse(schema_type, text, references)
        stored_text = parsed.normalized if normalize else text
        existing = self.lookup(subject, parsed, references)
        if existing is not None and (schema_id is None or schema_id == existing.schema_id):
            return Registered(existing.schema_id, [])
        self._writable(subject, importing=schema_id is not None)
        if schema_id is None:
            errors = self.compatibility_messages(subject, parsed)
            if errors:
                raise RegistryError(
                    409, 409,
                    f"Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: {errors}",
                )  # fmt: skip
            schema_id = self._id_for(parsed, references)
        else:
            entry = self.ids.get(schema_id)
            if entry is not None and (entry.schema_type != schema_type or self.parsed(schema_id).canonical != parsed.canonical):
                raise RegistryError(422, 42207, f"Schema id {schema_id} is already used by another schema")
        versions = self.subjects.get(subject, {})
        if version is None:
            version = max(versions, default=0) + 1
        elif version in versions:
            raise RegistryError(422, 42202, f"Version {version} of subject {subject} exists already")
        value = SchemaValue(subject, version, schema_id, schema_type, stored_text, tuple(references))
        return Registered(schema_id, [(encode_key(SchemaKey(subject, version)), encode_schema_value(value))])

    def _id_for(self, parsed: formats.ParsedSchema, references) -> int:
        for schema_id, entry in self.ids.items():
            if entry.schema_type == parsed.schema_type and entry.references == tuple(references):
                if self.parsed(schema_id).canonical == parsed.canonical:
                    return schema_id
        return self.max_id + 1

    def plan_delete_subject(self, subject: str, *, permanent: bool) -> tuple[list[int], list[tuple[bytes, bytes | None]]]:
        """DELETE /subjects/{s}: the versions deleted and the records that do it."""
        self._writable(subject)
        every = self.live_versions(subject, deleted=True)
        if not every:
            raise subject_not_found(subject)
        live = [v for v in every if not v.deleted]
        if permanent:
            if live:
                raise RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")
            self._refuse_referenced(every)
            return [v.version for v in every], [(encode_key(SchemaKey(subject, v.version)), None) for v in every]
        if not live:
            raise RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")
        self._refuse_referenced(live)
        last = live[-1].version
        return [v.version for v in live], [(encode_key(DeleteSubjectKey(subject)), encode_delete_subject_value(subject, last))]

    def plan_delete_version(self, subject: str, raw_version: str, *, permanent: bool) -> tuple[int, list[tuple[bytes, bytes | None]]]:
        """DELETE /subjects/{s}/versions/{v}."""
        self._writable(subject)
        version = parse_version(raw_version)
        if not self.live_versions(subject, deleted=True):
            raise subject_not_found(subject)
        if version is None:
            live = self.live_versions(subject, deleted=permanent)
            if not live:
                raise version_not_found(raw_version)
            value = live[-1]
        else:
            value = self.subjects[subject].get(version)
            if value is None:
                raise version_not_found(version)
        self._refuse_referenced([value])
        key = encode_key(SchemaKey(subject, value.version))
        if permanent:
            if not value.deleted:
                raise RegistryError(
                    404, 40407, f"Subject '{subject}' Version {value.version} was not deleted first before being permanently deleted"
                )
            return value.version, [(key, None)]
        if value.deleted:
            raise RegistryError(
                404, 40406, f"Subject '{subject}' Version {value.version} was soft deleted.Set permanent=true to delete permanently"
            )
        return value.version, [(key, encode_schema_value(_with_deleted(value)))]

    def _refuse_referenced(self, values: list[SchemaValue]) -> None:
        for value in values:
            for other_versions in self.subjects.values():
                for other in other_versions.values():
                    if not other.deleted and any(r.subject == value.subject and r.version == value.version for r in other.references):
                        raise RegistryError(
                            422, 42206,
                            f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={value.subject},version={value.version}}}.",
                        )  # fmt: skip

    def plan_config(self, subject: str | None, level: str | None) -> list[tuple[bytes, bytes | None]]:
        """PUT (level) or DELETE (None) /config[/{s}]."""
        if level is not None and level not in formats.COMPATIBILITY_LEVELS:
            raise RegistryError(
                422, 42203,
                "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive",
            )  # fmt: skip
        return [(encode_key(ConfigKey(subject)), None if level is None else encode_config_value(level))]

    def plan_mode(self, subject: str | None, mode: str | None, *, force: bool = False) -> list[tuple[bytes, bytes | None]]:
        """PUT (mode) or DELETE (None) /mode[/{s}]. IMPORT needs an empty registry
        (or subject) unless ``force``, as Confluent's."""
        if mode is not None and mode not in MODES:
            raise RegistryError(422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, IMPORT.")
        if mode == "IMPORT" and not force:
            having = self.live_versions(subject, deleted=True) if subject is not None else self.ids
            if having:
                raise RegistryError(422, 42205, "Cannot import since found existing subjects")
        return [(encode_key(ModeKey(subject)), None if mode is None else encode_mode_value(mode))]


def _with_deleted(value: SchemaValue) -> SchemaValue:
    return SchemaValue(value.subject, value.version, value.schema_id, value.schema_type, value.schema, value.references, True)

"""The schema registry's state, replayed from ``_schemas`` records, and the writes it plans (pure).

Every broker keeps one :class:`RegistryState` built by :meth:`RegistryState.apply`
from the topic's records in offset order; the partition's leader also plans
each write here (:meth:`RegistryState.plan_register` and the others) and
appends the planned records: the state changes only when a record is applied,
so a write's effect is the same on every broker.

Contexts (Confluent's schema contexts): a subject ``:.staging:orders-value`` is
the subject ``orders-value`` of the context ``.staging``; a bare name, or one
qualified with ``:.:``, is in the default context ``.``. Subjects are kept by
the name Confluent's registry stores (bare in the default context, qualified in
any other). Each context has its own ids, and its own compatibility and mode
(the key ``:.staging:``), which its subjects fall back to before the
``:.__GLOBAL:`` setting; the default context's own setting is the global one
(the null key), as Confluent's.

Ids: a schema (type, canonical text, references) registered anywhere in a
context keeps its id there; a new one gets the context's highest id ever seen
plus one. A permanent delete also writes the context's highest id (a NOOP record
Confluent's registry skips, records.py), so the highest id is remembered after
compaction has removed the record that held it: ids grow and are never reused.
Versions of a subject count on from its highest version, soft-deleted ones
included.

Errors are :class:`RegistryError` with Confluent's HTTP status and error code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema_formats import formats
from protocol.schema_formats.records import (
    ClearSubjectKey,
    ConfigKey,
    ContextKey,
    DeleteSubjectKey,
    MaxIdKey,
    ModeKey,
    NoopKey,
    Reference,
    SchemaKey,
    SchemaValue,
    decode_config_value,
    decode_delete_subject_value,
    decode_key,
    decode_max_id_value,
    decode_mode_value,
    decode_schema_value,
    encode_config_value,
    encode_context_value,
    encode_delete_subject_value,
    encode_key,
    encode_max_id_value,
    encode_mode_value,
    encode_schema_value,
)

# References nest at most this deep (a guard against a chain that never ends).
MAX_REFERENCE_DEPTH = 32

MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_MODE = "READWRITE"
# Confluent's bound on a version number (2^31 - 1).
VERSION_MAX = (1 << 31) - 1
DEFAULT_CONTEXT = "."
# Confluent's context of the settings every context falls back to.
GLOBAL_CONTEXT = ".__GLOBAL"
# A subject prefix starting with this matches the subjects of every context.
ALL_CONTEXTS_PREFIX = ":*:"


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


def split_subject(raw: str) -> tuple[str, str]:
    """(context, subject name) of a subject as a client names it: ``:.ctx:name``,
    ``:.ctx`` (the context's empty subject), or a bare name (the default context)."""
    if raw.startswith(":."):
        end = raw.find(":", 2)
        if end < 0:
            return raw[1:], ""
        return raw[1:end], raw[end + 1 :]
    return DEFAULT_CONTEXT, raw


def qualified(context: str, name: str) -> str:
    """The stored name: bare in the default context, ``:ctx:name`` in another."""
    return name if context == DEFAULT_CONTEXT else f":{context}:{name}"


def normalize_subject(raw: str) -> str:
    return qualified(*split_subject(raw))


def context_of(subject: str) -> str:
    return split_subject(subject)[0]


def normalize_context(raw: str) -> str:
    """A context as a URL segment names it (``.staging``, ``staging``, ``:.staging:``)."""
    context = raw[1:] if raw.startswith(":") else raw
    context = context[:-1] if context.endswith(":") else context
    if ":" in context:
        raise RegistryError(400, 400, f"Context name '{context}' cannot contain a colon")
    return context if context.startswith(".") else "." + context


def context_subject(context: str) -> str | None:
    """The key of a context's own config and mode (None, the global key, for the default)."""
    return None if context == DEFAULT_CONTEXT else qualified(context, "")


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
        # subject (as stored: qualified outside the default context) -> version ->
        # its SCHEMA value (soft-deleted ones included).
        self.subjects: dict[str, dict[int, SchemaValue]] = {}
        # context -> id -> what it names; ``ids`` is the default context's.
        self.ids: dict[int, IdEntry] = {}
        self.context_ids: dict[str, dict[int, IdEntry]] = {DEFAULT_CONTEXT: self.ids}
        # context -> the highest id it gave out (from SCHEMA records and NOOP floors).
        self.max_ids: dict[str, int] = {}
        # Contexts other than the default with a CONTEXT record.
        self.contexts: set[str] = set()
        # None: the global setting (the default context's); ":.ctx:": a context's.
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        # Parsed schemas by (context, id), read when first compared (not at replay).
        self._parsed: dict[tuple[str, int], formats.ParsedSchema] = {}

    @property
    def max_id(self) -> int:
        """The default context's highest id."""
        return self.max_ids.get(DEFAULT_CONTEXT, 0)

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
        elif isinstance(key, ContextKey):
            if value_bytes is None:
                self.contexts.discard(key.context)
            else:
                self.contexts.add(key.context)
        elif isinstance(key, MaxIdKey):
            if value_bytes is not None:
                self.max_ids[key.context] = max(self.max_ids.get(key.context, 0), decode_max_id_value(value_bytes))
        elif isinstance(key, NoopKey):
            pass

    def _apply_schema(self, key: SchemaKey, value: SchemaValue | None) -> None:
        context = context_of(key.subject)
        ids = self.context_ids.setdefault(context, {})
        versions = self.subjects.setdefault(key.subject, {})
        old = versions.pop(key.version, None)
        if old is not None:
            entry = ids.get(old.schema_id)
            if entry is not None:
                entry.users.discard((key.subject, key.version))
                if not entry.users:
                    del ids[old.schema_id]
                    self._parsed.pop((context, old.schema_id), None)
        if value is None:
            if not versions:
                del self.subjects[key.subject]
            return
        versions[key.version] = value
        entry = ids.get(value.schema_id)
        if entry is None:
            entry = ids[value.schema_id] = IdEntry(value.schema_type, value.schema, value.references)
        entry.users.add((key.subject, key.version))
        self.max_ids[context] = max(self.max_ids.get(context, 0), value.schema_id)

    # ----------------------------------------------------------------- reads

    def subject_names(self, *, deleted: bool = False, prefix: str | None = None) -> list[str]:
        """Subjects by their stored names, as Confluent's ``subjectPrefix`` selects them:
        None or ``:*:p``: names starting with ``p`` in every context; ``:.ctx:p``: in
        ``.ctx``; ``:.:p`` or ``p``: stored names starting with ``p`` (``p`` empty: all)."""
        if prefix is None:
            prefix = ALL_CONTEXTS_PREFIX
        if prefix.startswith(ALL_CONTEXTS_PREFIX):
            rest = prefix[len(ALL_CONTEXTS_PREFIX) :]
            matches = lambda s: split_subject(s)[1].startswith(rest)  # noqa: E731
        else:
            if prefix.startswith(":.:"):
                prefix = prefix[3:]
            elif prefix.startswith(":.") and prefix.count(":") == 1:
                prefix += ":"  # ":.ctx" names the context, as ":.ctx:" does
            matches = lambda s: s.startswith(prefix)  # noqa: E731
        return sorted(
            s for s, versions in self.subjects.items()
            if matches(s) and any(deleted or not v.deleted for v in versions.values())
        )  # fmt: skip

    def context_names(self) -> list[str]:
        """GET /contexts: the default context, then those with a CONTEXT record."""
        return [DEFAULT_CONTEXT, *sorted(self.contexts - {DEFAULT_CONTEXT})]

    def has_subjects(self, context: str) -> bool:
        """Whether any subject of the context has a version, soft-deleted ones included."""
        return any(context_of(s) == context and versions for s, versions in self.subjects.items())

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

    def schema_by_id(self, schema_id: int, context: str = DEFAULT_CONTEXT) -> IdEntry:
        entry = self.context_ids.get(context, {}).get(schema_id)
        if entry is None:
            raise schema_not_found(schema_id)
        return entry

    def context_of_id(self, schema_id: int, subject: str | None, default: str = DEFAULT_CONTEXT) -> str:
        """The context in which GET /schemas/ids/{id}?subject= looks the id up, as
        Confluent's: a qualified subject's context (the id must be the subject's,
        unless the subject is the context's empty one); a bare subject's default
        context when the id is its there, else the first other context where the same
        name holds the id, else the default context."""
        if not subject:
            return default
        context, name = split_subject(subject)

        def holds(context: str, subject: str) -> bool:
            entry = self.context_ids.get(context, {}).get(schema_id)
            return entry is not None and any(user == subject for user, _ in entry.users)

        if context != DEFAULT_CONTEXT or not name:
            if name and not holds(context, subject):
                raise schema_not_found(schema_id)
            return context
        if not holds(DEFAULT_CONTEXT, name):
            for other in sorted(self.context_ids):
                if other != DEFAULT_CONTEXT and holds(other, qualified(other, name)):
                    return other
        return DEFAULT_CONTEXT

    def _setting(self, settings: dict, subject: str | None, default_to_global: bool, built_in: str) -> str | None:
        """Confluent's resolution: the subject's own, then its context's (the global
        key for the default context), then ``:.__GLOBAL:``'s, then the built-in."""
        if subject in settings:
            return settings[subject]
        if subject is not None and not default_to_global and context_of(subject) != GLOBAL_CONTEXT:
            return None
        if subject is not None:
            own = settings.get(context_subject(context_of(subject)))
            if own is not None:
                return own
        elif None in settings:
            return settings[None]
        return settings.get(context_subject(GLOBAL_CONTEXT), built_in)

    def compatibility(self, subject: str | None, *, default_to_global: bool = True) -> str | None:
        return self._setting(self.configs, subject, default_to_global, formats.DEFAULT_COMPATIBILITY)

    def mode(self, subject: str | None, *, default_to_global: bool = True) -> str | None:
        return self._setting(self.modes, subject, default_to_global, DEFAULT_MODE)

    def parsed(self, schema_id: int, context: str = DEFAULT_CONTEXT) -> formats.ParsedSchema:
        parsed = self._parsed.get((context, schema_id))
        if parsed is None:
            entry = self.context_ids[context][schema_id]
            subject = min(entry.users)[0] if entry.users else qualified(context, "")
            parsed = formats.parse_schema(entry.schema_type, entry.schema, self.resolve(entry.references, subject))
            self._parsed[(context, schema_id)] = parsed
        return parsed

    def parsed_of(self, value: SchemaValue) -> formats.ParsedSchema:
        """The parsed schema of a subject's version (its id read in the subject's context)."""
        return self.parsed(value.schema_id, context_of(value.subject))

    @staticmethod
    def reference_target(reference: Reference, subject: str) -> str:
        """The stored subject a reference names: an unqualified one is in the context of
        the subject holding it, as Confluent resolves it."""
        context, name = split_subject(reference.subject)
        if context == DEFAULT_CONTEXT:
            context = context_of(subject)
        return qualified(context, name)

    def resolve(self, references, subject: str = "") -> dict[str, str]:
        """Import name -> schema text of each reference of ``subject``'s schema, and of
        their references in turn (a parser needs every named type the schema reaches,
        as Confluent resolves them); 42201 when one is not registered."""
        texts: dict[str, str] = {}
        pending = [(ref, subject, 0) for ref in references]
        while pending:
            ref, holder, depth = pending.pop()
            if ref.name in texts:
                continue
            if depth > MAX_REFERENCE_DEPTH:
                raise invalid_schema(f"references nest deeper than {MAX_REFERENCE_DEPTH}")
            target = self.reference_target(ref, holder)
            value = self.subjects.get(target, {}).get(ref.version)
            if value is None:
                raise invalid_schema(f"reference {ref.name!r} names {ref.subject} version {ref.version}, which is not registered")
            texts[ref.name] = value.schema
            pending.extend((nested, target, depth + 1) for nested in value.references)
        return texts

    def parse(self, schema_type: str, text: str, references, subject: str = "") -> formats.ParsedSchema:
        if schema_type not in formats.SCHEMA_TYPES:
            raise invalid_schema(f"unknown schema type {schema_type!r}")
        try:
            return formats.parse_schema(schema_type, text, self.resolve(references, subject))
        except formats.SchemaInvalid as exc:
            raise invalid_schema(str(exc)) from None

    def lookup(self, subject: str, parsed: formats.ParsedSchema, references, *, deleted: bool = False) -> SchemaValue | None:
        """The subject's version holding this schema (newest first), or None."""
        for value in reversed(self.live_versions(subject, deleted=deleted)):
            if value.schema_type == parsed.schema_type and value.references == tuple(references):
                if self.parsed_of(value).canonical == parsed.canonical:
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
        return formats.compatibility_errors(parsed, [self.parsed_of(v) for v in earlier], level)

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
        records) or the SCHEMA record of a new version (after the CONTEXT record of a
        context's first registration, as Confluent's registry writes it)."""
        context, name = split_subject(subject)
        if not name:
            raise RegistryError(422, 42208, f"The specified subject '{subject}' is not a valid subject name")
        parsed = self.parse(schema_type, text, references, subject)
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
            schema_id = self._id_for(context, parsed, references)
        else:
            entry = self.context_ids.get(context, {}).get(schema_id)
            if entry is not None and (entry.schema_type != schema_type or self.parsed(schema_id, context).canonical != parsed.canonical):
                raise RegistryError(422, 42207, f"Schema id {schema_id} is already used by another schema")
        versions = self.subjects.get(subject, {})
        if version is None:
            version = max(versions, default=0) + 1
        elif version in versions:
            raise RegistryError(422, 42202, f"Version {version} of subject {subject} exists already")
        value = SchemaValue(subject, version, schema_id, schema_type, stored_text, tuple(references))
        records = []
        if context != DEFAULT_CONTEXT and context not in self.contexts:
            records.append((encode_key(ContextKey(context)), encode_context_value(context)))
        records.append((encode_key(SchemaKey(subject, version)), encode_schema_value(value)))
        return Registered(schema_id, records)

    def _id_for(self, context: str, parsed: formats.ParsedSchema, references) -> int:
        for schema_id, entry in self.context_ids.get(context, {}).items():
            if entry.schema_type == parsed.schema_type and entry.references == tuple(references):
                if self.parsed(schema_id, context).canonical == parsed.canonical:
                    return schema_id
        return self.max_ids.get(context, 0) + 1

    def _max_id_record(self, subject: str) -> tuple[bytes, bytes]:
        """The subject's context's highest id, written with each permanent delete: the
        tombstoned SCHEMA record may be the one holding it, and compaction removes it."""
        context = context_of(subject)
        return encode_key(MaxIdKey(context)), encode_max_id_value(context, self.max_ids.get(context, 0))

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
            tombstones = [(encode_key(SchemaKey(subject, v.version)), None) for v in every]
            return [v.version for v in every], [*tombstones, self._max_id_record(subject)]
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
            return value.version, [(key, None), self._max_id_record(subject)]
        if value.deleted:
            raise RegistryError(
                404, 40406, f"Subject '{subject}' Version {value.version} was soft deleted.Set permanent=true to delete permanently"
            )
        return value.version, [(key, encode_schema_value(_with_deleted(value)))]

    def _refuse_referenced(self, values: list[SchemaValue]) -> None:
        for value in values:
            for other_versions in self.subjects.values():
                for other in other_versions.values():
                    if not other.deleted and self.references_to(other, value):
                        raise RegistryError(
                            422, 42206,
                            f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={value.subject},version={value.version}}}.",
                        )  # fmt: skip

    def references_to(self, value: SchemaValue, target: SchemaValue) -> bool:
        """Whether ``value`` has a reference to the subject and version of ``target``."""
        return any(
            r.version == target.version and self.reference_target(r, value.subject) == target.subject for r in value.references
        )

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
            if subject is None:
                having = bool(self.subjects)
            else:
                context, name = split_subject(subject)
                having = bool(self.live_versions(subject, deleted=True)) if name else self.has_subjects(context)
            if having:
                raise RegistryError(422, 42205, "Cannot import since found existing subjects")
        return [(encode_key(ModeKey(subject)), None if mode is None else encode_mode_value(mode))]

    def plan_delete_context(self, context: str) -> list[tuple[bytes, bytes | None]]:
        """DELETE /contexts/{ctx}: the CONTEXT record's tombstone, once the context has
        no subject (soft-deleted ones count); 42211 otherwise, as Confluent's."""
        if self.has_subjects(context):
            raise RegistryError(422, 42211, f"The specified context '{qualified(context, '')}' is not empty.")
        if context not in self.contexts:
            return []
        return [(encode_key(ContextKey(context)), None)]


def _with_deleted(value: SchemaValue) -> SchemaValue:
    return SchemaValue(value.subject, value.version, value.schema_id, value.schema_type, value.schema, value.references, True)

"""The schemas of a cluster's registry, replayed from its ``_schemas`` topic on disk (no broker).

The data source decodes keys and values framed by Confluent's serializers
(:mod:`spark_jobs.registry_decoder`); the schemas they name live in the
compacted ``_schemas`` topic (one partition) of the same log dirs, in
Confluent's key/value format (:mod:`protocol.schema_formats.records`). This
module replays it the way the registry does, keeping only what decoding
needs:

- every schema id still registered under some subject version, soft-deleted
  versions included (Confluent's deserializers read ``/schemas/ids/{id}``,
  which serves those too), with its type, text and references;
- every subject's versions, to find the latest one (the columns) and to
  resolve references (``subject``/``version`` -> text);
- a tombstone on a SCHEMA key and CLEAR_SUBJECT (a permanent delete) remove
  versions, and an id no version uses any more is gone.

The replay reads ONE replica of ``_schemas-0`` up to its committed end, as
the data source reads any partition (:mod:`spark_jobs.replicas`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema_formats.records import (
    ClearSubjectKey,
    DeleteSubjectKey,
    RecordUnreadable,
    SchemaKey,
    SchemaValue,
    decode_delete_subject_value,
    decode_key,
    decode_schema_value,
)

SCHEMAS_TOPIC = "_schemas"
# References nest at most this deep (a guard against a chain that never ends).
MAX_REFERENCE_DEPTH = 32


class RegistryUnavailable(ValueError):
    """No usable ``_schemas`` topic, or a subject or reference it does not hold."""


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema id: its type, its text, and its references' texts by import name
    (references of references included, as the format parsers need them all)."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[tuple[str, str], ...] = ()


@dataclass
class RegisteredSchemas:
    """The registry's subjects and ids, as far as the replayed records go."""

    subjects: dict[str, dict[int, SchemaValue]] = field(default_factory=dict)

    def apply(self, key_bytes: bytes | None, value_bytes: bytes | None) -> None:
        """One ``_schemas`` record in offset order; records of other kinds (CONFIG, MODE,
        NOOP) and unreadable ones are skipped, as they say nothing about decoding."""
        if key_bytes is None:
            return
        try:
            key = decode_key(key_bytes)
            if isinstance(key, SchemaKey):
                versions = self.subjects.setdefault(key.subject, {})
                if value_bytes is None:  # a tombstone: the version is deleted permanently
                    versions.pop(key.version, None)
                else:
                    versions[key.version] = decode_schema_value(value_bytes)
            elif isinstance(key, DeleteSubjectKey) and value_bytes is not None:
                up_to = decode_delete_subject_value(value_bytes)
                versions = self.subjects.get(key.subject, {})
                for version, value in list(versions.items()):
                    if version <= up_to and not value.deleted:
                        versions[version] = _soft_deleted(value)
            elif isinstance(key, ClearSubjectKey):
                versions = self.subjects.get(key.subject, {})
                for version, value in list(versions.items()):
                    if value.deleted:
                        del versions[version]
        except RecordUnreadable:
            pass  # the registry refuses to write such records; one that got there decodes nothing

    def latest(self, subject: str) -> SchemaValue:
        """The subject's newest version that is not soft-deleted."""
        live = [value for version, value in sorted(self.subjects.get(subject, {}).items()) if not value.deleted]
        if not live:
            known = sorted(s for s, versions in self.subjects.items() if any(not v.deleted for v in versions.values()))
            raise RegistryUnavailable(
                f"subject {subject!r} has no registered version in {SCHEMAS_TOPIC}"
                + (f" (subjects: {', '.join(known[:20])}{', ...' if len(known) > 20 else ''})" if known else "")
            )
        return live[-1]

    def by_id(self) -> dict[int, RegisteredSchema]:
        """Every id some version (soft-deleted ones too) still uses, with its references resolved."""
        found: dict[int, RegisteredSchema] = {}
        for versions in self.subjects.values():
            for value in versions.values():
                if value.schema_id not in found:
                    found[value.schema_id] = RegisteredSchema(
                        value.schema_id, value.schema_type, value.schema, tuple(sorted(self.resolve(value).items()))
                    )
        return found

    def resolve(self, value: SchemaValue) -> dict[str, str]:
        """Import name -> text of each reference of ``value``, and of theirs."""
        texts: dict[str, str] = {}
        pending = [(reference, 0) for reference in value.references]
        while pending:
            reference, depth = pending.pop()
            if reference.name in texts:
                continue
            if depth > MAX_REFERENCE_DEPTH:
                raise RegistryUnavailable(
                    f"schema {value.schema_id}: references nest deeper than {MAX_REFERENCE_DEPTH}"
                )
            target = self.subjects.get(reference.subject, {}).get(reference.version)
            if target is None:
                # Kept out of the decodable ids rather than failing the whole read: only
                # records written with this schema are affected (they read as unknown).
                texts[reference.name] = ""
                continue
            texts[reference.name] = target.schema
            pending.extend((nested, depth + 1) for nested in target.references)
        return texts


def _soft_deleted(value: SchemaValue) -> SchemaValue:
    return SchemaValue(
        value.subject, value.version, value.schema_id, value.schema_type, value.schema, value.references, True
    )


def replay(records) -> RegisteredSchemas:
    """The registry after ``records`` ((key, value) pairs in offset order)."""
    registered = RegisteredSchemas()
    for key, value in records:
        registered.apply(key, value)
    return registered


def read_registry(log_dirs, high_watermark: int | None) -> RegisteredSchemas:
    """Replay ``_schemas-0`` from the log dirs: one replica, up to ``high_watermark``
    (None: its last complete batch), as the data source reads any partition."""
    from spark_jobs import replicas, segment_reader

    found = segment_reader.find_replicas(log_dirs).get((SCHEMAS_TOPIC, 0))
    if not found:
        raise RegistryUnavailable(
            f"no {SCHEMAS_TOPIC}-0 directory in {list(log_dirs)}: the cluster has no schema registry "
            "(schema.registry.listener) or these are not its log dirs"
        )
    replica = replicas.preferred_replica(replicas.replica_logs(found))
    end = replicas.committed_end(replica, high_watermark)
    registered = RegisteredSchemas()
    for piece in segment_reader.split_by_segment(replica.pdir, replica.earliest, end):
        for columns in segment_reader.iter_piece(piece, missing_ok=False):
            for key, value in zip(columns.key, columns.value):
                registered.apply(key, value)
    return registered


__all__ = [
    "SCHEMAS_TOPIC",
    "RegisteredSchema",
    "RegisteredSchemas",
    "RegistryUnavailable",
    "read_registry",
    "replay",
]

"""Schema validation on produce: a topic's batch checked against the registry.

The rules are broker/schemas/validation_rules.py's; this module reads the
batch (decompressed once; where each record's key and value lie, by
protocol.records' scan, with no record objects built) and answers the
rules' questions from this broker's replay of ``_schemas``
(broker/schemas/service.py). Under TopicNameStrategy everything but the
payload follows from a key's or value's first five bytes, so the rules are
asked once per schema id and batch, and full mode decodes each payload by
a reader prepared once per id; the other strategies ask the rules per record.

The leader of a partition checks what it is asked to append: a schema id
it does not know yet may have been registered through another broker a
moment ago, so an unknown id first makes the caller catch the registry up
to its leader's high watermark (:meth:`SchemaValidator.refresh`) and check
again; only then is the record refused.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from broker.schemas.validation_rules import (
    TOPIC_NAME_STRATEGY,
    TopicValidation,
    payload_mismatch,
    record_problem,
    topic_validation,
)
from protocol.exceptions import ProtocolError
from protocol.records import batch_records_data, scan_keys_values, validate_batch
from protocol.schema_formats import formats
from protocol.schema_formats.framing import FRAMING_BYTES, split_framing
from protocol.schema_formats.parsed_schema import SchemaInvalid

log = logging.getLogger(__name__)


_UNKNOWN = object()

# The index ``check`` gives a problem of the batch as a whole (its records cannot be read).
WHOLE_BATCH = -1


class NeedsRefresh(Exception):
    """A record names a schema id this broker's replay does not hold (yet)."""


class _StateView:
    """The rules' SchemaView over one RegistryState."""

    def __init__(self, state, *, fresh: bool):
        self._state = state
        self._fresh = fresh

    def subjects_of(self, schema_id: int) -> frozenset[str] | None:
        entry = self._state.ids.get(schema_id)
        if entry is None:
            if not self._fresh:
                raise NeedsRefresh(schema_id)
            return None
        subjects = self._state.subjects
        return frozenset(
            subject for subject, version in entry.users if not subjects.get(subject, {}).get(version, _DELETED).deleted
        )

    def _parsed(self, schema_id: int):
        try:
            return self._state.parsed(schema_id)
        except (SchemaInvalid, KeyError) as exc:
            # A registered schema always parsed once; a failure here is a broken reference.
            log.warning("schema id %d cannot be read for validation: %s", schema_id, exc)
            return None

    def record_name(self, schema_id: int, payload: bytes) -> str | None:
        parsed = self._parsed(schema_id)
        return None if parsed is None else formats.record_name(parsed, payload)

    def payload_error(self, schema_id: int, payload: bytes) -> str | None:
        parsed = self._parsed(schema_id)
        if parsed is None:
            return f"schema id {schema_id} cannot be read"
        return formats.payload_error(parsed, payload)

    def payload_checker(self, schema_id: int):
        """``payload_error`` for one id, its schema looked up once: payload -> why it does not decode, or None."""
        parsed = self._parsed(schema_id)
        if parsed is None:
            reason = f"schema id {schema_id} cannot be read"
            return lambda payload: reason
        return formats.payload_checker(parsed)


class _Deleted:
    deleted = True


_DELETED = _Deleted()


class SchemaValidator:
    """Checks produced batches of topics that validate, for one broker."""

    def __init__(self, service):
        self._service = service
        # topic -> (its configs mapping, its validation): recomputed when the configs object changes.
        self._by_topic: dict[str, tuple[object, TopicValidation | None]] = {}
        # (topic, "key"/"value") -> records refused, for the metrics.
        self.refused_records: dict[tuple[str, str], int] = {}

    def validation_of(self, topic: str, configs) -> TopicValidation | None:
        """The topic's validation (None: it validates nothing); ``configs`` its overrides in the metadata image."""
        cached = self._by_topic.get(topic)
        if cached is not None and cached[0] is configs:
            return cached[1]
        validation = topic_validation(configs)
        self._by_topic[topic] = (configs, validation)
        return validation

    def check(self, validation: TopicValidation, topic: str, records, *, fresh: bool) -> list[tuple[int, str]]:
        """The records of the batch ``records`` that break ``validation``, as
        (index in the batch, reason), in order; ``[(WHOLE_BATCH, reason)]``
        when a batch of sound framing and CRC holds records that cannot be
        read. ``fresh``: the registry was just caught up, so an unknown id is
        refused rather than NeedsRefresh."""
        try:
            # The append checks the CRC; the batch is decompressed once here,
            # and only where each key and value lies is read of its records.
            header, data = batch_records_data(records, verify_crc=False)
            spans = scan_keys_values(data, header.records_count)
        except ProtocolError as exc:
            try:
                validate_batch(records)
            except ProtocolError:
                return []  # the append refuses the batch itself, with its own error (framing, CRC)
            # A sound batch whose records do not decode: the append reads no
            # records of most topics, so without this refusal they would be
            # stored unchecked.
            return [(WHOLE_BATCH, f"the batch's records cannot be read: {exc}")]
        view = _StateView(self._service.state, fresh=fresh)
        found: dict[int, tuple[str, str]] = {}  # record index -> (side, problem): the key's first
        for is_key in (True, False):
            strategy = validation.side(is_key)
            if strategy is None:
                continue
            side = "key" if is_key else "value"
            if strategy == TOPIC_NAME_STRATEGY:
                problems = self._check_by_id(validation, topic, is_key, data, spans, view)
            else:
                problems = self._check_each(validation, topic, is_key, data, spans, view)
            for index, problem in problems:
                found.setdefault(index, (side, problem))
        # Counted once the whole batch was checked (a NeedsRefresh checks it again).
        for side, _ in found.values():
            self.refused_records[(topic, side)] = self.refused_records.get((topic, side), 0) + 1
        return [(index, found[index][1]) for index in sorted(found)]

    @staticmethod
    def _check_by_id(validation, topic, is_key, data, spans, view) -> list[tuple[int, str]]:
        """TopicNameStrategy: the subject is the topic's, so everything but the
        payload follows from a record's first five bytes (magic byte and
        schema id): one verdict per distinct prefix in the batch, and in full
        mode one payload check per record by the id's schema."""
        id_only = replace(validation, full=False) if validation.full else validation
        side = "key" if is_key else "value"
        offset = 0 if is_key else 2
        framing_bytes = FRAMING_BYTES
        problems = []
        if not validation.full:
            # The hot loop of id mode: per record a slice and a dict lookup.
            verdicts: dict[bytes, str | None] = {}
            get = verdicts.get
            unknown = _UNKNOWN
            for index, span in enumerate(spans):
                length = span[offset + 1]
                if length < 0:
                    continue  # null: a tombstone, or a record without a key
                position = span[offset]
                # An if-expression, not min(): no call per record.
                end = position + (framing_bytes if length >= framing_bytes else length)  # noqa: FURB136
                prefix = data[position:end]
                problem = get(prefix, unknown)
                if problem is unknown:
                    problem = verdicts[prefix] = record_problem(id_only, topic, is_key, prefix, view)
                if problem is not None:
                    problems.append((index, problem))
            return problems
        # Full mode: prefix -> (its problem; or None, the schema id and its payload check).
        full_verdicts: dict[bytes, tuple[str | None, int, object]] = {}
        for index, span in enumerate(spans):
            length = span[offset + 1]
            if length < 0:
                continue
            position = span[offset]
            end = position + (framing_bytes if length >= framing_bytes else length)  # noqa: FURB136
            prefix = data[position:end]
            verdict = full_verdicts.get(prefix)
            if verdict is None:
                problem = record_problem(id_only, topic, is_key, prefix, view)
                if problem is None:
                    schema_id = split_framing(prefix)[0]
                    verdict = (None, schema_id, view.payload_checker(schema_id))
                else:
                    verdict = (problem, 0, None)
                full_verdicts[prefix] = verdict
            if verdict[0] is not None:
                problems.append((index, verdict[0]))
                continue
            problem = verdict[2](data[position + framing_bytes : position + length])
            if problem is not None:
                problems.append((index, payload_mismatch(side, verdict[1], problem)))
        return problems

    @staticmethod
    def _check_each(validation, topic, is_key, data, spans, view) -> list[tuple[int, str]]:
        """RecordNameStrategy and TopicRecordNameStrategy: the subject may
        depend on the payload (Protobuf's message indexes), so each record is
        checked whole."""
        problems = []
        offset = 0 if is_key else 2
        for index, span in enumerate(spans):
            length = span[offset + 1]
            if length < 0:
                continue
            position = span[offset]
            problem = record_problem(validation, topic, is_key, data[position : position + length], view)
            if problem is not None:
                problems.append((index, problem))
        return problems

    async def refresh(self) -> None:
        """Catch this broker's registry up to the leader of ``_schemas``."""
        await self._service.read_state()


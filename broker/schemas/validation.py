"""Schema validation on produce: a topic's batch checked against the registry.

The rules are broker/schemas/validation_rules.py's; this module reads the
batch (decompressed once, every record's key and value) and answers the
rules' questions from this broker's replay of ``_schemas``
(broker/schemas/service.py). The leader of a partition checks what it is
asked to append: a schema id it does not know yet may have been registered
through another broker a moment ago, so an unknown id first makes the
caller catch the registry up to its leader's high watermark
(:meth:`SchemaValidator.refresh`) and check again; only then is the record
refused.
"""

from __future__ import annotations

import logging

from protocol.schema_formats import formats
from protocol.schema_formats.parsed_schema import SchemaInvalid
from broker.schemas.validation_rules import (
    TOPIC_NAME_STRATEGY,
    TopicValidation,
    record_problem,
    topic_validation,
)
from protocol.exceptions import ProtocolError
from protocol.records import decode_batch_records
from protocol.schema_formats.framing import FRAMING_BYTES

log = logging.getLogger(__name__)


_UNKNOWN = object()


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
        (index in the batch, reason), in order. ``fresh``: the registry was
        just caught up, so an unknown id is refused rather than NeedsRefresh."""
        try:
            # The append checks the CRC; the batch is decompressed once here.
            _, decoded = decode_batch_records(records, verify_crc=False)
        except ProtocolError:
            return []  # the append refuses a batch that does not decode, with its own error
        view = _StateView(self._service.state, fresh=fresh)
        sides_checked = [(is_key, validation.side(is_key)) for is_key in (True, False) if validation.side(is_key) is not None]
        # With the topic's subject and ids alone (no payload decoded), a record's
        # verdict follows from its first five bytes: one answer per id and side.
        memo: dict | None = {} if not validation.full else None
        problems = []
        sides = []
        for index, record in enumerate(decoded):
            for is_key, strategy in sides_checked:
                data = record.key if is_key else record.value
                if data is None:
                    continue
                if memo is not None and strategy == TOPIC_NAME_STRATEGY:
                    memo_key = (is_key, data[:FRAMING_BYTES])
                    problem = memo.get(memo_key, _UNKNOWN)
                    if problem is _UNKNOWN:
                        problem = memo[memo_key] = record_problem(validation, topic, is_key, data, view)
                else:
                    problem = record_problem(validation, topic, is_key, data, view)
                if problem is not None:
                    problems.append((index, problem))
                    sides.append("key" if is_key else "value")
                    break
        # Counted once the whole batch was checked (a NeedsRefresh checks it again).
        for side in sides:
            self.refused_records[(topic, side)] = self.refused_records.get((topic, side), 0) + 1
        return problems

    async def refresh(self) -> None:
        """Catch this broker's registry up to the leader of ``_schemas``."""
        await self._service.read_state()


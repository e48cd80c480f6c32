"""Schema validation on produce: which topics, which subject, what a record must carry (pure).

A topic validates the keys or values of its records when its config says so,
with Confluent Server's names (``confluent.key.schema.validation``,
``confluent.value.schema.validation``, and the subject name strategies
``confluent.key.subject.name.strategy`` / ``confluent.value.subject.name.strategy``)
or Redpanda's (``redpanda.key.schema.id.validation``,
``redpanda.value.schema.id.validation``, ``redpanda.key.subject.name.strategy``,
``redpanda.value.subject.name.strategy``). Either flag turns a side on; its
strategy is the one named beside the flag that is on (Confluent's first).

A validated key or value must be null (a tombstone, or a record without a
key) or carry Confluent's framing: the magic byte 0, a 4-byte big-endian
schema id, then the serialized payload. The id must name a registered schema,
registered under the subject the strategy gives:

- TopicNameStrategy: ``<topic>-key`` / ``<topic>-value``;
- RecordNameStrategy: the record's fully qualified name (Avro: the record's
  full name; JSON Schema: its ``title``; Protobuf: the message the payload's
  message indexes name);
- TopicRecordNameStrategy: ``<topic>-<record name>``.

With ``schema.validation.mode=full`` (pybroker's own; ``id``, the default,
checks the id only) the payload must also decode as its schema.

The registry is reached through a :class:`SchemaView` (the registry state and
the formats, in broker/schemas/validation.py): these rules only decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from protocol.schema_formats.framing import FramingError, split_framing
from storage.topic_config import DEFAULT_SUBJECT_NAME_STRATEGY, SUBJECT_NAME_STRATEGY_PACKAGE

TOPIC_NAME_STRATEGY = "TopicNameStrategy"
RECORD_NAME_STRATEGY = "RecordNameStrategy"
TOPIC_RECORD_NAME_STRATEGY = "TopicRecordNameStrategy"
VALIDATION_MODE = "schema.validation.mode"

# (flag, strategy) config names per side, Confluent's before Redpanda's.
SIDE_CONFIGS = {
    "key": (
        ("confluent.key.schema.validation", "confluent.key.subject.name.strategy"),
        ("redpanda.key.schema.id.validation", "redpanda.key.subject.name.strategy"),
    ),
    "value": (
        ("confluent.value.schema.validation", "confluent.value.subject.name.strategy"),
        ("redpanda.value.schema.id.validation", "redpanda.value.subject.name.strategy"),
    ),
}


def short_strategy(name: str) -> str:
    return name.removeprefix(SUBJECT_NAME_STRATEGY_PACKAGE)


@dataclass(frozen=True)
class TopicValidation:
    """What a topic validates: the strategy per side (None: that side is not validated), and whether payloads are decoded."""

    key_strategy: str | None
    value_strategy: str | None
    full: bool

    def side(self, is_key: bool) -> str | None:
        return self.key_strategy if is_key else self.value_strategy


def _on(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def topic_validation(configs: Mapping[str, object]) -> TopicValidation | None:
    """The topic's validation from its configs (raw strings, or parsed: flags
    as bools); None when neither side is validated."""
    if not configs:
        return None
    strategies = {}
    for side, pairs in SIDE_CONFIGS.items():
        strategies[side] = None
        for flag, strategy in pairs:
            if _on(configs.get(flag)):
                strategies[side] = short_strategy(str(configs.get(strategy) or DEFAULT_SUBJECT_NAME_STRATEGY))
                break
    if strategies["key"] is None and strategies["value"] is None:
        return None
    mode = configs.get(VALIDATION_MODE)
    return TopicValidation(strategies["key"], strategies["value"], isinstance(mode, str) and mode.strip() == "full")


def subject_name(strategy: str, topic: str, is_key: bool, record_name: str | None) -> str | None:
    """The subject ``strategy`` gives; None when it needs a record name and there is none."""
    if strategy == TOPIC_NAME_STRATEGY:
        return f"{topic}-{'key' if is_key else 'value'}"
    if record_name is None:
        return None
    if strategy == RECORD_NAME_STRATEGY:
        return record_name
    return f"{topic}-{record_name}"


class SchemaView(Protocol):
    """What the rules ask of the registry."""

    def subjects_of(self, schema_id: int) -> frozenset[str] | None:
        """The subjects the id is registered under (soft-deleted versions left out); None: no such id."""

    def record_name(self, schema_id: int, payload: bytes) -> str | None:
        """The fully qualified record name of the schema (for Protobuf: of the message the payload names)."""

    def payload_error(self, schema_id: int, payload: bytes) -> str | None:
        """Why ``payload`` does not decode as the schema; None when it does."""


def payload_mismatch(side: str, schema_id: int, problem: str) -> str:
    """The refusal of a ``side`` ("key"/"value") whose payload does not decode as its schema."""
    return f"{side} does not match schema id {schema_id}: {problem}"


def record_problem(validation: TopicValidation, topic: str, is_key: bool, data: bytes | None, view: SchemaView) -> str | None:
    """Why one record's key (``is_key``) or value breaks the topic's validation; None when it passes."""
    strategy = validation.side(is_key)
    side = "key" if is_key else "value"
    if strategy is None or data is None:
        return None
    try:
        schema_id, payload = split_framing(data)
    except FramingError as exc:
        return f"{side} has no schema id: {exc}"
    subjects = view.subjects_of(schema_id)
    if subjects is None:
        return f"{side} schema id {schema_id} is not registered"
    record_name = None if strategy == TOPIC_NAME_STRATEGY else view.record_name(schema_id, payload)
    subject = subject_name(strategy, topic, is_key, record_name)
    if subject is None:
        return f"{side} schema id {schema_id} has no record name for {strategy}"
    if subject not in subjects:
        return f"{side} schema id {schema_id} is not registered under subject {subject} ({strategy})"
    if validation.full:
        problem = view.payload_error(schema_id, payload)
        if problem is not None:
            return payload_mismatch(side, schema_id, problem)
    return None

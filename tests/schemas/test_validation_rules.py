"""Schema validation on produce, the rules (broker/schemas/validation_rules.py):
which topics validate which side with which subject strategy, the framing a
record must carry, and what is refused, over a registry of three schemas."""

from __future__ import annotations

from typing import ClassVar

import pytest

from broker.schemas.validation_rules import TopicValidation, record_problem, subject_name, topic_validation
from protocol.schema_formats.framing import FramingError, split_framing


class View:
    """Ids 1 (orders-value, record com.acme.Order), 2 (com.acme.Order, and orders-com.acme.Order), 3 (nowhere live)."""

    subjects: ClassVar = {1: frozenset({"orders-value"}), 2: frozenset({"com.acme.Order", "orders-com.acme.Order"}), 3: frozenset()}

    def subjects_of(self, schema_id):
        return self.subjects.get(schema_id)

    def record_name(self, schema_id, payload):
        return "com.acme.Order" if schema_id in (1, 2) else None

    def payload_error(self, schema_id, payload):
        return None if payload == b"ok" else "bad bytes"


def framed(schema_id: int, payload: bytes = b"ok") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_a_topic_validates_the_sides_its_flags_turn_on_with_their_strategies():
    assert topic_validation({}) is None
    assert topic_validation({"confluent.value.schema.validation": False}) is None
    assert topic_validation({"confluent.value.schema.validation": True}) == TopicValidation(None, "TopicNameStrategy", False)
    rules = topic_validation({
        "confluent.key.schema.validation": True,
        "confluent.key.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
        "redpanda.value.schema.id.validation": True,
        "redpanda.value.subject.name.strategy": "TopicRecordNameStrategy",
        "schema.validation.mode": "full",
    })
    assert rules == TopicValidation("RecordNameStrategy", "TopicRecordNameStrategy", True)


@pytest.mark.parametrize(
    ("strategy", "is_key", "record", "subject"),
    [
        ("TopicNameStrategy", False, None, "orders-value"),
        ("TopicNameStrategy", True, "x.Y", "orders-key"),
        ("RecordNameStrategy", False, "com.acme.Order", "com.acme.Order"),
        ("TopicRecordNameStrategy", True, "com.acme.Order", "orders-com.acme.Order"),
        ("RecordNameStrategy", False, None, None),
    ],
)
def test_subject_names(strategy, is_key, record, subject):
    assert subject_name(strategy, "orders", is_key, record) == subject


def test_framing():
    assert split_framing(framed(258, b"abc")) == (258, b"abc")
    with pytest.raises(FramingError, match="magic byte"):
        split_framing(b"\x01\x00\x00\x00\x01")
    with pytest.raises(FramingError, match="fewer than"):
        split_framing(b"\x00\x00")


@pytest.mark.parametrize(
    ("validation", "is_key", "data", "problem"),
    [
        (TopicValidation(None, "TopicNameStrategy", False), False, framed(1), None),
        (TopicValidation(None, "TopicNameStrategy", False), False, None, None),  # a tombstone
        (TopicValidation(None, "TopicNameStrategy", False), True, b"not framed", None),  # keys not validated
        (TopicValidation(None, "TopicNameStrategy", False), False, b"plain text", "value has no schema id: the first byte is 112"),
        (TopicValidation(None, "TopicNameStrategy", False), False, framed(9), "value schema id 9 is not registered"),
        (TopicValidation(None, "TopicNameStrategy", False), False, framed(2), "not registered under subject orders-value"),
        (TopicValidation(None, "TopicNameStrategy", False), False, framed(3), "not registered under subject orders-value"),
        (TopicValidation(None, "RecordNameStrategy", False), False, framed(2), None),
        (TopicValidation(None, "RecordNameStrategy", False), False, framed(1), "not registered under subject com.acme.Order"),
        (TopicValidation("TopicRecordNameStrategy", None, False), True, framed(2), None),
        (TopicValidation(None, "TopicNameStrategy", True), False, framed(1, b"junk"), "value does not match schema id 1: bad bytes"),
        (TopicValidation(None, "TopicNameStrategy", False), False, framed(1, b"junk"), None),  # id mode: payload not decoded
    ],
)
def test_record_problems(validation, is_key, data, problem):
    found = record_problem(validation, "orders", is_key, data, View())
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found

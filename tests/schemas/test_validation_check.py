"""SchemaValidator.check in-process, against the rules applied record by record.

check reads a batch with the record scan and decides once per schema id what
does not depend on the payload; these tests hold it to the plain reading:
decode every record (decode_batch_records) and ask validation_rules'
record_problem of its key, then of its value. Random batches mix tombstones,
keys and values without framing, shorter than the framing, with unknown ids,
ids of another subject, and good and bad Avro payloads, under id and full
mode, on the key side, the value side or both, with TopicNameStrategy and
RecordNameStrategy.
"""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

fastavro = pytest.importorskip("fastavro")

from broker.schemas.state import RegistryState
from broker.schemas.validation import WHOLE_BATCH, NeedsRefresh, SchemaValidator, _StateView
from broker.schemas.validation_rules import TopicValidation, record_problem
from protocol.compression import CompressionType
from protocol.records import BATCH_HEADER_BYTES, CRC_OFFSET, build_batch, decode_batch_records, update_crc
from protocol.schema_formats.framing import frame
from protocol.schema_formats.records import SchemaKey, SchemaValue

TOPIC = "orders"
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme",
    "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string"}],
}
CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "com.acme",
    "fields": [{"name": "name", "type": "string"}],
}
VALUE_ID, KEY_ID, OTHER_ID, UNKNOWN_ID = 1, 2, 3, 99


class _Service:
    def __init__(self, state):
        self.state = state


def registry() -> RegistryState:
    state = RegistryState()
    for subject, schema_id, schema in (
        (f"{TOPIC}-value", VALUE_ID, ORDER),
        (f"{TOPIC}-key", KEY_ID, CUSTOMER),
        ("com.acme.Order", VALUE_ID, ORDER),
        ("elsewhere-value", OTHER_ID, CUSTOMER),
    ):
        state._apply_schema(SchemaKey(subject, 1), SchemaValue(subject, 1, schema_id, "AVRO", json.dumps(schema)))
    return state


def avro(schema, datum) -> bytes:
    stream = io.BytesIO()
    fastavro.schemaless_writer(stream, fastavro.parse_schema(schema), datum)
    return stream.getvalue()


GOOD_ORDER = avro(ORDER, {"id": 7, "note": "x" * 70})
GOOD_CUSTOMER = avro(CUSTOMER, {"name": "ada"})
fields = st.sampled_from(
    [
        None,
        frame(VALUE_ID, GOOD_ORDER),
        frame(VALUE_ID, GOOD_ORDER + b"\x00"),  # a byte after the record
        frame(VALUE_ID, GOOD_ORDER[:-3]),  # cut short
        frame(VALUE_ID, b"\xff\xff"),
        frame(KEY_ID, GOOD_CUSTOMER),
        frame(KEY_ID, b""),
        frame(OTHER_ID, GOOD_CUSTOMER),
        frame(UNKNOWN_ID, GOOD_ORDER),
        b"plain text, no framing",
        b"\x00\x00",
        b"",
        b"\x01" + GOOD_ORDER,
    ]
)
validations = st.builds(
    TopicValidation,
    st.sampled_from([None, "TopicNameStrategy", "RecordNameStrategy"]),
    st.sampled_from([None, "TopicNameStrategy", "RecordNameStrategy"]),
    st.booleans(),
).filter(lambda v: v.key_strategy or v.value_strategy)


def record_by_record(validation, batch, view) -> tuple[list[tuple[int, str]], dict]:
    """The plain reading: every record decoded, its key then its value asked of the rules."""
    _, decoded = decode_batch_records(batch)
    problems, refused = [], {}
    for index, record in enumerate(decoded):
        for is_key in (True, False):
            problem = record_problem(validation, TOPIC, is_key, record.key if is_key else record.value, view)
            if problem is not None:
                problems.append((index, problem))
                side = (TOPIC, "key" if is_key else "value")
                refused[side] = refused.get(side, 0) + 1
                break
    return problems, refused


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    validations,
    st.lists(st.tuples(fields, fields), min_size=1, max_size=25),
    st.sampled_from(list(CompressionType)),
)
def test_check_answers_as_the_rules_record_by_record(validation, items, codec):
    state = registry()
    batch = build_batch(items, codec=codec)
    validator = SchemaValidator(_Service(state))
    expected, refused = record_by_record(validation, batch, _StateView(state, fresh=True))
    assert validator.check(validation, TOPIC, batch, fresh=True) == expected
    assert validator.refused_records == refused


def test_an_unknown_id_asks_for_a_refresh_unless_the_registry_was_just_caught_up():
    validator = SchemaValidator(_Service(registry()))
    batch = build_batch([(None, frame(VALUE_ID, GOOD_ORDER)), (None, frame(UNKNOWN_ID, GOOD_ORDER))])
    for full in (False, True):
        validation = TopicValidation(None, "TopicNameStrategy", full)
        with pytest.raises(NeedsRefresh):
            validator.check(validation, TOPIC, batch, fresh=False)
        refused = [(1, f"value schema id {UNKNOWN_ID} is not registered")]
        assert validator.check(validation, TOPIC, batch, fresh=True) == refused


def test_full_mode_decodes_every_payload_not_one_per_schema_id():
    validator = SchemaValidator(_Service(registry()))
    good, cut = frame(VALUE_ID, GOOD_ORDER), frame(VALUE_ID, GOOD_ORDER[:-1])
    batch = build_batch([(None, good), (None, cut), (None, good), (None, cut)])
    assert validator.check(TopicValidation(None, "TopicNameStrategy", False), TOPIC, batch, fresh=True) == []
    problems = validator.check(TopicValidation(None, "TopicNameStrategy", True), TOPIC, batch, fresh=True)
    assert [index for index, _ in problems] == [1, 3]
    assert all(problem.startswith(f"value does not match schema id {VALUE_ID}: ") for _, problem in problems)


def test_records_that_cannot_be_read_refuse_the_batch_unless_the_append_refuses_it_first():
    validator = SchemaValidator(_Service(registry()))
    validation = TopicValidation(None, "TopicNameStrategy", False)
    garbled = bytearray(build_batch([(None, frame(VALUE_ID, GOOD_ORDER)), (None, b"x")], codec=CompressionType.NONE))
    garbled[BATCH_HEADER_BYTES] += 2  # the first record claims one byte more
    update_crc(garbled)
    [(index, reason)] = validator.check(validation, TOPIC, bytes(garbled), fresh=True)
    assert index == WHOLE_BATCH and "records cannot be read" in reason
    # A bad CRC (or framing) is the append's to refuse, with its own error.
    garbled[CRC_OFFSET] ^= 0xFF
    assert validator.check(validation, TOPIC, bytes(garbled), fresh=True) == []
    assert validator.check(validation, TOPIC, b"\x00" * 20, fresh=True) == []
    assert validator.refused_records == {}

"""The streaming-mode parser of the REST proxy (broker/http/rest/records.py), without a broker:
records concatenated in a body arrive cut anywhere (inside strings, literals, numbers,
multi-byte characters) and come out whole and in order; bad text is one 400 error,
after the records before it; a record past the bound is 413; payload types encode as
Confluent's proxy does."""

from __future__ import annotations

import itertools
import json

import pytest

from broker.http.rest.records import RecordStream, parse_record

RECORDS = [
    {"value": {"type": "JSON", "data": {"t": True, "f": False, "n": None, "x": -12.5e3, "s": "é\"\\x"}}, "partition_id": 3},
    {"key": {"type": "STRING", "data": "ключ"}, "value": {"type": "BINARY", "data": "AAEC"}, "headers": [{"name": "h", "value": None}]},
    {},
]


@pytest.mark.parametrize("step", range(1, 30))
def test_records_cut_at_every_position_come_out_whole(step):
    blob = " \n".join(json.dumps(r, ensure_ascii=False) for r in RECORDS * 3).encode()
    stream = RecordStream(1 << 20)
    out = []
    for start in range(0, len(blob), step):
        values, error = stream.feed(blob[start:start + step])
        assert error is None, (start, error.message)
        out += values
    values, error = stream.feed(b"", final=True)
    assert error is None
    assert out + values == RECORDS * 3


def test_bad_text_ends_the_stream_after_the_good_records():
    stream = RecordStream(1 << 20)
    values, error = stream.feed(b'{"value": null} {"a": tru}')
    assert values == [{"value": None}]
    assert (error.status, error.error_code) == (400, 400) and error.message.startswith("Malformed JSON")
    values, error = RecordStream(1 << 20).feed(b'{"a": 1', final=True)
    assert values == [] and error.status == 400


def test_a_record_past_the_bound_is_413():
    values, error = RecordStream(100).feed(b'{"value": {"type": "STRING", "data": "' + b"x" * 200)
    assert values == [] and (error.status, error.error_code) == (413, 413)


def test_payload_types_and_partitioning():
    counter = itertools.count()
    record = parse_record(RECORDS[0], 4, counter, 1 << 20)
    assert record.error is None and record.partition == 3
    assert json.loads(record.value) == RECORDS[0]["value"]["data"] and record.key is None
    record = parse_record(RECORDS[1], 4, counter, 1 << 20)
    assert record.key == "ключ".encode() and record.value == b"\x00\x01\x02" and record.headers == [("h", None)]
    assert record.key_info == {"type": "STRING", "size": len("ключ".encode())}
    # Keyed: Kafka's murmur2 partitioner (the same key, the same partition, every time).
    assert {parse_record({"key": {"type": "STRING", "data": "k"}}, 6, counter, 1 << 20).partition for _ in range(3)} == {
        parse_record({"key": {"type": "STRING", "data": "k"}}, 6, counter, 1 << 20).partition
    }
    # Unkeyed: round-robin.
    assert len({parse_record({}, 3, counter, 1 << 20).partition for _ in range(3)}) == 3
    # A schema type is serialized later, by the registry (broker/http/rest/schema_payloads.py).
    from broker.http.rest.schema_payloads import SchemaPayload

    pending = parse_record({"value": {"type": "AVRO", "data": 1}}, 3, counter, 1 << 20)
    assert pending.error is None and isinstance(pending.value, SchemaPayload) and pending.value.kind == "AVRO"
    for bad in ({"value": {"data": "x"}}, {"value": {"type": "BINARY", "data": "!"}},
                {"partition_id": -1}, {"timestamp": "yesterday"}, {"headers": [{"value": "AA=="}]}, []):
        assert parse_record(bad, 3, counter, 1 << 20).error.status == 400, bad
    assert parse_record({"value": {"type": "STRING", "data": "x" * 200}}, 1, counter, 150).error.status == 413

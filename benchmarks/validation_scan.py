"""Cost per record of schema validation on produce, in-process (no broker, no client).

Builds one v2 batch like a confluent-kafka producer's (null keys, values of
Confluent's framing around an Avro payload, timestamps a few milliseconds
apart, about 1 MB uncompressed) with ``protocol.records.build_batch``, and
times ``SchemaValidator.check`` on it against a registry state holding the
schema: id mode (one verdict per schema id) and full mode (every payload
decoded by fastavro). Also times the record scan alone
(``protocol.records.scan_keys_values``) and the full decode
(``decode_batch_records``) it replaces. Prints microseconds of CPU time per
record, the best of ``--repeat`` runs of ``--number`` calls each.

    python benchmarks/validation_scan.py --size 1000 --size 100

The end-to-end figure (a broker and a real producer) is
benchmarks/schema_validation.py's; this one says where a change moves the cost.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker.schemas.state import RegistryState
from broker.schemas.validation import SchemaValidator
from broker.schemas.validation_rules import topic_validation
from protocol.records import BATCH_HEADER_BYTES, Record, build_batch, decode_batch_records
from protocol.schema_formats.framing import frame
from protocol.schema_formats.records import SchemaKey, SchemaValue

TOPIC = "bench"
SCHEMA_ID = 1
SCHEMA = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "body", "type": "string"}]}  # fmt: skip
BATCH_BYTES = 1_000_000


class _Service:
    def __init__(self, state):
        self.state = state


def avro_payload(size: int) -> bytes:
    import fastavro

    stream = io.BytesIO()
    fastavro.schemaless_writer(stream, fastavro.parse_schema(SCHEMA), {"id": 1, "body": "x" * max(0, size - 12)})
    return frame(SCHEMA_ID, stream.getvalue())


def producer_like_batch(value: bytes) -> bytes:
    count = max(1, BATCH_BYTES // (len(value) + 10))
    # librdkafka stamps each record as produced: a few ms apart over a batch.
    records = [Record(offset_delta=i, timestamp_delta=i // 50, key=None, value=value) for i in range(count)]
    return build_batch(records, base_timestamp_ms=1_700_000_000_000)


def per_record_us(function, count: int, number: int, repeat: int) -> float:
    # This process's CPU time, not the wall clock: on a shared machine it varies far less.
    times = timeit.repeat(function, number=number, repeat=repeat, timer=time.process_time)
    return min(times) / number / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size", type=int, action="append", help="bytes of each value (repeatable); 1000 and 100 by default"
    )
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    state = RegistryState()
    subject = f"{TOPIC}-value"
    state._apply_schema(SchemaKey(subject, 1), SchemaValue(subject, 1, SCHEMA_ID, "AVRO", json.dumps(SCHEMA)))
    validator = SchemaValidator(_Service(state))
    id_mode = topic_validation({"confluent.value.schema.validation": "true"})
    full_mode = topic_validation({"confluent.value.schema.validation": "true", "schema.validation.mode": "full"})

    try:
        from protocol.records import scan_keys_values
    except ImportError:  # before the scanner existed
        scan_keys_values = None

    for size in args.size or [1000, 100]:
        value = avro_payload(size)
        batch = producer_like_batch(value)
        _, decoded = decode_batch_records(batch)
        count = len(decoded)
        assert not validator.check(id_mode, TOPIC, batch, fresh=True)
        assert not validator.check(full_mode, TOPIC, batch, fresh=True)
        print(f"{count} records of {len(value)} B in a batch of {len(batch)} B", end=" ")
        print(f"(us of CPU per record, best of {args.repeat}):")
        figures = {
            "decode_batch_records": lambda batch=batch: decode_batch_records(batch, verify_crc=False),
            "check, id mode": lambda batch=batch: validator.check(id_mode, TOPIC, batch, fresh=True),
            "check, full mode": lambda batch=batch: validator.check(full_mode, TOPIC, batch, fresh=True),
        }
        if scan_keys_values is not None:
            records_bytes = batch[BATCH_HEADER_BYTES:]
            figures["scan_keys_values"] = lambda data=records_bytes, count=count: scan_keys_values(data, count)
        for name, function in figures.items():
            print(f"  {name:22s} {per_record_us(function, count, args.number, args.repeat):6.3f}")


if __name__ == "__main__":
    main()

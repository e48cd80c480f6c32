"""``POST /v3/clusters/{cluster_id}/topics/{topic_name}/records``: produce, single or streaming.

The body is one JSON record, or (streaming mode, as Confluent's proxy) several
records concatenated in one chunked body; the answer has one JSON result per
record, in order, written as the records are acknowledged. A record is
``{"partition_id", "headers": [{"name", "value": base64}], "key": {"type",
"data"}, "value": {"type", "data"}, "timestamp": ISO-8601}`` with types
BINARY (base64 data), JSON (any JSON value, stored as its compact text) and
STRING; AVRO, PROTOBUF and JSONSCHEMA are serialized by a schema of the
registry (broker/http/rest/schema_payloads.py says which); a missing type with
data and no schema field is refused with 400. Without ``partition_id`` a keyed record goes to
murmur2(key) % partitions, as Kafka's default partitioner, others round-robin.

Batching: the records parsed from what has arrived so far (at most
``ROUND_RECORDS_MAX``) are produced together, one record batch per partition
in one Produce request (acks=all) per partition leader (this broker, or another
node over broker/http/rest/cluster.py), so a stream of many small records costs a
few Produce requests, not one per record. A record larger than the topic's
``max.message.bytes`` is answered 413 on its own; a batch is cut before it
would grow past that limit.

A body with one record answers with that record's status (200, or the error's
status); with more, the answer is 200 and each line is a result or an error
object (a malformed record ends the stream with a 400 line, as the rest cannot
be resynchronised).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import itertools
import json
import re
import time
from datetime import UTC, datetime

from broker.http.rest.errors import RestError, bad_request, kafka_error
from broker.http.rest.resources import Call
from broker.http.rest.schema_payloads import SchemaPayload, schema_payload
from broker.http.rest.schema_payloads import serialize as serialize_by_schema
from broker.schemas.state import RegistryError
from broker.tools.console import partition_for_key
from protocol.errors import ErrorCode
from protocol.records import build_batch

ROUND_RECORDS_MAX = 500
PRODUCE_TIMEOUT_MS = 30_000
ACKS_ALL = -1
# A record batch's fixed part and a record's worst-case framing, counted against max.message.bytes.
BATCH_OVERHEAD_BYTES = 61
RECORD_OVERHEAD_BYTES = 40
PAYLOAD_TYPES = ("BINARY", "JSON", "STRING")
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSONSCHEMA")
_DECODER = json.JSONDecoder()
_PARTIAL_TOKEN = re.compile(r"[A-Za-z0-9+\-.]*")
# Unkeyed records without a partition: one counter over all topics (a per-topic one
# would grow with every topic name ever posted to).
_ROUND_ROBIN = itertools.count()
_WHITESPACE = " \t\r\n"


class _Parsed:
    """One record of the body, ready to produce (or the error answering it)."""

    __slots__ = ("error", "headers", "key", "key_info", "partition", "result", "size", "timestamp_ms", "value", "value_info")

    def __init__(self):
        self.error: RestError | None = None
        self.result: dict | None = None


class RecordStream:
    """Parses concatenated JSON records from chunks of text, bounded per record."""

    def __init__(self, record_text_max: int):
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._text = ""
        self._record_text_max = record_text_max

    def feed(self, chunk: bytes, final: bool = False) -> tuple[list, RestError | None]:
        """The JSON values completed by ``chunk``, and the RestError of bad text after
        them (the stream ends there: what follows cannot be resynchronised)."""
        values: list = []
        try:
            return self._feed(chunk, final, values), None
        except RestError as exc:
            return values, exc

    def _feed(self, chunk: bytes, final: bool, values: list) -> list:
        try:
            self._text += self._decoder.decode(chunk, final)
        except UnicodeDecodeError:
            raise bad_request("The request body is not valid UTF-8.") from None
        pos, text = 0, self._text
        while True:
            while pos < len(text) and text[pos] in _WHITESPACE:
                pos += 1
            if pos == len(text):
                break
            try:
                value, end = _DECODER.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                # Cut short by the chunk's end: wait for more; anything else is malformed.
                if final or not _cut_short(text, exc):
                    self._text = ""
                    raise bad_request(f"Malformed JSON: {exc.msg} at character {exc.pos - pos} of a record.") from None
                break  # the record goes on in the next chunk
            if isinstance(value, (int, float)) and end == len(text) and not final:
                break  # a number at the end may go on
            values.append(value)
            pos = end
        self._text = text[pos:]
        if len(self._text) > self._record_text_max:
            raise RestError(413, 413, f"A record is larger than {self._record_text_max} characters of JSON.")
        return values


def _cut_short(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether a decoding error is only the end of what has arrived: an error at the
    end, a string not closed yet, or a literal or number still being written (``tr``,
    ``-1.``) up to the end."""
    return (
        exc.pos >= len(text)
        or exc.msg.startswith("Unterminated string")
        or _PARTIAL_TOKEN.fullmatch(text, exc.pos) is not None
    )


def _payload(part, what: str) -> tuple[bytes | SchemaPayload | None, dict | None]:
    """(bytes, {"type", "size"}) of a key or value; (None, None) when absent; a
    SchemaPayload (and None) when the registry must serialize it."""
    if part is None:
        return None, None
    if not isinstance(part, dict):
        raise bad_request(f"'{what}' must be an object with 'type' and 'data'.")
    kind = part.get("type")
    data = part.get("data")
    pending = schema_payload(part, what)
    if pending is not None:
        return pending, None  # serialized by the registry before the produce (Producer.produce)
    if kind is None:
        if "data" not in part:
            return None, None
        raise bad_request(f"'{what}.type' is required: one of {', '.join(PAYLOAD_TYPES + SCHEMA_TYPES)}.")
    if not isinstance(kind, str) or kind.upper() not in PAYLOAD_TYPES:
        raise bad_request(f"'{what}.type' must be one of {', '.join(PAYLOAD_TYPES + SCHEMA_TYPES)}.")
    kind = kind.upper()
    if kind == "BINARY":
        if data is None:
            encoded = None
        elif not isinstance(data, str):
            raise bad_request(f"'{what}.data' of type BINARY must be a base64 string.")
        else:
            try:
                encoded = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise bad_request(f"'{what}.data' is not valid base64.") from None
    elif kind == "STRING":
        if data is not None and not isinstance(data, str):
            raise bad_request(f"'{what}.data' of type STRING must be a string.")
        encoded = None if data is None else data.encode("utf-8")
    else:
        encoded = None if data is None else json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return encoded, {"type": kind, "size": 0 if encoded is None else len(encoded)}


def _timestamp_ms(raw) -> int | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise bad_request("'timestamp' must be an ISO-8601 date-time string.")
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise bad_request(f"'timestamp' {raw!r} is not an ISO-8601 date-time.") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    ms = int(parsed.timestamp() * 1000)
    if not 0 <= ms < 2**63:
        raise bad_request(f"'timestamp' {raw!r} is out of range.")
    return ms


def iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_record(value, partitions: int, round_robin, size_max: int) -> _Parsed:
    record = _Parsed()
    try:
        if not isinstance(value, dict):
            raise bad_request("A record must be a JSON object.")
        record.key, record.key_info = _payload(value.get("key"), "key")
        record.value, record.value_info = _payload(value.get("value"), "value")
        headers = value.get("headers") or []
        if not isinstance(headers, list):
            raise bad_request("'headers' must be a list of {name, value}.")
        record.headers = []
        for h in headers:
            if not isinstance(h, dict) or not isinstance(h.get("name"), str):
                raise bad_request("Each header must be an object with a string 'name'.")
            raw = h.get("value")
            if raw is not None and not isinstance(raw, str):
                raise bad_request(f"Header {h['name']}: 'value' must be a base64 string.")
            try:
                record.headers.append((h["name"], None if raw is None else base64.b64decode(raw, validate=True)))
            except (binascii.Error, ValueError):
                raise bad_request(f"Header {h['name']}: 'value' is not valid base64.") from None
        record.timestamp_ms = _timestamp_ms(value.get("timestamp"))
        partition = value.get("partition_id")
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < 2**31:
                raise bad_request("'partition_id' must be a non-negative integer.")
            record.partition = partition
        elif partitions <= 0:
            record.partition = 0
        elif record.key is not None and not isinstance(record.key, SchemaPayload):
            record.partition = partition_for_key(record.key, partitions)
        elif record.key is not None:
            record.partition = None  # by the serialized key, once it is (Producer.produce)
        else:
            record.partition = next(round_robin) % partitions
        if not isinstance(record.key, SchemaPayload) and not isinstance(record.value, SchemaPayload):
            size_record(record, size_max)
    except RestError as exc:
        record.error = exc
    return record


def size_record(record: _Parsed, size_max: int) -> None:
    """The record's size in a batch; RestError 413 past the topic's max.message.bytes."""
    record.size = (
        len(record.key or b"") + len(record.value or b"") + RECORD_OVERHEAD_BYTES
        + sum(len(n.encode()) + len(v or b"") + 10 for n, v in record.headers)
    )
    if record.size + BATCH_OVERHEAD_BYTES > size_max:
        raise RestError(
            413, 413,
            f"The record is {record.size + BATCH_OVERHEAD_BYTES} bytes, larger than the topic's max.message.bytes ({size_max}).",
        )


class Producer:
    """Produces the records of one POST for ``call`` (its principal), round by round."""

    def __init__(self, call: Call):
        self.call = call
        self.topic = call.params["topic_name"]
        broker = call.broker
        image_topic = broker.image.topics.get(self.topic)
        # Read from this broker's metadata image for planning only: whether the caller may
        # write, and whether the topic exists, is answered by the Produce itself.
        self.partitions = len(image_topic.partitions) if image_topic is not None else 0
        self.size_max = broker.topic_config(image_topic)["max.message.bytes"] if image_topic is not None else broker.config["message.max.bytes"]
        self.round_robin = _ROUND_ROBIN

    def parse(self, value) -> _Parsed:
        return parse_record(value, self.partitions, self.round_robin, self.size_max)

    async def _serialize(self, records: list[_Parsed]) -> None:
        """Serialize the keys and values that name a schema, by this broker's registry caught up once."""
        waiting = [r for r in records if r.error is None and (isinstance(r.key, SchemaPayload) or isinstance(r.value, SchemaPayload))]
        if not waiting:
            return
        try:
            state = await self.call.broker.schemas.read_state()
        except RegistryError as exc:
            error = RestError(500, 50002, f"The schema registry cannot be read: {exc.message}")
            for r in waiting:
                r.error = error
            return
        for r in waiting:
            try:
                if isinstance(r.key, SchemaPayload):
                    r.key, r.key_info = serialize_by_schema(state, self.topic, r.key)
                    if r.partition is None:
                        r.partition = partition_for_key(r.key, self.partitions) if self.partitions > 0 else 0
                if isinstance(r.value, SchemaPayload):
                    r.value, r.value_info = serialize_by_schema(state, self.topic, r.value)
                size_record(r, self.size_max)
            except RestError as exc:
                r.error = exc

    async def produce(self, records: list[_Parsed]) -> None:
        """Produce the records without an error (one batch per partition, cut at the
        size limit into further Produce requests) and set each one's result or error."""
        await self._serialize(records)
        pending = [r for r in records if r.error is None]
        while pending:
            batches: dict[int, list[_Parsed]] = {}
            sizes: dict[int, int] = {}
            rest = []
            for r in pending:
                if rest or sizes.get(r.partition, BATCH_OVERHEAD_BYTES) + r.size > self.size_max:
                    rest.append(r)  # next Produce: order within a partition is kept
                    continue
                batches.setdefault(r.partition, []).append(r)
                sizes[r.partition] = sizes.get(r.partition, BATCH_OVERHEAD_BYTES) + r.size
            await self._produce_once(batches)
            pending = rest

    async def _produce_once(self, batches: dict[int, list[_Parsed]]) -> None:
        now_ms = int(time.time() * 1000)
        built = {}
        for partition, records in batches.items():
            for r in records:
                if r.timestamp_ms is None:
                    r.timestamp_ms = now_ms
            built[partition] = build_batch([(r.key, r.value, r.headers, r.timestamp_ms) for r in records])
        # Each partition's batch to its leader, this broker or another (broker/http/rest/cluster.py).
        answered = await self.call.kafka.produce(self.topic, built, acks=ACKS_ALL, timeout_ms=PRODUCE_TIMEOUT_MS)
        cluster_id = self.call.cluster_id
        for partition, records in batches.items():
            p = answered.get(partition)
            if p is None:
                for r in records:
                    r.error = RestError(500, 50003, "The broker did not answer for this partition.")
                continue
            if p.error_code != ErrorCode.NONE:
                error = kafka_error(p.error_code, p.error_message, self.topic)
                for r in records:
                    r.error = error
                continue
            append_time = p.log_append_time_ms if p.log_append_time_ms is not None and p.log_append_time_ms >= 0 else None
            for i, r in enumerate(records):
                r.result = {
                    "error_code": 200,
                    "cluster_id": cluster_id,
                    "topic_name": self.topic,
                    "partition_id": partition,
                    "offset": p.base_offset + i,
                    "timestamp": iso_ms(append_time if append_time is not None else r.timestamp_ms),
                    "key": r.key_info,
                    "value": r.value_info,
                }


def answer_of(record: _Parsed) -> tuple[int, dict]:
    if record.error is not None:
        return record.error.status, record.error.body()
    return 200, record.result


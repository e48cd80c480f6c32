"""Confluent REST Proxy's v2 consumer API: consume over HTTP through a consumer instance.

``POST /consumers/{group}`` creates an instance (broker/http/rest/consumer_instances.py:
a real member of the group) and answers its ``instance_id`` and ``base_uri``;
under ``{base_uri}`` = ``/consumers/{group}/instances/{instance}``:

- ``subscription``: POST ``{"topics": [...]}`` or ``{"topic_pattern": "regex"}``,
  GET (the topics subscribed), DELETE (unsubscribe: leave the group);
- ``assignments``: POST ``{"partitions": [{"topic", "partition"}]}`` (manual
  assignment, no group membership), GET (the partitions assigned, by the group or by hand);
- ``records``: GET ``?timeout=MS&max_bytes=N`` with ``Accept:
  application/vnd.kafka.binary.v2+json`` (key and value base64) or
  ``application/vnd.kafka.json.v2+json`` (key and value as JSON), matching the
  instance's ``format``; ``[{"topic", "key", "value", "partition", "offset"}]``;
- ``offsets``: POST commits, with a body ``{"offsets": [{"topic", "partition",
  "offset", "metadata"}]}`` each partition's ``offset + 1`` (the offset is the
  last record processed, as Confluent's proxy reads it), without one the
  instance's positions (everything returned so far);
  ``committed/offsets``: GET ``{"partitions": [...]}`` (a body; none: the
  assigned partitions) answers the group's committed offsets;
- ``positions``: POST ``{"offsets": [{"topic", "partition", "offset"}]}`` seeks;
  ``positions/beginning`` and ``positions/end``: POST ``{"partitions": [...]}``;
- DELETE ``{base_uri}`` closes the instance (commits with auto-commit, leaves the group).

Bodies are ``application/vnd.kafka.v2+json`` (``application/vnd.kafka+json`` and
``application/json`` are accepted too; another type is 415), answers and errors
``application/vnd.kafka.v2+json``. Confluent's error codes: 40403 (no such
instance, or one another principal created), 40601 (Accept names the other
format), 406 (an Accept of no v2 format), 40902 (an instance of that name
exists), 40903 (subscription and manual assignment mixed, a seek outside the
assignment), 42204 (a bad instance setting), 422 (a malformed body).
"""

from __future__ import annotations

import asyncio
import base64
import json

from broker.http.rest.consumer_instances import REQUEST_TIMEOUT_MS_MAX, InstanceSettings
from broker.http.rest.errors import RestError, kafka_error
from broker.http.rest.resources import Call
from protocol.errors import ErrorCode
from protocol.records import decode_batch_records, iter_batches

V2_TYPE = "application/vnd.kafka.v2+json"
V2_REQUEST_TYPES = (V2_TYPE, "application/vnd.kafka+json", "application/json")
RECORD_TYPES = {"binary": "application/vnd.kafka.binary.v2+json", "json": "application/vnd.kafka.json.v2+json"}
RESPONSE_BYTES_MAX_DEFAULT = 64 << 20  # Confluent's consumer.request.max.bytes default
CONTROL_BATCH = 0x20
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1


def _unprocessable(message: str) -> RestError:
    return RestError(422, 422, message)


def _instance(call: Call):
    return call.consumers.get(call.params["group_name"], call.params["instance"], call.principal)


def _partitions(body, key: str = "partitions") -> list[tuple[str, int]]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise _unprocessable(f"The request body must be an object with a '{key}' list of {{topic, partition}}.")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) or type(item.get("partition")) is not int \
                or not 0 <= item["partition"] < 2**31:
            raise _unprocessable(f"Each of '{key}' must be {{\"topic\": string, \"partition\": non-negative integer}}.")
        out.append((item["topic"], item["partition"]))
    return out


def _offsets(body) -> dict[tuple[str, int], tuple[int, str | None]]:
    tps = _partitions(body, "offsets")
    out = {}
    for (topic, partition), item in zip(tps, body["offsets"]):
        offset = item.get("offset")
        metadata = item.get("metadata")
        if type(offset) is not int or not 0 <= offset < 2**63 - 1:
            raise _unprocessable("Each of 'offsets' needs a non-negative integer 'offset'.")
        if metadata is not None and not isinstance(metadata, str):
            raise _unprocessable("'metadata' must be a string.")
        out[(topic, partition)] = (offset, metadata)
    return out


def _tp_list(tps) -> list[dict]:
    return [{"topic": t, "partition": p} for t, p in sorted(tps)]


# ------------------------------------------------------------------ instances


async def create_instance(call: Call):
    settings = InstanceSettings.parse(call.body)
    group = call.params["group_name"]
    instance = call.consumers.create(group, settings, call.principal, call.host)
    return 200, {"instance_id": settings.name, "base_uri": f"{call.base_url}/consumers/{group}/instances/{instance.settings.name}"}


async def delete_instance(call: Call) -> None:
    instance = _instance(call)
    async with instance.lock:
        await call.consumers.remove(instance)


# ------------------------------------------------------------------ subscription, assignment


async def subscribe(call: Call) -> None:
    body = call.body
    topics = body.get("topics") if isinstance(body, dict) else None
    pattern = body.get("topic_pattern") if isinstance(body, dict) else None
    if (topics is None) == (pattern is None):
        raise _unprocessable("The request body must have either 'topics' (a list of names) or 'topic_pattern' (a regex).")
    if topics is not None and (not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics)):
        raise _unprocessable("'topics' must be a non-empty list of topic names.")
    if pattern is not None and (not isinstance(pattern, str) or not pattern):
        raise _unprocessable("'topic_pattern' must be a non-empty string.")
    instance = _instance(call)
    async with instance.lock:
        instance.subscribe(topics, pattern)


async def get_subscription(call: Call):
    instance = _instance(call)
    topics = instance.joined_topics if instance.pattern is not None else instance.topics
    return 200, {"topics": list(topics)}


async def unsubscribe(call: Call) -> None:
    instance = _instance(call)
    async with instance.lock:
        await instance.unsubscribe()


async def assign(call: Call) -> None:
    partitions = _partitions(call.body)
    instance = _instance(call)
    async with instance.lock:
        instance.assign(partitions)


async def get_assignments(call: Call):
    instance = _instance(call)
    return 200, {"partitions": _tp_list(instance.assigned)}


# ------------------------------------------------------------------ positions, offsets


async def seek(call: Call) -> None:
    offsets = {tp: offset for tp, (offset, _) in _offsets(call.body).items()}
    instance = _instance(call)
    async with instance.lock:
        instance.seek(offsets)


async def _seek_to(call: Call, timestamp: int) -> None:
    partitions = _partitions(call.body)
    instance = _instance(call)
    async with instance.lock:
        await instance.seek_to(partitions, timestamp)


async def seek_to_beginning(call: Call) -> None:
    await _seek_to(call, EARLIEST_TIMESTAMP)


async def seek_to_end(call: Call) -> None:
    await _seek_to(call, LATEST_TIMESTAMP)


async def commit_offsets(call: Call) -> None:
    given = None
    if call.body is not None:
        given = {tp: (offset + 1, metadata) for tp, (offset, metadata) in _offsets(call.body).items()}
    instance = _instance(call)
    async with instance.lock:
        offsets = instance.current_positions() if given is None else given
        await instance.commit(offsets)
        instance.committed_positions.update({tp: o for tp, (o, _) in offsets.items()})


async def committed_offsets(call: Call):
    wanted = None if call.body is None else _partitions(call.body)
    instance = _instance(call)
    async with instance.lock:
        partitions = instance.assigned if wanted is None else wanted
        committed = await instance.committed(list(partitions))
    return 200, {"offsets": [
        {"topic": t, "partition": p, "offset": committed[(t, p)][0], "metadata": committed[(t, p)][1] or ""}
        for t, p in sorted(set(partitions)) if (t, p) in committed
    ]}


# ------------------------------------------------------------------ records


def _accepted_format(accept: str | None) -> str | None:
    """The format the Accept header names; "" for any (none, */*); None for no v2 record type."""
    if not accept:
        return ""
    for part in accept.split(","):
        media = part.split(";")[0].strip().lower()
        for fmt, record_type in RECORD_TYPES.items():
            if media == record_type:
                return fmt
        if media in ("*/*", "application/*"):
            return ""
    return None


def _query_int(call: Call, name: str, default: int, high: int) -> int:
    raw = call.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise RestError(400, 400, f"'{name}' must be an integer.") from None
    if value < 0:
        raise RestError(400, 400, f"'{name}' must not be negative.")
    return min(value, high)


def _payload(data, fmt: str, what: str, where: str):
    if data is None:
        return None
    if fmt == "binary":
        return base64.b64encode(bytes(data)).decode()
    try:
        return json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError):
        raise RestError(500, 50002, f"The {what} of the record at {where} is not JSON (the instance's format is json).") from None


async def read_records(call: Call):
    wanted = _accepted_format(call.headers.get("Accept"))
    if wanted is None:
        raise RestError(406, 406, "HTTP 406 Not Acceptable")
    instance = _instance(call)
    fmt = instance.settings.format
    if wanted and wanted != fmt:
        raise RestError(406, 40601, "The requested embedded data format does not match the deserializer for this consumer instance")
    timeout_ms = _query_int(call, "timeout", instance.settings.request_timeout_ms, REQUEST_TIMEOUT_MS_MAX)
    max_bytes = _query_int(call, "max_bytes", RESPONSE_BYTES_MAX_DEFAULT, RESPONSE_BYTES_MAX_DEFAULT)
    async with instance.lock:
        await instance.ensure_member()
        positions = {tp: p for tp, p in instance.positions.items() if p is not None}
        if not positions:
            instance.assignment_changed.clear()
    if not positions:
        # Nothing assigned (yet): wait as a poll would, for at most the timeout.
        try:
            await _wait(instance.assignment_changed, timeout_ms)
        finally:
            instance.touch()
        return 200, [], RECORD_TYPES[fmt]
    async with instance.lock:
        fetched = await instance.kafka.fetch(positions, max_wait_ms=timeout_ms, min_bytes=instance.settings.fetch_min_bytes,
                                             max_bytes=max(max_bytes, 1))
        out, advanced = [], {}
        for tp, data in sorted(fetched.items()):
            if instance.positions.get(tp) != positions[tp]:
                continue  # sought or reassigned meanwhile
            out_before = len(out)
            position = _records_of(tp, data, positions[tp], fmt, out)
            if position is None:
                await _on_fetch_error(instance, tp, data.error_code)
                continue
            if len(out) > out_before or position != positions[tp]:
                advanced[tp] = position
        instance.positions.update(advanced)
        instance.touch()
    return 200, out, RECORD_TYPES[fmt]


async def _wait(event, timeout_ms: int) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout_ms / 1000)
    except TimeoutError:
        pass


def _records_of(tp, data, position: int, fmt: str, out: list) -> int | None:
    """Append the records of one partition's answer; the next position (None: an error)."""
    if data.error_code != ErrorCode.NONE:
        return None
    buf = data.records or b""
    where = f"{tp[0]}-{tp[1]}"
    for pos, _, header in iter_batches(buf, allow_truncated_tail=True):
        next_offset = header.base_offset + header.last_offset_delta + 1
        if not header.attributes & CONTROL_BATCH:
            _, records = decode_batch_records(buf, pos)
            for r in records:
                if r.offset >= position:
                    out.append({
                        "topic": tp[0],
                        "key": _payload(r.key, fmt, "key", f"{where} offset {r.offset}"),
                        "value": _payload(r.value, fmt, "value", f"{where} offset {r.offset}"),
                        "partition": tp[1],
                        "offset": r.offset,
                    })
        position = max(position, next_offset)
    return position


async def _on_fetch_error(instance, tp, code: int) -> None:
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        if instance.settings.auto_offset_reset == "none":
            raise RestError(500, 50002, f"The position of {tp[0]}-{tp[1]} is out of range and auto.offset.reset is none.")
        timestamp = EARLIEST_TIMESTAMP if instance.settings.auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        await instance.seek_to([tp], timestamp)
        return
    if code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        raise kafka_error(code, None, tp[0])
    # Leadership moved or the leader is loading: the next read routes it again.


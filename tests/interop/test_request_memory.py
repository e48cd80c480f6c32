"""queued.max.request.bytes: with a small budget, clients sending large
produce requests at once are all answered, while the request bytes the broker
holds (queued, being handled, or being received) never pass the budget by more
than one request. The broker reports its accounting when it stops."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

from protocol.records import build_batch
from tests.interop._support import (
    PRODUCE,
    Msg,
    RawConnection,
    create_topic,
    list_offset,
    produce,
    produce_request,
    unique_topic,
)

REQUEST_MAX_BYTES = 2 * 1024 * 1024
BUDGET_BYTES = REQUEST_MAX_BYTES  # Kafka's smallest allowed budget
SUMMARY = re.compile(
    r"client listeners: queued\.max\.request\.bytes=(?P<limit>\d+): at most (?P<peak>\d+) bytes of requests queued,"
    r" largest request (?P<largest>\d+) bytes, requests held back for memory (?P<refused>\d+) times"
)


def pipeline_large_produces(bootstrap: str, topic: str, partition: int, requests: int, record_bytes: int, results: list) -> None:
    """Send ``requests`` produce requests of one large record back to back, then read all answers."""
    with RawConnection(bootstrap, timeout_s=60) as connection:
        ids = []
        for i in range(requests):
            batch = build_batch([(None, bytes([i]) * record_bytes, [], int(time.time() * 1000))])
            ids.append(connection.send(PRODUCE, 9, produce_request(topic, {partition: batch}, acks=1)))
        for expected_id in ids:
            got_id, response = connection.read_response(PRODUCE, 9)
            results.append((got_id == expected_id, response.responses[0].partition_responses[0].error_code))


def run_threads(targets: list, timeout_s: float = 120) -> None:
    """Run the clients at once; their errors are raised here. Each is bounded
    by its own socket and client timeouts."""
    with ThreadPoolExecutor(len(targets)) as pool:
        futures = [pool.submit(target) for target in targets]
        deadline = time.monotonic() + timeout_s
        for future in futures:
            future.result(timeout=max(deadline - time.monotonic(), 0))


def test_a_small_budget_answers_every_large_request_and_bounds_what_is_held(broker_factory):
    broker = broker_factory(
        {"socket.request.max.bytes": str(REQUEST_MAX_BYTES), "queued.max.request.bytes": str(BUDGET_BYTES)}
    )
    topic = unique_topic("budget")
    create_topic(broker.bootstrap, topic, partitions=4)

    # Raw connections pipelining ~700 KB requests: three of them already fill
    # the budget, so later ones wait for answers to release memory.
    connections, requests, record_bytes = 4, 4, 700_000
    results: list = []
    run_threads(
        [
            (lambda p=p: pipeline_large_produces(broker.bootstrap, topic, p, requests, record_bytes, results))
            for p in range(connections)
        ]
    )
    assert len(results) == connections * requests
    assert all(in_order and error_code == 0 for in_order, error_code in results), results

    # Real producers at the same time, each batching ~1 MB requests.
    messages = [Msg(key=None, value=bytes([i % 256]) * 100_000) for i in range(30)]
    extra = {"batch.size": 1_000_000, "linger.ms": 50, "message.max.bytes": 1_000_000}
    run_threads(
        [
            (lambda p=p: produce("confluent", broker.bootstrap, topic, messages, partition=p, acks=1, extra=extra))
            for p in range(connections)
        ]
    )
    for partition in range(connections):
        assert list_offset(broker.bootstrap, topic, partition, -1).offset == requests + len(messages)

    assert broker.stop() == 0
    match = SUMMARY.search(broker.log_text())
    assert match, broker.log_text()[-2000:]
    limit, peak, largest, refused = (int(match.group(name)) for name in ("limit", "peak", "largest", "refused"))
    assert limit == BUDGET_BYTES
    assert largest > record_bytes
    # A frame is admitted while less than the budget is in use: one frame of overshoot at most.
    assert BUDGET_BYTES <= peak <= BUDGET_BYTES - 1 + largest
    assert refused > 0  # the budget did hold requests back


def test_without_the_key_there_is_no_budget(broker_factory):
    broker = broker_factory()
    topic = unique_topic("nobudget")
    create_topic(broker.bootstrap, topic)
    results: list = []
    pipeline_large_produces(broker.bootstrap, topic, 0, 3, 300_000, results)
    assert results == [(True, 0)] * 3
    assert broker.stop() == 0
    assert "queued.max.request.bytes" not in broker.log_text()

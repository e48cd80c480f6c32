"""Benchmark workloads: pure functions that take a bootstrap string and parameters and
return a dict of measurements. benchmarks/suite.py runs them against each broker.

Every loop is bounded by a deadline (TimeoutError when it passes), and every thread or
process started here is stopped before the function returns, also on failure.

Each client workload also reports the CPU seconds its client processes used while timed
(`client_cpu_seconds`, `time.process_time()`: every thread, librdkafka's included), so a
reader can tell a figure limited by the client from one limited by the broker, and calls
`on_start()`, when given, as its timed part begins: the caller reads the broker's CPU there.
"""

from __future__ import annotations

import multiprocessing
import queue
import struct
import threading
import time
from collections.abc import Callable

ADMIN_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 120.0
PROCESS_JOIN_TIMEOUT_S = 10.0
WORKER_REPORT_GRACE_S = 15.0  # the parent waits this much past its workers' deadline for their reports
QUEUE_BUFFERING_MAX_MESSAGES = 10_000_000  # never the bottleneck: the loop only backs off when librdkafka is full
DEADLINE_CHECK_EVERY_MESSAGES = 10_000  # time.monotonic() per message would show up in the producer's cost
# produce_consume_parallel: each producer holds at most this much unacknowledged data. It
# bounds how far the producers run ahead of the broker, and so the queueing in the latency
# samples (librdkafka's default is 1 GB), while leaving tens of ms of data in flight at
# several hundred MB/s.
PARALLEL_PRODUCER_BUFFER_KB = 16 << 10
PARALLEL_CONSUME_BATCH = 5_000
# consume(n, timeout) waits for n messages or the timeout: a short timeout keeps a
# half-full batch from adding its fill time to every latency sample.
PARALLEL_CONSUME_WAIT_S = 0.002
LATENCY_SAMPLE_EVERY = 10  # messages per latency sample in produce_consume_parallel
PARALLEL_CHECK_EVERY_MESSAGES = 256  # a timed producer reads the clock once per this many messages
_CLOCK_KEY = struct.Struct(">q")  # a message key carrying time.monotonic_ns() at produce()


def check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} did not finish before its deadline")


def _notify(on_start: Callable[[], object] | None) -> None:
    if on_start is not None:
        on_start()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(ADMIN_TIMEOUT_S)
    # Wait until metadata shows every partition with a leader, so the first produce does not race creation.
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        metadata = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        partitions_ready = metadata is not None and metadata.error is None and len(metadata.partitions) == partitions
        if partitions_ready and all(partition.leader >= 0 for partition in metadata.partitions.values()):
            return
        check_deadline(deadline, f"creating topic {topic}")
        time.sleep(0.05)


def _producer_config(bootstrap: str, acks: str, linger_ms: int = 10) -> tuple[dict, list]:
    failures = []

    def on_delivery(error, _message) -> None:
        if error is not None:
            failures.append(error)

    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": linger_ms,
        "batch.size": 1_000_000,
        "acks": acks,
        "queue.buffering.max.messages": QUEUE_BUFFERING_MAX_MESSAGES,
        # Only failures reach Python: a callback per delivered message would slow the producer.
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
    }
    return config, failures


def _produce_all(producer, topic: str, payload: bytes, count: int, deadline: float, key_prefix: str | None = None,
                 key_start: int = 0) -> None:  # fmt: skip
    # The producing loop is the client's hot path (librdkafka's produce() itself costs
    # about a microsecond): messages go in chunks through a bare for loop, and a full
    # queue (BufferError) retries the message that failed after serving delivery reports.
    produce_one = producer.produce
    index = 0
    while index < count:
        check_deadline(deadline, f"producing to {topic}")
        end = min(count, index + DEADLINE_CHECK_EVERY_MESSAGES)
        position = index
        try:
            if key_prefix is None:
                for position in range(index, end):
                    produce_one(topic, payload)
            else:
                for position in range(index, end):
                    produce_one(topic, payload, f"{key_prefix}{key_start + position}")
            index = end
        except BufferError:
            index = position
            producer.poll(0.001)
    remaining = producer.flush(max(0.0, min(FLUSH_TIMEOUT_S, deadline - time.monotonic())))
    if remaining:
        raise TimeoutError(f"{remaining} messages to {topic} were still undelivered at the deadline")


def produce(bootstrap: str, topic: str, messages: int, size_bytes: int, acks: str, deadline_s: float,
            on_start: Callable[[], object] | None = None) -> dict:  # fmt: skip
    """Produce `messages` messages of `size_bytes` to partition 0 of an existing topic."""
    from confluent_kafka import Producer

    config, failures = _producer_config(bootstrap, acks)
    producer = Producer(config)
    producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)  # connect first: start-up is not throughput
    payload = b"x" * size_bytes
    _notify(on_start)
    start, cpu_start_s = time.perf_counter(), time.process_time()
    _produce_all(producer, topic, payload, messages, time.monotonic() + deadline_s)
    seconds, client_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start_s
    if failures:
        raise RuntimeError(f"{len(failures)} messages failed, first: {failures[0]}")
    return {"messages": messages, "payload_bytes": messages * size_bytes, "seconds": seconds,
            "client_cpu_seconds": client_cpu_s, "client_processes": 1}  # fmt: skip


def consume(bootstrap: str, topic: str, messages: int, deadline_s: float,
            on_start: Callable[[], object] | None = None) -> dict:  # fmt: skip
    """Read `messages` messages from partition 0 starting at offset 0 with an assigned consumer."""
    from confluent_kafka import Consumer, Message, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{topic}",
        "enable.auto.commit": False,
        "fetch.max.bytes": 50 << 20,
        "max.partition.fetch.bytes": 10 << 20,
        # librdkafka stops fetching for fetch.queue.backoff.ms (default 1 s) each time its
        # queue fills; a Python loop then drains the queue and waits idle: ~0.18M instead
        # of ~1.4M msg/s, whatever the broker.
        "fetch.queue.backoff.ms": 10,
    })  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        received, payload_bytes = 0, 0
        deadline = time.monotonic() + deadline_s
        _notify(on_start)
        start, cpu_start_s = time.perf_counter(), time.process_time()
        while received < messages:
            check_deadline(deadline, f"consuming {topic}")
            batch = consumer.consume(10_000, 1.0)
            # Every message is still checked and its value taken, but through map() rather
            # than a Python for loop: with the loop, the consuming process itself is the
            # bottleneck at ~1.2M msg/s and every broker measures the same.
            errors = sum(map(bool, map(Message.error, batch)))
            received += len(batch) - errors
            payload_bytes += sum(map(len, filter(None, map(Message.value, batch))))
        seconds, client_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start_s
    finally:
        consumer.close()
    return {"messages": received, "payload_bytes": payload_bytes, "seconds": seconds,
            "client_cpu_seconds": client_cpu_s, "client_processes": 1}  # fmt: skip


def _keyed_producer_process(bootstrap: str, topic: str, key_start: int, count: int, size_bytes: int,
                            go, results, deadline_s: float) -> None:  # fmt: skip
    """One of the producer processes of produce_keyed: connects, waits for `go`, produces, reports its time."""
    try:
        from confluent_kafka import Producer

        config, failures = _producer_config(bootstrap, "1")
        producer = Producer(config)
        producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
        results.put(("ready", "producer", key_start, None))
        if not go.wait(deadline_s):
            raise TimeoutError("never told to start")
        start, cpu_start_s = time.perf_counter(), time.process_time()
        _produce_all(producer, topic, b"x" * size_bytes, count, time.monotonic() + deadline_s, "key-", key_start)
        seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start_s
        if failures:
            raise RuntimeError(f"{len(failures)} messages failed, first: {failures[0]}")
        results.put(("done", "producer", key_start, {"seconds": seconds, "cpu_seconds": cpu_s}))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", "producer", key_start, f"{type(exc).__name__}: {exc}"))


def _run_workers(workers: list, go, results, deadline_s: float, what: str, on_done,
                 on_start: Callable[[], object] | None = None) -> float:  # fmt: skip
    """Start `workers`; set `go` once every one has reported ("ready", role, id, None), so
    they start together; call on_done(role, id, value) for each ("done", role, id, value)
    until all are done. Returns time.monotonic() when `go` was set. A worker's ("error",
    role, id, text), a dead worker or the deadline raises; every worker is stopped and
    joined before this returns or raises. The workers' own deadline_s runs out first (they
    start theirs later), so a stuck worker can say what it was waiting for."""
    deadline = time.monotonic() + deadline_s + WORKER_REPORT_GRACE_S
    finished = False
    go_at_s = None
    started = []
    try:
        for worker in workers:
            worker.start()
            started.append(worker)
        ready, done = set(), set()
        while len(done) < len(workers):
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                pending = ", ".join(f"{role} {worker_id}" for role, worker_id in sorted(ready - done)) or "none"
                raise TimeoutError(f"{what} did not finish before their deadline: {len(ready)} of {len(workers)} "
                                   f"started, {len(done)} done; started but not done: {pending}")  # fmt: skip
            try:
                state, role, worker_id, value = results.get(timeout=min(remaining_s, 1.0))
            except queue.Empty:  # check the deadline and that the workers live
                if any(worker.exitcode not in (None, 0) for worker in workers):
                    raise RuntimeError(f"a process of {what} died") from None
                continue
            if state == "error":
                raise RuntimeError(f"{role} {worker_id} of {what}: {value}")
            if state == "ready":
                ready.add((role, worker_id))
                if len(ready) == len(workers):
                    _notify(on_start)
                    go_at_s = time.monotonic()
                    go.set()  # all connected: start together, so the slowest one's time is the run's
            else:
                done.add((role, worker_id))
                on_done(role, worker_id, value)
        finished = True
    finally:
        go.set()
        for worker in started:
            if not finished and worker.is_alive():
                worker.terminate()  # failure or Ctrl-C: stop now, not after the worker's share
            worker.join(PROCESS_JOIN_TIMEOUT_S)
            if worker.is_alive():
                worker.kill()
                worker.join(PROCESS_JOIN_TIMEOUT_S)
        results.close()
        results.join_thread()
    return go_at_s


def _shares(total: int, parts: int) -> list[int]:
    share, extra = divmod(total, parts)
    return [share + (1 if index < extra else 0) for index in range(parts)]


def produce_keyed(bootstrap: str, topic: str, messages: int, size_bytes: int, processes: int, deadline_s: float,
                  on_start: Callable[[], object] | None = None) -> dict:  # fmt: skip
    """`processes` spawned producer processes share `messages` keyed messages; time is the slowest one's."""
    context = multiprocessing.get_context("spawn")
    go, results = context.Event(), context.Queue()
    counts = _shares(messages, processes)
    starts = [sum(counts[:index]) for index in range(processes)]
    workers = [
        context.Process(
            target=_keyed_producer_process,
            args=(bootstrap, topic, starts[index], counts[index], size_bytes, go, results, deadline_s),
            daemon=True,
        )
        for index in range(processes)
    ]
    reports = {}
    _run_workers(workers, go, results, deadline_s, "keyed producers",
                 lambda _role, key_start, value: reports.__setitem__(key_start, value), on_start)  # fmt: skip
    return {
        "messages": messages,
        "payload_bytes": messages * size_bytes,
        "seconds": max(report["seconds"] for report in reports.values()),
        "client_cpu_seconds": sum(report["cpu_seconds"] for report in reports.values()),
        "client_processes": processes,
        "client_busiest_cores": max(report["cpu_seconds"] / report["seconds"] for report in reports.values()),
    }


def _partition_of(message: int, partitions: int, partition_run: int, first_partition: int) -> int:
    """The partition of a parallel producer's message number `message`: runs of
    partition_run messages, round-robin from first_partition."""
    return (first_partition + message // partition_run) % partitions


def _messages_per_partition(messages: int, partitions: int, partition_run: int, first_partition: int = 0) -> list[int]:
    """How many of a producer's messages 0..messages-1 each partition holds (see _partition_of)."""
    full_runs, rest = divmod(messages, partition_run)
    counts = [runs * partition_run for runs in _shares(full_runs, partitions)]
    counts[full_runs % partitions] += rest
    return counts[-first_partition % partitions :] + counts[: -first_partition % partitions]


def _parallel_producer_process(bootstrap: str, topic: str, index: int, seconds: float, size_bytes: int,
                               partitions: int, partition_run: int, first_partition: int, go, results,
                               deadline_s: float) -> None:  # fmt: skip
    """A producer of produce_consume_parallel: produces for `seconds` (acks=all, message m
    to _partition_of(m, ...), each key its send time), then reports how many it sent."""
    try:
        from confluent_kafka import Producer

        config, failures = _producer_config(bootstrap, "all")
        config["queue.buffering.max.kbytes"] = PARALLEL_PRODUCER_BUFFER_KB
        producer = Producer(config)
        producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
        results.put(("ready", "producer", index, None))
        if not go.wait(deadline_s):
            raise TimeoutError("never told to start")
        start_s, cpu_start_s = time.monotonic(), time.process_time()
        stop_s, deadline = start_s + seconds, start_s + deadline_s
        produce_one, payload = producer.produce, b"x" * size_bytes
        pack_clock, clock_ns = _CLOCK_KEY.pack, time.monotonic_ns  # CLOCK_MONOTONIC: one clock for the whole host
        sent = 0
        # As in _produce_all: chunks through a bare loop; a full queue retries the failed message.
        while time.monotonic() < stop_s:
            position = sent
            try:
                for position in range(sent, sent + PARALLEL_CHECK_EVERY_MESSAGES):
                    partition = (first_partition + position // partition_run) % partitions  # _partition_of, inlined
                    produce_one(topic, payload, pack_clock(clock_ns()), partition)
                sent = position + 1
            except BufferError:
                sent = position
                producer.poll(0.001)
        remaining = producer.flush(max(0.0, min(FLUSH_TIMEOUT_S, deadline - time.monotonic())))
        end_s, cpu_s = time.monotonic(), time.process_time() - cpu_start_s
        if remaining:
            raise TimeoutError(f"{remaining} messages to {topic} were still undelivered at the deadline")
        if failures:
            raise RuntimeError(f"{len(failures)} messages failed, first: {failures[0]}")
        results.put(("done", "producer", index, {"sent": sent, "end_s": end_s, "window_seconds": end_s - start_s,
                                                 "cpu_seconds": cpu_s}))  # fmt: skip
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", "producer", index, f"{type(exc).__name__}: {exc}"))


def _parallel_consumer_process(bootstrap: str, topic: str, index: int, partitions: list[int], expected_counts,
                               counts_known, go, results, deadline_s: float) -> None:  # fmt: skip
    """A consumer of produce_consume_parallel: reads its partitions from offset 0 while the
    producers write, until it has expected_counts[index] messages, which the parent sets
    (then sets counts_known) once every producer has reported what it sent. Samples
    end-to-end latency from the message keys."""
    try:
        from confluent_kafka import Consumer, Message, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 10,  # see consume()
        })  # fmt: skip
        try:
            consumer.assign([TopicPartition(topic, partition, 0) for partition in partitions])
            results.put(("ready", "consumer", index, None))
            if not go.wait(deadline_s):
                raise TimeoutError("never told to start")
            start_s, cpu_start_s = time.monotonic(), time.process_time()
            deadline = start_s + deadline_s
            received = payload_bytes = errors = 0
            expected = None
            last_message_s = start_s
            latencies_ns: list[int] = []
            unpack_clock = _CLOCK_KEY.unpack
            while expected is None or received < expected:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"consumer {index} of {topic} had {received} of "
                                       f"{'?' if expected is None else expected} messages at its deadline"
                                       f" ({errors} error events)")  # fmt: skip
                if expected is None and counts_known.is_set():
                    expected = expected_counts[index]
                batch = consumer.consume(PARALLEL_CONSUME_BATCH, PARALLEL_CONSUME_WAIT_S)
                if not batch:
                    continue
                now_ns = time.monotonic_ns()
                batch_errors = sum(map(bool, map(Message.error, batch)))
                if batch_errors:
                    errors += batch_errors
                    batch = [message for message in batch if message.error() is None]
                received += len(batch)
                payload_bytes += sum(map(len, map(Message.value, batch)))
                latencies_ns.extend(now_ns - unpack_clock(key)[0] for key in map(Message.key, batch[::LATENCY_SAMPLE_EVERY]))  # fmt: skip
                last_message_s = now_ns / 1e9
            cpu_s, window_s = time.process_time() - cpu_start_s, time.monotonic() - start_s
            # Reported before close(): the figures are complete, and a close that hangs
            # only delays this process's exit, which the parent bounds.
            results.put(("done", "consumer", index, {
                "received": received, "errors": errors, "payload_bytes": payload_bytes,
                "end_s": last_message_s, "window_seconds": window_s, "cpu_seconds": cpu_s,
                "latencies_ns": latencies_ns,
            }))  # fmt: skip
        finally:
            consumer.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", "consumer", index, f"{type(exc).__name__}: {exc}"))


def produce_consume_parallel(bootstrap: str, topic: str, seconds: float, size_bytes: int, producers: int,
                             consumers: int, partitions: int, partition_run: int, deadline_s: float,
                             on_start: Callable[[], object] | None = None) -> dict:  # fmt: skip
    """`producers` producer processes write for `seconds` (acks=all, in runs of `partition_run`
    messages round-robin over the existing topic's `partitions`, each producer from its own
    first partition, as librdkafka's sticky partitioner sends messages without keys) while
    `consumers` consumer processes, each assigned every consumers-th partition, read
    everything back; all start together. Timed by the clock rather than by a message count,
    so the run takes about as long whatever the broker's speed.

    Produce time runs from the start to the last producer's final acknowledgement, read time
    to the last message any consumer received. Latency is from produce() (the key) to
    receipt, sampled every LATENCY_SAMPLE_EVERY messages; at full load it includes the time
    messages wait in the producers' buffers.
    """
    context = multiprocessing.get_context("spawn")
    go, counts_known, results = context.Event(), context.Event(), context.Queue()
    expected_counts = context.Array("q", consumers)
    first_partitions = [index * partitions // producers for index in range(producers)]
    workers = [
        context.Process(target=_parallel_producer_process,
                        args=(bootstrap, topic, index, seconds, size_bytes, partitions, partition_run,
                              first_partitions[index], go, results, deadline_s), daemon=True)
        for index in range(producers)
    ] + [
        context.Process(target=_parallel_consumer_process,
                        args=(bootstrap, topic, index, list(range(index, partitions, consumers)), expected_counts,
                              counts_known, go, results, deadline_s), daemon=True)
        for index in range(consumers)
    ]  # fmt: skip
    reports: dict[str, dict[int, dict]] = {"producer": {}, "consumer": {}}

    def on_done(role: str, index: int, report: dict) -> None:
        reports[role][index] = report
        if role == "producer" and len(reports["producer"]) == producers:
            per_partition = [0] * partitions
            for producer_index, producer_report in reports["producer"].items():
                counts = _messages_per_partition(producer_report["sent"], partitions, partition_run,
                                                 first_partitions[producer_index])  # fmt: skip
                per_partition = [held + count for held, count in zip(per_partition, counts)]
            for consumer_index in range(consumers):
                expected_counts[consumer_index] = sum(per_partition[consumer_index::consumers])
            counts_known.set()

    go_at_s = _run_workers(workers, go, results, deadline_s, "parallel producers and consumers", on_done, on_start)
    messages = sum(report["sent"] for report in reports["producer"].values())
    received = sum(report["received"] for report in reports["consumer"].values())
    if received != messages:  # more: a message was written twice (librdkafka retries without idempotence)
        raise RuntimeError(f"{messages} messages produced, consumers received {received}")
    all_reports = [*reports["producer"].values(), *reports["consumer"].values()]
    produce_seconds = max(report["end_s"] for report in reports["producer"].values()) - go_at_s
    read_seconds = max(report["end_s"] for report in reports["consumer"].values()) - go_at_s
    latencies_ms = sorted(value / 1e6 for report in reports["consumer"].values() for value in report["latencies_ns"])
    return {
        "messages": messages,
        "payload_bytes": messages * size_bytes,
        "seconds": produce_seconds,
        "read_payload_bytes": sum(report["payload_bytes"] for report in reports["consumer"].values()),
        "read_seconds": read_seconds,
        "wall_seconds": max(produce_seconds, read_seconds),
        "latency_p50_ms": _percentile(latencies_ms, 0.50),
        "latency_p99_ms": _percentile(latencies_ms, 0.99),
        "latency_p999_ms": _percentile(latencies_ms, 0.999),
        "client_cpu_seconds": sum(report["cpu_seconds"] for report in all_reports),
        "client_processes": producers + consumers,
        "client_busiest_cores": max(report["cpu_seconds"] / report["window_seconds"] for report in all_reports),
        "consumer_errors": sum(report["errors"] for report in reports["consumer"].values()),
    }


def _percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def end_to_end_latency(bootstrap: str, topic: str, rate_per_s: int, seconds: float, size_bytes: int,
                       deadline_s: float, on_start: Callable[[], object] | None = None,
                       consume_bootstrap: str | None = None) -> dict:  # fmt: skip
    """Produce at a fixed rate with acks=all and measure produce-to-receive latency.

    ``consume_bootstrap``: read ``topic`` from another cluster (a mirror of it), so
    the latency is the time from the send to the record's arrival there.

    Each value carries its scheduled send time (time.perf_counter_ns, same process), so a
    producer that falls behind its schedule adds to the latency instead of hiding it.
    A consumer thread is assigned to partition 0 at the end of the (fresh) topic and has
    received a warm-up message before timing starts.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    warmup_marker = b"warmup"
    timestamp = struct.Struct(">q")
    padding = b"x" * max(0, size_bytes - timestamp.size)
    latencies_ns: list[int] = []
    expected = int(rate_per_s * seconds)
    ready, stop, consumer_errors = threading.Event(), threading.Event(), []
    deadline = time.monotonic() + deadline_s

    consumer = Consumer({
        "bootstrap.servers": consume_bootstrap or bootstrap,
        "group.id": f"bench-{topic}",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    })  # fmt: skip
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=ADMIN_TIMEOUT_S)
    consumer.assign([TopicPartition(topic, 0, high)])

    def receive() -> None:
        try:
            while not stop.is_set() and len(latencies_ns) < expected and time.monotonic() < deadline:
                # poll(), not consume(n, timeout): consume waits for n messages or the timeout, which
                # at a fixed rate would add the batch's fill time to every latency.
                message = consumer.poll(0.1)
                received_ns = time.perf_counter_ns()
                if message is None or message.error() is not None:
                    continue
                value = message.value()
                if value.startswith(warmup_marker):
                    ready.set()
                else:
                    latencies_ns.append(received_ns - timestamp.unpack_from(value)[0])
        except BaseException as exc:  # noqa: BLE001 - raised again by the producer side
            consumer_errors.append(exc)

    receiver = threading.Thread(target=receive, name="latency-consumer", daemon=True)
    receiver.start()
    # linger.ms=1, not 0: with 0, librdkafka sends a request per message, and Tansu falls
    # behind at 5,000 requests/s (p99 grows to seconds over the run); 1 ms keeps both steady.
    producer_config, failures = _producer_config(bootstrap, "all", linger_ms=1)
    producer = Producer(producer_config)
    try:
        # Warm-up messages until the consumer sees one: it is assigned, positioned and fetching.
        while not ready.is_set():
            check_deadline(deadline, "latency warm-up")
            if consumer_errors:
                raise consumer_errors[0]
            producer.produce(topic, warmup_marker)
            producer.flush(1.0)
            ready.wait(0.5)
        interval_ns = 1_000_000_000 // rate_per_s
        _notify(on_start)
        cpu_start_s = time.process_time()
        start_ns = time.perf_counter_ns()
        for index in range(expected):
            scheduled_ns = start_ns + index * interval_ns
            while (now_ns := time.perf_counter_ns()) < scheduled_ns:
                producer.poll(0)
                if scheduled_ns - now_ns > 200_000:
                    time.sleep((scheduled_ns - now_ns) / 2e9)
            if index % 1000 == 0:
                check_deadline(deadline, "latency producer")
            while True:
                try:
                    producer.produce(topic, timestamp.pack(scheduled_ns) + padding)
                    break
                except BufferError:
                    producer.poll(0)
                    check_deadline(deadline, "latency producer")
        producer.flush(max(0.0, min(FLUSH_TIMEOUT_S, deadline - time.monotonic())))
        receiver.join(max(0.0, deadline - time.monotonic()))
        client_cpu_s = time.process_time() - cpu_start_s
    finally:
        stop.set()
        receiver.join(PROCESS_JOIN_TIMEOUT_S)
        consumer.close()
    if consumer_errors:
        raise consumer_errors[0]
    if failures:
        raise RuntimeError(f"{len(failures)} messages failed, first: {failures[0]}")
    if len(latencies_ns) < expected:
        raise TimeoutError(f"received {len(latencies_ns)} of {expected} messages before the deadline")
    latencies_ms = sorted(value / 1e6 for value in latencies_ns)
    return {
        "messages": expected,
        "payload_bytes": expected * (timestamp.size + len(padding)),
        "seconds": seconds,
        "latency_p50_ms": _percentile(latencies_ms, 0.50),
        "latency_p99_ms": _percentile(latencies_ms, 0.99),
        "latency_p999_ms": _percentile(latencies_ms, 0.999),
        "latency_max_ms": latencies_ms[-1],
        "client_cpu_seconds": client_cpu_s,
        "client_processes": 1,
        "rate_limited": True,  # a fixed send rate: neither side runs flat out
    }


def produce_kafka_python(bootstrap: str, topic: str, messages: int, size_bytes: int, deadline_s: float,
                         on_start: Callable[[], object] | None = None) -> dict:  # fmt: skip
    """The same produce loop with kafka-python (pure Python client): where the client, not the broker, limits."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, batch_size=1_000_000, acks=1,
                             max_request_size=2_000_000)  # fmt: skip
    try:
        producer.partitions_for(topic)  # connect and load metadata before timing
        payload = b"x" * size_bytes
        deadline = time.monotonic() + deadline_s
        _notify(on_start)
        start, cpu_start_s = time.perf_counter(), time.process_time()
        for index in range(messages):
            if index % DEADLINE_CHECK_EVERY_MESSAGES == 0:
                check_deadline(deadline, f"kafka-python producing to {topic}")
            producer.send(topic, payload, partition=0)
        producer.flush(max(0.0, min(FLUSH_TIMEOUT_S, deadline - time.monotonic())))
        seconds, client_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start_s
    finally:
        producer.close(PROCESS_JOIN_TIMEOUT_S)
    return {"messages": messages, "payload_bytes": messages * size_bytes, "seconds": seconds,
            "client_cpu_seconds": client_cpu_s, "client_processes": 1}  # fmt: skip

"""Benchmark workloads: pure functions that take a bootstrap string and parameters and
return a dict of measurements. benchmarks/suite.py runs them against each broker.

Every loop is bounded by a deadline (TimeoutError when it passes), and every thread or
process started here is stopped before the function returns, also on failure.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import socket
import struct
import tempfile
import threading
import time

ADMIN_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 120.0
PROCESS_JOIN_TIMEOUT_S = 10.0
QUEUE_BUFFERING_MAX_MESSAGES = 10_000_000  # never the bottleneck: the loop only backs off when librdkafka is full
DEADLINE_CHECK_EVERY_MESSAGES = 10_000  # time.monotonic() per message would show up in the producer's cost
WRITE_CHUNK_BYTES = 1 << 20


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} did not finish before its deadline")


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
        _check_deadline(deadline, f"creating topic {topic}")
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
        _check_deadline(deadline, f"producing to {topic}")
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


def produce(bootstrap: str, topic: str, messages: int, size_bytes: int, acks: str, deadline_s: float) -> dict:
    """Produce `messages` messages of `size_bytes` to partition 0 of an existing topic."""
    from confluent_kafka import Producer

    config, failures = _producer_config(bootstrap, acks)
    producer = Producer(config)
    producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)  # connect first: start-up is not throughput
    payload = b"x" * size_bytes
    start = time.perf_counter()
    _produce_all(producer, topic, payload, messages, time.monotonic() + deadline_s)
    seconds = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} messages failed, first: {failures[0]}")
    return {"messages": messages, "payload_bytes": messages * size_bytes, "seconds": seconds}


def consume(bootstrap: str, topic: str, messages: int, deadline_s: float) -> dict:
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
        start = time.perf_counter()
        while received < messages:
            _check_deadline(deadline, f"consuming {topic}")
            batch = consumer.consume(10_000, 1.0)
            # Every message is still checked and its value taken, but through map() rather
            # than a Python for loop: with the loop, the consuming process itself is the
            # bottleneck at ~1.2M msg/s and every broker measures the same.
            errors = sum(map(bool, map(Message.error, batch)))
            received += len(batch) - errors
            payload_bytes += sum(map(len, filter(None, map(Message.value, batch))))
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    return {"messages": received, "payload_bytes": payload_bytes, "seconds": seconds}


def _keyed_producer_process(bootstrap: str, topic: str, key_start: int, count: int, size_bytes: int,
                            go, results, deadline_s: float) -> None:  # fmt: skip
    """One of the producer processes of produce_keyed: connects, waits for `go`, produces, reports its time."""
    try:
        from confluent_kafka import Producer

        config, failures = _producer_config(bootstrap, "1")
        producer = Producer(config)
        producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
        results.put(("ready", key_start, None))
        if not go.wait(deadline_s):
            raise TimeoutError("never told to start")
        start = time.perf_counter()
        _produce_all(producer, topic, b"x" * size_bytes, count, time.monotonic() + deadline_s, "key-", key_start)
        seconds = time.perf_counter() - start
        if failures:
            raise RuntimeError(f"{len(failures)} messages failed, first: {failures[0]}")
        results.put(("done", key_start, seconds))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", key_start, f"{type(exc).__name__}: {exc}"))


def produce_keyed(
    bootstrap: str, topic: str, messages: int, size_bytes: int, processes: int, deadline_s: float
) -> dict:
    """`processes` spawned producer processes share `messages` keyed messages; time is the slowest one's."""
    context = multiprocessing.get_context("spawn")
    go, results = context.Event(), context.Queue()
    share, extra = divmod(messages, processes)
    counts = [share + (1 if index < extra else 0) for index in range(processes)]
    starts = [sum(counts[:index]) for index in range(processes)]
    workers = [
        context.Process(
            target=_keyed_producer_process,
            args=(bootstrap, topic, starts[index], counts[index], size_bytes, go, results, deadline_s),
            daemon=True,
        )
        for index in range(processes)
    ]
    deadline = time.monotonic() + deadline_s
    finished = False
    try:
        for worker in workers:
            worker.start()
        seconds_by_worker = {}
        ready = 0
        while len(seconds_by_worker) < processes:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise TimeoutError("keyed producers did not finish before their deadline")
            try:
                state, key_start, value = results.get(timeout=min(remaining_s, 1.0))
            except queue.Empty:  # check the deadline and that the workers live
                if any(worker.exitcode not in (None, 0) for worker in workers):
                    raise RuntimeError("a keyed producer process died") from None
                continue
            if state == "error":
                raise RuntimeError(f"keyed producer starting at key {key_start}: {value}")
            if state == "ready":
                ready += 1
                if ready == processes:
                    go.set()  # all connected: start together, so the slowest one's time is the run's
            else:
                seconds_by_worker[key_start] = value
        finished = True
    finally:
        go.set()
        for worker in workers:
            if not finished and worker.is_alive():
                worker.terminate()  # failure or Ctrl-C: stop producing now, not after the worker's share
            worker.join(PROCESS_JOIN_TIMEOUT_S)
            if worker.is_alive():
                worker.kill()
                worker.join(PROCESS_JOIN_TIMEOUT_S)
        results.close()
        results.join_thread()
    return {"messages": messages, "payload_bytes": messages * size_bytes, "seconds": max(seconds_by_worker.values())}


def _percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def end_to_end_latency(bootstrap: str, topic: str, rate_per_s: int, seconds: float, size_bytes: int,
                       deadline_s: float) -> dict:  # fmt: skip
    """Produce at a fixed rate with acks=all and measure produce-to-receive latency.

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
        "bootstrap.servers": bootstrap,
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
            _check_deadline(deadline, "latency warm-up")
            if consumer_errors:
                raise consumer_errors[0]
            producer.produce(topic, warmup_marker)
            producer.flush(1.0)
            ready.wait(0.5)
        interval_ns = 1_000_000_000 // rate_per_s
        start_ns = time.perf_counter_ns()
        for index in range(expected):
            scheduled_ns = start_ns + index * interval_ns
            while (now_ns := time.perf_counter_ns()) < scheduled_ns:
                producer.poll(0)
                if scheduled_ns - now_ns > 200_000:
                    time.sleep((scheduled_ns - now_ns) / 2e9)
            if index % 1000 == 0:
                _check_deadline(deadline, "latency producer")
            while True:
                try:
                    producer.produce(topic, timestamp.pack(scheduled_ns) + padding)
                    break
                except BufferError:
                    producer.poll(0)
                    _check_deadline(deadline, "latency producer")
        producer.flush(max(0.0, min(FLUSH_TIMEOUT_S, deadline - time.monotonic())))
        receiver.join(max(0.0, deadline - time.monotonic()))
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
    }


def produce_kafka_python(bootstrap: str, topic: str, messages: int, size_bytes: int, deadline_s: float) -> dict:
    """The same produce loop with kafka-python (pure Python client): where the client, not the broker, limits."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, batch_size=1_000_000, acks=1,
                             max_request_size=2_000_000)  # fmt: skip
    try:
        producer.partitions_for(topic)  # connect and load metadata before timing
        payload = b"x" * size_bytes
        deadline = time.monotonic() + deadline_s
        start = time.perf_counter()
        for index in range(messages):
            if index % DEADLINE_CHECK_EVERY_MESSAGES == 0:
                _check_deadline(deadline, f"kafka-python producing to {topic}")
            producer.send(topic, payload, partition=0)
        producer.flush(max(0.0, min(FLUSH_TIMEOUT_S, deadline - time.monotonic())))
        seconds = time.perf_counter() - start
    finally:
        producer.close(PROCESS_JOIN_TIMEOUT_S)
    return {"messages": messages, "payload_bytes": messages * size_bytes, "seconds": seconds}


class _SinkProtocol(asyncio.BufferedProtocol):
    """Counts (and optionally appends to a file) the bytes of one connection, reading
    into one reused buffer: the least a Python server can do with incoming bytes."""

    def __init__(self, done: asyncio.Future, file_descriptor: int | None):
        self._buffer = memoryview(bytearray(WRITE_CHUNK_BYTES))
        self._file_descriptor = file_descriptor
        self._done = done
        self._transport: asyncio.Transport | None = None
        self.total_bytes = 0
        self.cpu_start_s = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.cpu_start_s = time.process_time()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.total_bytes += nbytes
        if self._file_descriptor is not None:
            os.write(self._file_descriptor, self._buffer[:nbytes])

    def eof_received(self) -> bool:
        cpu_s = time.process_time() - self.cpu_start_s
        self._transport.write(struct.pack(">qd", self.total_bytes, cpu_s))
        self._transport.close()
        if not self._done.done():
            self._done.set_result(None)
        return True


def _tcp_sink_process(port_pipe, deadline_s: float, file_dir: str | None) -> None:
    """A server (uvloop when installed, as the broker) that counts the bytes of one
    connection and answers at EOF with the count and its own CPU seconds."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def serve(file_descriptor: int | None) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        server = await loop.create_server(lambda: _SinkProtocol(done, file_descriptor), "127.0.0.1", 0)
        port_pipe.send(server.sockets[0].getsockname()[1])
        async with server:
            await asyncio.wait_for(done, deadline_s)
            await asyncio.sleep(0.05)  # let the answer leave before the loop closes

    if file_dir is None:
        asyncio.run(serve(None))
        return
    with tempfile.NamedTemporaryFile(dir=file_dir, prefix="sink-limit-") as file:
        asyncio.run(serve(file.fileno()))


def tcp_sink_limit(total_bytes: int, deadline_s: float, file_dir: str | None = None) -> dict:
    """Send total_bytes in 1 MB writes over 127.0.0.1 to a server in another process,
    which also appends them to a file in file_dir when given; its CPU time is reported."""
    context = multiprocessing.get_context("spawn")
    receive_end, send_end = context.Pipe(duplex=False)
    server = context.Process(target=_tcp_sink_process, args=(send_end, deadline_s, file_dir), daemon=True)
    server.start()
    try:
        if not receive_end.poll(ADMIN_TIMEOUT_S):
            raise TimeoutError("TCP sink did not start")
        port = receive_end.recv()
        chunk = b"x" * WRITE_CHUNK_BYTES
        answer_bytes = struct.calcsize(">qd")
        with socket.create_connection(("127.0.0.1", port), timeout=deadline_s) as sock:
            start = time.perf_counter()
            sent = 0
            while sent < total_bytes:
                sock.sendall(chunk[: min(WRITE_CHUNK_BYTES, total_bytes - sent)])
                sent += min(WRITE_CHUNK_BYTES, total_bytes - sent)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while len(answer) < answer_bytes:
                part = sock.recv(answer_bytes - len(answer))
                if not part:
                    raise ConnectionError("TCP sink closed without an answer")
                answer += part
            seconds = time.perf_counter() - start
        received, cpu_s = struct.unpack(">qd", answer)
        if received != total_bytes:
            raise RuntimeError(f"TCP sink counted {received} of {total_bytes} bytes")
    finally:
        server.join(PROCESS_JOIN_TIMEOUT_S)
        if server.is_alive():
            server.kill()
            server.join(PROCESS_JOIN_TIMEOUT_S)
    return {"payload_bytes": total_bytes, "seconds": seconds, "cpu_seconds": cpu_s}


def file_append_limit(directory: str, total_bytes: int, fsync: bool, deadline_s: float) -> dict:
    """Append total_bytes in 1 MB writes to a new file in directory, optionally fsync at the end."""
    chunk = b"x" * WRITE_CHUNK_BYTES
    deadline = time.monotonic() + deadline_s
    with tempfile.NamedTemporaryFile(dir=directory, prefix="append-limit-") as file:
        descriptor = file.fileno()
        start = time.perf_counter()
        cpu_start_s = time.process_time()
        written = 0
        while written < total_bytes:
            written += os.write(descriptor, chunk[: min(WRITE_CHUNK_BYTES, total_bytes - written)])
            if written % (64 * WRITE_CHUNK_BYTES) == 0:
                _check_deadline(deadline, "file append")
        if fsync:
            os.fsync(descriptor)
        seconds = time.perf_counter() - start
        cpu_s = time.process_time() - cpu_start_s
    return {"payload_bytes": total_bytes, "seconds": seconds, "cpu_seconds": cpu_s}

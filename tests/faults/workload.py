"""The clients of a fault run, as one program on the ``client`` host:
``python -m tests.faults.workload --bootstrap ... --topic ... --history FILE``.

Producers (idempotent acks=all, plain acks=all with retries, or acks=1 in the
unsafe run) send unique values round-robin over the topic's partitions;
consumers in one group poll and commit synchronously; a reader outside the
group reads the group's committed offsets; an admin creates topics. Every
operation goes to the history (JSON lines, the record shapes checker.py
reads) with its start and end time on the monotonic clock, relative to the
run's ``--t0``. A line "final" on stdin stops the clients; then a fresh
consumer reads every partition from the beginning to its high watermark and
the program prints "final-done" and exits.

With ``--client HOST`` (one program per client host, the five topology) every
client's name, and so every value it sends and every topic it creates, starts
with the host's name, and every operation carries ``client``: the histories of
all hosts merge into one. ``--no-final-read`` leaves the final read to another
host's program: this one prints "stopped" once its clients are done.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.faults.nemesis import RETENTION_MS_MIN

GROUP = "faults-group"
COMMIT_INTERVAL_S = 1.0
COMMITTED_READ_INTERVAL_S = 2.0
CREATE_TOPIC_INTERVAL_S = 8.0
FLUSH_BOUND_S = 30.0
FINAL_READ_BOUND_S = 120.0
FINAL_CHUNK_RECORDS = 5000
SEGMENT_BYTES = 100_000
# Errors after which the operation surely did not happen; anything else
# (timeouts, lost connections) may have taken effect: "info", as Jepsen says.
DEFINITE_COMMIT_ERRORS = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError._ASSIGNMENT_LOST,
    KafkaError._STATE,
}
INDETERMINATE_ADMIN_ERRORS = {
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.NOT_CONTROLLER,
}


class History:
    """Appends one JSON line per operation; shared by every client thread."""

    def __init__(self, path: str, t0: float, client: str | None = None):
        self._file = open(path, "a", buffering=1 << 16)
        self._lock = threading.Lock()
        self.t0 = t0
        self.client = {"client": client} if client else {}

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def add(self, **record) -> None:
        line = json.dumps(record | self.client, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Client(threading.Thread):
    """One client of the run: records its operations under its own name."""

    def __init__(self, name: str, history: History, stop: threading.Event, args):
        client = getattr(args, "client", None)  # txn_workload.py's clients run on one host
        super().__init__(name=f"{client}/{name}" if client else name, daemon=True)
        self.history, self.stop, self.args = history, stop, args

    def record(self, f: str, kind: str, start_s: float, **fields) -> None:
        """An operation that started at ``start_s`` and ends now."""
        self.history.add(f=f, type=kind, process=self.name, start_s=start_s, end_s=self.history.now(), **fields)


class ProducerClient(Client):
    def __init__(self, name, history, stop, args, *, acks: str, idempotent: bool):
        super().__init__(name, history, stop, args)
        self.acks, self.idempotent = acks, idempotent
        self.fatal = threading.Event()

    def _config(self) -> dict:
        return {
            "bootstrap.servers": self.args.bootstrap,
            "acks": self.acks,
            "enable.idempotence": self.idempotent,
            "linger.ms": 5,
            "message.timeout.ms": self.args.idempotent_message_timeout_ms
            if self.idempotent
            else self.args.message_timeout_ms,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 5000,
            "error_cb": self._on_error,
            # The idempotent producers log their sequence and epoch decisions
            # (a few lines per leader change) to the workload's stderr, so that
            # a duplicate can be traced to what the client was told; an epoch
            # bump also goes to the history (_EpochBumps).
            **({"debug": "eos", "logger": self._logger()} if self.idempotent else {}),
        }

    def _logger(self) -> logging.Logger:
        logger = logging.getLogger(f"faults.workload.{self.name}")
        if not logger.handlers:
            logger.addHandler(_EpochBumps(self))
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
        return logger

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal.set()

    def _delivered(self, value: str, partition: int, start_s: float):
        def report(error, message):
            common = {
                "f": "send",
                "process": self.name,
                "start_s": start_s,
                "end_s": self.history.now(),
                "topic": self.args.topic,
                "partition": partition,
                "value": value,
                "idempotent": self.idempotent,
                "acks": self.acks,
            }
            if error is None:
                self.history.add(type="ok", offset=message.offset(), **common)
            else:
                self.history.add(type="info", error=str(error.name()), **common)

        return report

    def run(self) -> None:
        interval_s = 1.0 / self.args.rate
        sequence = 0
        producer = Producer(self._config())
        next_send = time.monotonic()
        while not self.stop.is_set():
            if self.fatal.is_set():
                # An idempotent producer that hit a fatal error must be replaced;
                # its undelivered records are reported (as info) by the flush.
                producer.flush(1)
                producer = Producer(self._config())
                self.fatal.clear()
            now = time.monotonic()
            if now < next_send:
                producer.poll(min(next_send - now, 0.05))
                continue
            next_send += interval_s
            value = f"{self.name}-{sequence}"
            partition = sequence % self.args.partitions
            sequence += 1
            try:
                producer.produce(
                    self.args.topic,
                    value=value.encode(),
                    partition=partition,
                    on_delivery=self._delivered(value, partition, self.history.now()),
                )
            except BufferError:
                producer.poll(0.1)
            except KafkaException as exc:
                self.record(
                    "send",
                    "fail",
                    self.history.now(),
                    topic=self.args.topic,
                    partition=partition,
                    value=value,
                    idempotent=self.idempotent,
                    acks=self.acks,
                    error=str(exc),
                )
            producer.poll(0)
        left = producer.flush(FLUSH_BOUND_S)
        if left:
            print(f"{self.name}: {left} records still undelivered after {FLUSH_BOUND_S:.0f} s", file=sys.stderr)


class _EpochBumps(logging.Handler):
    """librdkafka's log lines (served by the producer's poll) to stderr, and
    each bump of the producer epoch to the history as an ``epoch_bump`` op:
    after one, librdkafka numbers the records it still holds from sequence 0
    under the new epoch, so one of them that was already written comes again
    and no broker can tell (checker.py counts those duplicates apart)."""

    def __init__(self, client: Client):
        super().__init__(logging.DEBUG)
        self.client = client

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        print(line, file=sys.stderr, flush=True)
        if "bumped epoch to" in line:
            self.client.record("epoch_bump", "ok", self.client.history.now(), log=line[-160:])


class ConsumerClient(Client):
    def _assigned(self, consumer, partitions) -> None:
        self.record("assign", "ok", self.history.now(), partitions=[[p.topic, p.partition] for p in partitions])

    def _revoked(self, consumer, partitions) -> None:
        # The last revocation comes from consumer.close() at the end, not from a rebalance.
        closing = {"closing": True} if self.stop.is_set() else {}
        self.record("assign", "ok", self.history.now(), partitions=[], **closing)

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.args.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                # As a careful user reads: a batch gone bad on a broker's disk
                # is an error here, not a record (librdkafka's default is off).
                "check.crcs": True,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
            }
        )
        consumer.subscribe([self.args.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        next_commit = time.monotonic() + COMMIT_INTERVAL_S
        try:
            while not self.stop.is_set():
                start_s = self.history.now()
                messages = consumer.consume(num_messages=500, timeout=0.5)
                records, errors = [], []
                for message in messages:
                    if message.error() is None:
                        records.append(
                            [message.topic(), message.partition(), message.offset(), message.value().decode()]
                        )
                    elif message.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(message.error().name())
                if records:
                    self.record(
                        "poll",
                        "ok",
                        start_s,
                        records=records,
                    )
                if errors:
                    self.record(
                        "poll",
                        "fail",
                        start_s,
                        error=",".join(sorted(set(errors))),
                    )
                if time.monotonic() >= next_commit:
                    next_commit = time.monotonic() + COMMIT_INTERVAL_S
                    self._commit(consumer)
        finally:
            consumer.close()

    def _commit(self, consumer) -> None:
        # Explicit positions rather than commit()'s implicit ones: a commit that
        # fails or times out is then on record with the offsets it carried.
        try:
            positions = [p for p in consumer.position(consumer.assignment()) if p.offset >= 0]
        except KafkaException:
            return
        if not positions:
            return
        tried = [[p.topic, p.partition, p.offset] for p in positions]
        start_s = self.history.now()
        try:
            done = consumer.commit(offsets=positions, asynchronous=False)
        except KafkaException as exc:
            code = exc.args[0].code()
            kind = "fail" if code in DEFINITE_COMMIT_ERRORS else "info"
            self.record(
                "commit",
                kind,
                start_s,
                group=GROUP,
                offsets=tried,
                error=exc.args[0].name(),
            )
            return
        offsets = [[p.topic, p.partition, p.offset] for p in done or [] if p.error is None and p.offset >= 0]
        failed = [p for p in done or [] if p.error is not None]
        if offsets:
            self.record(
                "commit",
                "ok",
                start_s,
                group=GROUP,
                offsets=offsets,
            )
        if failed:
            self.record(
                "commit",
                "info",
                start_s,
                group=GROUP,
                offsets=[[p.topic, p.partition, p.offset] for p in failed],
                error=",".join(str(p.error) for p in failed),
            )


class CommittedReader(Client):
    """Reads the group's committed offsets from outside the group (OffsetFetch)."""

    def __init__(self, history, stop, args):
        super().__init__("committed-reader", history, stop, args)

    def run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.args.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        partitions = [TopicPartition(self.args.topic, p) for p in range(self.args.partitions)]
        try:
            while not self.stop.wait(COMMITTED_READ_INTERVAL_S):
                start_s = self.history.now()
                try:
                    answer = consumer.committed(partitions, timeout=5)
                except KafkaException as exc:
                    self.record(
                        "committed",
                        "fail",
                        start_s,
                        group=GROUP,
                        error=exc.args[0].name(),
                    )
                    continue
                errors = [str(p.error) for p in answer if p.error is not None]
                if errors:  # a partition missing from the answer is not "nothing committed"
                    self.record(
                        "committed",
                        "fail",
                        start_s,
                        group=GROUP,
                        error=",".join(errors),
                    )
                    continue
                self.record(
                    "committed",
                    "ok",
                    start_s,
                    group=GROUP,
                    offsets=[[p.topic, p.partition, p.offset] for p in answer],
                )
        finally:
            consumer.close()


class TopicCreator(Client):
    def __init__(self, history, stop, args):
        super().__init__("admin", history, stop, args)

    def run(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.args.bootstrap})
        sequence = 0
        while not self.stop.wait(CREATE_TOPIC_INTERVAL_S):
            topic = f"{self.args.topic}-created-{f'{self.args.client}-' if self.args.client else ''}{sequence}"
            sequence += 1
            start_s = self.history.now()
            future = admin.create_topics([NewTopic(topic, num_partitions=1)], request_timeout=10)[topic]
            try:
                future.result(timeout=20)
                kind, error = "ok", None
            except KafkaException as exc:
                code = exc.args[0].code()
                kind, error = ("info" if code in INDETERMINATE_ADMIN_ERRORS else "fail"), exc.args[0].name()
            except Exception as exc:  # the future's own timeout
                kind, error = "info", type(exc).__name__
            self.record("create_topic", kind, start_s, topic=topic, **({"error": error} if error else {}))


def final_read(history: History, args) -> bool:
    """Every partition from the beginning to its high watermark; True if complete."""
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    topics: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            topics = sorted(admin.list_topics(timeout=10).topics)
            break
        except KafkaException:
            time.sleep(1)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"final-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "check.crcs": True,
            "enable.partition.eof": True,
        }
    )
    highs: dict[int, int] = {}
    lows: dict[int, int] = {}  # log start offsets: anything above 0 was deleted
    for partition in range(args.partitions):
        for _ in range(30):
            try:
                lows[partition], highs[partition] = consumer.get_watermark_offsets(
                    TopicPartition(args.topic, partition), timeout=5, cached=False
                )
                break
            except KafkaException:
                time.sleep(1)
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in highs])
    positions = {p: 0 for p in highs}
    chunk: list = []
    start_s = history.now()
    deadline = time.monotonic() + FINAL_READ_BOUND_S
    while any(positions[p] < highs[p] for p in highs) and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=1000, timeout=0.5):
            if message.error() is None:
                chunk.append([message.topic(), message.partition(), message.offset(), message.value().decode()])
                positions[message.partition()] = message.offset() + 1
            elif message.error().code() != KafkaError._PARTITION_EOF:
                print(f"final read: {message.error()}", file=sys.stderr, flush=True)  # e.g. a CRC error
        if len(chunk) >= FINAL_CHUNK_RECORDS:
            history.add(f="final_read", type="ok", process="final", start_s=start_s, end_s=history.now(), records=chunk)
            chunk = []
    consumer.close()
    complete = len(highs) == args.partitions and all(positions[p] >= highs[p] for p in highs)
    history.add(
        f="final_read",
        type="ok",
        process="final",
        start_s=start_s,
        end_s=history.now(),
        records=chunk,
        topics=topics,
        high_watermarks={str(p): h for p, h in highs.items()},
        log_start_offsets={str(p): low for p, low in lows.items()},
        complete=complete,
    )
    return complete


def create_run_topic(bootstrap: str, name: str, partitions: int, retention_ms: int = RETENTION_MS_MIN) -> None:
    """A run's topic: RF=3 with min.insync.replicas=2, as a careful user makes it;
    retried for up to a minute (the cluster may still be electing), an existing
    one taken as it is. The transactional workload makes its two the same way."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        topic = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=3,
            # Retention longer than the run (a broker whose wall clock jumps by
            # minutes, clock-jump, must not delete any of it: retention_ms_for) in
            # segments of 100 kB, which roll every 15-20 s at the workload's rate,
            # so that the log has closed segments for the corrupt nemesis to hit.
            config={"min.insync.replicas": "2", "retention.ms": str(retention_ms), "segment.bytes": str(SEGMENT_BYTES)},
        )
        try:
            admin.create_topics([topic], request_timeout=10)[name].result(timeout=20)
            return
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if time.monotonic() > deadline:
                raise
        time.sleep(1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--t0", type=float, required=True, help="the run's start on the monotonic clock")
    parser.add_argument("--rate", type=float, default=100.0, help="records per second per producer")
    parser.add_argument("--retention-ms", type=int, default=RETENTION_MS_MIN, help="the topic's retention.ms")
    parser.add_argument(
        "--message-timeout-ms",
        type=int,
        default=6000,
        help="message.timeout.ms of the plain producers: shorter than a failover, so some sends end indeterminate",
    )
    # librdkafka drops in-flight records whose message.timeout.ms ran out, then
    # bumps the producer epoch and renumbers the records after them: those may
    # already be in the log, and come again under the new epoch, which no broker
    # can tell from new records. Its documentation asks for a long timeout with
    # idempotence; librdkafka's default (300 s) outlasts any fault here.
    parser.add_argument(
        "--idempotent-message-timeout-ms",
        type=int,
        default=300_000,
        help="message.timeout.ms of the idempotent producers (default librdkafka's 300000)",
    )
    parser.add_argument("--unsafe", action="store_true", help="acks=1 producers without idempotence")
    parser.add_argument("--client", help="the client host's name, in every client name and operation (several hosts)")
    parser.add_argument(
        "--no-final-read", dest="final_read", action="store_false", help="another host's program does the final read"
    )
    args = parser.parse_args(argv)

    create_run_topic(args.bootstrap, args.topic, args.partitions, args.retention_ms)
    history = History(args.history, args.t0, args.client)
    stop = threading.Event()
    if args.unsafe:
        producers = [ProducerClient(f"producer-{i}", history, stop, args, acks="1", idempotent=False) for i in range(3)]
    else:
        producers = [
            ProducerClient("producer-0", history, stop, args, acks="all", idempotent=True),
            ProducerClient("producer-1", history, stop, args, acks="all", idempotent=True),
            ProducerClient("producer-2", history, stop, args, acks="all", idempotent=False),
        ]
    clients = [
        *producers,
        ConsumerClient("consumer-0", history, stop, args),
        ConsumerClient("consumer-1", history, stop, args),
        CommittedReader(history, stop, args),
        TopicCreator(history, stop, args),
    ]
    for client in clients:
        client.start()
    print("clients-started", flush=True)
    for line in sys.stdin:
        if line.strip() == "final":
            break
    stop.set()
    for client in clients:
        client.join(FLUSH_BOUND_S + 15)
    if not args.final_read:
        history.close()
        print("stopped", flush=True)
        return 0
    complete = final_read(history, args)
    history.close()
    print("final-done" if complete else "final-incomplete", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

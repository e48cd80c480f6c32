"""The transactional clients of a fault run (``--workload txn``), as one
program on the ``client`` host: ``python -m tests.faults.txn_workload
--bootstrap ... --input-topic ... --output-topic ... --history FILE``.

- Transactional producers (one transactional.id each) write, per
  transaction, one unique value to each of several partitions of the input
  topic; a seeded share of transactions is aborted on purpose, so the log
  holds aborted data for the readers to avoid.
- Processors consume the input topic in a group (read_committed) and, per
  batch, write one output record naming each input (topic, partition,
  offset, value) to the output topic in a transaction that also commits the
  batch's offsets (send_offsets_to_transaction): exactly-once
  consume-transform-produce. A seeded share of their transactions is aborted
  on purpose too, after which they rewind to the group's committed offsets.
- Readers poll every partition of both topics from the start throughout.

Every transaction ends as librdkafka documents: an error that
``txn_requires_abort`` is aborted, a retriable one retries the same call, a
fatal one (or retries used up) replaces the producer with a new one of the
same transactional.id, whose InitProducerId fences the old one and finishes
its open transaction. The history (JSON lines, the shapes txn_checker.py
reads, times on the monotonic clock relative to ``--t0``) holds each
transaction's writes with their delivery offsets and its outcome:
"committed" (commit_transaction returned), "aborted" (abort_transaction
returned) or "indeterminate". "final" on stdin stops the clients; a fresh
read_committed consumer then reads every partition to its end, the group's
committed offsets are read, and the program prints "final-done".

``--unsafe`` makes the readers and the processors' consumers
read_uncommitted: they then see aborted and still open transactions, which
the checker must flag.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.faults.txn_checker import OUTPUT_SEPARATOR
from tests.faults.nemesis import RETENTION_MS_MIN
from tests.faults.workload import Client, History, create_run_topic

GROUP = "faults-txn-processors"
PRODUCERS = 2
PROCESSORS = 2
READERS = 2
ABORT_SHARE = 0.2  # transactions aborted on purpose: 1 in 5
TRANSACTION_TIMEOUT_MS = 20_000  # a transaction left open by a fault holds back read_committed readers this long at most
END_TIMEOUT_S = 10.0  # one commit_transaction / abort_transaction / init_transactions call
END_ATTEMPTS = 3  # calls ending in a retriable error, before the producer is replaced
INIT_BOUND_S = 90.0
BATCH_RECORDS = 50
STOP_BOUND_S = 45.0  # a client still busy then is fenced before the final read
FINAL_READ_BOUND_S = 120.0
FINAL_CHUNK_RECORDS = 5000


def output_value(processor: str, txn_seq: int, topic: str, partition: int, offset: int, value: str) -> str:
    """The output record of one input, naming it; txn_checker.parse_output reads it back."""
    return OUTPUT_SEPARATOR.join((processor, str(txn_seq), topic, str(partition), str(offset), value))


class TransactionalClient(Client):
    """A client that owns one transactional producer (replaced when fatal)."""

    # librdkafka debug contexts of the producer, logged to the workload's stderr.
    producer_debug = ""

    def __init__(self, name, history, stop, args):
        super().__init__(name, history, stop, args)
        self.transactional_id = f"faults-{name}"
        self.generation = 0
        self.rng = random.Random(f"{args.seed}-{name}")
        self.fatal = threading.Event()  # set by librdkafka's error callback: the producer must be replaced

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal.set()

    def new_producer(self) -> Producer | None:
        """A producer of this client's transactional.id, initialised (fencing any
        earlier one and finishing its open transaction); None if the run stopped first."""
        deadline = time.monotonic() + INIT_BOUND_S
        while time.monotonic() < deadline:
            self.generation += 1
            self.fatal.clear()
            producer = Producer(
                {
                    "bootstrap.servers": self.args.bootstrap,
                    "transactional.id": self.transactional_id,
                    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    "linger.ms": 5,
                    "request.timeout.ms": 5000,
                    "retry.backoff.ms": 100,
                    "topic.metadata.refresh.interval.ms": 5000,
                    # Without it a fatal error is raised from whichever call
                    # serves callbacks next, the abort's poll included.
                    "error_cb": self._on_error,
                    **({"debug": self.producer_debug} if self.producer_debug else {}),
                }
            )
            for _attempt in range(END_ATTEMPTS):
                start_s = self.history.now()
                try:
                    producer.init_transactions(END_TIMEOUT_S)
                    self.record("init", "ok", start_s, transactional_id=self.transactional_id, generation=self.generation)
                    return producer
                except KafkaException as exc:
                    error = exc.args[0]
                    self.record("init", "fail", start_s, transactional_id=self.transactional_id,
                                generation=self.generation, error=error.name())
                    if not error.retriable() or self.stop.is_set() or time.monotonic() > deadline:
                        break
            if self.stop.is_set():
                return None
            time.sleep(0.5)
        raise RuntimeError(f"{self.name}: no InitProducerId within {INIT_BOUND_S:.0f} s")

    def transaction(self, producer, txn_seq: int, writes: list[tuple[str, int, str]], *, commit: bool,
                    offsets=None, consumer=None, **fields) -> tuple[str, Producer | None]:
        """Run one transaction of ``writes`` (topic, partition, value), with the
        consumer's ``offsets`` if given; record it; return its outcome and the
        producer to go on with."""
        start_s = self.history.now()
        delivered: dict[str, dict] = {}
        errors: list[str] = []

        def on_delivery(error, message):
            value = message.value().decode()
            if error is None:
                delivered[value] = {"offset": message.offset()}
            else:
                delivered[value] = {"error": error.name()}

        # The transaction's values on record before any is sent: if this client
        # never gets to record its end (stuck, fenced at the stop), the checker
        # still knows who wrote them (a read_uncommitted reader sees them at once).
        self.record(
            "txn_begin",
            "info",
            start_s,
            txn=f"{self.name}:{txn_seq}",
            intended="commit" if commit else "abort",
            writes=[[topic, partition, None, value] for topic, partition, value in writes],
            **fields,
        )
        usable = True  # False after a fatal error: no abort possible, only a new producer
        to_abort = not commit
        try:
            producer.begin_transaction()
            for topic, partition, value in writes:
                producer.produce(topic, value=value.encode(), partition=partition, on_delivery=on_delivery)
            if offsets:
                producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), END_TIMEOUT_S)
            if not commit:
                # Written before the abort, so the log holds aborted data for
                # the readers to skip (an abort purges what is still queued).
                producer.flush(END_TIMEOUT_S)
        except KafkaException as exc:
            errors.append(exc.args[0].name())
            usable, to_abort = not exc.args[0].fatal(), True
        except BufferError:  # the local queue is full: this transaction is given up
            errors.append("BufferError")
            to_abort = True
        outcome, commit_requested = None, False
        if usable and not to_abort:
            commit_requested = True
            outcome = self._end(producer.commit_transaction, "committed", errors, txn_seq)
            to_abort = outcome == "abort"
        if usable and to_abort:
            outcome = self._end(producer.abort_transaction, "aborted", errors, txn_seq)
        if outcome not in ("committed", "aborted"):
            outcome = "indeterminate"
        try:
            producer.poll(0)  # delivery reports of an abort's purged records
        except KafkaException as exc:
            errors.append(exc.args[0].name())
            self.fatal.set()
        if self.fatal.is_set():
            errors.append("fatal error reported")
        self.record(
            "txn",
            {"committed": "ok", "aborted": "fail"}.get(outcome, "info"),
            start_s,
            txn=f"{self.name}:{txn_seq}",
            transactional_id=self.transactional_id,
            generation=self.generation,
            intended="commit" if commit else "abort",
            commit_requested=commit_requested,
            outcome=outcome,
            writes=[
                [topic, partition, delivered.get(value, {}).get("offset"), value] for topic, partition, value in writes
            ],
            write_errors=sorted({d["error"] for d in delivered.values() if "error" in d}),
            **({"offsets": [[o.topic, o.partition, o.offset] for o in offsets], "group": GROUP} if offsets else {}),
            **({"errors": errors} if errors else {}),
            **fields,
        )
        if outcome == "indeterminate" or self.fatal.is_set():
            # The documented way out of a fatal error: a new producer of the
            # same transactional.id, which fences this one.
            self.record("replace", "ok", self.history.now(), transactional_id=self.transactional_id,
                        generation=self.generation, after=f"{self.name}:{txn_seq}")
            producer = self.new_producer()
        return outcome, producer

    def _end(self, call, outcome: str, errors: list[str], txn_seq: int) -> str | None:
        """commit_transaction or abort_transaction, retried while the error is
        retriable. Returns ``outcome`` once the call returned, "abort" when the
        error requires an abort, None when the producer must be replaced."""
        for _attempt in range(END_ATTEMPTS):
            start_s = self.history.now()
            try:
                call(END_TIMEOUT_S)
                return outcome
            except KafkaException as exc:
                error = exc.args[0]
                errors.append(error.name())
                # Each failed call on record as it happens: a client stuck in
                # retries shows where, even if its transaction never ends.
                self.record(
                    "end",
                    "fail",
                    start_s,
                    txn=f"{self.name}:{txn_seq}",
                    call="commit" if outcome == "committed" else "abort",
                    error=error.name(),
                    retriable=error.retriable(),
                    fatal=error.fatal(),
                    txn_requires_abort=error.txn_requires_abort(),
                    reason=error.str(),
                )
                if error.fatal():
                    return None
                if error.txn_requires_abort():
                    return "abort" if outcome == "committed" else None
                if not error.retriable():
                    return None
        return None


class TxnProducerClient(TransactionalClient):
    """Transactions of one value per partition over a seeded subset of the input partitions."""

    def run(self) -> None:
        producer = self.new_producer()
        interval_s = 1.0 / self.args.txn_rate
        next_start = time.monotonic()
        txn_seq = 0
        while producer is not None and not self.stop.is_set():
            now = time.monotonic()
            if now < next_start:
                producer.poll(min(next_start - now, 0.05))
                continue
            next_start = max(next_start + interval_s, now - 1.0)
            partitions = sorted(self.rng.sample(range(self.args.partitions), self.rng.randint(2, self.args.partitions)))
            commit = self.rng.random() >= ABORT_SHARE
            writes = [(self.args.input_topic, p, f"{self.name}:{txn_seq}:{p}") for p in partitions]
            _outcome, producer = self.transaction(producer, txn_seq, writes, commit=commit)
            txn_seq += 1


class ProcessorClient(TransactionalClient):
    """Consume-transform-produce: each input's output and the consumed offsets in one transaction."""

    # A processor once stayed inside send_offsets_to_transaction(10 s) for
    # minutes (docs/RELIABILITY.md); its transaction steps (a few hundred
    # transactions a run) show where the next one waits.
    producer_debug = "eos"

    def _consumer(self) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self.args.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_uncommitted" if self.args.unsafe else "read_committed",
                "check.crcs": True,  # a batch gone bad on a broker's disk is an error, not a record
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
            }
        )
        consumer.subscribe(
            [self.args.input_topic],
            on_assign=lambda c, ps: self.record("assign", "ok", self.history.now(), partitions=[[p.topic, p.partition] for p in ps]),
            on_revoke=lambda c, ps: self.record("assign", "ok", self.history.now(), partitions=[]),
            on_lost=lambda c, ps: self.record("assign", "ok", self.history.now(), partitions=[]),
        )
        return consumer

    def _rewind(self, consumer) -> Consumer:
        """Back to the group's committed offsets, as after any transaction not
        committed (librdkafka's transactions example); a new consumer (which
        rejoins and starts there) when they cannot be read."""
        start_s = self.history.now()
        try:
            assignment = consumer.assignment()
            committed = consumer.committed(assignment, timeout=END_TIMEOUT_S) if assignment else []
            for tp in committed:
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
            self.record("rewind", "ok", start_s, offsets=[[tp.topic, tp.partition, tp.offset] for tp in committed])
            return consumer
        except KafkaException as exc:
            self.record("rewind", "fail", start_s, error=exc.args[0].name())
            consumer.close()
            return self._consumer()

    def run(self) -> None:
        producer = self.new_producer()
        consumer = self._consumer()
        txn_seq = 0
        try:
            while producer is not None and not self.stop.is_set():
                messages = [m for m in consumer.consume(num_messages=BATCH_RECORDS, timeout=0.5) if m.error() is None]
                if not messages:
                    continue
                inputs = [[m.topic(), m.partition(), m.offset(), m.value().decode()] for m in messages]
                next_offsets: dict[tuple[str, int], int] = {}
                for topic, partition, offset, _value in inputs:
                    next_offsets[(topic, partition)] = max(next_offsets.get((topic, partition), 0), offset + 1)
                offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(next_offsets.items())]
                writes = [
                    (self.args.output_topic, partition, output_value(self.name, txn_seq, topic, partition, offset, value))
                    for topic, partition, offset, value in inputs
                ]
                commit = self.rng.random() >= ABORT_SHARE / 2
                outcome, producer = self.transaction(
                    producer, txn_seq, writes, commit=commit, offsets=offsets, consumer=consumer, inputs=inputs
                )
                txn_seq += 1
                if outcome != "committed":
                    consumer = self._rewind(consumer)
        finally:
            consumer.close()


class ReaderClient(Client):
    """Polls every partition of both topics from the start, outside any group."""

    def run(self) -> None:
        isolation = "read_uncommitted" if self.args.unsafe else "read_committed"
        consumer = Consumer(
            {
                "bootstrap.servers": self.args.bootstrap,
                "group.id": f"faults-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": isolation,
                "check.crcs": True,  # a batch gone bad on a broker's disk is an error, not a record
            }
        )
        consumer.assign(
            [
                TopicPartition(topic, p, OFFSET_BEGINNING)
                for topic in (self.args.input_topic, self.args.output_topic)
                for p in range(self.args.partitions)
            ]
        )
        self.record("assign", "ok", self.history.now(), partitions="all")
        try:
            while not self.stop.is_set():
                start_s = self.history.now()
                records, errors = [], set()
                for message in consumer.consume(num_messages=500, timeout=0.5):
                    if message.error() is None:
                        records.append([message.topic(), message.partition(), message.offset(), message.value().decode()])
                    elif message.error().code() != KafkaError._PARTITION_EOF:
                        errors.add(message.error().name())
                if records:
                    self.record("poll", "ok", start_s, isolation=isolation, records=records)
                if errors:
                    self.record("poll", "fail", start_s, isolation=isolation, error=",".join(sorted(errors)))
        finally:
            consumer.close()


def fence(history: History, args, transactional_id: str) -> None:
    """InitProducerId for a client that did not stop in time: its producer is
    fenced and its open transaction finished, so nothing of it commits after
    the final read (which would look like an anomaly of the broker)."""
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": transactional_id})
    start_s = history.now()
    try:
        producer.init_transactions(60)
        history.add(f="fence", type="ok", process="final", start_s=start_s, end_s=history.now(),
                    transactional_id=transactional_id)
    except KafkaException as exc:
        history.add(f="fence", type="fail", process="final", start_s=start_s, end_s=history.now(),
                    transactional_id=transactional_id, error=exc.args[0].name())


def final_read(history: History, args) -> bool:
    """Every partition of both topics, read_committed, to its end (the last
    stable offset, where the consumer reports the partition's end), then the
    group's committed offsets; True if complete."""
    topics = (args.input_topic, args.output_topic)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"faults-final-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "check.crcs": True,  # a batch gone bad on a broker's disk is an error, not a record
        }
    )
    ends: dict[tuple[str, int], int] = {}
    for topic in topics:
        for partition in range(args.partitions):
            for _ in range(30):
                try:  # read_committed: ListOffsets answers the last stable offset
                    ends[(topic, partition)] = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=5, cached=False
                    )[1]
                    break
                except KafkaException:
                    time.sleep(1)
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for (t, p) in ends])
    reached: dict[tuple[str, int], int] = {}
    chunk: list = []
    start_s = history.now()
    deadline = time.monotonic() + FINAL_READ_BOUND_S
    while any(reached.get(key, -1) < end for key, end in ends.items()) and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=1000, timeout=0.5):
            if message.error() is None:
                chunk.append([message.topic(), message.partition(), message.offset(), message.value().decode()])
            elif message.error().code() == KafkaError._PARTITION_EOF:
                reached[(message.topic(), message.partition())] = message.offset()
        if len(chunk) >= FINAL_CHUNK_RECORDS:
            history.add(f="final_read", type="ok", process="final", start_s=start_s, end_s=history.now(), records=chunk)
            chunk = []
    consumer.close()
    complete = len(ends) == len(topics) * args.partitions and all(reached.get(k, -1) >= e for k, e in ends.items())
    history.add(
        f="final_read",
        type="ok",
        process="final",
        start_s=start_s,
        end_s=history.now(),
        records=chunk,
        end_offsets=[[t, p, e] for (t, p), e in sorted(ends.items())],
        complete=complete,
    )
    return complete and final_committed(history, args)


def final_committed(history: History, args) -> bool:
    """The processors' group's committed offsets once they stopped."""
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "check.crcs": True,  # a batch gone bad on a broker's disk is an error, not a record
        }
    )
    partitions = [TopicPartition(args.input_topic, p) for p in range(args.partitions)]
    try:
        for _ in range(10):
            start_s = history.now()
            try:
                answer = consumer.committed(partitions, timeout=10)
            except KafkaException as exc:
                history.add(f="final_committed", type="fail", process="final", start_s=start_s, end_s=history.now(),
                            group=GROUP, error=exc.args[0].name())
                time.sleep(1)
                continue
            if any(p.error is not None for p in answer):
                time.sleep(1)
                continue
            history.add(f="final_committed", type="ok", process="final", start_s=start_s, end_s=history.now(),
                        group=GROUP, offsets=[[p.topic, p.partition, p.offset] for p in answer])
            return True
        return False
    finally:
        consumer.close()


def create_topics(args) -> None:
    """The run's two topics, as the records workload makes its one."""
    for name in (args.input_topic, args.output_topic):
        create_run_topic(args.bootstrap, name, args.partitions, args.retention_ms)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input-topic", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--t0", type=float, required=True, help="the run's start on the monotonic clock")
    parser.add_argument("--seed", type=int, default=1, help="seeds which transactions abort and where they write")
    parser.add_argument("--txn-rate", type=float, default=10.0, help="transactions per second per producer")
    parser.add_argument("--unsafe", action="store_true", help="read_uncommitted readers and processors")
    parser.add_argument("--retention-ms", type=int, default=RETENTION_MS_MIN, help="the topics' retention.ms")
    args = parser.parse_args(argv)

    create_topics(args)
    history = History(args.history, args.t0)
    stop = threading.Event()
    clients = [
        *(TxnProducerClient(f"txn-producer-{i}", history, stop, args) for i in range(PRODUCERS)),
        *(ProcessorClient(f"processor-{i}", history, stop, args) for i in range(PROCESSORS)),
        *(ReaderClient(f"reader-{i}", history, stop, args) for i in range(READERS)),
    ]
    for client in clients:
        client.start()
    print("clients-started", flush=True)
    for line in sys.stdin:
        if line.strip() == "final":
            break
    stop.set()
    for client in clients:
        client.join(STOP_BOUND_S)
    stuck = [client for client in clients if client.is_alive()]
    if stuck:
        print(f"clients still running after {STOP_BOUND_S:.0f} s: {', '.join(c.name for c in stuck)}", file=sys.stderr)
    for client in stuck:
        if isinstance(client, TransactionalClient):
            fence(history, args, client.transactional_id)
    complete = final_read(history, args)
    history.close()
    print("final-done" if complete else "final-incomplete", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

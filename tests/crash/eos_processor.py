"""A consume-transform-produce loop with confluent-kafka, run as its own process.

``python -m tests.crash.eos_processor --bootstrap H:P --input T --output T
--group G --transactional-id ID --expected N``: reads ``--input`` (all its
partitions, read_committed, from the group's committed offsets), writes each
record's value upper-cased to ``--output`` (same key and partition), and
commits the group's offsets inside the same transaction as the output
(``send_offsets_to_transaction``), one transaction per polled chunk, and prints
``committed N`` (the input records done so far) after each. Exits 0 once the
committed input positions add up to ``--expected``.

The partitions are assigned, not subscribed: one processor at a time, fenced
by its transactional id (a restarted processor's ``init_transactions``
aborts whatever its killed predecessor left open), and no wait for a dead
group member's session to expire. It may be SIGKILLed at any moment.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

CHUNK_RECORDS_MAX = 500
TIMEOUT_S = 30
STALL_S = TIMEOUT_S + 15
EXIT_CLIENT_STALLED = 3


class StallWatchdog:
    """Ends the process when a client call outlives ``stall_s`` (see the module's doc)."""

    def __init__(self, stall_s: float = STALL_S):
        self.stall_s = stall_s
        self._call: tuple[str, float] | None = None
        threading.Thread(target=self._watch, daemon=True).start()

    def call(self, name: str, function, *args):
        self._call = (name, time.monotonic())
        try:
            return function(*args)
        finally:
            self._call = None

    def _watch(self) -> None:
        while True:  # a daemon thread: ends with the process
            time.sleep(0.5)
            call = self._call
            if call is not None and time.monotonic() - call[1] > self.stall_s:
                print(f"client stalled: {call[0]} did not return within {self.stall_s:.0f} s", flush=True)
                os._exit(EXIT_CLIENT_STALLED)


WATCHDOG: StallWatchdog | None = None


def guarded(name: str, function, *args):
    return WATCHDOG.call(name, function, *args) if WATCHDOG is not None else function(*args)


def commit(producer, offsets, group_metadata, attempts_max: int = 10) -> bool:
    """Commit the open transaction with the group's offsets; False when it had to be aborted."""
    from confluent_kafka import KafkaException

    for step in ("offsets", "commit"):
        for attempt in range(attempts_max):
            try:
                if step == "offsets":
                    guarded("send_offsets_to_transaction", producer.send_offsets_to_transaction, offsets, group_metadata, TIMEOUT_S)
                else:
                    guarded("commit_transaction", producer.commit_transaction, TIMEOUT_S)
                break
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    guarded("abort_transaction", producer.abort_transaction, TIMEOUT_S)
                    return False
                if not error.retriable() or attempt == attempts_max - 1:
                    raise
    return True


def main(argv=None) -> int:
    from confluent_kafka import Consumer, Producer, TopicPartition

    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--output", "--group", "--transactional-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--expected", type=int, required=True)
    parser.add_argument("--chunk-records", type=int, default=CHUNK_RECORDS_MAX, help="records per transaction at most")
    parser.add_argument("--run-time-max-s", type=float, default=600)
    parser.add_argument(
        "--die-inside-transaction-after", type=int, metavar="N",
        help="SIGKILL itself once N records are committed, inside the next transaction after its output is sent",
    )
    args = parser.parse_args(argv)
    global WATCHDOG
    WATCHDOG = StallWatchdog()
    deadline = time.monotonic() + args.run_time_max_s

    debug = {"debug": os.environ["PYBROKER_EOS_DEBUG"]} if os.environ.get("PYBROKER_EOS_DEBUG") else {}
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.transactional_id,
        "linger.ms": 5,
        "transaction.timeout.ms": 60000,
        # e.g. PYBROKER_EOS_DEBUG=eos,protocol: librdkafka's transaction log in the processor's output.
        **debug,
    })
    # First: fences a killed predecessor and aborts its open transaction, so the
    # committed offsets read next are stable.
    guarded("init_transactions", producer.init_transactions, TIMEOUT_S)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    metadata = consumer.list_topics(args.input, timeout=TIMEOUT_S)
    partitions = sorted(metadata.topics[args.input].partitions)
    committed = consumer.committed([TopicPartition(args.input, p) for p in partitions], timeout=TIMEOUT_S)
    positions = {tp.partition: max(tp.offset, 0) for tp in committed}
    consumer.assign([TopicPartition(args.input, p, positions[p]) for p in partitions])
    print(f"starting at {positions}", flush=True)

    while sum(positions.values()) < args.expected:
        if time.monotonic() > deadline:
            print("run time exceeded", flush=True)
            return 2
        messages = consumer.consume(args.chunk_records, 1.0)
        messages = [m for m in messages if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        chunk_positions = dict(positions)
        for message in messages:
            producer.produce(args.output, key=message.key(), value=message.value().upper(), partition=message.partition())
            chunk_positions[message.partition()] = message.offset() + 1
        offsets = [TopicPartition(args.input, p, o) for p, o in chunk_positions.items()]
        if args.die_inside_transaction_after is not None and sum(positions.values()) >= args.die_inside_transaction_after:
            guarded("flush", producer.flush, TIMEOUT_S)  # the output is in the log, its transaction open
            os.kill(os.getpid(), signal.SIGKILL)
        if commit(producer, offsets, consumer.consumer_group_metadata()):
            positions = chunk_positions
            print(f"committed {sum(positions.values())}", flush=True)
        else:
            # Aborted: start again from the last committed positions.
            consumer.assign([TopicPartition(args.input, p, positions[p]) for p in partitions])
    print(f"done at {positions}", flush=True)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

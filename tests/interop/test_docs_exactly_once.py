"""docs/transactions.md's exactly-once example, run as it is printed there.

The code block after the page's ``exactly-once example`` marker is taken
as text, its bootstrap address pointed at a test broker, and run as a
process, twice: the first run turns the 30 records of ``orders`` into
``invoices``; 20 more orders then arrive and a second run (a restarted
invoicer, the same transactional id and group) must pick up after the
committed offsets, so ``invoices`` read with read_committed holds each order
exactly once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.interop._support import consume, create_topic

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- exactly-once example: run by tests/interop/test_docs_exactly_once.py -->"


def docs_example() -> str:
    text = (PROJECT_ROOT / "docs" / "transactions.md").read_text()
    after = text.split(MARKER, 1)[1]
    match = re.match(r"\s*```python\n(.*?)```", after, re.S)
    assert match, "docs/transactions.md's exactly-once example lost its code block"
    return match.group(1)


def run_example(code: str, bootstrap: str) -> None:
    assert 'BOOTSTRAP = "127.0.0.1:9092"' in code
    code = code.replace('BOOTSTRAP = "127.0.0.1:9092"', f'BOOTSTRAP = "{bootstrap}"')
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                               env=dict(os.environ))
    assert completed.returncode == 0, completed.stdout + completed.stderr


def produce_orders(bootstrap: str, first: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(first, first + count):
        producer.produce("orders", key=str(i).encode(), value=f"order-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def test_docs_exactly_once_example(broker_factory):
    broker = broker_factory({"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2"})
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "orders")
    create_topic(bootstrap, "invoices")
    code = docs_example()
    produce_orders(bootstrap, 0, 30)
    run_example(code, bootstrap)
    produce_orders(bootstrap, 30, 20)
    run_example(code, bootstrap)
    got = consume("confluent", bootstrap, "invoices", 50, extra={"isolation.level": "read_committed"}, settle_s=0.5)
    assert sorted(r.value for r in got) == sorted(f"invoice for order-{i}".encode() for i in range(50))

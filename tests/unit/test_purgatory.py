"""replication.purgatory: delayed operations complete exactly once, by progress,
deadline or cancellation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.purgatory import Purgatory


class Op:
    def __init__(self, ready=False):
        self.ready = ready
        self.outcomes: list[str] = []

    def try_complete(self):
        if self.ready:
            self.outcomes.append("done")
            return True
        return False

    def on_expire(self):
        self.outcomes.append("expired")

    def on_cancel(self, key):
        self.outcomes.append(f"cancelled:{key}")


def test_ready_operation_completes_at_once():
    purgatory = Purgatory()
    op = Op(ready=True)
    assert purgatory.add(op, ["a"], 100) is True
    assert len(purgatory) == 0
    assert purgatory.next_deadline_ms() is None


def test_check_completes_when_the_condition_holds():
    purgatory = Purgatory()
    op = Op()
    assert purgatory.add(op, ["a", "b"], 100) is False
    assert purgatory.check("a") == 0
    op.ready = True
    assert purgatory.check("b") == 1
    assert purgatory.check("a") == 0
    assert purgatory.expire(1000) == 0
    assert op.outcomes == ["done"]
    assert len(purgatory) == 0


def test_deadlines_expire_in_order():
    purgatory = Purgatory()
    ops = [Op() for _ in range(3)]
    for op, deadline in zip(ops, (30, 10, 20)):
        purgatory.add(op, ["k"], deadline)
    assert purgatory.next_deadline_ms() == 10
    assert purgatory.expire(19) == 1
    assert ops[1].outcomes == ["expired"]
    assert purgatory.next_deadline_ms() == 20
    assert purgatory.expire(30) == 2
    assert [op.outcomes for op in ops] == [["expired"], ["expired"], ["expired"]]


def test_cancel_key_ends_its_watchers():
    purgatory = Purgatory()
    op = Op()
    purgatory.add(op, ["k"], 50)
    assert purgatory.cancel_key("k") == 1
    assert purgatory.expire(100) == 0
    assert op.outcomes == ["cancelled:k"]


def test_bounded():
    purgatory = Purgatory(max_operations=2)
    purgatory.add(Op(), ["k"], 10)
    purgatory.add(Op(), ["k"], 10)
    with pytest.raises(OverflowError):
        purgatory.add(Op(), ["k"], 10)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "ready", "check", "expire", "cancel"]), st.integers(0, 4)), max_size=80))
def test_every_operation_ends_exactly_once(steps):
    purgatory = Purgatory()
    ops: list[Op] = []
    now_ms = 0
    for action, n in steps:
        now_ms += 5
        key = f"k{n % 3}"
        if action == "add":
            op = Op()
            ops.append(op)
            purgatory.add(op, [key, f"k{(n + 1) % 3}"], now_ms + 10 * n)
        elif action == "ready" and ops:
            ops[n % len(ops)].ready = True
        elif action == "check":
            purgatory.check(key)
        elif action == "expire":
            purgatory.expire(now_ms)
        elif action == "cancel":
            purgatory.cancel_key(key)
        assert all(len(op.outcomes) <= 1 for op in ops)
        assert len(purgatory) == sum(1 for op in ops if not op.outcomes)
    purgatory.expire(now_ms + 10_000)
    assert all(len(op.outcomes) == 1 for op in ops)


def test_operations_finished_through_one_key_do_not_pile_up_under_idle_ones():
    """A long-polling fetch waits under all its partitions and is woken through one;
    the idle partitions' lists must not keep every woken fetch alive."""
    purgatory = Purgatory()
    idle = [f"idle-{i}" for i in range(50)]
    for _ in range(1000):
        op = Op()
        purgatory.add(op, ["busy", *idle], 10**9)
        op.ready = True
        assert purgatory.check("busy") == 1
    assert len(purgatory) == 0
    assert sum(len(v) for v in purgatory._watchers.values()) <= 64 + 51

"""``pybroker cluster balance``'s lines, from DescribeBalancerStatus answers built as the handler builds them."""

from __future__ import annotations

from broker.handlers.describe_balancer import R, _answer, _plan_fields
from broker.tools.balancer import placement_lines, plan_lines, status_lines
from controller.balancer.driver import BalancerDriver, BalancerSettings
from protocol.errors import ErrorCode
from tests.unit.balancer.test_driver import cluster


def test_a_ready_balancer_and_its_plan_print_what_is_known_and_unknown_as_unknown():
    image = cluster([1, 2, 3], empty=[4], partitions=6, topics=("a",))
    plan = BalancerDriver(BalancerSettings(max_moves_per_broker=2)).plan(image)
    assert plan.moves
    response = _answer(
        ErrorCode.NONE, state="in_progress", trigger="node_add", moves_in_flight=3, bytes_to_move=-1,
        balanced_since_ms=-1, failed_brokers=[5], **_plan_fields(plan),
        broker_placements=[R.BrokerPlacement(broker_id=7, state="draining", replicas=0),
                           R.BrokerPlacement(broker_id=8, state="cordoned", replicas=4)],
    )
    assert status_lines(response, now_ms=10_000) == [
        "Status: in_progress",
        "Trigger: node_add",
        "Moves in flight: 3",
        "Bytes to move: unknown",
        "Balanced for: - (not balanced since this controller became active)",
        "Failed brokers: 5",
    ]
    assert placement_lines(response) == ["Broker 7: draining (drained: it may be stopped)", "Broker 8: cordoned (4 replica(s))"]
    lines = plan_lines(response)
    copying = sum(m.kind.value == "replica_move" for m in plan.moves)
    assert lines[0] == f"Plan: {len(plan.moves)} move(s), {copying} copying data"
    assert lines[1:3] == ["Plan bytes to move: unknown", "Plan estimated time: unknown"]
    assert ("More moves follow this plan (the bound on moves per broker held some back)." in lines) == plan.cost_bound_reached
    first = plan.moves[0]
    assert f"  a-{first.partition}: {list(first.old_replicas)} -> {list(first.new_replicas)} ({first.kind.value})" in lines


def test_off_and_balanced_say_so():
    assert status_lines(_answer(ErrorCode.NONE, state="off"), now_ms=0) == ["Status: off"]
    ready = _answer(ErrorCode.NONE, state="stalled", reason="why not", balanced_since_ms=1_000)
    lines = status_lines(ready, now_ms=61_500)
    assert lines[0] == "Status: stalled (why not)" and "Balanced for: 60 s" in lines

"""``pybroker cluster balance``'s lines, from DescribeBalancerStatus answers built as the handler builds them."""

from __future__ import annotations

from broker.handlers.describe_balancer import R, _answer, _plan_fields
from broker.tools.balancer import load_lines, placement_lines, plan_lines, status_lines
from controller.balancer.driver import BalancerDriver, BalancerSettings
from protocol.errors import ErrorCode
from tests.unit.balancer.test_driver import cluster


def test_a_ready_balancer_and_its_plan_print_what_is_known_and_unknown_as_unknown():
    image = cluster([1, 2, 3], empty=[4], partitions=6, topics=("a",))
    plan = BalancerDriver(BalancerSettings(max_moves_per_broker=2)).plan(image)
    assert plan.moves
    response = _answer(
        ErrorCode.NONE, state="in_progress", trigger="node_add", moves_in_flight=3, bytes_to_move=-1,
        balanced_since_ms=-1, failed_brokers=[5], **_plan_fields(plan, (-1, -1)),
        broker_placements=[R.BrokerPlacement(broker_id=7, state="draining", replicas=0),
                           R.BrokerPlacement(broker_id=8, state="cordoned", replicas=4)],
    )
    assert status_lines(response, now_ms=10_000) == [
        "Status: in_progress",
        "Trigger: node_add",
        "Moves in flight: 3",
        "Bytes to move: unknown",
        "Estimated time: unknown (the running plan's, from its start)",
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


def test_known_estimates_and_broker_loads_print_with_units():
    image = cluster([1, 2, 3], empty=[4], partitions=6, topics=("a",))
    plan = BalancerDriver(BalancerSettings(max_moves_per_broker=2)).plan(image)
    response = _answer(
        ErrorCode.NONE, state="in_progress", trigger="disk", moves_in_flight=2, bytes_to_move=4096,
        estimated_ms=1500, **_plan_fields(plan, (8192, 2500)),
        broker_loads=[R.BrokerLoad(broker_id=1, replicas=6, leaders=2, disk_used_bytes=850, disk_capacity_bytes=1000,
                                   bytes_in_per_second=10, bytes_out_per_second=20),
                      R.BrokerLoad(broker_id=4, replicas=0, leaders=0)],
    )
    lines = status_lines(response, now_ms=0)
    assert "Bytes to move: 4096 B" in lines and "Estimated time: 1.5 s (the running plan's, from its start)" in lines
    assert plan_lines(response)[1:3] == ["Plan bytes to move: 8192 B", "Plan estimated time: 2.5 s"]
    assert load_lines(response) == [
        "Broker 1 load: 6 replica(s), 2 leader(s), disk 850 of 1000 B (85%), in 10 B/s, out 20 B/s",
        "Broker 4 load: 0 replica(s), 0 leader(s), disk unknown, in unknown, out unknown",
    ]

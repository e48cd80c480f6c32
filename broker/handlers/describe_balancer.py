"""DescribeBalancerStatus (key 16010, pybroker's own), version 0.

The active controller's balancer (controller/balancer/driver.py): its state
(``off``, ``ready``, ``in_progress``, ``stalled`` with the reason), the moves in
flight, the brokers it has given up on, when it last found the cluster
balanced and, with ``include_plan``, the plan it would make now (a dry run,
nothing started), and every broker's replicas and leaders now and when the
current or last balancing run started. The active controller answers; a broker forwards the
request there like ListPartitionReassignments
(broker/controller_node/forwarding.py). A node that cannot reach the active
controller answers NOT_CONTROLLER, which tools retry.

Bytes to move and the time they take come from the replica sizes the
brokers report in their heartbeats (controller/balancer/load_reports.py);
until every broker has reported them (seconds after a controller became
active) they are -1, not claimed. ``broker_loads``: per registered broker, its
replica and leader counts and its latest measurements (-1 when none).

Authorization (with an authorizer): DESCRIBE on the cluster.
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.errors import NotControllerError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeBalancerStatus"]
R = struct_classes(API.response)
UNKNOWN = -1


def _answer(error: ErrorCode, message: str | None = None, **fields):
    base = dict(
        throttle_time_ms=0, error_code=error, error_message=message, state="", reason=None, trigger=None,
        moves_in_flight=0, failed_brokers=[], planned_moves=[], plan_violations=[], broker_placements=[],
        broker_loads=[], distribution_before=[],
    )
    base.update(fields)
    return R.DescribeBalancerStatusResponse(**base)


def _plan_fields(plan, estimates: tuple[int, int]) -> dict:
    plan_bytes, plan_ms = estimates
    sizes_known = plan_bytes != UNKNOWN
    return dict(
        plan_included=True,
        planned_moves=[
            R.PlannedMove(
                topic=m.topic, partition_index=m.partition, current_replicas=list(m.old_replicas),
                target_replicas=list(m.new_replicas), kind=m.kind.value,
                bytes_to_move=m.bytes_to_move if sizes_known else UNKNOWN,
            )
            for m in plan.moves
        ],
        plan_bytes_to_move=plan_bytes,
        plan_estimated_ms=plan_ms,
        plan_cost_bound_reached=plan.cost_bound_reached,
        plan_violations=[
            f"{v.goal}: " + (f"{v.topic}-{v.partition}: " if v.topic is not None else "") + v.reason
            for v in plan.violations
        ],
    )


def _load_entry(broker_id: int, replicas: int, leaders: int, report) -> object:
    if report is None:
        return R.BrokerLoad(broker_id=broker_id, replicas=replicas, leaders=leaders)
    return R.BrokerLoad(
        broker_id=broker_id, replicas=replicas, leaders=leaders,
        disk_used_bytes=report.disk_used_bytes, disk_capacity_bytes=report.disk_capacity_bytes,
        bytes_in_per_second=report.bytes_in_per_second, bytes_out_per_second=report.bytes_out_per_second,
    )


def _before_fields(status) -> dict:
    """The distribution when the current or last balancing run started (none yet: -1 and empty)."""
    return dict(
        distribution_before_ms=UNKNOWN if status.distribution_before_ms is None else status.distribution_before_ms,
        distribution_before=[R.BrokerShareBefore(broker_id=b, replicas=r, leaders=lead) for b, r, lead in status.distribution_before],
    )


def register(dispatcher, broker) -> None:
    def authorize(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.DESCRIBE)
        if message is None:
            return None
        return refuse_whole(lambda: _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message))

    async def handle(ctx, request):
        try:
            status, plan, placements = await broker.controller.balancer_status(with_plan=request.include_plan)
        except NotControllerError as exc:
            return _answer(ErrorCode.NOT_CONTROLLER, str(exc))
        if status is None:
            fields = dict(state="off")
        else:
            fields = dict(
                state=status.state.value,
                reason=status.reason,
                trigger=status.trigger,
                moves_in_flight=status.moves_in_flight,
                bytes_to_move=status.bytes_to_move,
                estimated_ms=status.estimated_ms,
                balanced_since_ms=UNKNOWN if status.balanced_since_ms is None else status.balanced_since_ms,
                failed_brokers=list(status.failed_brokers),
            )
            fields.update(_before_fields(status))
        if plan is not None:
            fields.update(_plan_fields(plan, broker.controller.balancer_estimates(plan)))
        fields["broker_placements"] = [R.BrokerPlacement(broker_id=b, state=state, replicas=held) for b, state, held in placements]
        try:
            loads = await broker.controller.balancer_broker_loads()
        except NotControllerError as exc:
            return _answer(ErrorCode.NOT_CONTROLLER, str(exc))
        fields["broker_loads"] = [_load_entry(*entry) for entry in loads]
        return _answer(ErrorCode.NONE, **fields)

    dispatcher.register(API.key, 0, 0, handle, authorize=authorize)

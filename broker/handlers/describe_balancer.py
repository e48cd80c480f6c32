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

Sizes are -1: the controller knows no partition sizes yet, so neither the
bytes to move nor the time they take are claimed.

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
        distribution=[], distribution_before=[],
    )
    base.update(fields)
    return R.DescribeBalancerStatusResponse(**base)


def _plan_fields(plan) -> dict:
    sizes_known = False  # the planner is given no partition sizes yet (all 0)
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
        plan_bytes_to_move=plan.total_bytes if sizes_known else UNKNOWN,
        plan_estimated_ms=UNKNOWN,
        plan_cost_bound_reached=plan.cost_bound_reached,
        plan_violations=[
            f"{v.goal}: " + (f"{v.topic}-{v.partition}: " if v.topic is not None else "") + v.reason
            for v in plan.violations
        ],
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
            status, plan, placements, shares = await broker.controller.balancer_status(with_plan=request.include_plan)
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
                balanced_since_ms=UNKNOWN if status.balanced_since_ms is None else status.balanced_since_ms,
                failed_brokers=list(status.failed_brokers),
            )
            fields.update(_before_fields(status))
        if plan is not None:
            fields.update(_plan_fields(plan))
        fields["broker_placements"] = [R.BrokerPlacement(broker_id=b, state=state, replicas=held) for b, state, held in placements]
        fields["distribution"] = [R.BrokerShare(broker_id=b, replicas=r, leaders=lead) for b, r, lead in shares]
        return _answer(ErrorCode.NONE, **fields)

    dispatcher.register(API.key, 0, 0, handle, authorize=authorize)

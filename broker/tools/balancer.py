"""``pybroker cluster``: the balancer of the active controller, described and dry-run;
brokers cordoned, removed (drained) and put back.

``--describe`` prints the status DescribeBalancerStatus (key 16010,
pybroker's own) reports: ``off``, ``ready``, ``in_progress`` or ``stalled``
with the reason, the moves in flight, the brokers given up on, and how long
the cluster has been balanced, and a line per broker with its replicas,
leaders, disk use and client bytes in and out per second as it last reported
them. ``--dry-run`` also prints the plan the balancer would make now, move by
move, without starting anything. Bytes, times and loads print as ``unknown``
while the controller has no report of them (seconds after it became active):
the tool does not make up what the broker did not say.

``remove-broker --id N`` marks broker N draining (AlterBrokerPlacements, key
16011): it takes no new replica and the balancer moves every replica off it;
``--describe`` shows how many it still holds, and at 0 it may be stopped.
``cordon --id N`` only stops new replicas going to it (KIP-1066's cordon: new
topics and partitions, and the balancer's moves); ``uncordon --id N`` puts it
back to normal, which also ends a drain (what moved stays moved).

Any broker answers: it forwards the request to the active controller. A
NOT_CONTROLLER answer (a failover) is asked again within ``--timeout``.
"""

from __future__ import annotations

import argparse
import sys
import time

from broker.tools.client import Refused, ToolClient, ToolError
from broker.tools.options import EXIT_CODES, add_client_options, settings_of
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = "DescribeBalancerStatus"
ALTER_API = "AlterBrokerPlacements"
NOT_CONTROLLER_RETRY_S = 0.2
_ALTER = struct_classes(APIS_BY_NAME[ALTER_API].request)


class BalancerTool(ToolClient):
    def describe(self, include_plan: bool):
        self.require(API, "describing the balancer")
        deadline = time.monotonic() + self._timeout_s
        while True:
            response = self.bootstrap_connection().call(API, 0, include_plan=include_plan)
            if response.error_code != ErrorCode.NOT_CONTROLLER or time.monotonic() >= deadline:
                break
            time.sleep(NOT_CONTROLLER_RETRY_S)
        if response.error_code != ErrorCode.NONE:
            detail = f": {response.error_message}" if response.error_message else ""
            raise ToolError(f"{API} failed: {ErrorCode(response.error_code).name}{detail}")
        return response

    def alter_placement(self, broker_id: int, state: str) -> None:
        self.require(ALTER_API, "cordoning and removing brokers")
        deadline = time.monotonic() + self._timeout_s
        while True:
            response = self.bootstrap_connection().call(
                ALTER_API, 0, brokers=[_ALTER.BrokerPlacementChange(broker_id=broker_id, state=state)]
            )
            codes = {r.error_code for r in response.results} | {response.error_code}
            if ErrorCode.NOT_CONTROLLER not in codes or time.monotonic() >= deadline:
                break
            time.sleep(NOT_CONTROLLER_RETRY_S)
        if response.error_code != ErrorCode.NONE:
            detail = f": {response.error_message}" if response.error_message else ""
            raise Refused(f"{ALTER_API} failed: {ErrorCode(response.error_code).name}{detail}")
        for result in response.results:
            if result.error_code != ErrorCode.NONE:
                detail = f": {result.error_message}" if result.error_message else ""
                raise Refused(f"broker {result.broker_id}: {ErrorCode(result.error_code).name}{detail}")


def _amount(value: int, unit: str) -> str:
    return "unknown" if value < 0 else f"{value} {unit}"


def _duration(ms: int) -> str:
    return "unknown" if ms < 0 else f"{ms / 1000:.1f} s"


def status_lines(response, now_ms: int) -> list[str]:
    state = response.state + (f" ({response.reason})" if response.reason else "")
    lines = [f"Status: {state}"]
    if response.state == "off":
        return lines
    lines.append(f"Trigger: {response.trigger or '-'}")
    lines.append(f"Moves in flight: {response.moves_in_flight}")
    lines.append(f"Bytes to move: {_amount(response.bytes_to_move, 'B')}")
    if response.moves_in_flight:
        lines.append(f"Estimated time: {_duration(response.estimated_ms)} (the running plan's, from its start)")
    if response.balanced_since_ms >= 0:
        lines.append(f"Balanced for: {max(0, now_ms - response.balanced_since_ms) // 1000} s")
    else:
        lines.append("Balanced for: - (not balanced since this controller became active)")
    lines.append(f"Failed brokers: {', '.join(map(str, response.failed_brokers)) or '-'}")
    return lines


def placement_lines(response) -> list[str]:
    lines = []
    for p in response.broker_placements:
        if p.state == "draining":
            left = "drained: it may be stopped" if p.replicas == 0 else f"{p.replicas} replica(s) left"
            lines.append(f"Broker {p.broker_id}: draining ({left})")
        else:
            lines.append(f"Broker {p.broker_id}: {p.state} ({p.replicas} replica(s))")
    return lines


def load_lines(response) -> list[str]:
    lines = []
    for b in response.broker_loads:
        if b.disk_capacity_bytes > 0 and b.disk_used_bytes >= 0:
            disk = f"{b.disk_used_bytes} of {b.disk_capacity_bytes} B ({100 * b.disk_used_bytes // b.disk_capacity_bytes}%)"
        else:
            disk = "unknown"
        lines.append(
            f"Broker {b.broker_id} load: {b.replicas} replica(s), {b.leaders} leader(s), disk {disk}, "
            f"in {_amount(b.bytes_in_per_second, 'B/s')}, out {_amount(b.bytes_out_per_second, 'B/s')}"
        )
    return lines


def plan_lines(response) -> list[str]:
    moves = response.planned_moves
    lines = [f"Plan: {len(moves)} move(s), {sum(m.kind == 'replica_move' for m in moves)} copying data"]
    lines.append(f"Plan bytes to move: {_amount(response.plan_bytes_to_move, 'B')}")
    lines.append(f"Plan estimated time: {_duration(response.plan_estimated_ms)}")
    if response.plan_cost_bound_reached:
        lines.append("More moves follow this plan (the bound on moves per broker held some back).")
    for violation in response.plan_violations:
        lines.append(f"Cannot be met: {violation}")
    for m in moves:
        lines.append(
            f"  {m.topic}-{m.partition_index}: {list(m.current_replicas)} -> {list(m.target_replicas)} ({m.kind})"
        )
    return lines


def register(commands) -> None:
    parser = commands.add_parser(
        "cluster",
        help="the cluster's balancer (status, plan) and brokers cordoned or removed",
        description="Talks to a running broker, which asks the active controller. 'balance --describe' prints the "
        "balancer's status (off, ready, in_progress, stalled and why), moves in flight, failed, cordoned and draining "
        "brokers; 'balance --dry-run' also prints the plan it would make now, without starting it; 'remove-broker', "
        "'cordon' and 'uncordon' change where new replicas may go. " + EXIT_CODES,
    )
    sub = parser.add_subparsers(dest="cluster_command", required=True)
    balance = sub.add_parser("balance", help="describe the balancer, or print its plan (--dry-run)")
    add_client_options(balance)
    action = balance.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="the balancer's status")
    action.add_argument("--dry-run", action="store_true", help="the status and the plan the balancer would make now")
    balance.set_defaults(func=cmd_cluster_balance)
    for name, state, text in (
        ("remove-broker", "draining", "drain a broker: no new replicas, and the balancer moves every replica off it"),
        ("cordon", "cordoned", "no new replicas on a broker (it keeps the ones it has)"),
        ("uncordon", "normal", "a broker takes new replicas again (also ends a remove-broker)"),
    ):
        command = sub.add_parser(name, help=text, description=text + ". " + EXIT_CODES)
        add_client_options(command)
        command.add_argument("--id", type=int, required=True, metavar="BROKER_ID", help="the broker")
        command.set_defaults(func=cmd_cluster_placement, placement_state=state)


def _with_tool(args: argparse.Namespace, action) -> int:
    """Run ``action(tool)`` against the cluster; a ToolError is printed with its exit code."""
    tool = None
    try:
        tool = BalancerTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        return action(tool)
    except ToolError as exc:
        print(f"pybroker cluster: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    finally:
        if tool is not None:
            tool.close()


def cmd_cluster_balance(args: argparse.Namespace) -> int:
    def describe(tool: BalancerTool) -> int:
        response = tool.describe(include_plan=args.dry_run)
        for line in status_lines(response, int(time.time() * 1000)):
            print(line)
        for line in placement_lines(response):
            print(line)
        for line in load_lines(response):
            print(line)
        if args.dry_run and response.plan_included:
            for line in plan_lines(response):
                print(line)
        return 0

    return _with_tool(args, describe)


PLACEMENT_DONE = {
    "draining": "Broker {id} is being removed: it takes no new replicas and the balancer moves its replicas away "
    "(see pybroker cluster balance --describe).",
    "cordoned": "Broker {id} is cordoned: it takes no new replicas.",
    "normal": "Broker {id} takes new replicas again.",
}


def cmd_cluster_placement(args: argparse.Namespace) -> int:
    def alter(tool: BalancerTool) -> int:
        tool.alter_placement(args.id, args.placement_state)
        print(PLACEMENT_DONE[args.placement_state].format(id=args.id))
        return 0

    return _with_tool(args, alter)

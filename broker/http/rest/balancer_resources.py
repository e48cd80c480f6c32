"""The REST proxy's balancer resources (Confluent REST v3's shapes where they fit).

* ``GET /v3/clusters/{id}/balancer``: the active controller's balancer, as
  DescribeBalancerStatus answers it (protocol/messages/balancer.py): the
  envelope is Confluent's ``KafkaBalancerStatus`` (kind, metadata, cluster_id,
  a ``broker_tasks`` link); the fields are pybroker's (``state`` off, ready,
  in_progress or stalled, with its ``reason``; moves in flight; the per-broker
  distribution now and when the last balancing run started). A size the
  controller does not know is null, never a guess.
* ``DELETE /v3/clusters/{id}/brokers/{broker_id}``: remove-broker, as
  Confluent's: the broker is drained (AlterBrokerPlacements ``draining``) and
  the answer is 202 with the ``remove-broker`` task. Unlike Confluent, the
  broker is never shut down by it: ``should_shutdown=true`` is refused (400),
  and the task says ``should_shutdown: false``; stop the broker once its task
  is SUCCESS (it holds no replica).
* ``GET /v3/clusters/{id}/brokers/-/tasks`` and ``.../brokers/{broker_id}/tasks``:
  the remove-broker tasks, one per draining broker (IN_PROGRESS while it holds
  replicas, SUCCESS once it holds none). Cordoned brokers have no task.

Errors and authorization are the handlers' (DESCRIBE, ALTER on the cluster).
The requests go through this broker's dispatcher, which forwards them to the
active controller; NOT_CONTROLLER (an election under way) is asked again a
bounded number of times.
"""

from __future__ import annotations

import asyncio

from broker.http.rest.errors import RestError, bad_request, kafka_error, not_found
from broker.http.rest.kafka import REQUESTS
from broker.http.rest.resources import Call, _int_param, _list, _resource, check_cluster
from protocol.errors import ErrorCode

UNKNOWN = -1
NOT_CONTROLLER_ATTEMPTS = 20
NOT_CONTROLLER_BACKOFF_S = 0.25
TASK_TYPE = "remove-broker"
_PLACEMENT = REQUESTS["AlterBrokerPlacements"]


async def _while_no_controller(send, error_of):
    """``await send()`` again while ``error_of(response)`` is NOT_CONTROLLER (an
    election under way), a bounded number of times; the last response."""
    for attempt in range(NOT_CONTROLLER_ATTEMPTS):
        response = await send()
        if error_of(response) != ErrorCode.NOT_CONTROLLER or attempt == NOT_CONTROLLER_ATTEMPTS - 1:
            return response
        await asyncio.sleep(NOT_CONTROLLER_BACKOFF_S)


async def _describe(call: Call):
    response = await _while_no_controller(
        lambda: call.kafka.call("DescribeBalancerStatus", include_plan=False), lambda r: r.error_code
    )
    if response.error_code != ErrorCode.NONE:
        raise kafka_error(response.error_code, response.error_message)
    return response


def _known(value: int):
    return None if value == UNKNOWN else value


def _load(e) -> dict:
    """A broker's share now, with its measurements (null until it reported them)."""
    return {
        "broker_id": e.broker_id, "replicas": e.replicas, "leaders": e.leaders,
        "disk_used_bytes": _known(e.disk_used_bytes), "disk_capacity_bytes": _known(e.disk_capacity_bytes),
        "bytes_in_per_second": _known(e.bytes_in_per_second), "bytes_out_per_second": _known(e.bytes_out_per_second),
    }


def _shares(entries) -> list[dict]:
    return [{"broker_id": e.broker_id, "replicas": e.replicas, "leaders": e.leaders} for e in entries]


async def get_balancer(call: Call) -> dict:
    check_cluster(call)
    r = await _describe(call)
    body = _resource(
        call, "KafkaBalancerStatus", ("balancer",), (),
        cluster_id=call.cluster_id,
        state=r.state,
        reason=r.reason,
        trigger=r.trigger,
        moves_in_flight=r.moves_in_flight,
        bytes_to_move=_known(r.bytes_to_move),
        estimated_ms=_known(r.estimated_ms),
        balanced_since_ms=_known(r.balanced_since_ms),
        failed_brokers=list(r.failed_brokers),
        broker_placements=[{"broker_id": p.broker_id, "state": p.state, "replicas": p.replicas} for p in r.broker_placements],
        distribution=[_load(e) for e in r.broker_loads],
        distribution_before_ms=_known(r.distribution_before_ms),
        distribution_before=_shares(r.distribution_before),
        broker_tasks=call.related("brokers", "-", "tasks"),
    )
    body["metadata"]["resource_name"] = call.crn() + "/balancer"  # one balancer per cluster: no id
    return body


def _task(call: Call, broker_id: int, replicas: int) -> dict:
    return _resource(
        call, "KafkaBrokerTask", ("brokers", broker_id, "tasks", TASK_TYPE),
        (("broker", broker_id), ("task", TASK_TYPE)),
        cluster_id=call.cluster_id,
        broker_id=broker_id,
        task_type=TASK_TYPE,
        task_status="IN_PROGRESS" if replicas else "SUCCESS",
        replicas=replicas,
        should_shutdown=False,
        broker=call.related("brokers", broker_id),
    )


async def _tasks(call: Call, only: int | None) -> list[dict]:
    r = await _describe(call)
    return [
        _task(call, p.broker_id, p.replicas)
        for p in r.broker_placements if p.state == "draining" and (only is None or p.broker_id == only)
    ]


async def list_all_tasks(call: Call) -> dict:
    check_cluster(call)
    return _list(call, "KafkaBrokerTaskList", ("brokers", "-", "tasks"), await _tasks(call, None))


async def list_broker_tasks(call: Call) -> dict:
    check_cluster(call)
    broker_id = _int_param(call, "broker_id")
    return _list(call, "KafkaBrokerTaskList", ("brokers", broker_id, "tasks"), await _tasks(call, broker_id))


async def remove_broker(call: Call) -> dict:
    """Drain the broker (202 and its task); 404 for a broker that is not registered,
    400 for a drain the controller refuses (balancer off, too few brokers left)."""
    check_cluster(call)
    broker_id = _int_param(call, "broker_id")
    shutdown = (call.query.get("should_shutdown") or "false").lower()
    if shutdown not in ("true", "false"):
        raise bad_request("'should_shutdown' must be true or false.")
    if shutdown == "true":
        raise bad_request("pybroker does not stop a removed broker: stop it once its remove-broker task is SUCCESS "
                          "(ask again with should_shutdown=false).")
    async def drain():
        response = await call.kafka.call("AlterBrokerPlacements", brokers=[
            _PLACEMENT.BrokerPlacementChange(broker_id=broker_id, state="draining"),
        ])
        if response.error_code != ErrorCode.NONE:
            raise kafka_error(response.error_code, response.error_message)
        return response.results[0]

    result = await _while_no_controller(drain, lambda r: r.error_code)
    if result.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED:
        raise not_found(result.error_message or f"Broker {broker_id} cannot be found.")
    if result.error_code == ErrorCode.INVALID_REQUEST:
        raise RestError(400, 40002, result.error_message or "INVALID_REQUEST")
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)
    tasks = await _tasks(call, broker_id)
    # The drain is committed, so the describe names it; its replica count is the controller's now.
    return tasks[0] if tasks else _task(call, broker_id, 0)

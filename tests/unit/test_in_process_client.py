"""broker.net.in_process_client: requests to the broker's own dispatcher, framed by the client core.

A request the dispatcher answers comes back decoded; one it refuses (an API it
does not serve, as it would close a socket) raises RequestRefused and is no
longer awaited, so the client goes on serving later calls; calls that overlap
each get their own answer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.net.dispatch import Dispatcher
from broker.net.in_process_client import InProcessClient, RequestRefused
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE_CLUSTER = APIS_BY_NAME["DescribeCluster"]
LIST_GROUPS = APIS_BY_NAME["ListGroups"]
R = struct_classes(DESCRIBE_CLUSTER.response)
CLUSTER_ACTIONS_OMITTED = -(2**31)


class Connection:
    peer = "test"
    listener_name = None


def answering_dispatcher() -> Dispatcher:
    """A dispatcher that serves DescribeCluster v0 (naming the asker's client id
    as the cluster id) and nothing else."""
    dispatcher = Dispatcher()

    async def describe_cluster(ctx, request):
        await asyncio.sleep(0)  # let overlapping calls interleave
        return R.DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, cluster_id=ctx.client_id, controller_id=1,
            brokers=[], cluster_authorized_operations=CLUSTER_ACTIONS_OMITTED,
        )

    dispatcher.register(DESCRIBE_CLUSTER.key, 0, 0, describe_cluster)
    return dispatcher


def describe_cluster(client: InProcessClient):
    body = DESCRIBE_CLUSTER.request.cls(include_cluster_authorized_operations=False)
    return client.request(DESCRIBE_CLUSTER, 0, body, Connection())


def test_an_answer_comes_back_decoded_and_a_refusal_is_not_awaited():
    async def main():
        client = InProcessClient(SimpleNamespace(dispatcher=answering_dispatcher()), "in-process-test")
        answer = await describe_cluster(client)
        assert (answer.error_code, answer.cluster_id) == (0, "in-process-test")
        with pytest.raises(RequestRefused, match="ListGroups v4 was refused by the broker"):
            await client.request(LIST_GROUPS, 4, LIST_GROUPS.request.cls(states_filter=[]), Connection())
        assert client._state.in_flight == 0
        assert (await describe_cluster(client)).cluster_id == "in-process-test"
        assert client._state.in_flight == 0

    asyncio.run(main())


def test_overlapping_calls_each_get_their_answer():
    async def main():
        client = InProcessClient(SimpleNamespace(dispatcher=answering_dispatcher()), "overlap")
        answers = await asyncio.wait_for(asyncio.gather(*(describe_cluster(client) for _ in range(20))), 5)
        assert [a.cluster_id for a in answers] == ["overlap"] * 20
        assert client._state.in_flight == 0

    asyncio.run(main())

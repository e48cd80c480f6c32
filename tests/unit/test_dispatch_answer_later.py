"""broker.net.dispatch: what a pipelining connection gets for a handler's AnswerLater.

An overlappable AnswerLater (a Produce that appended and only waits) comes
back as a task at once, so the connection may start its next request; one
with ``overlappable=False`` (a transactional Produce that must hear from the
coordinator before it appends) is awaited inside ``handle_frame``, so the
connection takes nothing else until it is answered."""

from __future__ import annotations

import asyncio

from broker.net.dispatch import AnswerLater, Dispatcher
from protocol.framing import encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE_CLUSTER = APIS_BY_NAME["DescribeCluster"]
R = struct_classes(DESCRIBE_CLUSTER.response)


class Connection:
    peer = "test"
    listener_name = None


def request_frame() -> bytes:
    body = DESCRIBE_CLUSTER.request.cls(include_cluster_authorized_operations=False)
    return encode_request(DESCRIBE_CLUSTER, 0, 7, "test", body)[4:]


def run(overlappable: bool):
    async def main():
        gate = asyncio.Event()
        dispatcher = Dispatcher()

        async def answer():
            await gate.wait()
            return R.DescribeClusterResponse(
                throttle_time_ms=0, error_code=0, error_message=None, cluster_id="c", controller_id=1, brokers=[],
                cluster_authorized_operations=-2147483648,
            )

        dispatcher.register(DESCRIBE_CLUSTER.key, 0, 0, lambda ctx, request: AnswerLater(answer(), overlappable=overlappable))
        handled = asyncio.get_running_loop().create_task(dispatcher.handle_frame(request_frame(), Connection(), pipelined=True))
        await asyncio.sleep(0.05)
        done_before_gate = handled.done()
        gate.set()
        result = await asyncio.wait_for(handled, 5)
        if isinstance(result, asyncio.Task):
            result = await asyncio.wait_for(result, 5)
        return done_before_gate, result

    return asyncio.run(main())


def test_an_overlappable_answer_comes_back_as_a_task_at_once():
    done_before_gate, frame = run(overlappable=True)
    assert done_before_gate  # the connection got its task and could go on
    assert frame is not None


def test_a_non_overlappable_answer_holds_the_request_until_it_is_ready():
    done_before_gate, frame = run(overlappable=False)
    assert not done_before_gate  # handle_frame itself waited for the answer
    assert frame is not None and not isinstance(frame, asyncio.Task)

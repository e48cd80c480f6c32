"""broker.net.connection over real TCP sockets (in-process server, asyncio
clients), with a dispatcher that answers each request after a delay:

* a request and its response are not kept once the response is written, and
  an idle connection holds no receive buffer and no task;
* queued.max.request.bytes (RequestMemoryBudget): pipelining clients get every
  answer, in order, while the admitted bytes never pass the budget by more
  than one frame; connections that go away give their share back;
* the config key: Kafka's default, and its rule against a budget smaller than
  socket.request.max.bytes.
"""

from __future__ import annotations

import asyncio
import gc
import struct
import sys
import weakref

import pytest

from broker.config import ConfigError, load_config
from broker.net.connection import KafkaConnection, RequestMemoryBudget
from protocol.framing import FrameReceiver, ResponseFrame, thread_scratch

TIMEOUT_S = 20


class DelayedEcho:
    """Answers a frame with its first four bytes (the client's id for it)
    after ``delay_s``; records what the budget held while it was handled."""

    CLOSE = object()

    def __init__(self, delay_s: float, budget: RequestMemoryBudget | None = None):
        self.delay_s = delay_s
        self.budget = budget
        self.used_while_handling: list[int] = []
        self.responses: list[weakref.ref] = []

    async def handle_frame(self, frame, connection, pipelined=False):
        if self.budget is not None:
            self.used_while_handling.append(self.budget.used_bytes)
        await asyncio.sleep(self.delay_s)
        response = ResponseFrame(struct.pack(">i", 4) + bytes(frame[:4]))
        self.responses.append(weakref.ref(response))
        return response


async def serve(dispatcher, budget=None, max_frame_bytes=1 << 20):
    connections: set = set()
    server = await asyncio.get_running_loop().create_server(
        lambda: KafkaConnection(dispatcher, max_frame_bytes, connections, "test", budget), "127.0.0.1", 0
    )
    return server, server.sockets[0].getsockname()[1], connections


def request(request_id: int, payload_bytes: int) -> bytes:
    return struct.pack(">ii", 4 + payload_bytes, request_id) + bytes(payload_bytes)


async def pipeline(port: int, ids: list[int], payload_bytes: int) -> list[int]:
    """Send every request at once, then read one answer per request: the ids answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(request(i, payload_bytes) for i in ids))
        answered = []
        for _ in ids:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            answered.append(struct.unpack(">i", await reader.readexactly(size))[0])
        return answered
    finally:
        writer.close()


def test_request_and_response_are_dropped_once_answered():
    async def scenario():
        dispatcher = DelayedEcho(0.001)
        server, port, connections = await serve(dispatcher)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in range(3):
                writer.write(request(i, 100_000))
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                assert struct.unpack(">i", await reader.readexactly(size))[0] == i
            await asyncio.sleep(0.05)  # the worker is waiting for the next request
            [connection] = connections
            assert len(dispatcher.responses) == 3
            assert all(ref() is None for ref in dispatcher.responses)
            # No task waits for the next request (its frame would hold the last one).
            assert connection._worker is None
            assert connection._receiver.buffered_bytes == 0
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


@pytest.mark.parametrize("payload_bytes", [1_000, 40_000, 300_000])
def test_pipelining_clients_are_all_answered_within_the_budget(payload_bytes):
    limit_bytes = 5 * payload_bytes

    async def scenario():
        budget = RequestMemoryBudget(limit_bytes)
        dispatcher = DelayedEcho(0.002, budget)
        server, port, connections = await serve(dispatcher, budget)
        try:
            clients = [list(range(c * 100, c * 100 + 12)) for c in range(6)]
            answered = await asyncio.gather(*(pipeline(port, ids, payload_bytes) for ids in clients))
            assert answered == clients  # every request, in order per connection
            frame_bytes = 4 + payload_bytes
            assert budget.frame_bytes_peak == frame_bytes
            assert budget.used_bytes_peak <= limit_bytes - 1 + frame_bytes
            assert max(dispatcher.used_while_handling) <= limit_bytes - 1 + frame_bytes
            assert budget.refusals > 0  # 72 requests did not all fit
            for _ in range(100):
                if not connections:
                    break
                await asyncio.sleep(0.01)
            assert budget.used_bytes == 0 and not budget._waiting
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


def test_connections_that_go_away_give_their_share_back():
    async def scenario():
        budget = RequestMemoryBudget(100_000)
        dispatcher = DelayedEcho(0.5, budget)
        server, port, connections = await serve(dispatcher, budget)
        try:
            # One connection fills the budget with a request being handled; a
            # second has sent half of a large frame (admitted: its declared size
            # counts); a third has a frame refused and waits.
            _, busy = await asyncio.open_connection("127.0.0.1", port)
            busy.write(request(1, 100_000))
            while budget.used_bytes < 100_004:
                await asyncio.sleep(0.005)
            _, waiting = await asyncio.open_connection("127.0.0.1", port)
            waiting.write(request(2, 50))
            while not budget._waiting:
                await asyncio.sleep(0.005)
            assert budget.used_bytes == 100_004
            for writer in (busy, waiting):
                writer.close()
            for _ in range(200):
                if not connections:
                    break
                await asyncio.sleep(0.01)
            assert not connections
            assert budget.used_bytes == 0 and not budget._waiting

            _, partial = await asyncio.open_connection("127.0.0.1", port)
            partial.write(request(3, 600_000)[:1000])
            while budget.used_bytes == 0:
                await asyncio.sleep(0.005)
            assert budget.used_bytes == 600_004  # the whole declared frame
            partial.close()
            for _ in range(200):
                if budget.used_bytes == 0:
                    break
                await asyncio.sleep(0.01)
            assert budget.used_bytes == 0
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


def test_an_idle_connection_holds_no_receive_buffer():
    async def scenario():
        server, port, connections = await serve(DelayedEcho(0))
        try:
            # Connections that were served and stay open, with nothing to do.
            streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            for i, (reader, writer) in enumerate(streams):
                writer.write(request(i, 10))
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                assert struct.unpack(">i", await reader.readexactly(size))[0] == i
            assert len(connections) == 3
            shared = thread_scratch(FrameReceiver.SCRATCH_BYTES)
            for connection in connections:
                assert connection._worker is None and not connection._pending
                receiver = connection._receiver
                assert receiver.buffered_bytes == 0 and receiver._scratch.owner is not receiver
                # What it references besides the scratch all receivers of the thread share.
                own = [o for o in gc.get_referents(receiver) if o is not shared]
                assert sum(sys.getsizeof(o) for o in own) < 2048, own
            for _, writer in streams:
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


# --------------------------------------------------------------------------- the key


def test_queued_max_request_bytes_default_and_rule():
    assert load_config({}, warn=lambda _: None)["queued.max.request.bytes"] == -1
    for value in ("-1", "0", "104857600", "1000000000"):
        assert load_config({"queued.max.request.bytes": value}, warn=lambda _: None)["queued.max.request.bytes"] == int(value)
    for value in ("1", "104857599"):
        with pytest.raises(ConfigError, match="queued.max.request.bytes"):
            load_config({"queued.max.request.bytes": value}, warn=lambda _: None)
    with pytest.raises(ConfigError, match="queued.max.request.bytes"):
        load_config({"queued.max.request.bytes": "lots"}, warn=lambda _: None)
    config = load_config({"queued.max.request.bytes": "2048", "socket.request.max.bytes": "1024"}, warn=lambda _: None)
    assert config["queued.max.request.bytes"] == 2048


def test_a_budget_needs_a_positive_limit():
    with pytest.raises(ValueError):
        RequestMemoryBudget(0)

"""broker.net.connection: Produce requests that only wait for their answers
(fsyncs, followers) let the next Produce of the connection start; answers
still go out in request order, and any other request waits for the Produces
before it. Real TCP, in-process server, a dispatcher that plays the handlers."""

from __future__ import annotations

import asyncio
import contextlib
import struct

from broker.net.connection import PIPELINED_PRODUCES_MAX, KafkaConnection
from protocol.framing import ResponseFrame

TIMEOUT_S = 20
PRODUCE, METADATA = 0, 3


class Handlers:
    """A frame is (api key int16, request id int32, how long its answer waits
    in ms int32). A Produce that waits answers later (a task, as the real
    dispatcher gives a pipelining connection); anything else answers when
    handled. Records when each request was handled and answered."""

    CLOSE = object()

    def __init__(self):
        self.events: list[tuple[str, int]] = []

    async def handle_frame(self, frame, connection, pipelined=False):
        api_key, request_id, wait_ms = struct.unpack(">hii", bytes(frame[:10]))
        self.events.append(("handled", request_id))
        answer = ResponseFrame(struct.pack(">ii", 4, request_id))
        if api_key == PRODUCE and wait_ms and pipelined:
            async def later():
                await asyncio.sleep(wait_ms / 1000)
                self.events.append(("ready", request_id))
                return answer

            return asyncio.get_running_loop().create_task(later())
        await asyncio.sleep(wait_ms / 1000)
        self.events.append(("ready", request_id))
        return answer


def frame(api_key: int, request_id: int, wait_ms: int) -> bytes:
    return struct.pack(">ihii", 10, api_key, request_id, wait_ms)


@contextlib.asynccontextmanager
async def served():
    """A server of KafkaConnections playing Handlers, and one client connected to it."""
    handlers = Handlers()
    connections: set = set()
    server = await asyncio.get_running_loop().create_server(
        lambda: KafkaConnection(handlers, 1 << 20, connections, "test"), "127.0.0.1", 0
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        yield reader, writer, handlers, connections
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def read_answers(reader, count: int) -> list[int]:
    answered = []
    for _ in range(count):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        answered.append(struct.unpack(">i", await reader.readexactly(size))[0])
    return answered


async def exchange(requests: list[bytes]) -> tuple[list[int], Handlers, set]:
    async with served() as (reader, writer, handlers, connections):
        writer.write(b"".join(requests))
        return await read_answers(reader, len(requests)), handlers, connections


def run(requests):
    return asyncio.run(asyncio.wait_for(exchange(requests), TIMEOUT_S))


def test_produces_overlap_their_waits_and_are_answered_in_order():
    # The first waits longest: the others are handled meanwhile, answered after it.
    answered, handlers, _ = run([frame(PRODUCE, 1, 300), frame(PRODUCE, 2, 10), frame(PRODUCE, 3, 0)])
    assert answered == [1, 2, 3]
    events = handlers.events
    assert events.index(("handled", 2)) < events.index(("ready", 1))
    assert events.index(("handled", 3)) < events.index(("ready", 1))


def test_another_request_waits_for_the_produces_before_it():
    answered, handlers, _ = run([frame(PRODUCE, 1, 200), frame(METADATA, 2, 0), frame(PRODUCE, 3, 0)])
    assert answered == [1, 2, 3]
    events = handlers.events
    assert events.index(("ready", 1)) < events.index(("handled", 2))
    assert events.index(("handled", 2)) < events.index(("handled", 3))


def test_at_most_so_many_produces_wait_at_once():
    count = PIPELINED_PRODUCES_MAX + 3
    answered, handlers, _ = run([frame(PRODUCE, i, 100) for i in range(count)])
    assert answered == list(range(count))
    events = handlers.events
    # The first one past the bound starts only once the oldest is answered.
    assert events.index(("ready", 0)) < events.index(("handled", PIPELINED_PRODUCES_MAX))
    assert events.index(("handled", PIPELINED_PRODUCES_MAX - 1)) < events.index(("ready", 0))


def test_a_produce_arriving_while_others_wait_starts_at_once():
    async def scenario():
        async with served() as (reader, writer, handlers, connections):
            writer.write(frame(PRODUCE, 1, 400))
            await asyncio.sleep(0.1)  # the first waits; the worker waits for it or a new request
            writer.write(frame(PRODUCE, 2, 0))
            assert await read_answers(reader, 2) == [1, 2]
            assert handlers.events.index(("handled", 2)) < handlers.events.index(("ready", 1))
            await asyncio.sleep(0.05)
            [connection] = connections
            assert connection._worker is None  # nothing left: no task
            assert connection.idle_s(connection.last_active_s) == 0.0

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


def test_requests_before_the_end_of_the_stream_are_all_answered():
    async def scenario():
        async with served() as (reader, writer, _, _):
            writer.write(frame(PRODUCE, 1, 200) + frame(PRODUCE, 2, 50))
            writer.write_eof()
            data = await reader.read()  # until the broker closes
            assert [struct.unpack(">ii", data[i : i + 8])[1] for i in range(0, len(data), 8)] == [1, 2]

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

"""broker.net.dispatch with client quotas: request_percentage counts event-loop time only, the
throttle goes into throttle_time_ms and mutes the connection; broker.net.connection's muting."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.net.connection import KafkaConnection
from broker.net.dispatch import AnswerLater, Dispatcher, _Timed
from broker.net.quotas import REQUEST_PERCENTAGE, ClientQuotaManager
from controller.metadata.image import quota_entity
from protocol.framing import decode_response, encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE_CLUSTER = APIS_BY_NAME["DescribeCluster"]
R = struct_classes(DESCRIBE_CLUSTER.response)


def _response():
    return R.DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, cluster_id="c", controller_id=1, brokers=[],
        cluster_authorized_operations=-2147483648,
    )


class Connection:
    peer = "test"
    listener_name = None
    principal = "User:alice"

    def __init__(self):
        self.throttles = []

    def throttle(self, throttle_ms):
        self.throttles.append(throttle_ms)


def frame(client_id="app") -> bytes:
    body = DESCRIBE_CLUSTER.request.cls(include_cluster_authorized_operations=False)
    return encode_request(DESCRIBE_CLUSTER, 0, 7, client_id, body)[4:]


def manager(percentage):
    quotas = {quota_entity([("client-id", None)]): {REQUEST_PERCENTAGE: percentage}} if percentage else {}
    return ClientQuotaManager(lambda: quotas)


def test_timed_counts_the_steps_not_the_waits():
    async def handler():
        time.sleep(0.02)
        await asyncio.sleep(0.2)
        time.sleep(0.02)
        return 42

    async def main():
        class Ctx:
            busy_s = 0.0

        ctx = Ctx()
        assert await _Timed(handler(), ctx) == 42
        return ctx.busy_s

    busy_s = asyncio.run(main())
    assert 0.035 <= busy_s < 0.15


def test_timed_passes_exceptions_and_cancellation():
    class Ctx:
        busy_s = 0.0

    async def failing():
        await asyncio.sleep(0)
        raise KeyError("x")

    async def sleeper():
        return await _Timed(asyncio.sleep(10), Ctx())

    async def main():
        with pytest.raises(KeyError):
            await _Timed(failing(), Ctx())
        task = asyncio.get_running_loop().create_task(sleeper())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


@pytest.mark.parametrize("is_async", [False, True])
def test_over_request_percentage_the_answer_carries_the_throttle_and_the_connection_is_muted(is_async):
    def busy(ctx=None, request=None):
        time.sleep(0.01)  # 10 ms of "event loop" per request
        return _response()

    async def busy_async(ctx, request):
        await asyncio.sleep(0.05)  # waiting is not busy
        return busy()

    async def main():
        dispatcher = Dispatcher()
        dispatcher.register(DESCRIBE_CLUSTER.key, 0, 0, busy_async if is_async else busy)
        dispatcher.quotas = manager(1.0)  # 1 % of a thread
        connection = Connection()
        answer = await dispatcher.handle_frame(frame(), connection)
        # 10 ms busy in the request's own millisecond(s): far over 1 %.
        _, response = decode_response(DESCRIBE_CLUSTER, 0, bytes(answer)[4:])
        return response.throttle_time_ms, connection.throttles

    throttle_ms, throttles = asyncio.run(main())
    assert throttle_ms == 1000  # far over 1 %, and capped at one sample as Kafka caps it
    assert throttles == [throttle_ms]


def test_without_quotas_nothing_is_throttled_or_timed():
    async def main():
        dispatcher = Dispatcher()
        dispatcher.register(DESCRIBE_CLUSTER.key, 0, 0, lambda ctx, request: _response())
        dispatcher.quotas = manager(None)
        connection = Connection()
        answer = await dispatcher.handle_frame(frame(), connection)
        _, response = decode_response(DESCRIBE_CLUSTER, 0, bytes(answer)[4:])
        return response.throttle_time_ms, connection.throttles

    assert asyncio.run(main()) == (0, [])


def test_a_pipelined_answer_gets_the_handlers_throttle():
    async def main():
        dispatcher = Dispatcher()
        gate = asyncio.Event()

        async def answer():
            await gate.wait()
            return _response()

        def handle(ctx, request):
            ctx.throttle_time_ms = 1234  # as Produce does for producer_byte_rate
            return AnswerLater(answer())

        dispatcher.register(DESCRIBE_CLUSTER.key, 0, 0, handle)
        dispatcher.quotas = manager(10**6)
        connection = Connection()
        task = await dispatcher.handle_frame(frame(), connection, pipelined=True)
        assert connection.throttles == [1234]  # muted before the answer is ready
        gate.set()
        _, response = decode_response(DESCRIBE_CLUSTER, 0, bytes(await task)[4:])
        return response.throttle_time_ms

    assert asyncio.run(main()) == 1234


class _Transport:
    def __init__(self):
        self.paused = False
        self.written = []

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False

    def is_closing(self):
        return False

    def get_extra_info(self, name):
        return ("127.0.0.1", 1234) if name == "peername" else None

    def write(self, data):
        self.written.append((time.monotonic(), bytes(data)))

    def close(self):
        pass

    def abort(self):
        pass


def test_a_throttled_connection_reads_and_starts_nothing_until_the_time_is_over():
    async def main():
        dispatcher = Dispatcher()
        dispatcher.register(DESCRIBE_CLUSTER.key, 0, 0, lambda ctx, request: _response())
        connection = KafkaConnection(dispatcher, 1 << 20, set())
        transport = _Transport()
        connection.connection_made(transport)
        connection.throttle(300)
        assert transport.paused
        started = time.monotonic()
        data = encode_request(DESCRIBE_CLUSTER, 0, 7, "app", DESCRIBE_CLUSTER.request.cls(include_cluster_authorized_operations=False))
        buffer = connection.get_buffer(len(data))
        buffer[: len(data)] = data
        connection.buffer_updated(len(data))  # already received before the mute took effect
        await asyncio.sleep(0.15)
        assert transport.written == []  # held while muted
        connection.throttle(100)  # a shorter throttle does not shorten the mute
        for _ in range(100):
            if transport.written:
                break
            await asyncio.sleep(0.02)
        assert transport.written and transport.written[0][0] - started >= 0.29
        assert not transport.paused
        connection.connection_lost(None)

    asyncio.run(main())

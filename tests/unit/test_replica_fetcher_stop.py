"""A replica fetcher's stop() ends its loop however the cancellation meets it:
a node whose fetcher went on after stop() never exited on SIGTERM (a dev
cluster's nodes, all stopped at once, were killed after the stop timeout)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from broker.net.node_client import ConnectionFailed, KafkaClientConnection
from broker.replica.fetcher import ReplicaFetcher
from controller.metadata.image import BrokerRegistration, Endpoint, MetadataImage
from replication.replica_core import FollowerState

LEADER_ID = 2
KEY = ("t", 0)
STOP_BOUND_S = 5


class FakeConfig(dict):
    inter_broker_listener_name = "REPLICATION"


def follower_of(port: int):
    """A ReplicaFetcher of broker 1 following partition t-0 on broker 2 at 127.0.0.1:port."""
    topic_id = uuid.UUID(int=7)
    config = FakeConfig({
        "replica.fetch.wait.max.ms": 500,
        "replica.fetch.min.bytes": 1,
        "replica.fetch.response.max.bytes": 10 << 20,
        "replica.fetch.max.bytes": 1 << 20,
        "replica.fetch.backoff.ms": 1000,
        "replica.socket.timeout.ms": 30_000,
    })
    leader = BrokerRegistration(LEADER_ID, uuid.uuid4(), 10, (Endpoint("REPLICATION", "127.0.0.1", port, 0),))
    broker = SimpleNamespace(
        config=config,
        image=MetadataImage(brokers={LEADER_ID: leader}, topic_names_by_id={topic_id: "t"}),
        node_connection=lambda host, port, client_id, *, to, connect_timeout_ms: KafkaClientConnection(
            host, port, client_id, connect_timeout_ms=connect_timeout_ms
        ),
    )
    plog = SimpleNamespace(leader_epochs=[], log_end_offset=0, log_start_offset=0)
    state = FollowerState(topic_id, LEADER_ID, 3)
    manager = SimpleNamespace(
        broker=broker,
        node_id=1,
        fetch_state=lambda key: (state, plog) if key == KEY else None,
        throttled=lambda *args: False,
    )
    fetcher = ReplicaFetcher(manager, LEADER_ID, 0)
    fetcher.add(KEY)
    return fetcher


async def silent_leader():
    """A leader that reads fetches and never answers; set() once one arrived."""
    received = asyncio.Event()

    async def serve(reader, writer):
        try:
            while await reader.read(65536):
                received.set()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], received


def test_stop_ends_the_fetcher_when_the_leader_connection_ends_in_the_same_turn():
    """The leader stops as this broker does: its connection fails the fetch in
    flight in the loop turn stop() cancels the fetcher. Before, the error won
    over the cancellation (Python 3.11's asyncio.wait_for), the fetcher backed
    off and fetched again every second, and stop() waited for it for good."""

    async def scenario():
        server, port, received = await silent_leader()
        fetcher = follower_of(port)
        task = None
        try:
            fetcher.start()
            await asyncio.wait_for(received.wait(), STOP_BOUND_S)
            (pending,) = fetcher._connection._pending.values()
            # What the connection's reader does when the leader goes, in the turn stop() cancels.
            pending.set_exception(ConnectionFailed("connection reset by peer"))
            task = fetcher._task
            stopping = asyncio.ensure_future(fetcher.stop())
            # asyncio.wait, not wait_for: it neither cancels stop() nor takes its
            # late return for success.
            done, _ = await asyncio.wait({stopping}, timeout=STOP_BOUND_S)
            assert stopping in done and task.done(), "stop() still waits for the fetcher"
        finally:
            if task is not None and not task.done():
                task.cancel()  # it is backing off now: this cancellation reaches it
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_stop_ends_the_fetcher_even_if_an_await_swallows_the_cancellation():
    """Whatever await the cancellation meets (a library's, a future change's),
    stop() does not depend on it reaching the loop."""

    async def scenario():
        fetcher = follower_of(1)  # never connected: the fetch round is replaced below
        rounds = []

        async def round_that_swallows_cancellation(loop):
            rounds.append(loop.time())
            if len(rounds) > 1:
                await asyncio.sleep(10)  # a later round ends on a cancellation as it should
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass  # as wait_for on Python 3.11 may, when its awaitable finished in that turn
            return False

        fetcher._fetch_once = round_that_swallows_cancellation
        fetcher.start()
        while not rounds:
            await asyncio.sleep(0)
        task = fetcher._task
        stopping = asyncio.ensure_future(fetcher.stop())
        done, _ = await asyncio.wait({stopping}, timeout=STOP_BOUND_S)
        assert stopping in done and task.done(), "stop() still waits for the fetcher"
        assert len(rounds) == 1  # no backoff, no second round

    asyncio.run(scenario())

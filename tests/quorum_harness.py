"""A one-voter metadata quorum driven synchronously, for tests of controller commands.

It is the real stack (the on-disk Raft log, the Raft core and its asyncio
driver, the quorum controller) on a private event loop, with blocking methods
of the controller's names, so a test reads like a script: create, inspect the
image, close, reopen and see the log replayed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

from broker.controller_node.quorum_controller import QuorumController
from broker.controller_node.raft_driver import RaftDriver
from controller.raft.disk_log import DiskRaftLog
from controller.raft.node import RaftConfig
from controller.raft.quorum_state_store import QuorumStateStore
from controller.topic_commands import METADATA_TOPIC, ClusterDefaults

METADATA_DIR_NAME = f"{METADATA_TOPIC}-0"
NODE_ID = 1


class SingleVoterController:
    def __init__(
        self,
        root: Path,
        defaults: ClusterDefaults,
        *,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
        clock_ms: Callable[[], int] | None = None,
        snapshot_bytes_between: int = 20 << 20,
    ):
        self.loop = asyncio.new_event_loop()
        directory = Path(root) / METADATA_DIR_NAME
        kwargs = {} if clock_ms is None else {"clock_ms": clock_ms}
        self.raft_log = DiskRaftLog(directory, **kwargs)
        self.controller = QuorumController(
            self.raft_log, defaults, new_uuid=new_uuid, snapshot_bytes_between=snapshot_bytes_between, **kwargs
        )
        self.driver = RaftDriver(
            NODE_ID, {NODE_ID: None}, self.raft_log, QuorumStateStore(directory), RaftConfig(), "test-cluster", self.controller
        )
        self.controller.attach(self.driver)
        self._closed = False

        async def start():
            self.driver.start()
            if not await self.controller.wait_caught_up(10_000):
                raise RuntimeError("the one-voter quorum did not elect itself")

        self.run(start())

    def run(self, coroutine):
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, 30))

    @property
    def image(self):
        return self.controller.image

    @property
    def defaults(self):
        return self.controller.defaults

    def subscribe(self, listener) -> None:
        self.controller.subscribe(listener)

    def create_topics(self, specs, **kwargs):
        return self.run(self.controller.create_topics(specs, **kwargs))

    def create_partitions(self, specs, **kwargs):
        return self.run(self.controller.create_partitions(specs, **kwargs))

    def delete_topics(self, targets):
        return self.run(self.controller.delete_topics(targets))

    def alter_configs(self, changes, **kwargs):
        return self.run(self.controller.alter_configs(changes, **kwargs))

    def allocate_producer_ids(self, broker_id: int, block_size: int):
        return self.run(self.controller.allocate_producer_ids(broker_id, -1, block_size))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.run(self.driver.stop())
        self.controller.close()
        self.raft_log.close()
        self.loop.close()

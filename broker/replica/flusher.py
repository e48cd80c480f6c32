"""Group fsyncs: the flushes that produce requests wait for, many logs per worker pass.

With ``flush.messages`` reached (``log.flush.interval.messages=1`` makes every
batch durable before it is acknowledged) a produce used to fsync on the event
loop, one partition at a time, and every other request waited behind it. Here
an append that reached the threshold asks for a flush and its response waits
for it; a pass of eight worker threads syncs every log asked for since the last
pass, so
requests to many partitions share a pass (a group commit) and the loop keeps
serving meanwhile. Asks arriving during a pass go into the next one.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from storage.log import PartitionLog

log = logging.getLogger(__name__)

# Worker threads of a pass: one fsync waits for the device, several overlap there.
SYNC_THREADS = 8


class GroupFlusher:
    def __init__(self, on_failure):
        # Called with (log, OSError) when an fsync fails: nothing written there
        # may be acknowledged: the broker takes the log dir offline (or halts).
        self._on_failure = on_failure
        self._asked: dict[int, tuple[PartitionLog, list[asyncio.Future]]] = {}
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._executor = ThreadPoolExecutor(max_workers=SYNC_THREADS, thread_name_prefix="group flush")
        self.passes = 0
        self.logs_synced = 0

    def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group flusher")

    async def stop(self) -> None:
        """Finish the flushes asked for (their requests are still waiting), then stop.
        Never cancelled mid-pass: its fsyncs would go on with nobody to finish them."""
        if self._task is None:
            return
        self._stopping = True
        self._wakeup.set()
        await self._task
        self._executor.shutdown(wait=False)

    def flush(self, plog: PartitionLog) -> asyncio.Future:
        """A future done once everything appended to ``plog`` so far is durable."""
        future = asyncio.get_running_loop().create_future()
        entry = self._asked.get(id(plog))
        if entry is None:
            self._asked[id(plog)] = (plog, [future])
        else:
            entry[1].append(future)
        if self._wakeup is not None:
            self._wakeup.set()
        return future

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._asked:
                await self._pass()
            if self._stopping:
                return

    async def _pass(self) -> None:
        asked, self._asked = self._asked, {}
        pending = []
        for plog, futures in asked.values():
            try:
                pending.append((plog, plog.begin_flush(), futures))
            except OSError as exc:
                self._failed(plog, exc, futures)
        syncing = [(plog, flush) for plog, flush, _ in pending if flush is not None]
        failures: dict[int, OSError] = {}
        if syncing:
            # Split over the workers: fsyncs of different files overlap in the device.
            loop = asyncio.get_running_loop()
            shares = [syncing[i :: SYNC_THREADS] for i in range(min(SYNC_THREADS, len(syncing)))]
            for share_failures in await asyncio.gather(
                *(loop.run_in_executor(self._executor, _sync_all, share) for share in shares)
            ):
                failures.update(share_failures)
        self.passes += 1
        self.logs_synced += len(syncing)
        for plog, flush, futures in pending:
            error = failures.get(id(plog))
            if error is not None:
                self._failed(plog, error, futures)
                continue
            if flush is not None:
                plog.end_flush(flush)
            for future in futures:
                if not future.done():
                    future.set_result(None)

    def _failed(self, plog: PartitionLog, exc: OSError, futures: list[asyncio.Future]) -> None:
        for future in futures:
            if not future.done():
                future.set_exception(exc)
        self._on_failure(plog, exc)


def _sync_all(syncing) -> dict[int, OSError]:
    """On the worker thread: every log's fsyncs; the failures by log."""
    failures = {}
    for plog, flush in syncing:
        try:
            flush.sync()
        except OSError as exc:
            failures[id(plog)] = exc
    return failures

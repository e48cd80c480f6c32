"""What it costs to hand a produce request's bytes to another process and get a small answer back.

docs/SCALING.md weighs designs where the process that reads a request is not the
one owning its partition: the request crosses to another process and its answer
crosses back. This measures that crossing alone, with no broker:

- ``unix``:   a Unix stream socket pair; a 16-byte header and the payload in one
              ``writev``, a 16-byte answer.
- ``pipe``:   two pipes (sized 1 MiB where the kernel allows), otherwise the same.
- ``shm``:    a ring of slots in ``multiprocessing.shared_memory``: the sender copies
              the payload into a slot and rings an eventfd doorbell; the receiver
              reads it in place, writes its answer beside the slots and rings the
              other eventfd. No futex, no spinning.
- ``thread``: for scale, inside one process: an asyncio loop (uvloop when installed,
              as the broker) passes the payload by reference to a second thread's
              loop with ``call_soon_threadsafe``; the answer comes back the same way.
- ``memcpy``: a reference, not a hand-off: one copy of the payload in Python, what
              the ``shm`` sender pays on top of its doorbell.

Both sides use non-blocking descriptors and ``poll`` with a deadline when there
is nothing to read, as an event loop would. ``--windows`` sets the requests in
flight (1: a wake-up per round trip on each side; 8: pipelined, as a busy
listener). The receiver answers each request's sequence number, length, first
and last byte, and the sender checks every answer.

Per cell (transport, size, window): round trips per second and each side's CPU
(``getrusage(RUSAGE_THREAD)``, user + system) per hand-off and per GB of payload,
the median of ``--rounds`` runs ([min-max] where it matters); rounds alternate
the transports (A, B, C, D, A, B, C, D ...).

    python benchmarks/handoff.py                       # 1 KiB, 16 KiB, 1 MiB; windows 1 and 8
    python benchmarks/handoff.py --quick               # a smoke run of a few seconds
    python benchmarks/handoff.py --sizes 16384 --windows 1 --seconds 2 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import multiprocessing
import os
import resource
import select
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing import shared_memory

# length, flags, sequence number
HEADER = struct.Struct("<IIQ")
# sequence number, length seen, first byte, last byte (padded to 16 bytes)
ANSWER = struct.Struct("<QIBB2x")
START_FLAG = 1  # the receiver starts its CPU clock when it sees this request
STOP_FLAG = 2  # the receiver stops, reports its CPU time and exits
RESULT = struct.Struct("<dQ")  # receiver CPU seconds, requests answered in the timed part

TRANSPORTS = ("unix", "pipe", "shm", "thread", "memcpy")
DEFAULT_SIZES = (1024, 16 * 1024, 1 << 20)
DEFAULT_WINDOWS = (1, 8)
PIPE_BYTES = 1 << 20  # F_SETPIPE_SZ; the kernel's pipe-max-size is 1 MiB by default
WARM_UP_ROUND_TRIPS = 16
CELL_TIMEOUT_S = 60.0  # a cell that has not finished by then failed
CHILD_JOIN_TIMEOUT_S = 10.0


def thread_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


@dataclass
class CellResult:
    transport: str
    size_bytes: int
    window: int
    round_trips: int
    wall_s: float
    sender_cpu_s: float
    receiver_cpu_s: float

    @property
    def round_trips_per_s(self) -> float:
        return self.round_trips / self.wall_s

    def cpu_us_per_handoff(self, side: str) -> float:
        return self._cpu(side) / self.round_trips * 1e6

    def cpu_s_per_gb(self, side: str) -> float:
        return self._cpu(side) / (self.round_trips * self.size_bytes / 1e9)

    def _cpu(self, side: str) -> float:
        return {"sender": self.sender_cpu_s, "receiver": self.receiver_cpu_s}.get(
            side, self.sender_cpu_s + self.receiver_cpu_s
        )


class Deadline:
    def __init__(self, seconds: float):
        self.at = time.monotonic() + seconds

    def remaining_ms(self) -> int:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("hand-off cell ran past its deadline")
        return max(1, int(left * 1000))


def _wait(poller: select.poll, deadline: Deadline) -> None:
    if not poller.poll(deadline.remaining_ms()):
        deadline.remaining_ms()  # raises once the deadline has passed


def _poller(fd: int, events: int) -> select.poll:
    poller = select.poll()
    poller.register(fd, events)
    return poller


def _write_all(fd: int, buffers: list, poller: select.poll, deadline: Deadline) -> None:
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        try:
            written = os.writev(fd, views)
        except BlockingIOError:
            _wait(poller, deadline)
            continue
        while written and views:
            if written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][written:]
                written = 0


def _read_into(fd: int, views: list[memoryview], poller: select.poll, deadline: Deadline) -> None:
    """Fill every view, in order, from a non-blocking stream descriptor."""
    views = [v for v in views if len(v)]
    while views:
        try:
            got = os.readv(fd, views)
        except BlockingIOError:
            _wait(poller, deadline)
            continue
        if got == 0:
            raise EOFError("the other side closed")
        while got and views:
            if got >= len(views[0]):
                got -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][got:]
                got = 0


# The sender's side, shared by every transport: a window of requests in flight,
# each answer checked, a clock around the timed part.


class _Channel:
    """One transport's two ends as the sender sees them (requests out, answers in)."""

    def send(self, seq: int, flags: int, payload: bytearray) -> None:
        raise NotImplementedError

    def answer(self, seq: int) -> tuple[int, int, int, int]:
        raise NotImplementedError


def _payloads(size: int, window: int) -> list[bytearray]:
    # One buffer per slot: a buffer in flight is not touched until its answer came back.
    return [bytearray(b"\xa5" * size) for _ in range(window)]


def _mark(payload: bytearray, seq: int) -> None:
    payload[0] = seq & 0xFF
    payload[-1] = (seq >> 8) & 0xFF


def _check(answer: tuple[int, int, int, int], seq: int, size: int) -> None:
    expected = (seq, size, seq & 0xFF, (seq >> 8) & 0xFF)
    if answer != expected:
        raise AssertionError(f"answer {answer} to request {seq}, expected {expected}")


def _drive(channel: _Channel, size: int, window: int, seconds: float, max_round_trips: int) -> tuple[int, float, float]:
    """Warm up, then keep ``window`` requests in flight for ``seconds`` (or
    ``max_round_trips``); returns (round trips, wall seconds, sender CPU seconds)."""
    payloads = _payloads(size, window)
    seq = 0

    def exchange(count: int, first_flags: int) -> None:
        nonlocal seq
        in_flight: list[int] = []
        for index in range(count):
            if len(in_flight) == window:
                oldest = in_flight.pop(0)
                _check(channel.answer(oldest), oldest, size)
            payload = payloads[seq % window]
            _mark(payload, seq)
            channel.send(seq, first_flags if index == 0 else 0, payload)
            in_flight.append(seq)
            seq += 1
        for pending in in_flight:
            _check(channel.answer(pending), pending, size)

    exchange(WARM_UP_ROUND_TRIPS, 0)
    cpu_start = thread_cpu_s()
    wall_start = time.perf_counter()
    timed = 0
    first = True
    # Batches of one window keep the clock check off the per-request path.
    while timed < max_round_trips and (first or time.perf_counter() - wall_start < seconds):
        count = min(window * 16, max_round_trips - timed)
        exchange(count, START_FLAG if first else 0)
        first = False
        timed += count
    wall_s = time.perf_counter() - wall_start
    cpu_s = thread_cpu_s() - cpu_start
    return timed, wall_s, cpu_s


# The receiver's side: a loop over requests, each answered.


def _serve(next_request: Callable[[], tuple[int, int, memoryview]], answer: Callable[[int, bytes], None]) -> tuple[float, int]:
    cpu_start = 0.0
    answered = 0
    while True:
        seq, flags, payload = next_request()
        if flags & STOP_FLAG:
            return (thread_cpu_s() - cpu_start if cpu_start else 0.0), answered
        if flags & START_FLAG:
            cpu_start = thread_cpu_s()
            answered = 0
        answer(seq, ANSWER.pack(seq, len(payload), payload[0], payload[-1]))
        answered += 1


# Streams: a Unix socket pair or two pipes.


class _StreamSender(_Channel):
    def __init__(self, request_fd: int, answer_fd: int, window: int, deadline: Deadline):
        self.request_fd, self.answer_fd = request_fd, answer_fd
        self.out_poll = _poller(request_fd, select.POLLOUT)
        self.in_poll = _poller(answer_fd, select.POLLIN)
        self.deadline = deadline
        self.buffer = bytearray(ANSWER.size * window)
        self.ready: list[tuple[int, int, int, int]] = []
        self.header = bytearray(HEADER.size)

    def send(self, seq: int, flags: int, payload: bytearray) -> None:
        HEADER.pack_into(self.header, 0, len(payload), flags, seq)
        _write_all(self.request_fd, [self.header, payload], self.out_poll, self.deadline)

    def answer(self, seq: int) -> tuple[int, int, int, int]:
        # Answers are small: take all that are there in one read.
        while not self.ready:
            try:
                got = os.readv(self.answer_fd, [self.buffer])
            except BlockingIOError:
                _wait(self.in_poll, self.deadline)
                continue
            if got == 0:
                raise EOFError("the receiver closed")
            whole = got - got % ANSWER.size
            if whole != got:
                _read_into(self.answer_fd, [memoryview(self.buffer)[got:whole + ANSWER.size]], self.in_poll, self.deadline)
                whole += ANSWER.size
            self.ready = [ANSWER.unpack_from(self.buffer, offset) for offset in range(0, whole, ANSWER.size)]
        return self.ready.pop(0)

    def stop(self) -> None:
        HEADER.pack_into(self.header, 0, 0, STOP_FLAG, 0)
        _write_all(self.request_fd, [self.header], self.out_poll, self.deadline)


def _stream_receiver(request_fd: int, answer_fd: int, size: int, result_fd: int, timeout_s: float) -> None:
    deadline = Deadline(timeout_s)
    in_poll = _poller(request_fd, select.POLLIN)
    out_poll = _poller(answer_fd, select.POLLOUT)
    header = bytearray(HEADER.size)
    body = bytearray(size)
    header_view, body_view = memoryview(header), memoryview(body)

    def next_request() -> tuple[int, int, memoryview]:
        # Every request of a cell has the same size, so one readv takes a whole
        # request (header and body) when the kernel holds it, as a reader with a
        # large buffer would; a stop request is a header alone.
        while True:
            try:
                got = os.readv(request_fd, [header_view, body_view])
                break
            except BlockingIOError:
                _wait(in_poll, deadline)
        if got == 0:
            raise EOFError("the sender closed")
        if got < HEADER.size:
            _read_into(request_fd, [header_view[got:]], in_poll, deadline)
            got = HEADER.size
        length, flags, seq = HEADER.unpack_from(header)
        _read_into(request_fd, [body_view[got - HEADER.size:length]], in_poll, deadline)
        return seq, flags, body_view[:length]

    def answer(_seq: int, data: bytes) -> None:
        _write_all(answer_fd, [data], out_poll, deadline)

    cpu_s, answered = _serve(next_request, answer)
    os.write(result_fd, RESULT.pack(cpu_s, answered))


def _stream_pair(kind: str) -> tuple[int, int, int, int]:
    """(request write end, request read end, answer write end, answer read end)."""
    if kind == "unix":
        requests = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        answers = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # The socket objects would close their descriptors when collected: keep the descriptors only.
        fds = (requests[0].detach(), requests[1].detach(), answers[1].detach(), answers[0].detach())
    else:
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        fds = (request_write, request_read, answer_write, answer_read)
        for fd in (request_write, answer_write):
            try:
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:
                pass  # a lower pipe-max-size: keep the default 64 KiB
    for fd in fds:
        os.set_blocking(fd, False)
    return fds


# Shared memory: a ring of ``window`` slots and two eventfd doorbells.


class _Ring:
    """Slot ``i`` holds a header and up to ``size`` payload bytes; the answers of
    all slots sit after the slots."""

    def __init__(self, shm: shared_memory.SharedMemory, size: int, window: int):
        self.buf = shm.buf
        self.slot_bytes = HEADER.size + size
        self.window = window
        self.answers_at = self.slot_bytes * window

    def slot(self, seq: int) -> int:
        return (seq % self.window) * self.slot_bytes

    def answer_at(self, seq: int) -> int:
        return self.answers_at + (seq % self.window) * ANSWER.size


def _ring_bytes(size: int, window: int) -> int:
    return (HEADER.size + size) * window + ANSWER.size * window


class _ShmSender(_Channel):
    def __init__(self, ring: _Ring, request_bell: int, answer_bell: int, deadline: Deadline):
        self.ring = ring
        self.request_bell, self.answer_bell = request_bell, answer_bell
        self.in_poll = _poller(answer_bell, select.POLLIN)
        self.deadline = deadline
        self.answered_upto = 0  # answers the doorbell has announced, counted from the first request

    def send(self, seq: int, flags: int, payload: bytearray) -> None:
        at = self.ring.slot(seq)
        HEADER.pack_into(self.ring.buf, at, len(payload), flags, seq)
        self.ring.buf[at + HEADER.size:at + HEADER.size + len(payload)] = payload
        # The write() of the doorbell is a system call: the slot's bytes are in
        # memory before the receiver can see the bell.
        os.eventfd_write(self.request_bell, 1)

    def answer(self, seq: int) -> tuple[int, int, int, int]:
        while self.answered_upto <= seq:
            try:
                self.answered_upto += os.eventfd_read(self.answer_bell)
            except BlockingIOError:
                _wait(self.in_poll, self.deadline)
        return ANSWER.unpack_from(self.ring.buf, self.ring.answer_at(seq))

    def stop(self, seq: int) -> None:
        HEADER.pack_into(self.ring.buf, self.ring.slot(seq), 0, STOP_FLAG, seq)
        os.eventfd_write(self.request_bell, 1)


def _shm_receiver(ring: _Ring, request_bell: int, answer_bell: int, result_fd: int, timeout_s: float) -> None:
    deadline = Deadline(timeout_s)
    in_poll = _poller(request_bell, select.POLLIN)
    announced = 0  # requests the doorbell has announced and not yet read
    next_seq = 0

    def next_request() -> tuple[int, int, memoryview]:
        nonlocal announced, next_seq
        while not announced:
            try:
                announced = os.eventfd_read(request_bell)
            except BlockingIOError:
                _wait(in_poll, deadline)
        announced -= 1
        at = ring.slot(next_seq)
        length, flags, seq = HEADER.unpack_from(ring.buf, at)
        next_seq += 1
        return seq, flags, ring.buf[at + HEADER.size:at + HEADER.size + length]

    def answer(seq: int, data: bytes) -> None:
        ring.buf[ring.answer_at(seq):ring.answer_at(seq) + ANSWER.size] = data
        os.eventfd_write(answer_bell, 1)

    cpu_s, answered = _serve(next_request, answer)
    os.write(result_fd, RESULT.pack(cpu_s, answered))


# A cell between two processes.


def _run_process_cell(transport: str, size: int, window: int, seconds: float, max_round_trips: int) -> CellResult:
    context = multiprocessing.get_context("fork")
    result_read, result_write = os.pipe()
    shm = None
    close_later: list[int] = [result_read, result_write]
    deadline = Deadline(CELL_TIMEOUT_S)
    try:
        if transport == "shm":
            shm = shared_memory.SharedMemory(create=True, size=_ring_bytes(size, window))
            ring = _Ring(shm, size, window)
            request_bell = os.eventfd(0, os.EFD_NONBLOCK)
            answer_bell = os.eventfd(0, os.EFD_NONBLOCK)
            close_later += [request_bell, answer_bell]
            child = context.Process(
                target=_shm_receiver, args=(ring, request_bell, answer_bell, result_write, CELL_TIMEOUT_S), daemon=True
            )
            channel: _Channel = _ShmSender(ring, request_bell, answer_bell, deadline)
        else:
            request_write, request_read, answer_write, answer_read = _stream_pair(transport)
            close_later += [request_write, request_read, answer_write, answer_read]
            child = context.Process(
                target=_stream_receiver,
                args=(request_read, answer_write, size, result_write, CELL_TIMEOUT_S),
                daemon=True,
            )
            channel = _StreamSender(request_write, answer_read, window, deadline)
        child.start()
        try:
            round_trips, wall_s, sender_cpu_s = _drive(channel, size, window, seconds, max_round_trips)
            if isinstance(channel, _ShmSender):
                channel.stop(WARM_UP_ROUND_TRIPS + round_trips)
            else:
                channel.stop()
            report = bytearray(RESULT.size)
            os.set_blocking(result_read, False)
            _read_into(result_read, [memoryview(report)], _poller(result_read, select.POLLIN), deadline)
            receiver_cpu_s, answered = RESULT.unpack(report)
            if answered != round_trips:
                raise AssertionError(f"receiver answered {answered} timed requests, sender counted {round_trips}")
        finally:
            child.join(CHILD_JOIN_TIMEOUT_S)
            if child.is_alive():
                child.kill()
                child.join(CHILD_JOIN_TIMEOUT_S)
        if child.exitcode != 0:
            raise RuntimeError(f"{transport} receiver exited with {child.exitcode}")
        return CellResult(transport, size, window, round_trips, wall_s, sender_cpu_s, receiver_cpu_s)
    finally:
        if shm is not None:
            shm.close()
            shm.unlink()
        for fd in close_later:
            os.close(fd)


# A cell inside one process: two asyncio loops in two threads.


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def _run_thread_cell(size: int, window: int, seconds: float, max_round_trips: int) -> CellResult:
    owner_loop = _new_loop()
    owner_ready = threading.Event()
    owner_cpu = {"start": 0.0, "total": 0.0, "answered": 0}

    def owner_thread() -> None:
        asyncio.set_event_loop(owner_loop)
        owner_loop.call_soon(owner_ready.set)
        owner_loop.run_forever()

    thread = threading.Thread(target=owner_thread, name="handoff owner", daemon=True)
    thread.start()
    if not owner_ready.wait(CHILD_JOIN_TIMEOUT_S):
        raise TimeoutError("the owner thread's loop did not start")
    acceptor_loop = _new_loop()

    def handle(seq: int, flags: int, payload: bytearray, future: asyncio.Future) -> None:
        # Runs on the owner's loop.
        if flags & STOP_FLAG:
            owner_cpu["total"] = thread_cpu_s() - owner_cpu["start"]
            acceptor_loop.call_soon_threadsafe(future.set_result, None)
            return
        if flags & START_FLAG:
            owner_cpu["start"] = thread_cpu_s()
            owner_cpu["answered"] = 0
        answer = (seq, len(payload), payload[0], payload[-1])
        owner_cpu["answered"] += 1
        acceptor_loop.call_soon_threadsafe(future.set_result, answer)

    class ThreadChannel:
        async def round_trips(self, count: int, first_flags: int, seq: int, payloads: list[bytearray]) -> int:
            in_flight: list[tuple[int, asyncio.Future]] = []
            for index in range(count):
                if len(in_flight) == window:
                    oldest, future = in_flight.pop(0)
                    _check(await future, oldest, size)
                payload = payloads[seq % window]
                _mark(payload, seq)
                future = acceptor_loop.create_future()
                owner_loop.call_soon_threadsafe(handle, seq, first_flags if index == 0 else 0, payload, future)
                in_flight.append((seq, future))
                seq += 1
            for pending, future in in_flight:
                _check(await future, pending, size)
            return seq

    async def drive() -> tuple[int, float, float]:
        channel = ThreadChannel()
        payloads = _payloads(size, window)
        seq = await channel.round_trips(WARM_UP_ROUND_TRIPS, 0, 0, payloads)
        cpu_start = thread_cpu_s()
        wall_start = time.perf_counter()
        timed = 0
        first = True
        while timed < max_round_trips and (first or time.perf_counter() - wall_start < seconds):
            count = min(window * 16, max_round_trips - timed)
            seq = await channel.round_trips(count, START_FLAG if first else 0, seq, payloads)
            first = False
            timed += count
        wall_s = time.perf_counter() - wall_start
        cpu_s = thread_cpu_s() - cpu_start
        stopped = acceptor_loop.create_future()
        owner_loop.call_soon_threadsafe(handle, seq, STOP_FLAG, payloads[0], stopped)
        await stopped
        return timed, wall_s, cpu_s

    try:
        round_trips, wall_s, sender_cpu_s = acceptor_loop.run_until_complete(
            asyncio.wait_for(drive(), CELL_TIMEOUT_S)
        )
    finally:
        owner_loop.call_soon_threadsafe(owner_loop.stop)
        thread.join(CHILD_JOIN_TIMEOUT_S)
        acceptor_loop.close()
        if not thread.is_alive():
            owner_loop.close()
    if owner_cpu["answered"] != round_trips:
        raise AssertionError(f"owner answered {owner_cpu['answered']} timed requests, sender counted {round_trips}")
    return CellResult("thread", size, window, round_trips, wall_s, sender_cpu_s, owner_cpu["total"])


def _run_memcpy_cell(size: int, seconds: float, max_round_trips: int) -> CellResult:
    source = bytearray(b"\xa5" * size)
    target = bytearray(size)
    target[:] = source  # touch the target's pages before the clock starts
    cpu_start = thread_cpu_s()
    wall_start = time.perf_counter()
    copies = 0
    while copies < max_round_trips and (copies == 0 or time.perf_counter() - wall_start < seconds):
        for _ in range(64):
            target[:] = source
        copies += 64
    return CellResult("memcpy", size, 1, copies, time.perf_counter() - wall_start, thread_cpu_s() - cpu_start, 0.0)


def run_cell(transport: str, size: int, window: int, seconds: float, max_round_trips: int = 10**9) -> CellResult:
    if size < 2:
        raise ValueError("a request carries at least 2 bytes (its first and last are checked)")
    if transport == "thread":
        return _run_thread_cell(size, window, seconds, max_round_trips)
    if transport == "memcpy":
        return _run_memcpy_cell(size, seconds, max_round_trips)
    if transport in ("unix", "pipe", "shm"):
        return _run_process_cell(transport, size, window, seconds, max_round_trips)
    raise ValueError(f"unknown transport {transport!r}")


# The table.


def _size_label(size: int) -> str:
    if size >= 1 << 20 and size % (1 << 20) == 0:
        return f"{size >> 20} MiB"
    if size >= 1024 and size % 1024 == 0:
        return f"{size >> 10} KiB"
    return f"{size} B"


def _spread(values: list[float], fmt: str) -> str:
    middle = format(statistics.median(values), fmt)
    if len(values) < 2:
        return middle
    return f"{middle} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def table(results: list[CellResult], markdown: bool = False) -> str:
    header = [
        "transport", "size", "window", "n", "round trips/s", "MB/s",
        "CPU us/hand-off sender", "receiver", "total", "CPU s/GB sender", "receiver", "total",
    ]
    keys: list[tuple[str, int, int]] = []
    for r in results:
        key = (r.transport, r.size_bytes, r.window)
        if key not in keys:
            keys.append(key)
    keys.sort(key=lambda k: (k[1], k[2], TRANSPORTS.index(k[0])))
    rows = []
    for key in keys:
        cell = [r for r in results if (r.transport, r.size_bytes, r.window) == key]
        median = statistics.median
        rows.append([
            key[0], _size_label(key[1]), str(key[2]) if key[0] != "memcpy" else "-", str(len(cell)),
            _spread([r.round_trips_per_s for r in cell], ",.0f"),
            f"{median(r.round_trips_per_s * r.size_bytes / 1e6 for r in cell):,.0f}",
            f"{median(r.cpu_us_per_handoff('sender') for r in cell):.2f}",
            f"{median(r.cpu_us_per_handoff('receiver') for r in cell):.2f}",
            _spread([r.cpu_us_per_handoff('total') for r in cell], ".2f"),
            f"{median(r.cpu_s_per_gb('sender') for r in cell):.2f}",
            f"{median(r.cpu_s_per_gb('receiver') for r in cell):.2f}",
            _spread([r.cpu_s_per_gb('total') for r in cell], ".2f"),
        ])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---"] * 3 + ["---:"] * 9) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(value.ljust(widths[i]) if i < 3 else value.rjust(widths[i]) for i, value in enumerate(row))
        for row in [header, *rows]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="payload bytes, comma-separated")
    parser.add_argument("--windows", default=",".join(map(str, DEFAULT_WINDOWS)), help="requests in flight")
    parser.add_argument("--transports", default=",".join(TRANSPORTS))
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one short round: a smoke run")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", help="write every run's figures to this file")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    windows = [int(w) for w in args.windows.split(",")]
    transports = [t for t in args.transports.split(",") if t]
    unknown = set(transports) - set(TRANSPORTS)
    if unknown:
        parser.error(f"unknown transports: {', '.join(sorted(unknown))}")
    seconds, rounds = (0.2, 1) if args.quick else (args.seconds, args.rounds)

    results: list[CellResult] = []
    started = time.monotonic()
    for round_index in range(rounds):
        for size in sizes:
            for window in windows:
                for transport in transports:
                    if transport == "memcpy" and window != windows[0]:
                        continue  # a copy has no window
                    results.append(run_cell(transport, size, window, seconds))
        print(f"round {round_index + 1}/{rounds} done after {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(
        f"hand-off of a request and a {ANSWER.size}-byte answer between two processes (and two threads); "
        f"{rounds} round(s) of {seconds:g} s per cell; CPU is user + system of each side's thread; "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    print(table(results, markdown=args.markdown))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) for r in results], out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

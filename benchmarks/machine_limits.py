"""The machine's own limits for moving bytes, with no broker: a bare TCP sink, the same sink
appending to a file, and a bare file append. benchmarks/suite.py shows them under the broker
rows as the most any broker could reach. Bounded by deadlines like workloads.py.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import struct
import tempfile
import time

from workloads import ADMIN_TIMEOUT_S, PROCESS_JOIN_TIMEOUT_S, check_deadline

WRITE_CHUNK_BYTES = 1 << 20


class _SinkProtocol(asyncio.BufferedProtocol):
    """Counts (and optionally appends to a file) the bytes of one connection, reading
    into one reused buffer: the least a Python server can do with incoming bytes."""

    def __init__(self, done: asyncio.Future, file_descriptor: int | None):
        self._buffer = memoryview(bytearray(WRITE_CHUNK_BYTES))
        self._file_descriptor = file_descriptor
        self._done = done
        self._transport: asyncio.Transport | None = None
        self.total_bytes = 0
        self.cpu_start_s = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.cpu_start_s = time.process_time()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.total_bytes += nbytes
        if self._file_descriptor is not None:
            os.write(self._file_descriptor, self._buffer[:nbytes])

    def eof_received(self) -> bool:
        cpu_s = time.process_time() - self.cpu_start_s
        self._transport.write(struct.pack(">qd", self.total_bytes, cpu_s))
        self._transport.close()
        if not self._done.done():
            self._done.set_result(None)
        return True


def _tcp_sink_process(port_pipe, deadline_s: float, file_dir: str | None) -> None:
    """A server (uvloop when installed, as the broker) that counts the bytes of one
    connection and answers at EOF with the count and its own CPU seconds."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def serve(file_descriptor: int | None) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        server = await loop.create_server(lambda: _SinkProtocol(done, file_descriptor), "127.0.0.1", 0)
        port_pipe.send(server.sockets[0].getsockname()[1])
        async with server:
            await asyncio.wait_for(done, deadline_s)
            await asyncio.sleep(0.05)  # let the answer leave before the loop closes

    if file_dir is None:
        asyncio.run(serve(None))
        return
    with tempfile.NamedTemporaryFile(dir=file_dir, prefix="sink-limit-") as file:
        asyncio.run(serve(file.fileno()))


def tcp_sink_limit(total_bytes: int, deadline_s: float, file_dir: str | None = None) -> dict:
    """Send total_bytes in 1 MB writes over 127.0.0.1 to a server in another process,
    which also appends them to a file in file_dir when given; its CPU time is reported."""
    context = multiprocessing.get_context("spawn")
    receive_end, send_end = context.Pipe(duplex=False)
    server = context.Process(target=_tcp_sink_process, args=(send_end, deadline_s, file_dir), daemon=True)
    server.start()
    try:
        if not receive_end.poll(ADMIN_TIMEOUT_S):
            raise TimeoutError("TCP sink did not start")
        port = receive_end.recv()
        chunk = b"x" * WRITE_CHUNK_BYTES
        answer_bytes = struct.calcsize(">qd")
        with socket.create_connection(("127.0.0.1", port), timeout=deadline_s) as sock:
            start = time.perf_counter()
            sent = 0
            while sent < total_bytes:
                sock.sendall(chunk[: min(WRITE_CHUNK_BYTES, total_bytes - sent)])
                sent += min(WRITE_CHUNK_BYTES, total_bytes - sent)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while len(answer) < answer_bytes:
                part = sock.recv(answer_bytes - len(answer))
                if not part:
                    raise ConnectionError("TCP sink closed without an answer")
                answer += part
            seconds = time.perf_counter() - start
        received, cpu_s = struct.unpack(">qd", answer)
        if received != total_bytes:
            raise RuntimeError(f"TCP sink counted {received} of {total_bytes} bytes")
    finally:
        server.join(PROCESS_JOIN_TIMEOUT_S)
        if server.is_alive():
            server.kill()
            server.join(PROCESS_JOIN_TIMEOUT_S)
    return {"payload_bytes": total_bytes, "seconds": seconds, "cpu_seconds": cpu_s}


def file_append_limit(directory: str, total_bytes: int, fsync: bool, deadline_s: float) -> dict:
    """Append total_bytes in 1 MB writes to a new file in directory, optionally fsync at the end."""
    chunk = b"x" * WRITE_CHUNK_BYTES
    deadline = time.monotonic() + deadline_s
    with tempfile.NamedTemporaryFile(dir=directory, prefix="append-limit-") as file:
        descriptor = file.fileno()
        start = time.perf_counter()
        cpu_start_s = time.process_time()
        written = 0
        while written < total_bytes:
            written += os.write(descriptor, chunk[: min(WRITE_CHUNK_BYTES, total_bytes - written)])
            if written % (64 * WRITE_CHUNK_BYTES) == 0:
                check_deadline(deadline, "file append")
        if fsync:
            os.fsync(descriptor)
        seconds = time.perf_counter() - start
        cpu_s = time.process_time() - cpu_start_s
    return {"payload_bytes": total_bytes, "seconds": seconds, "cpu_seconds": cpu_s}

"""broker.net.node_client._ResponseReader: response frames cut out of whatever pieces
the socket delivers, large ones read into buffers of their own (no copies)."""

from __future__ import annotations

import asyncio
import random
import struct

from broker.net.node_client import SMALL_FRAME_BYTES, ConnectionFailed, _ResponseReader


class FrameState:
    """Stands for ClientConnectionState: a frame is its correlation id and a body."""

    def frame_size(self, prefix) -> int:
        return struct.unpack(">i", prefix)[0]

    def receive_frame(self, frame):
        return struct.unpack_from(">i", frame, 0)[0], frame


def _frame(correlation_id: int, size: int) -> bytes:
    body = struct.pack(">i", correlation_id) + bytes((correlation_id + i) % 251 for i in range(size - 4))
    return struct.pack(">i", len(body)) + body


def _feed(reader: _ResponseReader, data: bytes, pieces: list[int]) -> None:
    """Give ``data`` to the reader as a transport would, in pieces of at most these sizes."""
    view = memoryview(data)
    index = 0
    while view:
        buffer = reader.get_buffer(-1)
        assert len(buffer) > 0
        count = min(len(buffer), len(view), pieces[index % len(pieces)])
        buffer[:count] = view[:count]
        buffer.release()
        reader.buffer_updated(count)
        view = view[count:]
        index += 1


def test_frames_of_every_size_come_out_whole_however_the_bytes_arrive():
    async def scenario():
        sizes = [4, 10, 1000, SMALL_FRAME_BYTES - 1, SMALL_FRAME_BYTES, SMALL_FRAME_BYTES + 1, 300_000, 8, 2_000_000, 17]
        frames = [_frame(i, size) for i, size in enumerate(sizes)]
        rng = random.Random(7)
        for pieces in ([1], [3], [4096], [65536], [1 << 22], [rng.randint(1, 200_000) for _ in range(50)]):
            loop = asyncio.get_running_loop()
            futures = [loop.create_future() for _ in sizes]
            pending = dict(enumerate(futures))
            reader = _ResponseReader(FrameState(), pending, loop.create_future())
            if pieces == [1]:
                reader.take(b"".join(frames[:3]))  # what the stream held when the reader took over
                _feed(reader, b"".join(frames[3:]), [7919])
            else:
                _feed(reader, b"".join(frames), pieces)
            assert not reader.ended.done() and not pending
            for i, frame in enumerate(frames):
                got = futures[i].result()
                assert bytes(got) == frame[4:], (pieces[:3], i)
                # A large frame is the buffer the socket wrote to, handed on as it is.
                assert isinstance(got, bytearray if sizes[i] > SMALL_FRAME_BYTES else bytes)

    asyncio.run(scenario())


def test_the_end_of_the_connection_and_a_bad_frame_end_the_reader():
    async def scenario():
        loop = asyncio.get_running_loop()
        reader = _ResponseReader(FrameState(), {}, loop.create_future())
        reader.connection_lost(None)
        assert isinstance(reader.ended.result(), ConnectionFailed)

        class Refusing(FrameState):
            def frame_size(self, prefix) -> int:
                from protocol.exceptions import ProtocolError

                raise ProtocolError("negative response size")

        reader = _ResponseReader(Refusing(), {}, loop.create_future())
        _feed(reader, b"\xff\xff\xff\xff" + b"x" * 10, [100])
        assert "negative" in str(reader.ended.result())

    asyncio.run(scenario())

"""protocol.framing under fuzzing: FrameSplitter and decode_request.

* FrameSplitter yields the same frames whether the stream arrives whole, one
  byte at a time or in random chunks; negative sizes raise ProtocolError and
  sizes over the limit FrameTooLarge, without buffering the payload first.
* FrameReceiver (the socket reads into its buffers) yields the same frames as
  FrameSplitter for any sequence of read sizes, through its scratch buffer,
  its compaction and its chunked large frames, and fails the same way.
* decode_request raises only ProtocolError (UnsupportedVersionError is one)
  on random bytes and on truncated or corrupted real requests.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.exceptions import ProtocolError, UnsupportedVersionError
from protocol.framing import FrameReceiver, FrameSplitter, FrameTooLarge, decode_request, encode_request
from protocol.registry import APIS_BY_KEY, APIS_BY_NAME
from tests.property.strategies import values_for

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

payload_st = st.binary(min_size=0, max_size=300)


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def feed_in_chunks(splitter: FrameSplitter, stream: bytes, cuts: list[int]) -> list[bytes]:
    frames: list[bytes] = []
    previous = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(stream))) + [len(stream)]:
        frames += splitter.feed(stream[previous:cut])
        previous = cut
    return frames


# --------------------------------------------------------------------------- FrameSplitter


@SETTINGS
@given(payloads=st.lists(payload_st, max_size=8), data=st.data())
def test_splitter_same_frames_however_the_stream_is_cut(payloads, data):
    stream = b"".join(framed(p) for p in payloads)

    whole = FrameSplitter(1000)
    assert whole.feed(stream) == payloads
    assert whole.buffered_bytes == 0

    one_by_one = FrameSplitter(1000)
    frames: list[bytes] = []
    for i in range(len(stream)):
        frames += one_by_one.feed(stream[i : i + 1])
    assert frames == payloads
    assert one_by_one.buffered_bytes == 0

    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=max(len(stream), 1)), max_size=20), label="cuts")
    chunked = FrameSplitter(1000)
    assert feed_in_chunks(chunked, stream, cuts) == payloads
    assert chunked.buffered_bytes == 0


@SETTINGS
@given(payloads=st.lists(payload_st, min_size=1, max_size=5), cut=st.integers(min_value=1, max_value=10_000))
def test_splitter_keeps_an_incomplete_tail(payloads, cut):
    stream = b"".join(framed(p) for p in payloads)
    cut = cut % len(stream) or 1
    splitter = FrameSplitter(1000)
    first = splitter.feed(stream[:cut])
    # Only whole frames come out; what is left is buffered.
    assert first == payloads[: len(first)]
    assert splitter.buffered_bytes == cut - sum(4 + len(p) for p in first)
    assert first + splitter.feed(stream[cut:]) == payloads


def test_splitter_empty_and_zero_length_frames():
    splitter = FrameSplitter(10)
    assert splitter.feed(b"") == []
    assert splitter.feed(b"\x00\x00") == []
    assert splitter.buffered_bytes == 2
    assert splitter.feed(b"\x00\x00" + b"\x00\x00\x00\x00") == [b"", b""]
    assert splitter.buffered_bytes == 0


def test_splitter_accepts_bytearray_and_memoryview():
    stream = framed(b"abc") + framed(b"de")
    assert FrameSplitter(10).feed(bytearray(stream)) == [b"abc", b"de"]
    assert FrameSplitter(10).feed(memoryview(stream)) == [b"abc", b"de"]


def test_splitter_frames_are_independent_of_later_feeds():
    splitter = FrameSplitter(100)
    frames = splitter.feed(framed(b"hello") + b"\x00\x00")
    splitter.feed(b"\x00\x02xy")
    assert frames == [b"hello"]


@pytest.mark.parametrize("size", [-1, -2, -(2**31), -100])
def test_negative_size_is_a_protocol_error(size):
    splitter = FrameSplitter(1000)
    with pytest.raises(ProtocolError) as exc:
        splitter.feed(struct.pack(">i", size))
    assert not isinstance(exc.value, FrameTooLarge)
    # Also after good frames in the same feed, and byte by byte.
    with pytest.raises(ProtocolError):
        FrameSplitter(1000).feed(framed(b"ok") + struct.pack(">i", size))
    splitter = FrameSplitter(1000)
    with pytest.raises(ProtocolError):
        for byte in struct.pack(">i", size):
            splitter.feed(bytes([byte]))


@pytest.mark.parametrize("limit, size", [(0, 1), (10, 11), (1000, 1001), (1000, 2**31 - 1), (104857600, 104857601)])
def test_over_limit_size_is_frame_too_large(limit, size):
    splitter = FrameSplitter(limit)
    # The size prefix alone is enough: the broker must not wait for (or buffer) the payload.
    with pytest.raises(FrameTooLarge) as exc:
        splitter.feed(struct.pack(">i", size))
    assert isinstance(exc.value, ProtocolError)
    assert (exc.value.size, exc.value.limit) == (size, limit)


def test_frame_at_the_limit_is_accepted():
    assert FrameSplitter(5).feed(framed(b"12345")) == [b"12345"]
    assert FrameSplitter(0).feed(framed(b"")) == [b""]


@SETTINGS
@given(stream=st.binary(max_size=200), limit=st.integers(min_value=0, max_value=64))
def test_splitter_on_random_bytes_raises_only_protocol_errors(stream, limit):
    splitter = FrameSplitter(limit)
    try:
        for i in range(0, len(stream), 7):
            for frame in splitter.feed(stream[i : i + 7]):
                assert len(frame) <= limit
    except ProtocolError:
        pass


# --------------------------------------------------------------------------- FrameReceiver


class SmallFrameReceiver(FrameReceiver):
    # Tiny scratch and chunk sizes so short hypothesis streams reach every path:
    # frames complete in scratch, compaction, large frames over several chunks.
    FRAME_CHUNK_BYTES = 7

    def __init__(self, max_frame_bytes: int):
        super().__init__(max_frame_bytes, scratch_bytes=32)


def receive(receiver: FrameReceiver, stream: bytes, read_sizes: list[int]) -> list[bytes]:
    """Play a socket: each read fills at most the lent buffer and at most the next read size."""
    frames: list[bytes] = []
    position, reads = 0, 0
    while position < len(stream):
        buffer = receiver.get_buffer()
        assert len(buffer) > 0
        wanted = read_sizes[reads % len(read_sizes)] if read_sizes else len(stream)
        count = min(len(buffer), wanted, len(stream) - position)
        buffer[:count] = stream[position : position + count]
        position += count
        reads += 1
        frames += [bytes(frame) for frame in receiver.buffer_updated(count)]
    return frames


@settings(SETTINGS, max_examples=400)
@given(
    payloads=st.lists(st.binary(min_size=0, max_size=80), max_size=10),
    read_sizes=st.lists(st.integers(min_value=1, max_value=50), max_size=12),
    small=st.booleans(),
)
def test_receiver_yields_the_frames_of_the_splitter(payloads, read_sizes, small):
    stream = b"".join(framed(p) for p in payloads)
    receiver = SmallFrameReceiver(1000) if small else FrameReceiver(1000)
    assert receive(receiver, stream, read_sizes) == payloads
    assert receiver.buffered_bytes == 0


def test_receiver_large_frame_whose_received_part_spans_chunks():
    # 26 bytes of a 40-byte frame arrive in the scratch buffer; chunks hold 7.
    payload = bytes(range(40))
    assert receive(SmallFrameReceiver(1000), framed(payload), [30, 3]) == [payload]


def test_receiver_reads_a_large_frame_into_its_own_buffer():
    receiver = FrameReceiver(10 << 20, scratch_bytes=1024)
    payload = bytes(range(256)) * 4096  # 1 MiB
    head = framed(payload)[:100]
    buffer = receiver.get_buffer()
    buffer[: len(head)] = head
    assert receiver.buffer_updated(len(head)) == []
    # The next buffer is the frame's own, sized for exactly the rest of it.
    rest = receiver.get_buffer()
    assert len(rest) == len(payload) - 96
    rest[:] = payload[96:]
    [frame] = receiver.buffer_updated(len(rest))
    assert frame == payload
    # A later frame does not overwrite the one handed out.
    assert receive(receiver, framed(b"x" * 600), [1000]) == [b"x" * 600]
    assert frame == payload


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_receiver_negative_size_is_a_protocol_error(size):
    with pytest.raises(ProtocolError) as exc:
        receive(FrameReceiver(1000), framed(b"ok") + struct.pack(">i", size), [3])
    assert not isinstance(exc.value, FrameTooLarge)


def test_receiver_over_limit_size_is_frame_too_large_before_any_payload():
    receiver = FrameReceiver(104857600)
    with pytest.raises(FrameTooLarge) as exc:
        receive(receiver, struct.pack(">i", 104857601), [])
    assert (exc.value.size, exc.value.limit) == (104857601, 104857600)


def test_receiver_allocates_a_large_frame_as_its_bytes_arrive():
    receiver = FrameReceiver(1 << 30, scratch_bytes=1024)
    receive(receiver, struct.pack(">i", 1 << 30) + b"abc", [])
    # A size prefix asking for 1 GiB reserves one chunk, not the gigabyte.
    assert len(receiver.get_buffer()) == FrameReceiver.FRAME_CHUNK_BYTES - 3


# --------------------------------------------------------------------------- decode_request

# Real requests for a spread of APIs, across their versions, built from the declarations.
_SAMPLE_KEYS = [0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18, 19, 20, 22, 32, 36, 60]


def _request_cases(seed: int = 7) -> list[tuple]:
    """(api, version, flexible, value strategy): lowest, highest and one random version per API."""
    rng = random.Random(seed)
    cases = []
    for key in _SAMPLE_KEYS:
        api = APIS_BY_KEY.get(key)
        if api is None:
            continue
        high = api.versions.high if api.versions.high is not None else api.versions.low
        for version in sorted({api.versions.low, high, rng.randint(api.versions.low, high)}):
            flexible = version in api.flexible
            cases.append((api, version, flexible, values_for(api.request, version, flexible)))
    return cases


REQUEST_CASES = _request_cases()


def _encode_case(case, data) -> bytes:
    api, version, _, strategy = case
    value = data.draw(strategy, label=f"{api.name} v{version}")
    correlation_id = data.draw(st.integers(min_value=-(2**31), max_value=2**31 - 1), label="correlation_id")
    client_id = data.draw(st.one_of(st.none(), st.text(max_size=8)), label="client_id")
    return encode_request(api, version, correlation_id, client_id, value)[4:]


def _decode_only_protocol_errors(frame) -> bool:
    try:
        decode_request(frame)
        return True
    except ProtocolError:
        return False


@SETTINGS
@given(data=st.data())
def test_real_requests_decode_and_their_truncations_fail_cleanly(data):
    case = data.draw(st.sampled_from(REQUEST_CASES), label="case")
    frame = _encode_case(case, data)
    header, body = decode_request(frame)
    api, version, _, _ = case
    assert (header.request_api_key, header.request_api_version) == (api.key, version)
    # Every proper prefix: a decoder that reads left to right cannot finish early.
    for end in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:end])


@SETTINGS
@given(data=st.data())
def test_corrupted_requests_raise_only_protocol_error(data):
    case = data.draw(st.sampled_from(REQUEST_CASES), label="case")
    frame = bytearray(_encode_case(case, data))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4), label="flips")):
        i = data.draw(st.integers(min_value=0, max_value=len(frame) - 1), label="index")
        frame[i] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]) | st.integers(0, 255), label="byte")
    _decode_only_protocol_errors(bytes(frame))


@SETTINGS
@given(data=st.data())
def test_trailing_bytes_after_a_real_request_are_ignored(data):
    # Kafka's request parser ignores what follows the last field, and
    # librdkafka relies on it; the body must still decode to the same value.
    case = data.draw(st.sampled_from(REQUEST_CASES), label="case")
    frame = _encode_case(case, data)
    tail = data.draw(st.binary(min_size=1, max_size=16), label="tail")
    assert decode_request(frame + tail) == decode_request(frame)


@SETTINGS
@given(frame=st.binary(max_size=120))
def test_random_bytes_raise_only_protocol_error(frame):
    _decode_only_protocol_errors(frame)


@SETTINGS
@given(
    api_key=st.sampled_from(sorted(APIS_BY_KEY)),
    version=st.integers(min_value=-3, max_value=40),
    rest=st.binary(max_size=60),
)
def test_random_bodies_behind_plausible_headers(api_key, version, rest):
    frame = struct.pack(">hhi", api_key, version, 1) + rest
    api = APIS_BY_KEY[api_key]
    try:
        decode_request(frame)
    except UnsupportedVersionError as exc:
        assert version not in api.versions
        assert (exc.api_key, exc.api_version) == (api_key, version)
    except ProtocolError:
        pass


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00",
        b"\x00\x12\x00",
        b"\x00\x12\x00\x00\x00\x00\x00",  # 7 bytes: shorter than any header
        b"\x00\x12\x00\x00\x00\x00\x00\x01",  # no client_id
        b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x05ab",  # client_id runs past the end
        b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00",  # v3 header without tagged fields
        b"\x7f\xff\x00\x00\x00\x00\x00\x01\x00\x00",  # unknown api key
        b"\x00\x12\x7f\xff\x00\x00\x00\x01\x00\x00",  # unknown version
        b"\xff\xff\x00\x00\x00\x00\x00\x01\x00\x00",  # negative api key
        b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe",  # client_id not UTF-8
        b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x00\x7f\xff\xff\xff",  # Metadata: 2**31-1 topics
        b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x00\xff\xff\xff\xfe",  # Metadata: -2 topics
        b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00\x00\xff\xff\xff\xff\x0f",  # overlong compact length
    ],
)
def test_specific_bad_requests(frame):
    with pytest.raises(ProtocolError):
        decode_request(frame)


def test_unsupported_version_is_a_protocol_error():
    frame = struct.pack(">hhi", 18, 999, 5) + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as exc:
        decode_request(frame)
    assert isinstance(exc.value, ProtocolError)
    assert (exc.value.api_key, exc.value.api_version) == (18, 999)


def test_seeded_mutation_sweep_raises_only_protocol_error():
    """A deterministic sweep over the golden-style frames: every single-byte value at every position."""
    from protocol.schema import struct_classes

    api = APIS_BY_NAME["Metadata"]
    R = struct_classes(api.request)
    bases = [
        encode_request(api, 1, 2, "c", api.request.cls(topics=[R.MetadataRequestTopic(name="abc")]))[4:],
        encode_request(APIS_BY_NAME["ApiVersions"], 3, 7, "test", APIS_BY_NAME["ApiVersions"].request.cls(client_software_name="p", client_software_version="1"))[4:],
    ]
    decoded = 0
    total = 0
    for base in bases:
        for i in range(len(base)):
            for value in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFE, 0xFF):
                frame = bytearray(base)
                frame[i] = value
                total += 1
                decoded += _decode_only_protocol_errors(bytes(frame))
    assert 0 < decoded < total

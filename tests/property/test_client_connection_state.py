"""protocol.client.ClientConnectionState, the sans-IO client core, under fuzzing.

* Responses to pipelined requests come back decoded with the API and version
  of their own request, matched by correlation id, whether the bytes arrive
  whole, one byte at a time or in random chunks, and in whatever order the
  peer answers; nothing is left buffered or awaited afterwards.
* Correlation ids are distinct, non-negative, and wrap within int32; the bytes
  ``send`` returns are the request as the broker's own decoder reads it.
* A transport that reads whole frames itself (``frame_size``, then
  ``receive_frame``) gets the same answers and the same checks.
* Frames over the limit, negative sizes, answers to nothing sent (or answered
  twice) and bytes that do not decode raise ProtocolError, and only that, on
  any input.
"""

from __future__ import annotations

import struct
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.client import (
    CORRELATION_ID_MASK,
    RESPONSE_BYTES_MAX,
    ClientConnectionState,
    Response,
    UndecodableResponse,
)
from protocol.exceptions import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameTooLarge, decode_request, encode_request, encode_response
from protocol.registry import APIS_BY_NAME
from tests.property.strategies import values_for

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# APIs without record fields (their values re-encode byte for byte), at old and flexible versions.
CASES = [
    (APIS_BY_NAME["ApiVersions"], 0),
    (APIS_BY_NAME["ApiVersions"], 3),
    (APIS_BY_NAME["Metadata"], 9),
    (APIS_BY_NAME["ListOffsets"], 1),
    (APIS_BY_NAME["ListOffsets"], 7),
    (APIS_BY_NAME["FindCoordinator"], 3),
    (APIS_BY_NAME["SaslHandshake"], 1),
    (APIS_BY_NAME["SaslAuthenticate"], 2),
]


@st.composite
def exchanges(draw):
    """Requests sent, and the peer's answer to each as frame bytes, in the peer's order."""
    state = ClientConnectionState(draw(st.one_of(st.none(), st.text(max_size=20))))
    sent = []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        api, version = draw(st.sampled_from(CASES))
        request = draw(values_for(api.request, version, version in api.flexible), label=f"{api.name}.request")
        correlation_id, data = state.send(api, version, request)
        answer = draw(values_for(api.response, version, version in api.flexible), label=f"{api.name}.response")
        sent.append((correlation_id, data, api, version, request, bytes(encode_response(api, version, correlation_id, answer))))
    answered = draw(st.permutations(sent))
    return state, sent, answered


def reencoded(state_response: Response, api, version) -> bytes:
    return bytes(encode_response(api, version, state_response.correlation_id, state_response.body))


def chunks(stream: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted({c for c in cuts if 0 < c < len(stream)}), len(stream)]
    return [stream[a:b] for a, b in pairwise(edges)]


@SETTINGS
@given(exchange=exchanges(), data=st.data())
def test_responses_match_their_requests_however_the_bytes_are_cut(exchange, data):
    state, sent, answered = exchange
    assert len({correlation_id for correlation_id, *_ in sent}) == len(sent)
    assert state.in_flight == len(sent)
    for correlation_id, request_bytes, api, version, request, _ in sent:
        header, body = decode_request(memoryview(request_bytes)[SIZE_PREFIX_BYTES:])
        assert (header.request_api_key, header.request_api_version, header.correlation_id) == (api.key, version, correlation_id)
        assert header.client_id == state.client_id
        assert encode_request(api, version, correlation_id, state.client_id, body) == request_bytes
        assert struct.unpack_from(">i", request_bytes)[0] == len(request_bytes) - SIZE_PREFIX_BYTES
    stream = b"".join(frame for *_, frame in answered)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=30), label="cuts")
    one_byte_at_a_time = data.draw(st.booleans(), label="one byte at a time")
    pieces = [stream[i : i + 1] for i in range(len(stream))] if one_byte_at_a_time else chunks(stream, cuts)
    received = []
    for piece in pieces:
        state.receive_data(piece)
        received += state.responses()
    assert [r.correlation_id for r in received] == [correlation_id for correlation_id, *_ in answered]
    for response, (_, _, api, version, _, frame) in zip(received, answered):
        assert reencoded(response, api, version) == frame
    assert state.in_flight == 0
    assert state.buffered_bytes == 0
    assert state.next_response() is None


@SETTINGS
@given(exchange=exchanges())
def test_whole_frames_read_by_the_transport_decode_as_the_stream_does(exchange):
    """The asyncio client reads each frame itself (size prefix, then body) and hands
    it over whole: the same answers, the same checks, nothing buffered."""
    state, _, answered = exchange
    for correlation_id, _, api, version, _, frame in answered:
        size = state.frame_size(frame[:SIZE_PREFIX_BYTES])
        assert size == len(frame) - SIZE_PREFIX_BYTES
        response = state.receive_frame(frame[SIZE_PREFIX_BYTES:])
        assert response.correlation_id == correlation_id
        assert reencoded(response, api, version) == frame
    assert state.in_flight == 0 and state.buffered_bytes == 0


@pytest.mark.parametrize("size", [-1, 0, 3, RESPONSE_BYTES_MAX + 1])
def test_a_frame_size_the_transport_reads_is_checked(size):
    with pytest.raises(ProtocolError):
        ClientConnectionState("c").frame_size(struct.pack(">i", size))


@SETTINGS
@given(exchange=exchanges(), cut=st.integers(min_value=1))
def test_an_incomplete_response_waits_for_its_last_byte(exchange, cut):
    state, _, answered = exchange
    frame = answered[0][-1]
    cut %= len(frame)
    state.receive_data(frame[:cut])
    assert state.next_response() is None
    assert state.buffered_bytes == cut
    state.receive_data(frame[cut:])
    assert state.next_response().correlation_id == answered[0][0]


def test_correlation_ids_count_up_and_wrap_within_int32():
    api = APIS_BY_NAME["ApiVersions"]
    state = ClientConnectionState("c")
    body = api.request.cls()
    assert [state.send(api, 0, body)[0] for _ in range(3)] == [1, 2, 3]
    state._next_correlation_id = CORRELATION_ID_MASK
    assert [state.send(api, 0, body)[0] for _ in range(2)] == [CORRELATION_ID_MASK, 0]


def test_a_request_without_a_response_is_not_awaited():
    api = APIS_BY_NAME["Produce"]
    state = ClientConnectionState("c")
    correlation_id, _ = state.send(api, 9, api.request.cls(acks=0), expect_response=False)
    assert state.in_flight == 0
    answer = encode_response(api, 9, correlation_id, api.response.cls())
    state.receive_data(bytes(answer))
    with pytest.raises(ProtocolError, match="no request awaits"):
        state.next_response()


def test_an_abandoned_request_is_not_awaited_and_others_still_are():
    api = APIS_BY_NAME["ApiVersions"]
    state = ClientConnectionState("c")
    refused, _ = state.send(api, 0, api.request.cls())
    kept, _ = state.send(api, 0, api.request.cls())
    state.abandon(refused)
    assert state.in_flight == 1
    state.receive_data(bytes(encode_response(api, 0, kept, api.response.cls())))
    assert state.next_response().correlation_id == kept
    state.receive_data(bytes(encode_response(api, 0, refused, api.response.cls())))
    with pytest.raises(ProtocolError, match="no request awaits"):
        state.next_response()


def test_an_answer_twice_and_an_answer_to_nothing_are_refused():
    api = APIS_BY_NAME["ApiVersions"]
    state = ClientConnectionState("c")
    correlation_id, _ = state.send(api, 0, api.request.cls())
    frame = bytes(encode_response(api, 0, correlation_id, api.response.cls()))
    state.receive_data(frame + frame)
    assert state.next_response().correlation_id == correlation_id
    with pytest.raises(ProtocolError, match=f"correlation id {correlation_id}, which no request awaits"):
        state.next_response()


def test_the_size_limit_is_checked_before_the_frame_arrives():
    api = APIS_BY_NAME["ApiVersions"]
    state = ClientConnectionState("c", response_bytes_max=100)
    state.send(api, 0, api.request.cls())
    state.receive_data(struct.pack(">i", 101))  # the size prefix alone: nothing else needs to come
    with pytest.raises(FrameTooLarge) as refused:
        state.next_response()
    assert (refused.value.size, refused.value.limit) == (101, 100)
    assert ClientConnectionState("c").response_bytes_max == RESPONSE_BYTES_MAX == 256 << 20


def test_a_frame_of_exactly_the_limit_is_read():
    api = APIS_BY_NAME["ApiVersions"]
    state = ClientConnectionState("c")
    correlation_id, _ = state.send(api, 0, api.request.cls())
    frame = bytes(encode_response(api, 0, correlation_id, api.response.cls()))
    state.response_bytes_max = len(frame) - SIZE_PREFIX_BYTES
    state.receive_data(frame)
    assert state.next_response().correlation_id == correlation_id


@pytest.mark.parametrize("size", [-1, -(1 << 31)])
def test_a_negative_size_is_refused(size):
    state = ClientConnectionState("c")
    state.receive_data(struct.pack(">i", size))
    with pytest.raises(ProtocolError, match="negative"):
        state.next_response()


@pytest.mark.parametrize("size", [0, 3])
def test_a_frame_shorter_than_a_header_is_refused(size):
    state = ClientConnectionState("c")
    state.receive_data(struct.pack(">i", size) + bytes(size))
    with pytest.raises(ProtocolError, match="shorter than its header"):
        state.next_response()


def test_an_undecodable_body_names_its_request():
    api = APIS_BY_NAME["Metadata"]
    state = ClientConnectionState("c")
    correlation_id, _ = state.send(api, 9, api.request.cls())
    garbage = struct.pack(">i", correlation_id) + b"\xff" * 7
    state.receive_data(struct.pack(">i", len(garbage)) + garbage)
    with pytest.raises(UndecodableResponse) as refused:
        state.next_response()
    assert refused.value.correlation_id == correlation_id
    assert str(refused.value).startswith("Metadata response: ")


@SETTINGS
@given(exchange=exchanges(), garbage=st.binary(max_size=200), data=st.data())
def test_only_protocol_errors_on_corrupted_or_random_bytes(exchange, garbage, data):
    state, _, answered = exchange
    stream = bytearray(b"".join(frame for *_, frame in answered))
    for _ in range(data.draw(st.integers(min_value=0, max_value=4), label="flips")):
        position = data.draw(st.integers(min_value=0, max_value=len(stream) - 1), label="position")
        stream[position] ^= data.draw(st.integers(min_value=1, max_value=255), label="mask")
    state.response_bytes_max = data.draw(st.integers(min_value=0, max_value=1 << 16), label="limit")
    try:
        for piece in (bytes(stream), garbage):
            state.receive_data(piece)
            for response in state.responses():
                assert isinstance(response, Response)
    except ProtocolError:
        pass

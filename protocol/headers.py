"""Request and response headers, and which header version each API uses."""

from __future__ import annotations

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.primitives import INT16, INT32
from protocol.schema import INT16 as T_INT16
from protocol.schema import INT32 as T_INT32
from protocol.schema import STRING, DataMessage, F

REQUEST_HEADER = DataMessage(
    "RequestHeader",
    "0-2",
    flexible="2+",
    fields=[
        F("request_api_key", T_INT16),
        F("request_api_version", T_INT16),
        F("correlation_id", T_INT32),
        # Never compact, even in header v2: a broker must read the client id
        # before it knows whether it understands the request's version.
        F("client_id", STRING, "1+", nullable="1+", ignorable=True, flexible="none"),
    ],
)

RESPONSE_HEADER = DataMessage(
    "ResponseHeader",
    "0-1",
    flexible="1+",
    fields=[F("correlation_id", T_INT32)],
)

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


def request_header_version(api_key: int, api_version: int, flexible: bool) -> int:
    if flexible:
        return 2
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0  # the one request that predates client_id
    return 1


def response_header_version(api_key: int, flexible: bool) -> int:
    # ApiVersions answers with header v0 at every version so that a client can
    # read the answer before it knows which versions the broker speaks.
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if flexible else 0


def peek_request_header(frame) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part every header version shares."""
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than any header")
    return INT16.unpack_from(frame, 0)[0], INT16.unpack_from(frame, 2)[0], INT32.unpack_from(frame, 4)[0]


def decode_request_header(frame, header_version: int):
    """Returns (header, body_offset)."""
    return decode_struct(REQUEST_HEADER.struct, header_version, header_version >= 2, frame, 0, exact=False)


def encode_request_header(out: bytearray, header_version: int, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
    header = REQUEST_HEADER.struct(
        request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
    )
    encode_struct(REQUEST_HEADER.struct, header_version, header_version >= 2, header, out)


def encode_response_header(out: bytearray, header_version: int, correlation_id: int) -> None:
    out += INT32.pack(correlation_id)
    if header_version >= 1:
        out.append(0)  # no tagged fields

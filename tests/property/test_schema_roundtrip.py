"""Property tests of the codec over every declared message, side and version.

For each (API, request|response) and each data message, each test loops over
all of its versions and draws a random valid value for each one (one test per
message and side keeps hypothesis' per-test overhead affordable, and each
generated value serves several properties):

* encode -> decode gives the same value, consumes exactly the encoded bytes,
  and re-encoding gives the same bytes;
* every truncation, random bytes, single-byte corruptions and encodings cut
  and continued with random bytes make the decoder raise
  :class:`ProtocolError` and nothing else (a valid decode is acceptable for
  random and corrupted input, and must then be re-encodable);
* an encoding fed one byte at a time into a growing buffer fails with
  ``ProtocolError`` for every proper prefix, even with ``exact=False``, and
  decodes once complete. (Decoding reads left to right and only uses the
  buffer's length to fail, so a proper prefix of a valid encoding can never
  decode.)
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from tests.property.strategies import MessageCase, message_groups, values_for

GROUPS = message_groups()
GROUP_IDS = list(GROUPS)

_COMMON = dict(
    deadline=None,
    database=None,  # leave no .hypothesis directory in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # One shrunk failure and no explain phase: with many versions per example,
    # a codec bug fails in many ways at once and reporting each takes minutes.
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
# Examples per test; each example covers every version of its group. The
# file runs every declared (API, side, version), so these stay small.
ROUNDTRIP = settings(max_examples=20, **_COMMON)
TRUNCATION = settings(max_examples=5, **_COMMON)
FUZZ = settings(max_examples=25, **_COMMON)

groups = pytest.mark.parametrize("group", GROUP_IDS)

# Built once: making strategies inside the loops is measurably slow.
_INDEX = st.integers(min_value=0, max_value=2**16)
_BYTE = st.one_of(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0x81, 0xFE, 0xFF]), st.integers(0, 255))
_TAIL = st.binary(min_size=1, max_size=16)
_BLOB = st.binary(max_size=64)


def _encode(case: MessageCase, value) -> bytes:
    return bytes(encode_struct(case.struct, case.version, case.flexible, value))


def _decode(case: MessageCase, buf, exact: bool = True):
    return decode_struct(case.struct, case.version, case.flexible, buf, exact=exact)


def _decode_untrusted(case: MessageCase, buf, exact: bool = True):
    """Decode bytes that may be garbage: ``(value, end)``, or ``None`` on ProtocolError.

    Any other exception fails the test, naming the message and the bytes.
    """
    try:
        return _decode(case, buf, exact)
    except ProtocolError:
        return None
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(
            f"{case.label} exact={exact}: decoding raised {type(exc).__name__}: {exc!r} "
            f"instead of ProtocolError on {len(buf)} bytes {bytes(buf).hex()}"
        )


def _check_reencodable(case: MessageCase, value) -> None:
    """What the decoder accepted, the encoder can write, and that encoding is stable.

    (Bytes are compared rather than values: random float64 bits may be NaN.)
    """
    first = _encode(case, value)
    again, end = _decode(case, first)
    assert end == len(first)
    assert _encode(case, again) == first, case.label


def _check_untrusted(case: MessageCase, buf) -> None:
    """Decode garbage both ways; whatever decodes must be re-encodable."""
    for exact in (True, False):
        got = _decode_untrusted(case, buf, exact)
        if got is not None:
            _check_reencodable(case, got[0])


def _draw_encoded(data, case: MessageCase):
    value = data.draw(values_for(case.struct, case.version, case.flexible), label=case.label)
    return value, _encode(case, value)


def test_registry_is_not_empty():
    assert GROUPS, "no messages declared"
    assert any(case.side == "request" for cases in GROUPS.values() for case in cases)


@groups
@ROUNDTRIP
@given(data=st.data())
def test_roundtrip_and_corruptions(group, data):
    for case in GROUPS[group]:
        value, buf = _draw_encoded(data, case)
        decoded, end = _decode(case, buf)
        assert end == len(buf), f"{case.label}: decode stopped at {end} of {len(buf)} bytes"
        assert decoded == value, f"{case.label}: {decoded!r} != {value!r}"
        assert _encode(case, decoded) == buf, f"{case.label}: re-encoding differs"
        # Decoding also works at an offset inside a larger buffer, and from
        # the other buffer types a connection may hand over.
        padded = b"\xa5" * 3 + buf + b"\x5a"
        for view in (padded, bytearray(padded), memoryview(padded)):
            at_offset, end = decode_struct(case.struct, case.version, case.flexible, view, 3, exact=False)
            assert end == 3 + len(buf) and at_offset == value, f"{case.label} from {type(view).__name__}"
        if not buf:
            continue
        # (c) One byte of the encoding replaced: ProtocolError, or a value
        # the codec can write again.
        index = data.draw(_INDEX, label=f"{case.label} index") % len(buf)
        byte = data.draw(_BYTE, label=f"{case.label} byte")
        if byte == buf[index]:
            byte ^= 0xFF
        corrupted = bytearray(buf)
        corrupted[index] = byte
        _check_untrusted(case, corrupted)
        # The encoding cut anywhere and continued with random bytes gets the
        # decoder deep into the message before things go wrong.
        cut = data.draw(_INDEX, label=f"{case.label} cut") % (len(buf) + 1)
        tail = data.draw(_TAIL, label=f"{case.label} tail")
        _check_untrusted(case, buf[:cut] + tail)


@groups
@TRUNCATION
@given(data=st.data())
def test_truncations_and_growing_prefix(group, data):
    for case in GROUPS[group]:
        value, buf = _draw_encoded(data, case)
        # (a) Every truncation, as a fresh bytes object.
        for cut in range(len(buf)):
            prefix = buf[:cut]
            for exact in (True, False):
                got = _decode_untrusted(case, prefix, exact)
                assert got is None, (
                    f"{case.label}: truncation to {cut} of {len(buf)} bytes decoded "
                    f"(exact={exact}) as {got!r}; bytes {buf.hex()}"
                )
        # The same encoding fed one byte at a time into one growing buffer.
        stream = bytearray()
        for byte in buf:
            got = _decode_untrusted(case, stream, exact=False)
            assert got is None, (
                f"{case.label}: proper prefix of {len(stream)}/{len(buf)} bytes decoded as {got!r}; "
                f"bytes {buf.hex()}"
            )
            stream.append(byte)
        decoded, end = _decode(case, stream, exact=False)
        assert end == len(buf) and decoded == value, case.label


@groups
@FUZZ
@given(data=st.data())
def test_random_bytes_raise_only_protocol_error(group, data):
    for case in GROUPS[group]:
        # (b) Random bytes.
        blob = data.draw(_BLOB, label=f"{case.label} random")
        _check_untrusted(case, blob)


def test_every_single_byte_corruption_of_one_encoding():
    """Exhaustive over position and byte value for the default value of each case."""
    for cases in GROUPS.values():
        for case in cases:
            buf = _encode(case, case.struct.cls())
            for index in range(len(buf)):
                corrupted = bytearray(buf)
                for byte in (0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFE, 0xFF):
                    if byte == buf[index]:
                        continue
                    corrupted[index] = byte
                    got = _decode_untrusted(case, corrupted)
                    if got is not None:
                        _check_reencodable(case, got[0])

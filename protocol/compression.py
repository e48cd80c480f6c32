"""Compression codecs used inside Kafka record batches and legacy message sets.

Sans-IO: bytes in, bytes out. Every failure to decompress, whatever library it
comes from, surfaces as :class:`~protocol.exceptions.ProtocolError`, because the
compressed bytes come straight from a client and a bad payload must only fail
that one request.

Wire compatibility notes:

* gzip: a plain RFC 1952 stream (Java's ``GZIPOutputStream``); concatenated
  members are accepted on read because ``GZIPInputStream`` accepts them.
* snappy: Java clients wrap snappy blocks in the xerial ``SnappyOutputStream``
  framing, librdkafka sends a single raw snappy block; we write xerial (so Java
  consumers can read what we produce) and read both.
* lz4: the standard LZ4 *frame* format with independent blocks and no stored
  content size, which is what Kafka's ``KafkaLZ4BlockOutputStream`` writes and
  what its reader insists on. Magic-0 message sets carry a frame whose header
  checksum was computed wrongly by Kafka 0.8; see
  :func:`repair_kafka08_lz4_header`.
* zstd: standard zstd frames; zstd-jni and librdkafka may omit the content size
  from the frame header, so decompression is streaming and bounded rather than
  relying on the declared size.

Every decompressor enforces ``max_output_bytes`` so a tiny "zip bomb" cannot make
the broker allocate gigabytes.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard

from protocol.exceptions import ProtocolError

__all__ = [
    "CompressionType",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "XERIAL_MAGIC",
    "XERIAL_BLOCK_BYTES",
    "compress",
    "decompress",
    "repair_kafka08_lz4_header",
]


class CompressionType(IntEnum):
    """Codec id as stored in bits 0-2 of a batch's (or legacy message's) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Java's SnappyOutputStream writes version 1 / minimum compatible version 1.
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_HEADER_BYTES = _XERIAL_HEADER.size
_XERIAL_VERSION = 1
_XERIAL_COMPAT_VERSION = 1
# The xerial default block size; a Java reader accepts any size but matching it
# keeps our output byte-identical in shape to what Java producers send.
XERIAL_BLOCK_BYTES = 32 * 1024
_INT32 = struct.Struct(">i")

# gzip wbits: 16 + 15 selects the gzip container with a 32 KiB window.
_GZIP_WBITS = 16 + zlib.MAX_WBITS

# zstd can regenerate a whole 128 KiB block from a 4-byte RLE block, so one
# input byte may expand about 2**15-fold. Feeding the streaming decompressor
# slices sized from the remaining budget bounds the overshoot before we notice.
_ZSTD_WORST_RATIO_SHIFT = 16
_ZSTD_MIN_FEED_BYTES = 64

# lz4's max_length allocates its whole output buffer up front, so a huge bound
# per call would cost a huge allocation per batch; step through in slices.
_LZ4_STEP_BYTES = 1024 * 1024

_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"


def compress(codec: int, data: bytes | bytearray | memoryview, *, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` the way Kafka producers do.

    ``level`` is codec-specific (gzip 0-9, lz4 frame levels, zstd levels); None
    picks the codec's usual default. Snappy ignores it.
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        compressor = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION if level is None else level, zlib.DEFLATED, _GZIP_WBITS
        )
        return compressor.compress(data) + compressor.flush()
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(bytes(data))
    if codec == CompressionType.LZ4:
        return lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_linked=False,
            store_size=False,
            content_checksum=False,
        )
    if codec == CompressionType.ZSTD:
        compressor = zstandard.ZstdCompressor(level=3 if level is None else level)
        return compressor.compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    *,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> bytes:
    """Decompress ``data``; raise ProtocolError on any malformed, truncated or
    oversized (> ``max_output_bytes``) input."""
    try:
        if codec == CompressionType.NONE:
            if len(data) > max_output_bytes:
                raise ProtocolError(f"payload exceeds {max_output_bytes} bytes")
            return bytes(data)
        if codec == CompressionType.GZIP:
            return _gzip_decompress(data, max_output_bytes)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(bytes(data), max_output_bytes)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data, max_output_bytes)
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(data, max_output_bytes)
    except (ProtocolError, MemoryError):
        raise
    except Exception as exc:
        # zlib.error, snappy.UncompressError, RuntimeError from lz4,
        # ZstdError... all mean the same thing to the broker: bad input.
        raise ProtocolError(f"corrupt {_codec_name(codec)} payload: {exc}") from exc
    raise ProtocolError(f"unknown compression codec {codec}")


def _codec_name(codec: int) -> str:
    try:
        return CompressionType(codec).name.lower()
    except ValueError:
        return f"codec {codec}"


# --------------------------------------------------------------------------- gzip


def _gzip_decompress(data, max_output_bytes: int) -> bytes:
    chunks = []
    produced_bytes = 0
    remaining = bytes(data)
    if not remaining:
        raise ProtocolError("empty gzip payload")
    while remaining:
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        # max_length caps what one call may produce, so the bound holds even
        # for a single deflate stream that expands enormously.
        chunk = decompressor.decompress(remaining, max_output_bytes - produced_bytes + 1)
        produced_bytes += len(chunk)
        if produced_bytes > max_output_bytes:
            raise ProtocolError(f"gzip payload inflates beyond {max_output_bytes} bytes")
        chunks.append(chunk)
        if not decompressor.eof:
            raise ProtocolError("truncated gzip payload")
        remaining = decompressor.unused_data
    return b"".join(chunks)


# --------------------------------------------------------------------------- snappy


def _xerial_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPAT_VERSION))
    pack_length = _INT32.pack
    raw_compress = snappy.compress
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = raw_compress(data[start : start + XERIAL_BLOCK_BYTES])
        out += pack_length(len(block))
        out += block
    return bytes(out)


def _snappy_declared_length(block: bytes) -> int:
    """The uncompressed size every raw snappy block announces in its preamble.

    Reading it ourselves lets us refuse an oversized block before the library
    allocates the output.
    """
    result = 0
    shift = 0
    for index in range(min(len(block), 5)):
        byte = block[index]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result
        shift += 7
    raise ProtocolError("corrupt snappy block preamble")


def _snappy_raw_block(block: bytes, budget_bytes: int) -> bytes:
    declared_bytes = _snappy_declared_length(block)
    if declared_bytes > budget_bytes:
        raise ProtocolError(f"snappy payload inflates beyond the {budget_bytes}-byte limit")
    out = snappy.decompress(block)
    if len(out) != declared_bytes:
        raise ProtocolError("snappy block length disagrees with its preamble")
    return out


def _snappy_decompress(data: bytes, max_output_bytes: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw_block(data, max_output_bytes)
    if len(data) < _XERIAL_HEADER_BYTES:
        raise ProtocolError("truncated xerial snappy header")
    # Version fields are not checked: the block layout has not changed across
    # xerial versions, so refusing one would only reject readable data.
    chunks = []
    produced_bytes = 0
    pos = _XERIAL_HEADER_BYTES
    end = len(data)
    unpack_length = _INT32.unpack_from
    while pos < end:
        if end - pos < 4:
            raise ProtocolError("truncated xerial snappy block length")
        (block_bytes,) = unpack_length(data, pos)
        pos += 4
        if block_bytes < 0 or block_bytes > end - pos:
            raise ProtocolError("xerial snappy block runs past end of payload")
        chunk = _snappy_raw_block(data[pos : pos + block_bytes], max_output_bytes - produced_bytes)
        pos += block_bytes
        produced_bytes += len(chunk)
        chunks.append(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------- lz4


def _lz4_decompress(data, max_output_bytes: int) -> bytes:
    chunks = []
    produced_bytes = 0
    remaining = bytes(data)
    if not remaining:
        raise ProtocolError("empty lz4 payload")
    # Kafka writes one frame, but concatenated frames are a valid lz4 stream
    # and cost nothing to accept.
    while remaining:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        pending = remaining
        while True:
            step_bytes = min(_LZ4_STEP_BYTES, max_output_bytes - produced_bytes + 1)
            chunk = decompressor.decompress(pending, max_length=step_bytes)
            pending = b""
            produced_bytes += len(chunk)
            if produced_bytes > max_output_bytes:
                raise ProtocolError(f"lz4 payload inflates beyond {max_output_bytes} bytes")
            chunks.append(chunk)
            if decompressor.eof:
                break
            if decompressor.needs_input:
                raise ProtocolError("truncated lz4 frame")
        remaining = decompressor.unused_data or b""
    return b"".join(chunks)


_XXH32_PRIME1 = 2654435761
_XXH32_PRIME2 = 2246822519
_XXH32_PRIME3 = 3266489917
_XXH32_PRIME4 = 668265263
_XXH32_PRIME5 = 374761393
_U32 = 0xFFFFFFFF


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (an LZ4 frame descriptor is at most 14).

    Written out here because only this tiny case is needed and it keeps the
    xxhash package out of the broker's dependencies.
    """
    if len(data) >= 16:
        raise ValueError("_xxh32_short only handles inputs shorter than 16 bytes")
    acc = (seed + _XXH32_PRIME5 + len(data)) & _U32
    pos = 0
    while pos + 4 <= len(data):
        word = int.from_bytes(data[pos : pos + 4], "little")
        acc = (acc + word * _XXH32_PRIME3) & _U32
        acc = (((acc << 17) | (acc >> 15)) & _U32) * _XXH32_PRIME4 & _U32
        pos += 4
    while pos < len(data):
        acc = (acc + data[pos] * _XXH32_PRIME5) & _U32
        acc = (((acc << 11) | (acc >> 21)) & _U32) * _XXH32_PRIME1 & _U32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _XXH32_PRIME2) & _U32
    acc ^= acc >> 13
    acc = (acc * _XXH32_PRIME3) & _U32
    acc ^= acc >> 16
    return acc


def repair_kafka08_lz4_header(data: bytes | bytearray | memoryview) -> bytes:
    """Rewrite the header-checksum byte of an LZ4 frame written by Kafka < 0.10.

    Old Kafka hashed the frame magic together with the descriptor, so its HC
    byte never matches; Kafka itself skips that check for magic-0 messages.
    Recomputing the correct byte lets a standard frame decoder accept the
    payload while every other integrity check stays on. Input that is not an
    LZ4 frame is returned unchanged, so the decoder reports the real problem.
    """
    frame = bytearray(data)
    if len(frame) < 7 or frame[:4] != _LZ4_FRAME_MAGIC:
        return bytes(frame)
    flags = frame[4]
    descriptor_end = 6
    if flags & 0x08:  # content size present
        descriptor_end += 8
    if flags & 0x01:  # dictionary id present
        descriptor_end += 4
    if len(frame) <= descriptor_end:
        return bytes(frame)
    frame[descriptor_end] = (_xxh32_short(bytes(frame[4:descriptor_end])) >> 8) & 0xFF
    return bytes(frame)


# --------------------------------------------------------------------------- zstd


def _zstd_decompress(data, max_output_bytes: int) -> bytes:
    view = memoryview(data)
    end = len(view)
    if not end:
        raise ProtocolError("empty zstd payload")
    decompressor = zstandard.ZstdDecompressor()
    chunks = []
    produced_bytes = 0
    pos = 0
    # Each decompressobj handles exactly one frame; unused_data marks where the
    # next concatenated frame starts.
    while pos < end:
        stream = decompressor.decompressobj()
        while not stream.eof:
            if pos >= end:
                raise ProtocolError("truncated zstd frame")
            budget_bytes = max_output_bytes - produced_bytes
            feed_bytes = max(_ZSTD_MIN_FEED_BYTES, budget_bytes >> _ZSTD_WORST_RATIO_SHIFT)
            piece = view[pos : pos + feed_bytes]
            chunk = stream.decompress(piece)
            pos += len(piece)
            produced_bytes += len(chunk)
            if produced_bytes > max_output_bytes:
                raise ProtocolError(f"zstd payload inflates beyond {max_output_bytes} bytes")
            chunks.append(chunk)
        pos -= len(stream.unused_data)
    return b"".join(chunks)

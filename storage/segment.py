"""One log segment: ``<base_offset:020d>.log`` with its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of v2 record batches exactly as
Kafka writes them; this module never decodes records, it walks batch headers.
"""

from __future__ import annotations

import os
from pathlib import Path

from protocol.exceptions import ProtocolError
from protocol.records import BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, iter_batches, parse_batch_header, validate_batch
from storage.index import OffsetIndex, TimeIndex

# Enough bytes to read one batch header (and its length) in a single pread.
_HEADER_READ_BYTES = BATCH_HEADER_BYTES
_RECOVERY_CHUNK_BYTES = 1 << 20


def segment_file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogSegment:
    __slots__ = (
        "directory",
        "base_offset",
        "next_offset",
        "size_bytes",
        "index",
        "time_index",
        "index_interval_bytes",
        "created_ms",
        "rolling_base_timestamp_ms",
        "max_timestamp_ms",
        "_fd",
        "_bytes_since_index",
        "_unflushed_bytes",
    )

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, *, created_ms: int):
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = segment_file_stem(base_offset)
        self.index = OffsetIndex(self.directory / f"{stem}.index", base_offset)
        self.time_index = TimeIndex(self.directory / f"{stem}.timeindex", base_offset)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size_bytes = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.created_ms = created_ms
        self.rolling_base_timestamp_ms: int | None = None
        self.max_timestamp_ms = self.time_index.max_timestamp
        self._bytes_since_index = 0
        self._unflushed_bytes = 0

    @property
    def log_path(self) -> Path:
        return self.directory / f"{segment_file_stem(self.base_offset)}.log"

    # ----------------------------------------------------------------- opening

    def recover(self, on_batch=None) -> int:
        """Walk every batch header of the segment.

        Sets ``next_offset``, the maximum timestamp and index entries missing
        from the files; cuts the log at the first batch that is torn, is not a
        v2 batch or fails its CRC, since nothing after such a batch can be
        trusted. Returns the number of bytes cut off. ``on_batch(header)`` is
        called for every batch kept.
        """
        valid_end = 0
        end = self.size_bytes
        next_offset = self.base_offset
        max_timestamp_ms = -1
        first_timestamp_ms = None
        read_bytes = _RECOVERY_CHUNK_BYTES
        while valid_end < end:
            data = os.pread(self._fd, min(read_bytes, end - valid_end), valid_end)
            consumed = 0
            try:
                for batch_pos, batch_size, header in iter_batches(data, allow_truncated_tail=True):
                    validate_batch(data, batch_pos, batch_size)
                    last_offset = header.base_offset + header.last_offset_delta
                    position = valid_end + batch_pos
                    if position - self.index.last_position() >= self.index_interval_bytes:
                        self.index.append(last_offset, position)
                    if first_timestamp_ms is None:
                        first_timestamp_ms = header.max_timestamp_ms
                    if header.max_timestamp_ms > max_timestamp_ms:
                        max_timestamp_ms = header.max_timestamp_ms
                        self.time_index.maybe_append(header.max_timestamp_ms, last_offset)
                    next_offset = last_offset + 1
                    consumed = batch_pos + batch_size
                    if on_batch is not None:
                        on_batch(header)
            except ProtocolError:
                pass
            if consumed == 0:
                # Either one batch larger than the read, or garbage.
                try:
                    needed = parse_batch_header(data, 0).batch_length + LOG_OVERHEAD_BYTES
                except ProtocolError:
                    break
                if len(data) < needed <= end - valid_end:
                    read_bytes = needed
                    continue
                break
            valid_end += consumed
            read_bytes = _RECOVERY_CHUNK_BYTES
        truncated = end - valid_end
        if truncated:
            os.ftruncate(self._fd, valid_end)
            self.size_bytes = valid_end
            self.index.truncate_to_position(valid_end)
            self.time_index.truncate_to_offset(next_offset)
        self.next_offset = next_offset
        self.max_timestamp_ms = max_timestamp_ms
        self.rolling_base_timestamp_ms = first_timestamp_ms
        return truncated

    def time_waited_for_roll_ms(self, now_ms: int, incoming_timestamp_ms: int) -> int:
        """How old the segment is for ``segment.ms``: like Kafka, measured in record
        time from the first batch once there is one (so a restart does not reset
        it), in wall-clock time since creation before that."""
        if self.rolling_base_timestamp_ms is not None:
            return incoming_timestamp_ms - self.rolling_base_timestamp_ms
        return now_ms - self.created_ms

    @property
    def indexes_missing(self) -> bool:
        return self.size_bytes > 0 and not (self.index.path.exists() and self.time_index.path.exists())

    def _read_header(self, position: int):
        data = os.pread(self._fd, _HEADER_READ_BYTES, position)
        if len(data) < BATCH_HEADER_BYTES:
            return None
        return parse_batch_header(data, 0)

    # ----------------------------------------------------------------- writing

    def append(self, data, last_offset: int, batch_positions: list[tuple[int, int, int]]) -> None:
        """Append already offset-assigned batches.

        ``batch_positions`` lists ``(relative_position, last_offset, max_timestamp_ms)``
        of each batch inside ``data``, for the indexes.
        """
        start = self.size_bytes
        if self.rolling_base_timestamp_ms is None and batch_positions:
            self.rolling_base_timestamp_ms = batch_positions[0][2]
        written = os.write(self._fd, data)
        while written < len(data):  # os.write may be partial on some filesystems
            written += os.write(self._fd, memoryview(data)[written:])
        for rel_pos, batch_last_offset, batch_max_ts in batch_positions:
            if self._bytes_since_index >= self.index_interval_bytes:
                self.index.append(batch_last_offset, start + rel_pos)
                self._bytes_since_index = 0
            if batch_max_ts > self.max_timestamp_ms:
                self.max_timestamp_ms = batch_max_ts
                self.time_index.maybe_append(batch_max_ts, batch_last_offset)
        self._bytes_since_index += len(data)
        self.size_bytes = start + len(data)
        self.next_offset = last_offset + 1
        self._unflushed_bytes += len(data)

    def flush(self, fsync: bool = True) -> None:
        if fsync and self._unflushed_bytes:
            os.fsync(self._fd)
        self._unflushed_bytes = 0
        self.index.flush(fsync)
        self.time_index.flush(fsync)

    # ----------------------------------------------------------------- reading

    def find_batch_position(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the first batch whose last offset is >= ``offset``."""
        position = self.index.lookup(offset)
        end = self.size_bytes
        while position < end:
            header = self._read_header(position)
            if header is None:
                return None
            size = header.batch_length + LOG_OVERHEAD_BYTES
            if header.base_offset + header.last_offset_delta >= offset:
                return position, size
            position += size
        return None

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def headers_from(self, position: int):
        """Yield (position, size, header) of each batch from ``position`` to the end."""
        end = self.size_bytes
        while position < end:
            header = self._read_header(position)
            if header is None:
                return
            size = header.batch_length + LOG_OVERHEAD_BYTES
            yield position, size, header
            position += size

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        for suffix in (".log", ".index", ".timeindex"):
            try:
                (self.directory / f"{segment_file_stem(self.base_offset)}{suffix}").unlink()
            except FileNotFoundError:
                pass

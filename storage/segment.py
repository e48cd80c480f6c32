"""One log segment: ``<base_offset:020d>.log`` with its ``.index``, ``.timeindex``
and, once a transaction aborted in it, ``.txnindex`` (storage.txn_index).

The ``.log`` file is a plain concatenation of v2 record batches exactly as
Kafka writes them; this module never decodes records, it walks batch headers.
The ``.log`` file descriptor comes from a shared :class:`FileHandlePool`, so a
segment costs no open file while nobody uses it.
"""

from __future__ import annotations

import os
from pathlib import Path

from protocol.exceptions import ProtocolError
from protocol.records import BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, iter_batches, parse_batch_header, validate_batch
from storage.handle_pool import DEFAULT_POOL, FileHandlePool
from storage.index import OffsetIndex, TimeIndex
from storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

# How much of the .log one read brings when walking batch headers: a few
# pages, so that small batches cost a read per window rather than per batch.
HEADER_WINDOW_BYTES = 16 * 1024

_RECOVERY_CHUNK_BYTES = 1 << 20
DEFAULT_INDEX_BYTES = 10 * 1024 * 1024


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
        "txn_index",
        "index_interval_bytes",
        "created_ms",
        "rolling_base_timestamp_ms",
        "_max_timestamp_ms",
        "_pool",
        "log_path",
        "_bytes_since_index",
        "_unflushed_bytes",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        created_ms: int,
        pool: FileHandlePool | None = None,
        index_bytes: int = DEFAULT_INDEX_BYTES,
        size_bytes: int | None = None,
        txn_index_exists: bool | None = None,
    ):
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._pool = pool if pool is not None else DEFAULT_POOL
        stem = segment_file_stem(base_offset)
        self.log_path = self.directory / f"{stem}.log"
        self.index = OffsetIndex(self.directory / f"{stem}.index", base_offset, index_bytes)
        self.time_index = TimeIndex(self.directory / f"{stem}.timeindex", base_offset, index_bytes)
        txn_path = self.directory / f"{stem}{TXN_INDEX_SUFFIX}"
        if txn_index_exists is False:
            self.txn_index = TransactionIndex.empty(txn_path)
        else:
            self.txn_index = TransactionIndex(txn_path, file_exists=txn_index_exists)
        if size_bytes is None:
            size_bytes = os.fstat(self._fd()).st_size
        elif size_bytes == 0:
            self._fd()  # a new segment's .log must exist even before its first append
        self.size_bytes = size_bytes
        self.next_offset = base_offset
        self.created_ms = created_ms
        self.rolling_base_timestamp_ms: int | None = None
        self._max_timestamp_ms: int | None = None  # from the time index, when first needed
        self._bytes_since_index = 0
        self._unflushed_bytes = 0

    def _fd(self) -> int:
        return self._pool.fd(self.log_path)

    @property
    def max_timestamp_ms(self) -> int:
        if self._max_timestamp_ms is None:
            self._max_timestamp_ms = self.time_index.max_timestamp
        return self._max_timestamp_ms

    @max_timestamp_ms.setter
    def max_timestamp_ms(self, value: int) -> None:
        self._max_timestamp_ms = value

    # ----------------------------------------------------------------- opening

    def recover(self, on_batch=None, *, verify_crc: bool = True, start_position: int = 0) -> int:
        """Walk the batches of the segment from ``start_position`` (a batch boundary).

        Sets ``next_offset``, the maximum timestamp and the index entries;
        cuts the log at the first batch that is torn, is not a v2 batch or
        (with ``verify_crc``) fails its CRC, since nothing after such a batch
        can be trusted. Returns the number of bytes cut off.
        ``on_batch(header, data, position)`` is called for every batch kept, the
        batch being at ``position`` in ``data`` (for the few callers that need
        more than its header: a control batch's type). The ``.txnindex`` is
        left alone: its entries need producer state, which the log holds.
        """
        if start_position == 0:
            self.index.reset()
            self.time_index.reset()
            max_timestamp_ms = -1
            first_timestamp_ms = None
        else:
            max_timestamp_ms = self.time_index.max_timestamp
            first_timestamp_ms = self.rolling_base_timestamp_ms
        fd = self._fd()
        valid_end = start_position
        end = self.size_bytes
        next_offset = self.base_offset
        last_indexed = self.index.last_position()
        read_bytes = _RECOVERY_CHUNK_BYTES
        while valid_end < end:
            data = os.pread(fd, min(read_bytes, end - valid_end), valid_end)
            consumed = 0
            try:
                for batch_pos, batch_size, header in iter_batches(data, allow_truncated_tail=True):
                    if verify_crc:
                        validate_batch(data, batch_pos, batch_size)
                    last_offset = header.base_offset + header.last_offset_delta
                    position = valid_end + batch_pos
                    if position - last_indexed >= self.index_interval_bytes and position > 0:
                        self.index.append(last_offset, position)
                        last_indexed = position
                    if first_timestamp_ms is None:
                        first_timestamp_ms = header.max_timestamp_ms
                    if header.max_timestamp_ms > max_timestamp_ms:
                        max_timestamp_ms = header.max_timestamp_ms
                        self.time_index.maybe_append(header.max_timestamp_ms, last_offset)
                    next_offset = last_offset + 1
                    consumed = batch_pos + batch_size
                    if on_batch is not None:
                        on_batch(header, data, batch_pos)
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
            os.ftruncate(fd, valid_end)
            self.size_bytes = valid_end
            self.index.truncate_to_position(valid_end)
            self.time_index.truncate_to_offset(next_offset)
        if valid_end > start_position or start_position == 0:
            self.next_offset = next_offset
        self._max_timestamp_ms = max_timestamp_ms
        self.rolling_base_timestamp_ms = first_timestamp_ms
        self.index.flush()
        self.time_index.flush()
        return truncated

    def load_after_clean_shutdown(self, on_batch=None) -> None:
        """A cleanly closed segment: its files are whole, so only the batches after
        the last index entry are read (headers only) to find the log end."""
        start = self.index.last_position()
        header = self._read_header(0) if self.size_bytes else None
        if header is not None:
            self.rolling_base_timestamp_ms = header.max_timestamp_ms
        if start:
            header = self._read_header(start)
            self.next_offset = header.base_offset if header is not None else self.base_offset
        for _, _, header in self.headers_from(start):
            self.next_offset = header.base_offset + header.last_offset_delta + 1
            if on_batch is not None:
                on_batch(header)

    def _read_at(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes of the ``.log`` from ``position``: every read of batch headers goes through here."""
        return os.pread(self._fd(), length, position)

    def _read_header(self, position: int):
        data = self._read_at(position, BATCH_HEADER_BYTES)
        if len(data) < BATCH_HEADER_BYTES:
            return None
        return parse_batch_header(data, 0)

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

    # ----------------------------------------------------------------- writing

    def append(self, data, last_offset: int, batch_positions: list[tuple[int, int, int]]) -> None:
        """Append already offset-assigned batches.

        ``batch_positions`` lists ``(relative_position, last_offset, max_timestamp_ms)``
        of each batch inside ``data``, for the indexes.
        """
        start = self.size_bytes
        if self.rolling_base_timestamp_ms is None and batch_positions:
            self.rolling_base_timestamp_ms = batch_positions[0][2]
        fd = self._fd()
        written = os.write(fd, data)
        while written < len(data):  # os.write may be partial on some filesystems
            written += os.write(fd, memoryview(data)[written:])
        max_timestamp_ms = self.max_timestamp_ms
        for rel_pos, batch_last_offset, batch_max_ts in batch_positions:
            if self._bytes_since_index >= self.index_interval_bytes:
                self.index.append(batch_last_offset, start + rel_pos)
                self._bytes_since_index = 0
            if batch_max_ts > max_timestamp_ms:
                max_timestamp_ms = batch_max_ts
                self.time_index.maybe_append(batch_max_ts, batch_last_offset)
        self._max_timestamp_ms = max_timestamp_ms
        self._bytes_since_index += len(data)
        self.size_bytes = start + len(data)
        self.next_offset = last_offset + 1
        self._unflushed_bytes += len(data)

    def truncate_to_position(self, position: int, next_offset: int) -> None:
        """Cut the ``.log`` at ``position`` (a batch boundary whose batch starts at
        ``next_offset``) and drop the index entries past it."""
        os.ftruncate(self._fd(), position)
        self.size_bytes = position
        self.next_offset = next_offset
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(next_offset)
        self.txn_index.truncate_to(next_offset)
        self._max_timestamp_ms = self.time_index.max_timestamp
        self._bytes_since_index = 0
        if position == 0:
            self.rolling_base_timestamp_ms = None

    def take_unflushed(self) -> int:
        """Bytes appended since the last flush, which the caller now makes durable."""
        unflushed, self._unflushed_bytes = self._unflushed_bytes, 0
        return unflushed

    def file_descriptor(self) -> int:
        """The .log file's descriptor, valid until the next call into the handle pool."""
        return self._fd()

    def flush(self, fsync: bool = True) -> None:
        if fsync and self._unflushed_bytes:
            os.fsync(self._fd())
        self._unflushed_bytes = 0
        self.index.flush(fsync)
        self.time_index.flush(fsync)
        self.txn_index.flush(fsync)

    @property
    def index_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    # ----------------------------------------------------------------- reading

    def find_batch_position(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the first batch whose last offset is >= ``offset``."""
        for position, size, header in self.headers_from(self.index.lookup(offset)):
            if header.base_offset + header.last_offset_delta >= offset:
                return position, size
        return None

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd(), length, position)

    def dup_fd(self) -> int:
        """A descriptor of the ``.log`` file that stays valid after the pool closes its own."""
        return os.dup(self._fd())

    def headers_from(self, position: int):
        """Yield (position, size, header) of each batch from ``position`` to the end.

        The headers of small batches are read a window at a time
        (HEADER_WINDOW_BYTES), not with a read each: a fetch of a megabyte of
        small batches walks a hundred or more of them. After a batch larger
        than the window, only the next header is read.
        """
        end = self.size_bytes
        window = b""
        window_start = position
        read_bytes = HEADER_WINDOW_BYTES
        while position < end:
            relative = position - window_start
            if relative + BATCH_HEADER_BYTES > len(window):
                window_start, relative = position, 0
                window = self._read_at(position, max(min(read_bytes, end - position), BATCH_HEADER_BYTES))
                if len(window) < BATCH_HEADER_BYTES:
                    return
            header = parse_batch_header(window, relative)
            size = header.batch_length + LOG_OVERHEAD_BYTES
            read_bytes = HEADER_WINDOW_BYTES if size < HEADER_WINDOW_BYTES else BATCH_HEADER_BYTES
            yield position, size, header
            position += size

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        self.flush(fsync=False)
        self.index.close()
        self.time_index.close()
        self._pool.close(self.log_path)

    def close_files(self) -> None:
        """Let go of the open .log descriptor (before its file is unlinked elsewhere)."""
        self._pool.close(self.log_path)

    def file_names(self) -> list[str]:
        stem = segment_file_stem(self.base_offset)
        names = [f"{stem}.log", f"{stem}.index", f"{stem}.timeindex"]
        if self.txn_index.file_exists:
            names.append(f"{stem}{TXN_INDEX_SUFFIX}")
        return names

    def delete(self) -> None:
        self._pool.close(self.log_path)
        for path in (self.log_path, self.index.path, self.time_index.path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.txn_index.delete()

"""A byte range of a segment file, handed to the network layer unread.

The broker can send it with ``sendfile`` (zero-copy) or read it when the
transport cannot; the protocol encoder treats it as opaque record bytes (see
``is_external_bytes`` in :mod:`protocol.codec`). It owns a duplicated file
descriptor, so it stays readable even if the handle pool closes the segment's
own descriptor or retention deletes the file; whoever ends up with it closes it.
"""

from __future__ import annotations

import os


class FileSlice:
    __slots__ = ("fd", "position", "length", "next_offset")

    is_external_bytes = True

    def __init__(self, fd: int, position: int, length: int, next_offset: int = -1):
        self.fd = fd
        self.position = position
        self.length = length
        # The offset after the slice's last batch (-1: not known): a
        # read_committed fetch lists the aborted transactions below it.
        self.next_offset = next_offset

    def __len__(self) -> int:
        return self.length

    def read_all(self) -> bytes:
        return self.read_from(0)

    def read_from(self, skip: int) -> bytes:
        """The slice's bytes after its first ``skip`` (which went out another way)."""
        wanted = self.length - skip
        data = os.pread(self.fd, wanted, self.position + skip)
        if len(data) != wanted:
            raise OSError(f"segment shrank under a read: wanted {wanted} bytes, got {len(data)}")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self):  # a last resort: every path that takes a slice closes it
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1

    def __repr__(self) -> str:
        return f"FileSlice(position={self.position}, length={self.length})"

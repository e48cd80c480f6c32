"""A bounded pool of open ``.log`` file descriptors, least recently used closed first.

Kafka keeps every segment's files open, which is why a broker with many
partitions runs out of file handles. Here a segment opens its ``.log`` file
when it is read or written and the pool closes the least recently used ones
past ``max_open``. A descriptor handed out stays valid until the next call
into the pool (callers use it at once and do not keep it; a reader that must
keep one, like a zero-copy send, takes a ``dup``).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

DEFAULT_MAX_OPEN_FILES = 1024


class FileHandlePool:
    def __init__(self, max_open: int = DEFAULT_MAX_OPEN_FILES):
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.max_open = max_open
        self._open: OrderedDict[Path, int] = OrderedDict()
        self.opens = 0  # how many times a file had to be (re)opened

    def fd(self, path: Path) -> int:
        fd = self._open.get(path)
        if fd is not None:
            self._open.move_to_end(path)
            return fd
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.opens += 1
        self._open[path] = fd
        while len(self._open) > self.max_open:
            _, old = self._open.popitem(last=False)
            os.close(old)
        return fd

    def close(self, path: Path) -> None:
        fd = self._open.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        while self._open:
            _, fd = self._open.popitem()
            os.close(fd)

    def __len__(self) -> int:
        return len(self._open)


# Logs created without a pool (tests, tools) share this one.
DEFAULT_POOL = FileHandlePool()

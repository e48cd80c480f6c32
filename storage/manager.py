"""All partition logs of a broker, across its ``log.dirs``."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Callable

from storage.log import LogConfig, PartitionLog, partition_dir_name

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


class LogManager:
    def __init__(self, log_dirs: list[Path], *, clock_ms: Callable[[], int] | None = None):
        self.log_dirs = [Path(d) for d in log_dirs]
        self._clock_ms = clock_ms
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)

    def existing_partitions(self) -> dict[tuple[str, int], Path]:
        """Partition directories found on disk (topic, partition) -> path."""
        found = {}
        for directory in self.log_dirs:
            for child in directory.iterdir():
                match = _PARTITION_DIR.match(child.name)
                if child.is_dir() and match:
                    found[(match.group(1), int(match.group(2)))] = child
        return found

    def _choose_dir(self) -> Path:
        counts = {d: 0 for d in self.log_dirs}
        for plog in self.logs.values():
            parent = plog.directory.parent
            if parent in counts:
                counts[parent] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def get_or_create(self, topic: str, partition: int, config: LogConfig, existing: Path | None = None) -> PartitionLog:
        key = (topic, partition)
        plog = self.logs.get(key)
        if plog is None:
            directory = existing or self._choose_dir() / partition_dir_name(topic, partition)
            plog = PartitionLog(directory, config, clock_ms=self._clock_ms)
            self.logs[key] = plog
        return plog

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def delete(self, topic: str, partition: int, path: Path | None = None) -> None:
        plog = self.logs.pop((topic, partition), None)
        if plog is not None:
            plog.close()
            path = plog.directory
        if path is not None and path.exists():
            shutil.rmtree(path)

    def flush_all(self, fsync: bool = True) -> None:
        for plog in self.logs.values():
            plog.flush(fsync)

    def close(self) -> None:
        for plog in self.logs.values():
            plog.flush(fsync=True)
            plog.close()
        self.logs.clear()

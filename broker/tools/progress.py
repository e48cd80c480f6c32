"""Progress bars for long tool operations, on stderr and only when stderr is a terminal.

A script piping the tools' output sees nothing extra: without a TTY (or
without tqdm installed, or for a total too small to be worth a bar) the
returned object's ``update`` does nothing.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Below this many units an operation ends before a bar would be read.
TOTAL_MIN = 200
# dump-log reads tens of MB/s: a bar is worth it from about a segment's default size down.
DUMP_BYTES_MIN = 64 << 20


class _Silent:
    def update(self, count: int = 1) -> None:
        pass


@contextmanager
def progress(
    total: int, description: str, unit: str = "partition", stream=None, total_min: int = TOTAL_MIN, leave: bool = False
):
    """A bar over ``total`` units; ``leave`` keeps it on the screen once closed (a state, not a wait)."""
    stream = stream if stream is not None else sys.stderr
    if total < total_min or not getattr(stream, "isatty", lambda: False)():
        yield _Silent()
        return
    try:
        from tqdm import tqdm
    except ImportError:  # an install without the dependency still works, without bars
        yield _Silent()
        return
    bar = tqdm(total=total, desc=description, unit=unit, file=stream, leave=leave, unit_scale=unit == "B")
    try:
        yield bar
    finally:
        bar.close()


_POSITION = re.compile(r"\bposition: (\d+)\b")


def track_dump(lines: Iterator[str], paths: list[str], stream=None, stdout=None) -> Iterator[str]:
    """``dump-log``'s lines, unchanged, moving a bar (bytes of the files dumped) on the way.

    The dump's batch lines say their byte position in the file ("position: N"),
    and each file starts with "Dumping PATH": together they tell how far it is.
    The bar is shown only when stdout is not the terminal too (dump-log > file):
    a bar redrawn between printed lines would only garble them."""
    stream = stream if stream is not None else sys.stderr
    stdout = stdout if stdout is not None else sys.stdout
    if getattr(stdout, "isatty", lambda: False)():
        yield from lines
        return
    sizes = []
    for path in paths:
        try:
            sizes.append(os.path.getsize(path))
        except OSError:
            sizes.append(0)
    with progress(sum(sizes), "dump-log", unit="B", stream=stream, total_min=DUMP_BYTES_MIN) as bar:
        index, done_before, shown = -1, 0, 0
        for line in lines:
            if line.startswith("Dumping ") and index + 1 < len(sizes):
                if index >= 0:
                    done_before += sizes[index]
                index += 1
                target = done_before
            else:
                match = _POSITION.search(line) if index >= 0 else None
                target = done_before + int(match.group(1)) if match else shown
            if target > shown:
                bar.update(target - shown)
                shown = target
            yield line

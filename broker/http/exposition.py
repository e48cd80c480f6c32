"""A scrape of many series without holding the event loop.

A broker of 100,000 partitions has 400,000 per-partition series. Gathered and
formatted in one piece on the loop that took 2-5 s, every scrape (Prometheus:
every 15 s), while no request was served. So a scrape runs in two parts:

* gathering reads the broker's state, so it stays on the loop, where nothing
  changes under it; a collector yields ``NEXT_TURN`` between slices of a long
  family, and :func:`gather` lets the loop run other work there. What a
  collector keeps across a turn must be its own snapshot (a sorted list of
  keys), never a live dict of the broker's;
* the cyclic garbage collector is paused meanwhile: a scrape makes a few
  objects per series (1.2 million for 400,000 series), which set off its full
  collections, each walking every object of the broker (200-650 ms measured
  with 100,000 partitions); they are acyclic, so their reference counts free
  them once formatted, and the collector finds nothing of theirs after;
* formatting only reads the families just built, which nothing else holds, so
  it runs on a worker thread, which then frees them in slices (freed in one
  piece on the loop they held it 300 ms). The loop waits for the GIL at most
  one switch interval (5 ms) at a time.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from collections.abc import Iterable

# Yielded by a collector between slices of a long family; never formatted.
NEXT_TURN = object()
# Per-partition series gathered between two turns of the loop (about 10 ms).
SERIES_PER_TURN = 1000


class Gathered:
    """Families already collected, in the shape prometheus_client's encoders read
    (an object with ``collect()``)."""

    def __init__(self, families: list):
        self.families = families

    def collect(self) -> list:
        return self.families


def gather_now(collected: Iterable) -> Gathered:
    """Every family at once (tests, and callers off the loop)."""
    return Gathered([family for family in collected if family is not NEXT_TURN])


async def gather(collected: Iterable) -> Gathered:
    """Every family, letting the loop run at each ``NEXT_TURN``."""
    families = []
    for family in collected:
        if family is NEXT_TURN:
            await asyncio.sleep(0)
        else:
            families.append(family)
    return Gathered(families)


async def scrape(collected: Iterable, encoder) -> bytes:
    """Gather on the loop, then format and free on a worker thread."""
    with collector_paused():
        handed = [await gather(collected)]  # the thread takes the only reference
        return await asyncio.to_thread(_format_and_free, encoder, handed)


def _format_and_free(encoder, handed: list) -> bytes:
    gathered = handed.pop()
    try:
        return encoder(gathered)
    finally:
        _free_in_steps(gathered.families)


def _free_in_steps(families: list) -> None:
    """Free the families a slice at a time: one ``del`` of 100,000 samples is
    one C call that holds the GIL for the whole of it (about 75 ms here), and
    the loop could not run until it ends."""
    while families:
        family = families.pop()
        samples = family.samples
        family.samples = []
        while samples:
            del samples[-SERIES_PER_TURN:]


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (if it was on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

"""How the C allocator treats the broker's request buffers.

A large request (a produce of a megabyte, say) is received into a buffer of
its own (protocol/framing.py). glibc's malloc serves blocks that large with
``mmap`` and gives them back with ``munmap`` when they are freed, and it trims
freed memory at the top of its heap back to the kernel: so each large request
met fresh pages, which the kernel faults in and zeroes one at a time before
Python zeroes them again. On a virtual machine whose free memory goes back to
the hypervisor that first touch is several times dearer still. With blocks up
to ``MMAP_THRESHOLD_BYTES`` taken from the heap and up to
``TRIM_THRESHOLD_BYTES`` of freed heap kept, the next request reuses the last
one's pages: the broker spent about 40 % less CPU per 0.9 MB produce request
(benchmarks/request_path.py; docs/PERFORMANCE.md). The price is memory the
process keeps after a burst, at most the trim threshold above what it uses.

Only glibc has ``mallopt``; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

# glibc's parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc caps the mmap threshold at 32 MiB on 64-bit systems; requests are
# received in chunks of at most 16 MiB (FrameReceiver.FRAME_CHUNK_BYTES).
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 64 << 20


def keep_request_buffers_in_heap() -> bool:
    """Set the thresholds; True when the allocator took them."""
    try:
        # The process's own symbols, as the connection layer's malloc_trim finds them.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS): nothing to tune
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    taken = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if not taken:
        log.debug("the C allocator refused the request-buffer thresholds")
    return taken

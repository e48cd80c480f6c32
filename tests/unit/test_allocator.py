"""broker/allocator.py: the broker asks glibc to serve large request buffers
from its heap and to keep freed heap, so a large request reuses the pages of
the one before it instead of faulting in fresh ones."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from broker.allocator import keep_request_buffers_in_heap

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_the_thresholds_are_taken_and_large_buffers_stop_faulting_in_fresh_pages():
    # In a child process, so this test's own process keeps the allocator as it was.
    script = """
import resource, sys
from broker.allocator import keep_request_buffers_in_heap

def faults_of_large_buffers():
    # Five requests of 1 MiB in flight at once, as a pipelining producer sends them.
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        buffers = [bytearray(1 << 20) for _ in range(5)]
        del buffers
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

untuned = faults_of_large_buffers()
assert keep_request_buffers_in_heap()
faults_of_large_buffers()  # the heap grows once
tuned = faults_of_large_buffers()
print(untuned, tuned)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    untuned, tuned = map(int, done.stdout.split())
    # Without the thresholds the freed buffers go back to the kernel (munmap, or a
    # trim of the heap) and each new one faults in up to 256 pages of 4 KiB.
    assert untuned >= 20 * 5 * 200, untuned
    assert tuned < 500, tuned


@pytest.mark.skipif(GLIBC, reason="checks the fallback where there is no glibc")
def test_without_glibc_nothing_is_changed():
    assert keep_request_buffers_in_heap() is False

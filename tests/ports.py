"""Ports for servers a test starts later, chosen where nothing else takes them.

A port found free by binding port 0 comes from the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``), which is also where every outgoing
connection gets its source port: between the choice and the server's bind,
another process's connection (the test's own other nodes dialling each other)
can take it, and the server fails with "Address already in use". So ports are
picked at random below that range, and kept only when they can be bound now.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Below the usual ephemeral range (Linux: 32768-60999; IANA: 49152-65535).
LOW_PORT = 20000
DEFAULT_EPHEMERAL_LOW = 32768
TRIES_MAX = 2000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(count: int, taken: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """``count`` distinct ports that can be bound now, outside the ephemeral range and ``taken``."""
    high = _ephemeral_low() - 1
    low = LOW_PORT if high - LOW_PORT > 1000 else 1024
    rng = random.SystemRandom()
    chosen: list[int] = []
    for _ in range(TRIES_MAX):
        if len(chosen) == count:
            return chosen
        port = rng.randint(low, high)
        if port not in chosen and port not in taken and bindable(port):
            chosen.append(port)
    if len(chosen) == count:
        return chosen
    raise RuntimeError(f"no {count} free ports found in {low}-{high}")


def free_port(taken: set[int] | frozenset[int] = frozenset()) -> int:
    return free_ports(1, taken)[0]

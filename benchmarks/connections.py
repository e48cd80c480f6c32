"""Broker memory per idle connection, and after the connections close.

For each N, starts a fresh pybroker, opens N TCP connections (plain sockets,
in batches), each sends one ApiVersions request and reads the answer, so every
connection has really been served, then leaves them idle. Prints the broker's
resident memory (VmRSS) before, with the N connections open (and the growth
per connection), and after all of them closed.

    python benchmarks/connections.py                  # N = 2,000 and 10,000
    python benchmarks/connections.py --connections 500 5000

The process here holds one descriptor per connection and so does the broker:
N must stay under both processes' open-file limits.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protocol.client import ClientConnectionState
from protocol.framing import SIZE_PREFIX_BYTES
from protocol.registry import APIS_BY_NAME

API_VERSIONS = APIS_BY_NAME["ApiVersions"]
API_VERSIONS_VERSION = 3
# Below the listen backlog (asyncio: 100): a full accept queue drops SYNs,
# which the client resends only after a second.
CONNECT_BATCH = 64
# Time for the broker to notice closed connections and let go of them.
SETTLE_TIMEOUT_S = 60
# After they are gone: the broker gives freed memory back to the system a
# second after a burst of closes (broker.net.connection._HeapTrimmer).
AFTER_CLOSE_S = 2.5


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _api_versions_request(state: ClientConnectionState) -> bytes:
    body = API_VERSIONS.request.cls(client_software_name="pybroker-bench", client_software_version="1")
    return state.send(API_VERSIONS, API_VERSIONS_VERSION, body)[1]


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)


def _check_answer(sock: socket.socket, state: ClientConnectionState) -> None:
    size = state.frame_size(_recv_exactly(sock, SIZE_PREFIX_BYTES))
    body = state.receive_frame(_recv_exactly(sock, size)).body
    if body.error_code != 0:
        raise RuntimeError(f"ApiVersions answered error {body.error_code}")


def open_served_connections(host: str, port: int, count: int, sockets: list, timeout_s: float = 30.0) -> None:
    """Append ``count`` connected sockets to ``sockets``, each answered one
    ApiVersions request. The caller closes them (also when this raises): they
    are appended as they are made."""
    while count > 0:
        batch = []
        for _ in range(min(CONNECT_BATCH, count)):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.settimeout(timeout_s)
            sock.connect((host, port))
            state = ClientConnectionState("connections-bench")
            sock.sendall(_api_versions_request(state))
            batch.append((sock, state))
        # The batch's requests are all sent before the first answer is awaited.
        for sock, state in batch:
            _check_answer(sock, state)
        count -= len(batch)


def close_all(sockets: list) -> None:
    for sock in sockets:
        sock.close()
    sockets.clear()


def wait_for_descriptors(pid: int, target: int, timeout_s: float = SETTLE_TIMEOUT_S) -> int:
    """Wait until the broker holds ``target`` descriptors or fewer (closed connections gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = open_descriptors(pid)
        if held <= target or time.monotonic() >= deadline:
            return held
        time.sleep(0.1)


def measure(pid: int, host: str, port: int, count: int) -> dict:
    """RSS of broker ``pid`` before, with ``count`` served idle connections, and after they closed."""
    sockets: list = []
    try:
        descriptors_idle = open_descriptors(pid)
        open_served_connections(host, port, 1, sockets)  # first use of the request path
        close_all(sockets)
        descriptors_before = wait_for_descriptors(pid, descriptors_idle, timeout_s=5)
        time.sleep(0.5)
        before = rss_bytes(pid)
        started = time.monotonic()
        open_served_connections(host, port, count, sockets)
        open_s = time.monotonic() - started
        time.sleep(1.0)
        with_open = rss_bytes(pid)
        close_all(sockets)
        held = wait_for_descriptors(pid, descriptors_before)
        if held > descriptors_before:
            raise RuntimeError(f"the broker still holds {held - descriptors_before} of the closed connections")
        time.sleep(AFTER_CLOSE_S)
        after = rss_bytes(pid)
    finally:
        close_all(sockets)
    return {
        "connections": count,
        "open_s": open_s,
        "rss_before": before,
        "rss_open": with_open,
        "rss_after": after,
        "per_connection": (with_open - before) / count,
    }


def main() -> None:
    from benchmarks.produce_consume import start_broker

    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, nargs="+", default=[2_000, 10_000])
    parser.add_argument("--no-uvloop", action="store_true", help="run the broker on the standard asyncio loop")
    args = parser.parse_args()
    for count in args.connections:
        with tempfile.TemporaryDirectory() as tmp:
            proc, bootstrap = start_broker(Path(tmp), args.no_uvloop)
            try:
                host, port = bootstrap.rsplit(":", 1)
                result = measure(proc.pid, host, int(port), count)
            finally:
                proc.terminate()
                proc.wait(30)
        mib = 1024 * 1024
        print(
            f"{count:>6} idle connections: RSS {result['rss_before'] / mib:.1f} MiB -> {result['rss_open'] / mib:.1f} MiB"
            f" = {result['per_connection'] / 1024:.1f} KiB per connection (opened in {result['open_s']:.1f} s);"
            f" after closing: {result['rss_after'] / mib:.1f} MiB"
            f" ({(result['rss_after'] - result['rss_before']) / result['rss_before']:+.0%} of before)"
        )


if __name__ == "__main__":
    main()

"""The eio nemesis' mechanism by itself: a Python process under the shim gets
EIO from every way the broker's storage writes and syncs (os.write, pwrite,
writev, pwritev, fsync, fdatasync, syncfs, a buffered file's flush) for files
under a directory its control file names, and only while it names it; files
in another directory, reads and sockets keep working; uvloop starts under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.faults.eio import RELOAD_S, EioShimUnavailable, build_eio_shim, preload_env, set_failing

# One line in, the outcome of each call on a file of each directory out:
# "ok" or the errno's name. A socketpair shows sockets are left alone.
PROBE = r"""
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
a_dir, b_dir = sys.argv[1], sys.argv[2]
def outcome(call):
    try:
        call()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
def syncfs(fd):
    if libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")
def calls(directory):
    path = os.path.join(directory, "data")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    size = os.fstat(fd).st_size
    dfd = os.open(directory, os.O_RDONLY)
    buffered = open(os.path.join(directory, "buffered"), "ab")
    def buffered_write():
        buffered.write(b"x")
        buffered.flush()
    result = {
        "write": outcome(lambda: os.write(fd, b"w")),
        "pwrite": outcome(lambda: os.pwrite(fd, b"p", 0)),
        "writev": outcome(lambda: os.writev(fd, [b"a", b"b"])),
        "pwritev": outcome(lambda: os.pwritev(fd, [b"a", b"b"], 0)),
        "fsync": outcome(lambda: os.fsync(fd)),
        "fdatasync": outcome(lambda: os.fdatasync(fd)),
        "syncfs": outcome(lambda: syncfs(dfd)),
        "buffered": outcome(buffered_write),
        "read": outcome(lambda: os.pread(fd, 1, 0)),
        "grew": os.fstat(fd).st_size - size,
    }
    try:
        buffered.close()
    except OSError:
        pass
    os.close(fd)
    os.close(dfd)
    return result
left, right = socket.socketpair()
for line in sys.stdin:
    if not line.strip():
        break
    left.sendall(b"ping")
    sock = right.recv(4) == b"ping"
    print(json.dumps({"a": calls(a_dir), "b": calls(b_dir), "socket": sock}), flush=True)
"""
WRITES = ("write", "pwrite", "writev", "pwritev", "fsync", "fdatasync", "syncfs", "buffered")


@pytest.fixture
def shim(tmp_path):
    try:
        return build_eio_shim(tmp_path / "shim")
    except EioShimUnavailable as exc:
        pytest.skip(str(exc))


def test_writes_and_syncs_under_the_named_dir_fail_only_while_named(shim, tmp_path):
    a_dir, b_dir = tmp_path / "logs", tmp_path / "logs2"
    a_dir.mkdir()
    b_dir.mkdir()
    control = tmp_path / "eio-control"
    set_failing(control, [])
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(a_dir), str(b_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **preload_env(shim, control)},
    )

    def sample(failing):
        set_failing(control, failing)
        time.sleep(RELOAD_S * 3)
        probe.stdin.write("x\n")
        probe.stdin.flush()
        return json.loads(probe.stdout.readline())

    try:
        before = sample([])
        during = sample([a_dir])
        after = sample([])
        assert probe.poll() is None, "the probe died under the shim"
    finally:
        probe.stdin.close()
        probe.wait(10)
    for state in (before, after):
        for side in ("a", "b"):
            assert all(state[side][call] == "ok" for call in WRITES), state
    assert all(during["a"][call] == "EIO" for call in WRITES), during
    assert during["a"]["grew"] == 0, "a failed write must write nothing"
    assert during["a"]["read"] == "ok"
    assert all(during["b"][call] == "ok" for call in WRITES), during
    assert during["socket"] and before["socket"]
    # A prefix of another directory's name is not that directory.
    assert not str(b_dir).startswith(str(a_dir) + os.sep)


def test_uvloop_starts_and_serves_a_socket_under_the_shim(shim, tmp_path):
    pytest.importorskip("uvloop")
    control = tmp_path / "eio-control"
    set_failing(control, [tmp_path / "elsewhere"])
    code = (
        "import asyncio, uvloop\n"
        "async def main():\n"
        "    async def echo(reader, writer):\n"
        "        writer.write(await reader.read(4)); await writer.drain(); writer.close()\n"
        "    server = await asyncio.start_server(echo, '127.0.0.1', 0)\n"
        "    port = server.sockets[0].getsockname()[1]\n"
        "    reader, writer = await asyncio.open_connection('127.0.0.1', port)\n"
        "    writer.write(b'ping'); await writer.drain()\n"
        "    return await reader.read(4)\n"
        "print(uvloop.run(main()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, **preload_env(shim, control)}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "b'ping'"

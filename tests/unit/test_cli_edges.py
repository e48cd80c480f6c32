"""The edges of every ``pybroker`` command, without a broker: ``--version`` on
the command and on each subcommand, an unknown flag answered with the usage of
the subcommand it was given to, and a stdout closed early (``| head``) ending
the process quietly with exit code 141."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tomllib

import pytest

from broker.cli import build_parser, main
from broker.tools.cli_common import EXIT_BROKEN_PIPE, package_version
from tests.conftest import PROJECT_ROOT


def pyproject_version() -> str:
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]["version"]


def subcommand_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the parser tree: (), ("topics",), ("groups", "list"), ..."""
    paths = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += subcommand_paths(sub, (*path, name))
    return paths


def run_cli(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
        cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def test_version_is_the_packages():
    assert package_version() == pyproject_version()
    done = run_cli("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"pybroker {pyproject_version()}\n", "")


def test_version_falls_back_to_pyproject_when_not_installed(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert package_version() == pyproject_version()


def test_every_subcommand_has_version(capsys):
    paths = subcommand_paths(build_parser())
    # The tree as the CLI documents it: the broker's own commands and the admin tools.
    names = {p[0] for p in paths if p}
    assert {"start", "dump-log", "storage", "groups", "transactions", "metadata-quorum", "reassign", "healthcheck",
            "topics", "configs", "console-producer", "console-consumer", "get-offsets", "delete-records",
            "acls"} <= names
    assert ("groups", "describe") in paths and ("storage", "format") in paths
    for path in paths:
        with pytest.raises(SystemExit) as exited:
            main([*path, "--version"])
        assert exited.value.code == 0, path
        assert capsys.readouterr().out == f"pybroker {pyproject_version()}\n", path


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("topics", ["topics", "--describe", "--no-such-flag"]),
        ("configs", ["configs", "--describe", "--entity-type", "topics", "--bogus", "x"]),
        ("groups describe", ["groups", "describe", "g", "--bogus"]),
        ("groups", ["groups", "--describe", "--group", "g", "--bogus"]),
        ("transactions list", ["transactions", "list", "--nope"]),
        ("storage format", ["storage", "format", "-c", "server.properties", "-t", "x", "--zzz"]),
        ("dump-log", ["dump-log", "file.log", "--bogus"]),
    ],
)
def test_an_unknown_flag_prints_the_usage_of_its_subcommand(command, args, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: pybroker {command} "), err
    assert f"pybroker {command}: error: unrecognized arguments: " in err
    assert "usage: pybroker [-h]" not in err


def test_the_real_command_reports_an_unknown_flag_with_its_usage():
    done = run_cli("acls", "--list", "--bogus")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: pybroker acls ") and "unrecognized arguments: --bogus" in done.stderr


def closed_pipe():
    """A pipe whose reading end is already closed, as after ``| head`` read what it wanted."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    write_end = closed_pipe()
    try:
        return run_cli(*args, stdout=write_end)
    finally:
        os.close(write_end)


def test_a_closed_stdout_ends_quietly_with_141():
    done = run_into_closed_pipe("storage", "random-uuid")
    assert (done.returncode, done.stderr) == (EXIT_BROKEN_PIPE, "")
    assert EXIT_BROKEN_PIPE == 128 + 13  # what a shell reports for a process stopped by SIGPIPE
    # argparse's own help and version output ignore a closed stdout: quiet too, exit code 0.
    for args in (["topics", "--help"], ["--version"]):
        done = run_into_closed_pipe(*args)
        assert (done.returncode, done.stderr) == (0, ""), args


def test_dump_log_into_head_is_quiet(tmp_path):
    from protocol.records import build_batch

    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(build_batch([(b"k%d" % i, b"v" * 200, [], 1_700_000_000_000) for i in range(3000)]))
    # A real pipeline: head takes three lines and exits while dump-log still writes.
    done = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m broker dump-log -d {segment.name} | head -n 3; exit "${{PIPESTATUS[0]}}"'],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    assert len(done.stdout.splitlines()) == 3
    assert "Traceback" not in done.stderr and done.stderr == ""
    # Far more output than a pipe holds: the writer was cut off.
    assert done.returncode == 141

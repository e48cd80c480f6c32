"""What every ``pybroker`` subcommand shares at the edges of the process:

- ``--version`` on ``pybroker`` and on each subcommand: the package version
  (installed metadata, else the ``version`` line of the source tree's
  pyproject.toml), exit code 0, as Kafka's tools print theirs;
- an unknown flag is reported with the usage of the subcommand it was given
  to (argparse would show the top-level usage), exit code 2;
- stdout closed early (``pybroker configs --describe --all | head``) ends the
  process quietly with exit code 141, 128 + SIGPIPE: what a shell reports for
  a program a closed pipe stopped, so ``set -o pipefail`` scripts see the
  output was cut, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE (13)
DISTRIBUTION = "pybroker"


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        pass
    # Run from a source tree that was never installed: the project's own file says it.
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else "unknown"


def _subparsers_action(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def add_version_flags(parser: argparse.ArgumentParser) -> None:
    """``--version`` on ``parser`` and every subcommand under it (at any depth)."""
    text = f"{DISTRIBUTION} {package_version()}"
    pending = [parser]
    while pending:
        current = pending.pop()
        if "--version" not in current._option_string_actions:
            current.add_argument("--version", action="version", version=text, help="print the version and exit")
        sub = _subparsers_action(current)
        if sub is not None:
            pending.extend(dict.fromkeys(sub.choices.values()))  # aliases share a parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, but unrecognized arguments are reported by the
    deepest subcommand parser that was chosen: its usage is the one that helps."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        chosen = parser
        while (sub := _subparsers_action(chosen)) is not None:
            name = getattr(args, sub.dest, None) if sub.dest != argparse.SUPPRESS else None
            if name is None or name not in sub.choices:
                break
            chosen = sub.choices[name]
        chosen.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def exit_quietly_on_broken_pipe(run: Callable[[], int]) -> int:
    """``run()``'s exit code; ``EXIT_BROKEN_PIPE`` when stdout was closed before
    everything was written. Output still buffered is flushed inside, so a pipe
    closed at exit is caught here too rather than by the interpreter."""
    try:
        code = run()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Later writes (the interpreter's flush at exit) go nowhere instead of failing again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass  # stdout is not a file descriptor (a test's capture): nothing more to silence
        return EXIT_BROKEN_PIPE

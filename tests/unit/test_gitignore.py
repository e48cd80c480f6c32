""".gitignore covers what the README's walkthroughs write into the clone (the
security walkthrough's keys, certificates and admin password, the log dirs of
configs/*.properties, the reassignment example's files), and none of the
project's own files. Asked of git itself (``git check-ignore``), so the rules
are git's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Every file README.md's "A secured broker, step by step" writes, run from the
# clone's root (tests/interop/test_readme_security.py runs it), and the others
# its commands leave behind.
WALKTHROUGH_FILES = [
    "secrets/ca.key",
    "secrets/ca.pem",
    "secrets/ca.srl",
    "secrets/broker.key",
    "secrets/broker.csr",
    "secrets/broker.ext",
    "secrets/broker.crt",
    "secrets/broker-keystore.pem",
    "admin.properties",
    "data/secure-logs/meta.properties",
    "data/secure-logs/__cluster_metadata-0/00000000000000000000.log",
    "data/kafka-logs/orders-0/00000000000000000000.log",
    "data/controller-1/meta.properties",
    "data/broker-4/meta.properties",
    "move.json",
    "rollback.txt",
]
# Files of the project that look like those and must stay tracked.
PROJECT_FILES = ["configs/secure.properties", "configs/server.properties", "tests/tls_certs.py", "README.md"]


def check_ignore(paths: list[str]) -> set[str]:
    """The paths git ignores; --no-index: whether a path is tracked does not matter."""
    if shutil.which("git") is None:
        pytest.skip("no git command")
    inside = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    if inside.returncode != 0 or Path(inside.stdout.strip()).resolve() != PROJECT_ROOT:
        pytest.skip("not a git checkout of the project")
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"], cwd=PROJECT_ROOT, input="\n".join(paths) + "\n",
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: none ignored
    return set(done.stdout.splitlines())


def test_git_ignores_every_file_the_walkthroughs_write():
    ignored = check_ignore(WALKTHROUGH_FILES)
    assert sorted(set(WALKTHROUGH_FILES) - ignored) == []


def test_git_ignores_no_project_file():
    assert check_ignore(PROJECT_FILES) == set()

""".dockerignore at the build context's root: it keeps virtual environments,
caches, build outputs, data and the security walkthrough's files out of the
context, and nothing the Dockerfile copies.

Docker reads the file with its own rules (not .gitignore's), implemented here
as the engine documents them: one pattern a line, ``#`` lines and blank lines
skipped, each pattern cleaned like a path (leading and trailing ``/`` dropped),
``*`` any run of characters but ``/``, ``?`` one such character, ``**`` any
number of directories, ``!`` an exception; a path is excluded when it or one
of its parent directories matches, the last matching line deciding."""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = PROJECT_ROOT / "docker" / "Dockerfile"


def _regex(pattern: str) -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/": zero or more directories
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise ValueError(f"unterminated class in {pattern!r}")
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("^") else body) + "]")
            i = end
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


def read_patterns(text: str) -> list[tuple[bool, re.Pattern]]:
    """(is an exception, regex) per line, in order."""
    patterns = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        if exception:
            line = line[1:].strip()
        cleaned = posixpath.normpath(line).lstrip("/") if line.strip("/") else line
        patterns.append((exception, _regex(cleaned)))
    return patterns


def excluded(path: str, patterns: list[tuple[bool, re.Pattern]]) -> bool:
    """Whether ``path`` (relative to the context, with "/") is left out of the context."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for exception, regex in patterns:
        if any(regex.fullmatch(candidate) for candidate in candidates):
            verdict = not exception
    return verdict


def test_the_matcher_follows_dockers_documented_rules():
    rules = read_patterns("# a comment\n*/temp*\n*/*/temp*\ntemp?\n/rooted/\n**/*.go\n*.md\n!README*.md\nREADME-secret.md\n")
    for path in ["somedir/temporary.txt", "somedir/temp", "somedir/subdir/temporary.txt", "tempa", "rooted/x/y",
                 "a.go", "x/y/z.go", "notes.md", "README-secret.md", "somedir/temp/inside"]:
        assert excluded(path, rules), path
    for path in ["temporary.txt", "a/b/c/temp", "tempab", "x/rooted", "README.md", "README-mine.md", "docs/notes.md"]:
        assert not excluded(path, rules), path


def context_root() -> Path:
    """The directory the image is built from: compose's build.context, relative to docker/."""
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")
    compose = yaml.YAML(typ="safe", pure=True).load((PROJECT_ROOT / "docker" / "compose.yaml").read_text())
    return (PROJECT_ROOT / "docker" / compose["x-pybroker"]["build"]["context"]).resolve()


def test_dockerignore_sits_at_the_build_context_root():
    assert context_root() == PROJECT_ROOT
    assert "docker build -f docker/Dockerfile -t pybroker ." in DOCKERFILE.read_text()
    assert (PROJECT_ROOT / ".dockerignore").is_file()


LEFT_OUT = [
    ".venv/lib/python3.11/site-packages/aiohttp/__init__.py",
    "venv/bin/python",
    "broker/.venv/pyvenv.cfg",
    "data/kafka-logs/orders-0/00000000000000000000.log",
    "data/secure-logs/meta.properties",
    "secrets/ca.key",
    "secrets/broker-keystore.pem",
    "admin.properties",
    "move.json",
    "rollback.txt",
    ".git/HEAD",
    ".git/objects/ab/cdef",
    "broker/__pycache__/cli.cpython-311.pyc",
    "storage/log.pyc",
    ".pytest_cache/v/cache/lastfailed",
    ".hypothesis/examples/1/2",
    ".mypy_cache/3.11/x.json",
    ".ruff_cache/content",
    "pybroker.egg-info/PKG-INFO",
    "build/lib/broker/cli.py",
    "dist/pybroker-0.1.0.tar.gz",
    "site/index.html",
    "tests/unit/test_dockerignore.py",
]


def patterns() -> list[tuple[bool, re.Pattern]]:
    return read_patterns((PROJECT_ROOT / ".dockerignore").read_text())


@pytest.mark.parametrize("path", LEFT_OUT)
def test_junk_data_and_secrets_stay_out_of_the_context(path):
    assert excluded(path, patterns())


def copied_sources() -> list[str]:
    """The context paths the Dockerfile's COPY instructions name (joined continuation lines)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    sources = []
    for line in text.splitlines():
        words = shlex.split(line, comments=False) if line.strip().upper().startswith("COPY ") else []
        if words:
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def test_everything_the_dockerfile_copies_is_in_the_context():
    sources = copied_sources()
    assert {"pyproject.toml", "README.md", "configs", "broker", "storage", "protocol"} <= set(sources), sources
    rules = patterns()
    checked = 0
    for source in sources:
        root = PROJECT_ROOT / source
        assert root.exists(), source
        files = [root] if root.is_file() else [Path(d) / f for d, _, fs in os.walk(root) for f in fs]
        for file in files:
            relative = file.relative_to(PROJECT_ROOT).as_posix()
            if "__pycache__" in relative.split("/"):
                continue  # bytecode the checkout made: rebuilt in the image
            assert not excluded(relative, rules), relative
            checked += 1
    assert checked > 100, checked

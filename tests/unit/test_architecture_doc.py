"""docs/ARCHITECTURE.md kept true to the tree.

Every backticked repository path in the document names something that exists,
and every Python module of the six packages has a home in the file map: a row
whose first cell names it. The file map is grouped under one heading per
package and per room of broker/, in the layering order of
tests/unit/test_layering.py, and a row sits under the heading of its folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_layering import PACKAGES, ROOMS_ALLOWED

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"

# The only globs a file map row may use to name files, each with the reason it
# may stand for many: one module per API, each documented in its own docstring.
COVERING_GLOBS = {
    "protocol/messages/*.py": "one declaration module per API or family",
    "broker/handlers/*.py": "one handler module per API",
}

BACKTICKED = re.compile(r"`([^`\n]+)`")
FENCED = re.compile(r"^```.*?^```", re.M | re.S)


def backticked_paths(text: str) -> list[str]:
    """Backticked tokens outside code blocks that are repository paths: no
    spaces, not a flag, not absolute, not a URL, and either holding a ``/`` or
    naming a ``.py`` file."""
    found = []
    for token in BACKTICKED.findall(FENCED.sub("", text)):
        if any(c.isspace() for c in token) or token.startswith(("-", "/")) or "://" in token:
            continue
        if "/" in token or token.endswith(".py"):
            found.append(token)
    return found


def exists(root: Path, path: str) -> bool:
    if any(c in path for c in "*?["):
        return any(root.glob(path))
    return (root / path).exists()


def file_map_rows(text: str) -> list[tuple[str, list[str]]]:
    """(heading, paths of the row's first cell) for every table row of the File map."""
    section = text.split("\n## File map\n", 1)[1].split("\n## ", 1)[0]
    heading = ""
    rows = []
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:]
        elif line.startswith("| `"):
            rows.append((heading, BACKTICKED.findall(line.split("|")[1])))
    return rows


def unnamed_modules(text: str, root: Path) -> list[str]:
    named: set[str] = set()
    for _, paths in file_map_rows(text):
        for path in paths:
            if path in COVERING_GLOBS:
                named.update(str(p.relative_to(root)) for p in root.glob(path))
            else:
                named.add(path)
    missing = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = str(path.relative_to(root))
            if path.name == "__init__.py" and not path.read_text().strip():
                continue  # an empty package marker has nothing to describe
            if relative not in named:
                missing.append(relative)
    return missing


def test_backticked_paths_exist():
    missing = [p for p in backticked_paths(DOC.read_text()) if not exists(ROOT, p)]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_module_has_a_row():
    missing = unnamed_modules(DOC.read_text(), ROOT)
    assert not missing, f"modules without a row in docs/ARCHITECTURE.md's file map: {missing}"


def test_only_the_named_globs_cover_files():
    globs = {p for _, paths in file_map_rows(DOC.read_text()) for p in paths if "*" in p}
    assert globs == set(COVERING_GLOBS), globs ^ set(COVERING_GLOBS)


def test_rows_sit_under_their_folder():
    problems = []
    for heading, paths in file_map_rows(DOC.read_text()):
        folder = heading.split()[0]
        for path in paths:
            in_packages = path.split("/")[0] in PACKAGES
            if "/" not in folder:
                if in_packages:
                    problems.append(f"{path} under '{heading}'")
            elif not path.startswith(folder):
                problems.append(f"{path} under '{heading}'")
    assert not problems, "\n".join(problems)


def test_file_map_follows_the_layering_order():
    """Packages bottom-up; inside broker/, its rooms in test_layering's order (the
    base modules under a ``broker/`` heading), then the entry points and wiring."""
    folders = [h.split()[0] for h, _ in file_map_rows(DOC.read_text())]
    order = [f for i, f in enumerate(folders) if "/" in f and (i == 0 or folders[i - 1] != f)]
    expected = []
    for package in PACKAGES:
        if package != "broker":
            expected.append(f"{package}/")
            continue
        expected += ["broker/" if room == "base" else f"broker/{room}/" for room in ROOMS_ALLOWED]
        expected.append("broker/")  # the entry points and the wiring
    assert order == expected


def test_the_checks_see_problems(tmp_path):
    (tmp_path / "protocol").mkdir()
    (tmp_path / "protocol" / "__init__.py").write_text("")
    (tmp_path / "protocol" / "a.py").write_text("")
    (tmp_path / "protocol" / "b.py").write_text("")
    text = (
        "Intro `protocol/gone.py` and `--flag/x` and `https://x/y`.\n\n"
        "## File map\n\n### protocol/\n\n| path | what |\n| --- | --- |\n"
        "| `protocol/a.py` | a, unlike `protocol/b.py` |\n\n## Next\n"
    )
    assert backticked_paths(text) == ["protocol/gone.py", "protocol/a.py", "protocol/b.py"]
    assert [p for p in backticked_paths(text) if not exists(tmp_path, p)] == ["protocol/gone.py"]
    # Named only in a description, b.py has no row of its own.
    assert unnamed_modules(text, tmp_path) == ["protocol/b.py"]

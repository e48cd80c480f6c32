"""The documentation site builds strictly: no broken link or anchor between pages, no page left out of the nav.

mkdocs.yml turns those into warnings and ``--strict`` makes any warning fail the
build. The site goes to a temporary directory, never into the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 240


def build(site_dir: Path, config: Path = PROJECT_ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    # NO_MKDOCS_2_WARNING: Material's banner about MkDocs' future, printed on every build.
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site_dir)],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
    )


@pytest.fixture(scope="module", autouse=True)
def mkdocs_or_skip():
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install -e '.[docs]' (the test extra has it too)")


def test_the_site_builds_strictly(tmp_path):
    done = build(tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "site" / "configuration" / "index.html").read_text()
    assert "Moving ports" in page and "advertised.listeners" in page
    # Material's search: the box on every page and the index it searches.
    assert 'data-md-component="search"' in page
    assert (tmp_path / "site" / "search" / "search_index.json").is_file()


def test_a_broken_link_between_pages_fails_the_build(tmp_path):
    """The strict build is only worth running if it catches what it is for."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[there](other.md#no-such-heading) and [gone](missing.md)\n")
    (docs / "other.md").write_text("# Other\n")
    (docs / "orphan.md").write_text("# Not in the nav\n")
    config = (PROJECT_ROOT / "mkdocs.yml").read_text().split("\nnav:")[0]
    (tmp_path / "mkdocs.yml").write_text(config + "\nnav:\n  - index.md\n  - other.md\n")
    done = build(tmp_path / "site", tmp_path / "mkdocs.yml")
    assert done.returncode != 0
    for complaint in ("missing.md", "#no-such-heading", "orphan.md"):
        assert complaint in done.stdout + done.stderr, complaint

"""The ``upgrade`` nemesis (tests/faults/upgrade.py): a short rolling upgrade
of the fault cluster from OLD_REF to this tree and back, under the records
workload. Nothing acknowledged may be lost or duplicated, and the new feature
level is refused until every node runs this tree. Skips with the reason when
git, the ref (a shallow clone) or network namespaces are missing."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib

import pytest

from controller.features import SUPPORTED_FEATURE_LEVELS
from tests.faults.cluster import PROJECT_ROOT
from tests.faults.upgrade import NEW_FEATURE, OLD_REF, OldBuildUnavailable, OldTree, resolve_ref
from tests.faults.quick import assert_safe, fault_run

pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")

# Steps back to back: 6 up, the refused old broker, 6 down, about 80-130 s on
# two cores (2-3 min with the cluster's start and the final read; more on a
# loaded machine); the seconds only spread them when the cluster is faster.
UPGRADE_SECONDS = 30
UPGRADE_SEED = 36


def _old_ref_or_skip() -> str:
    try:
        return resolve_ref(OLD_REF)
    except OldBuildUnavailable as exc:
        pytest.skip(str(exc))


def test_old_build_lacks_the_new_level_and_runs_on_this_venv():
    """OLD_REF is what the nemesis needs: its supported range of the feature
    stops below the new level this tree supports, and its dependencies are
    among this tree's (the same venv runs both)."""
    commit = _old_ref_or_skip()
    name, level = NEW_FEATURE
    low, high = SUPPORTED_FEATURE_LEVELS[name]
    assert low <= level <= high
    old = OldTree(commit)
    try:
        printed = subprocess.run(
            [sys.executable, "-c", "from controller.features import SUPPORTED_FEATURE_LEVELS as s; print(dict(s))"],
            env={**os.environ, "PYTHONPATH": str(old.root)},
            cwd=old.root,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        old_low, old_high = ast.literal_eval(printed.stdout)[name]
        old_deps = tomllib.loads((old.root / "pyproject.toml").read_text())["project"]["dependencies"]
    finally:
        old.remove()
    assert not old.root.exists()
    assert not old_low <= level <= old_high, f"the old build supports {name}={level}: nothing to refuse"
    head_deps = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(old_deps) <= set(head_deps)


@pytest.mark.timeout(600)
def test_rolling_upgrade_and_back_loses_nothing(tmp_path):
    _old_ref_or_skip()
    pytest.importorskip("confluent_kafka")
    summary, report = fault_run(UPGRADE_SECONDS, UPGRADE_SEED, tmp_path, kinds=("upgrade",))
    upgrade = summary["upgrade"]
    assert_safe(summary, report)
    assert summary["acknowledged"] > 5_000, report
    steps = [(s["kind"], s["detail"]) for s in upgrade["steps"]]
    assert steps.count(("upgrade", "old -> head")) == 6 and steps.count(("downgrade", "head -> old")) == 6, report
    assert all(s["back"] for s in upgrade["steps"]), report
    outcomes = [(c["action"].split()[0], c["outcome"]) for c in upgrade["feature_checks"]]
    # Refused before each of the six upgrade steps, then done and shown finalized.
    assert outcomes[:8] == [("upgrade", "INVALID_UPDATE_VERSION")] * 6 + [("upgrade", "NONE"), ("describe", "1")], report
    # Cordon is refused with every node on head: balancer.version stays 0 in a cluster the old build formatted.
    assert ("cordon", "UNSUPPORTED_VERSION") in outcomes, report
    assert upgrade["feature_checks_as_expected"], report
    assert not upgrade["refused_probe"]["served"], report

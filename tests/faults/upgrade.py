"""The ``upgrade`` nemesis: a rolling upgrade of the fault cluster from an
older pybroker (a git ref) to this tree and back, under the records workload.

It is not a windowed fault like the others: an upgrade is one long process in
which every node is stopped cleanly once, started on the other build, and
waited for (back in every ISR, or caught up in the metadata quorum) before the
next. So it replaces the seeded schedule instead of joining it (``--nemeses
upgrade`` alone), and each node's step is one window of the results: the
checker's availability during and outside windows is availability during and
between the steps.

The order (Kafka's rolling upgrade: one node at a time, the finalized feature
levels raised only after every node runs the new build):

1. every node starts on ``OLD_REF``, exported with ``git archive`` into a
   temporary directory (removed at the end); a node runs from either tree with
   the same data dir, through PYTHONPATH (``Node.code_root``);
2. controllers, then brokers, one at a time: SIGTERM, start on this tree, wait.
   Before each step ``features upgrade`` of ``NEW_FEATURE`` must be refused
   with INVALID_UPDATE_VERSION (some node, or the active controller itself,
   runs the old build); after the last it must succeed and ``features
   describe`` must show the level. ``cluster cordon`` must then still be
   refused with UNSUPPORTED_VERSION: the cluster was formatted by the old
   build, so ``balancer.version`` stays 0, and a BrokerPlacementRecord in the
   log would stop the old build's nodes applying metadata after the downgrade;
3. a probe: one broker started on the old build while the new level is
   finalized must not come back (the controller refuses its registration);
   it goes back to this tree;
4. ``features downgrade`` of the level (a SAFE_DOWNGRADE), then every node back
   to the old build in the reverse order; the upgrade is refused again at the
   end, by the old active controller's own range.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from broker.tools.balancer import BalancerTool
from broker.tools.client import Refused, ToolError
from broker.tools.features import FeaturesTool, Update, describe_lines
from controller.features import SHARE_VERSION, UpgradeType
from protocol.errors import ErrorCode
from tests.faults.cluster import INTERNAL_PORT, PROJECT_ROOT, wait_until

# The old build: main just before the share-groups merge (00bdbf6), whose
# SUPPORTED_FEATURE_LEVELS has share.version (0, 0) where this tree has (0, 1),
# so finalizing share.version=1 must be refused while any node runs it. Its
# pyproject.toml is this tree's (same dependencies), so the same venv runs both.
OLD_REF = "b0579336736e9854025f312eeb79b29dd7282515"
NEW_FEATURE = (SHARE_VERSION, 1)
# Bounds per step: a broker's clean stop, its start and every partition of the
# run's topics fully replicated again; a controller caught up in the quorum.
STOP_BOUND_S = 30
BACK_BOUND_S = 120
# How long the probe's old broker is given to register against a finalized
# level it does not support (several of its registration attempts).
REFUSED_PROBE_S = 10
FEATURE_CALL_TIMEOUT_S = 15.0


class OldBuildUnavailable(Exception):
    """Why the old build cannot be had here (no git, not a checkout, no such ref)."""


def resolve_ref(ref: str, repo: Path = PROJECT_ROOT) -> str:
    """The commit id of ``ref`` in ``repo``, or OldBuildUnavailable saying why not."""
    if shutil.which("git") is None:
        raise OldBuildUnavailable("git is not installed: the upgrade nemesis builds the old release from a git ref")
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OldBuildUnavailable(f"git rev-parse failed: {exc}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise OldBuildUnavailable(
            f"the ref {ref} is not in the git repository at {repo.name} (a shallow clone lacks it: clone the whole history)"
        )
    return done.stdout.strip()


def export_tree(commit: str, into: Path, repo: Path = PROJECT_ROOT) -> Path:
    """The files of ``commit`` written into ``into`` (``git archive``: nothing
    is added to the repository's own worktrees or refs)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", commit], stdout=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
            tar.extractall(into)
    finally:
        archive.stdout.close()
        returncode = archive.wait(60)
    if returncode != 0:
        raise OldBuildUnavailable(f"git archive {commit} exited with {returncode}")
    return into


class OldTree:
    """The old build in a temporary directory (``remove`` deletes it; so does
    the interpreter's exit, should a run end before it gets there)."""

    def __init__(self, ref: str = OLD_REF):
        self.commit = resolve_ref(ref)
        self._tmp = tempfile.TemporaryDirectory(prefix="pybroker-old-")
        self.root = export_tree(self.commit, Path(self._tmp.name) / "tree")

    def remove(self) -> None:
        self._tmp.cleanup()


@dataclass
class FeatureCheck:
    """One ``features`` call of the run and what it had to answer."""

    at_s: float
    action: str  # upgrade, downgrade, describe
    expected: str  # NONE, INVALID_UPDATE_VERSION, or the finalized level for describe
    outcome: str
    message: str = ""

    @property
    def as_expected(self) -> bool:
        return self.outcome == self.expected

    def as_dict(self) -> dict:
        return {**self.__dict__, "as_expected": self.as_expected}


class RollingUpgrade:
    """Drives the steps on a ``FaultCluster`` whose nodes run from ``old_root``."""

    def __init__(self, cluster, topics: list[str], old_root: Path, now, log=print):
        self.cluster = cluster
        self.topics = topics
        self.old_root = old_root
        self.now = now
        self.log = log
        self.windows: list[dict] = []
        self.checks: list[FeatureCheck] = []
        self.refused_probe: dict | None = None
        self._started_ms: dict[int, int] = {}  # node id -> wall-clock ms of its last start

    def build_of(self, node) -> str:
        return "old" if node.code_root == self.old_root else "head"

    def order(self) -> list:
        """Controllers first (the active one last of them: one election less),
        then brokers; the downgrade goes back in the reverse order."""
        active = self.cluster.active_controller()
        controllers = sorted(self.cluster.controllers, key=lambda n: (n is active, n.node_id))
        return [*controllers, *sorted(self.cluster.brokers, key=lambda n: n.node_id)]

    def run(self, run_start: float, spread_s: float, downgrade: bool = True) -> None:
        """All steps; the step starts spread evenly over ``spread_s`` after
        ``run_start`` (monotonic), or one right after the other if slower."""
        order = self.order()
        steps = len(order) * (2 if downgrade else 1) + (1 if downgrade else 0)
        gap_s = spread_s / (steps + 1)
        index = 0

        def pace() -> None:
            nonlocal index
            index += 1
            time.sleep(max(0.0, run_start + index * gap_s - time.monotonic()))

        for node in order:
            pace()
            self.check_update("upgrade", "INVALID_UPDATE_VERSION")
            self.step(node, PROJECT_ROOT, "upgrade")
        self.check_update("upgrade", "NONE")
        self.check_describe(NEW_FEATURE[1])
        self.check_cordon(order[-1])
        if not downgrade:
            return
        pace()
        self.probe_refused_registration(order[-1])
        self.check_update("downgrade", "NONE")
        self.check_describe(0)
        for node in reversed(order):
            pace()
            self.step(node, self.old_root, "downgrade")
        self.check_update("upgrade", "INVALID_UPDATE_VERSION")
        self.check_describe(0)

    # ------------------------------------------------------------------ steps

    def step(self, node, code_root: Path, kind: str) -> dict:
        """Stop ``node`` cleanly, start it from ``code_root``, wait until it is back."""
        started = self.now()
        was = self.build_of(node)
        clean = self.cluster.stop(node, STOP_BOUND_S)
        stopped = self.now()
        node.code_root = code_root
        self._started_ms[node.node_id] = int(time.time() * 1000)
        self.cluster.start(node)
        back = wait_until(lambda: self.is_back(node), BACK_BOUND_S)
        window = {
            "kind": kind,
            "targets": [node.hostname],
            "start_s": started,
            "end_s": self.now(),
            "detail": f"{was} -> {self.build_of(node)}",
            "stop_s": round(stopped - started, 3),
            "clean_stop": clean,
            "back": bool(back),
        }
        self.windows.append(window)
        self.log(
            f"{started:7.1f} s  {kind} {node.hostname}: {window['detail']}, stopped in {window['stop_s']:.1f} s"
            f"{'' if clean else ' (SIGKILL)'}, {'back' if back else 'NOT back'} after {window['end_s'] - started:.1f} s"
        )
        return window

    def is_back(self, node) -> bool:
        if not node.running():
            return False
        if node.is_broker:
            return self.cluster.serving(node) and self.cluster.fully_replicated(self.topics)
        return self.controller_caught_up(node)

    def controller_caught_up(self, node) -> bool:
        """The quorum has a leader, ``node``'s log reaches its high watermark, and
        the leader saw it fetch after its start: the leader keeps a stopped
        voter's last state, so an end offset alone would call a node that is
        still starting caught up (and the next step would stop a second voter).
        The leader reports fetch times in wall-clock ms, the same clock as this
        host's (no clock shim in an upgrade run)."""
        for asked, partition in self.cluster.quorum_answers():
            if partition.error_code != 0 or partition.leader_id != asked.node_id:
                continue  # only the leader tracks its voters (a follower answers blanks)
            mine = next((v for v in partition.current_voters if v.replica_id == node.node_id), None)
            if mine is None:
                return False
            if node.node_id == partition.leader_id:
                return True  # it leads the quorum again: it is the one that is caught up
            fetched = mine.last_fetch_timestamp >= self._started_ms.get(node.node_id, 0)
            return fetched and mine.log_end_offset >= partition.high_watermark
        return False

    def admitted(self, node) -> bool:
        """Another broker lists ``node`` among the live (registered, unfenced)
        brokers: a broker always lists itself, registered or not."""
        for other in self.cluster.brokers:
            if other is node or not other.running():
                continue
            try:
                return node.node_id in {b.node_id for b in self.cluster.metadata(other).brokers}
            except (OSError, ToolError, TimeoutError, ConnectionError):
                continue
        return False

    def probe_refused_registration(self, node) -> None:
        """With the new level finalized, ``node`` (a broker) started on the old
        build must not rejoin; what it did is recorded, then it goes back to head."""
        started = self.now()
        self.cluster.stop(node, STOP_BOUND_S)
        # Its controlled shutdown fences it; the others must have seen that before its old build starts.
        wait_until(lambda: not self.admitted(node), REFUSED_PROBE_S)
        node.code_root = self.old_root
        self.cluster.start(node)
        served = wait_until(lambda: self.admitted(node), REFUSED_PROBE_S)
        answered = self.cluster.serving(node)
        exited = node.process.poll()
        lines = [
            line.strip()
            for line in node.log_paths[-1].read_text(errors="replace").splitlines()
            if "regist" in line.lower() or "finalized" in line.lower()
        ]
        self.refused_probe = {
            "node": node.hostname,
            "served": bool(served),
            "answered_metadata": answered,
            "exit_code": exited,
            "log_lines": lines[-5:],
        }
        self.log(f"{started:7.1f} s  old build on {node.hostname} with {NEW_FEATURE[0]}={NEW_FEATURE[1]} finalized: "
                 f"{'ADMITTED (wrong)' if served else 'not admitted'}, answers Metadata: {answered}, exit code {exited}; "
                 f"{lines[-1:] or 'no registration line'}")
        window = self.step(node, PROJECT_ROOT, "refused-old")
        window["start_s"] = started  # the old build's attempt belongs to the window

    # --------------------------------------------------------------- features

    def _tool_address(self) -> str:
        serving = [n for n in self.cluster.brokers if self.cluster.serving(n)]
        node = serving[0] if serving else self.cluster.brokers[0]
        return f"{self.cluster.net.ips[node.hostname]}:{INTERNAL_PORT}"

    def _features_tool(self) -> FeaturesTool:
        return FeaturesTool(self._tool_address(), timeout_s=FEATURE_CALL_TIMEOUT_S)

    def check_update(self, action: str, expected: str) -> FeatureCheck:
        name, level = NEW_FEATURE
        update = (
            Update(name, level, UpgradeType.UPGRADE)
            if action == "upgrade"
            else Update(name, 0, UpgradeType.SAFE_DOWNGRADE)
        )
        at = self.now()
        tool = self._features_tool()
        try:
            response = tool.update([update], dry_run=False)
            code, message = response.error_code, response.error_message
            if code == ErrorCode.NONE:
                result = next((r for r in response.results or [] if r.feature == name), None)
                if result is not None:
                    code, message = result.error_code, result.error_message
            outcome = ErrorCode(code).name
        except (OSError, ToolError, TimeoutError, ConnectionError) as exc:
            outcome, message = "no answer", str(exc)
        finally:
            tool.close()
        check = FeatureCheck(at, f"{action} {name}={update.level}", expected, outcome, message or "")
        self.checks.append(check)
        self.log(f"{at:7.1f} s  features {check.action}: {outcome}{'' if check.as_expected else ' (UNEXPECTED)'}"
                 f"{f': {message}' if message else ''}")
        return check

    def check_cordon(self, node) -> FeatureCheck:
        """``cluster cordon`` of ``node`` must be refused (UNSUPPORTED_VERSION):
        balancer.version is 0 in a cluster the old build formatted."""
        at = self.now()
        tool = BalancerTool(self._tool_address(), timeout_s=FEATURE_CALL_TIMEOUT_S)
        try:
            tool.alter_placement(node.node_id, "cordoned")
            outcome, message = "NONE", ""
        except Refused as exc:
            # "broker N: ERROR_NAME: why" (BalancerTool.alter_placement)
            message = str(exc)
            named = re.match(r"broker \d+: (\w+)", message)
            outcome = named.group(1) if named else "refused"
        except (OSError, ToolError, TimeoutError, ConnectionError) as exc:
            outcome, message = "no answer", str(exc)
        finally:
            tool.close()
        check = FeatureCheck(at, f"cordon {node.hostname}", "UNSUPPORTED_VERSION", outcome, message)
        self.checks.append(check)
        self.log(f"{at:7.1f} s  cluster cordon {node.hostname}: {outcome}{'' if check.as_expected else ' (UNEXPECTED)'}"
                 f"{f': {message}' if message else ''}")
        return check

    def check_describe(self, level: int) -> FeatureCheck:
        name = NEW_FEATURE[0]
        at = self.now()
        tool = self._features_tool()
        try:
            response = tool.describe()
            # The finalized list itself: an old build does not list a feature it supports at 0 only.
            finalized = {f.name: f.max_version_level for f in response.finalized_features or []}
            outcome = str(finalized.get(name, 0))
            line = next((l for l in describe_lines(response) if l.startswith(f"Feature: {name}\t")), "")
            message = line.replace("\t", " ") or f"{name} not among the broker's supported features"
        except (OSError, ToolError, TimeoutError, ConnectionError) as exc:
            outcome, message = "no answer", str(exc)
        finally:
            tool.close()
        check = FeatureCheck(at, f"describe {name}", str(level), outcome, message)
        self.checks.append(check)
        self.log(f"{at:7.1f} s  features describe: {message}{'' if check.as_expected else ' (UNEXPECTED)'}")
        return check

    def summary(self, commit: str) -> dict:
        return {
            "old_ref": commit,
            "feature": f"{NEW_FEATURE[0]}={NEW_FEATURE[1]}",
            "steps": self.windows,
            "feature_checks": [c.as_dict() for c in self.checks],
            "feature_checks_as_expected": all(c.as_expected for c in self.checks),
            "refused_probe": self.refused_probe,
        }


def upgrade_rows(upgrade: dict | None, recovery: list[dict]) -> list[tuple[str, object]]:
    """The results table's rows of an upgrade run: each step's time and the
    ok share of sends during it (the checker's recovery entry of its window),
    each feature check."""
    if upgrade is None:
        return []
    ok_share = {(r["kind"], r["start_s"]): r.get("ok_share_during") for r in recovery}
    rows: list[tuple[str, object]] = [("upgrade from", f"{upgrade['old_ref'][:10]} (feature {upgrade['feature']})")]
    for step in upgrade["steps"]:
        rows.append(
            (
                f"  {step['kind']} {step['targets'][0]}",
                f"{step['detail']}: {step['end_s'] - step['start_s']:.1f} s (stop {step['stop_s']:.1f} s"
                f"{'' if step['clean_stop'] else ', SIGKILL'}){'' if step['back'] else ' NOT BACK'}, "
                f"ok share {ok_share.get((step['kind'], step['start_s']))}",
            )
        )
    for check in upgrade["feature_checks"]:
        rows.append(
            (
                f"  features {check['action']} @{check['at_s']:.0f}s",
                f"{check['outcome']}{'' if check['as_expected'] else ' UNEXPECTED, wanted ' + check['expected']}",
            )
        )
    probe = upgrade.get("refused_probe")
    if probe is not None:
        rows.append(
            (
                "  old build, level finalized",
                f"{probe['node']} {'admitted (WRONG)' if probe['served'] else 'not admitted'}, "
                f"{'answers' if probe.get('answered_metadata') else 'does not answer'} Metadata itself, "
                f"exit code {probe['exit_code']}",
            )
        )
    return rows

"""One fault run from start to verdict: the compose cluster in namespaces,
the workload on the client host, the nemesis schedule, healing, the final
read, the checker, summary.json and the timeline picture.

``python -m tests.faults --seconds S --seed N --out DIR [--unsafe]`` runs it
from a shell (see __main__.py); the quick test in test_quick_run.py calls
``run_faults`` directly.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from tests.faults import checker, txn_checker
from tests.faults.clock import ClockShimUnavailable, build_shim
from tests.faults.cluster import REPLICATION_FACTOR, TOPOLOGIES, FaultCluster, wait_until
from tests.faults.eio import build_eio_shim
from tests.faults.nemesis import KINDS, UPGRADE, Nemesis, netem_available, retention_ms_for, schedule
from tests.faults.upgrade import OLD_REF, OldTree, RollingUpgrade, upgrade_rows
from tests.netns import check_available

TOPIC = "faults"
PARTITIONS = 4
# The transactional workload's topics: producers write the input, processors
# turn it into the output (tests/faults/txn_workload.py).
TXN_INPUT_TOPIC = "faults-txn-in"
TXN_OUTPUT_TOPIC = "faults-txn-out"
WORKLOADS = ("records", "txn")
CLIENT_START_BOUND_S = 90
# Load before the upgrade's first step, as the schedule's warm-up.
UPGRADE_WARMUP_S = 5.0
HEAL_BOUND_S = 120
FINAL_BOUND_S = 240
# What Kafka documents as able to lose acknowledged writes: a leader elected
# from outside the ISR, and producers not waiting for the ISR.
UNSAFE_ENV = {"KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE": "true"}
# What a broker logs when it halts on a corrupt batch (broker/replica/corruption.py).
CORRUPT_HALT_LINE = "before the corrupt batch; halting"


class _Lines(threading.Thread):
    """Collects a child's stdout lines, so waits on it are bounded."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.lines, self.changed = stream, [], threading.Event()
        self.start()

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line.strip())
            self.changed.set()

    def wait_for(self, wanted: tuple[str, ...], bound_s: float) -> str | None:
        return wait_until(lambda: next((l for l in self.lines if l in wanted), None), bound_s, 0.2)


def read_history(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_faults(
    seconds: float,
    seed: int,
    out: Path,
    *,
    unsafe: bool = False,
    kinds=KINDS,
    rate_per_producer: float = 100.0,
    idempotent_message_timeout_ms: int | None = None,
    workload_name: str = "records",
    txn_rate_per_producer: float = 10.0,
    topology: str = "default",
    upgrade_from: str = OLD_REF,
    upgrade_downgrade: bool = True,
    log=print,
) -> dict:
    """Run one schedule of ``seconds`` (after a 5 s warm-up inside it) and
    return the summary written to ``out/summary.json``.

    ``workload_name`` "records" is the plain and idempotent producers of
    workload.py; "txn" the transactions of txn_workload.py, where ``unsafe``
    means read_uncommitted readers on the same safe cluster (so what the
    checker finds comes from the isolation level alone).

    ``topology`` names one of cluster.TOPOLOGIES: "five" is five combined
    nodes with a client host on each side of a split, each running the
    records workload with its own history; the checker reads them merged.

    ``kinds`` ``("upgrade",)``: instead of a schedule, a rolling upgrade from
    the build at ``upgrade_from`` to this tree, steps spread over ``seconds``,
    and back again if ``upgrade_downgrade`` (tests/faults/upgrade.py)."""
    transactional = workload_name == "txn"
    client_hosts = TOPOLOGIES[topology].client_hosts
    if transactional and len(client_hosts) > 1:
        raise ValueError(f"the {topology} topology runs the records workload only (its transactional ids are one host's)")
    topics = [TXN_INPUT_TOPIC, TXN_OUTPUT_TOPIC] if transactional else [TOPIC]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    check_available()
    # One client host keeps the single history.jsonl; several write one each.
    history_paths = {
        host: out / ("history.jsonl" if len(client_hosts) == 1 else f"history-{host}.jsonl") for host in client_hosts
    }
    for path in history_paths.values():
        path.unlink(missing_ok=True)
    t0 = time.monotonic()

    def now() -> float:
        return round(time.monotonic() - t0, 3)

    windows: list[dict] = []
    unexpected_exits: list[dict] = []
    unavailable: dict[str, str] = {}
    final_state = "not reached"
    healed_s = None
    # The LD_PRELOAD shims some kinds need, built with the C compiler: a kind
    # whose shim cannot be built is left out and reported.
    shims = {}
    for kind, build, folder in (("clock-jump", build_shim, "clock-shim"), ("eio", build_eio_shim, "eio-shim")):
        if kind in kinds:
            try:
                shims[kind] = build(out / folder)
            except ClockShimUnavailable as exc:  # EioShimUnavailable too
                unavailable[kind] = str(exc)
                kinds = tuple(k for k in kinds if k != kind)
    upgrading = UPGRADE in kinds
    if upgrading and len(kinds) > 1:
        raise ValueError("the upgrade nemesis is one long process: it runs alone")
    if upgrading and topology != "default":
        raise ValueError("the upgrade nemesis runs on the default topology")
    old_tree = OldTree(upgrade_from) if upgrading else None  # raises OldBuildUnavailable: no git, no such ref
    cluster = FaultCluster(
        out / "cluster",
        extra_env=UNSAFE_ENV if unsafe and not transactional else None,
        clock_shim=shims.get("clock-jump"),
        eio_shim=shims.get("eio"),
        compose_file=TOPOLOGIES[topology].compose_file,
        client_hosts=client_hosts,
    )
    workloads: dict[str, tuple[subprocess.Popen, _Lines]] = {}
    upgrade = None
    if old_tree is not None:
        for node in cluster.nodes.values():
            node.code_root = old_tree.root
    try:
        if "latency-loss" in kinds and (why := netem_available(cluster)):
            unavailable["latency-loss"] = why
            kinds = tuple(k for k in kinds if k != "latency-loss")
        plan = [] if upgrading else schedule(seed, seconds, kinds)
        log(f"starting the cluster ({len(cluster.nodes)} nodes) in network namespaces")
        cluster.start_all(TOPOLOGIES[topology].start_bound_s)
        for host in client_hosts:
            command = _workload_command(
                cluster,
                workload_name,
                history_paths[host],
                t0,
                seed,
                seconds=seconds,
                unsafe=unsafe,
                rate_per_producer=rate_per_producer,
                idempotent_message_timeout_ms=idempotent_message_timeout_ms,
                txn_rate_per_producer=txn_rate_per_producer,
                # Several hosts: names by host, and the first host's program reads back at the end.
                host_args=[] if len(client_hosts) == 1 else ["--client", host, *(["--no-final-read"] if host != client_hosts[0] else [])],
                host=host,
            )
            with open(_stderr_path(out, host, client_hosts), "w") as stderr:  # the child keeps its own copy
                workload = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                    env=cluster.client_env(),
                )
            workloads[host] = (workload, _Lines(workload.stdout))
        for host, (workload, lines) in workloads.items():
            if lines.wait_for(("clients-started",), CLIENT_START_BOUND_S) is None:
                raise RuntimeError(
                    f"the workload on {host} did not start: "
                    + _stderr_path(out, host, client_hosts).read_text()[-2000:]
                )
        run_start = time.monotonic()
        nemesis = Nemesis(cluster, topics[0], PARTITIONS, seed)
        if old_tree is not None:
            upgrade = RollingUpgrade(cluster, topics, old_tree.root, now, log)
            try:
                upgrade.run(run_start + UPGRADE_WARMUP_S, seconds - UPGRADE_WARMUP_S, upgrade_downgrade)
            finally:
                windows.extend(upgrade.windows)  # the steps done, even if one failed
            _note_exits(cluster, unexpected_exits, now())
        for window in plan:
            time.sleep(max(0.0, run_start + window.start_s - time.monotonic()))
            started = now()
            try:
                targets = nemesis.start(window.kind)
            except Exception as exc:  # a fault that could not be made is reported, not fatal
                windows.append(
                    {"kind": window.kind, "targets": [], "start_s": started, "end_s": now(), "error": repr(exc)}
                )
                nemesis.active = None
                continue
            detail = nemesis.detail
            log(f"{started:7.1f} s  {window.kind} {' '.join(targets)}{f' ({detail})' if detail else ''}")
            time.sleep(max(0.0, run_start + window.end_s - time.monotonic()))
            detail = nemesis.detail
            restarted = nemesis.heal()
            windows.append(
                {"kind": window.kind, "targets": targets, "start_s": started, "end_s": now(), "restarted": restarted}
                | ({"detail": detail} if detail else {})
            )
            _note_exits(cluster, unexpected_exits, now())
        time.sleep(max(0.0, run_start + seconds - time.monotonic()))
        nemesis.heal_everything()
        _note_exits(cluster, unexpected_exits, now())
        log(f"{now():7.1f} s  healed; waiting for every partition to be fully replicated")
        # A broker may still halt now, on a corrupt batch of the last window
        # found after it: it is started again, as after any exit.
        if wait_until(lambda: _note_exits(cluster, unexpected_exits, now()) or cluster.fully_replicated(topics), HEAL_BOUND_S):
            healed_s = now()
        # The other hosts' clients stop (their producers flush) before the
        # first host's final read takes the high watermarks: a send they had
        # in flight may still be acknowledged, and must be read back.
        stopped = True
        for host in client_hosts[1:]:
            workload, lines = workloads[host]
            workload.stdin.write("final\n")
            workload.stdin.flush()
            stopped = stopped and lines.wait_for(("stopped",), FINAL_BOUND_S) is not None
            workload.wait(30)
        workload, lines = workloads[client_hosts[0]]
        workload.stdin.write("final\n")
        workload.stdin.flush()
        final_state = lines.wait_for(("final-done", "final-incomplete"), FINAL_BOUND_S) or "timed out"
        workload.wait(30)
        if not stopped:
            final_state = "a client host's workload did not stop before the final read"
    finally:
        for workload, _lines in workloads.values():
            if workload.poll() is None:
                workload.kill()
                workload.wait(10)
        cluster.close()
        if old_tree is not None:
            old_tree.remove()
    replicas = compare_replicas(cluster, topics, PARTITIONS)
    if upgrade is not None:
        seconds = max(seconds, now())  # the steps take what they take
    history = [op for host in client_hosts for op in read_history(history_paths[host])]
    nemesis_windows = [w for w in windows if "error" not in w]
    if transactional:
        summary = txn_checker.check(history, nemesis_windows, seconds)
        settings = (
            "unsafe: read_uncommitted readers and processors; transactional producers, RF=3, min.insync.replicas=2"
            if unsafe
            else "safe: read_committed readers and processors; transactional producers, RF=3, min.insync.replicas=2"
        )
    else:
        summary = checker.check(history, nemesis_windows, seconds)
        settings = (
            "unsafe: unclean.leader.election.enable=true, acks=1"
            if unsafe
            else "safe: acks=all (idempotent and plain), min.insync.replicas=2, RF=3"
        )
    summary.update(
        {
            "workload": workload_name,
            "topology": topology,
            "client_hosts": list(client_hosts),
            "seed": seed,
            "seconds": seconds,
            "settings": settings,
            "nemeses": windows,
            "nemeses_unavailable": unavailable,
            "unexpected_exits": unexpected_exits,
            "healed_at_s": healed_s,
            "final_read": final_state,
            "replicas": replicas,
        }
        | ({"upgrade": upgrade.summary(old_tree.commit)} if upgrade is not None else {})
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    try:
        from tests.faults import timeline

        timeline.draw(
            history,
            nemesis_windows,
            summary,
            out / "timeline.png",
            f"pybroker faults, seed {seed}, {seconds:.0f} s, {'unsafe' if unsafe else 'safe'} settings",
        )
    except ImportError as exc:
        log(f"no timeline picture: {exc}")
    return summary


def compare_replicas(cluster, topics: list[str], partitions: int) -> dict:
    """The replicas' logs of each partition after the stop, batch bytes end
    to end: ``diverged`` lists partitions (``topic-partition``) where one
    replica's bytes are not a prefix of another's (two different records at one
    offset, or a corrupt byte kept); ``ends_differ`` those where all agree but
    some replica holds less; ``copies_missing`` those fewer than
    REPLICATION_FACTOR brokers hold (with more brokers than replicas, a broker
    without the partition's directory is not one of its replicas)."""
    diverged, ends_differ, copies_missing = [], [], []
    for topic in topics:
        for partition in range(partitions):
            logs = sorted(cluster.replica_logs(topic, partition).items(), key=lambda item: len(item[1]))
            name = f"{topic}-{partition}"
            if len(logs) < REPLICATION_FACTOR:
                copies_missing.append({"partition": name, "holders": [host for host, _ in logs]})
            if not logs:
                continue
            shortest, longest = logs[0][1], logs[-1][1]
            if any(not longest.startswith(data) for _, data in logs):
                diverged.append(name)
            elif len(shortest) != len(longest):
                ends_differ.append({"partition": name, "bytes": {host: len(data) for host, data in logs}})
    return {"diverged": diverged, "ends_differ": ends_differ, "copies_missing": copies_missing}


def _workload_command(
    cluster,
    workload_name: str,
    history_path: Path,
    t0: float,
    seed: int,
    *,
    seconds: float,
    unsafe: bool,
    rate_per_producer: float,
    idempotent_message_timeout_ms: int | None,
    txn_rate_per_producer: float,
    host_args: list[str],
    host: str,
) -> list[str]:
    """The client program of the workload, on client host ``host``."""
    common = [
        "--partitions", str(PARTITIONS), "--history", str(history_path), "--t0", repr(t0),
        "--retention-ms", str(retention_ms_for(seconds)),
    ]
    if workload_name == "txn":
        return cluster.client_command(
            "-m",
            "tests.faults.txn_workload",
            "--bootstrap",
            cluster.bootstrap(),
            "--input-topic",
            TXN_INPUT_TOPIC,
            "--output-topic",
            TXN_OUTPUT_TOPIC,
            *common,
            "--seed",
            str(seed),
            "--txn-rate",
            str(txn_rate_per_producer),
            *(["--unsafe"] if unsafe else []),
            host=host,
        )
    return cluster.client_command(
        "-m",
        "tests.faults.workload",
        "--bootstrap",
        cluster.bootstrap(),
        "--topic",
        TOPIC,
        *common,
        "--rate",
        str(rate_per_producer),
        *(["--unsafe"] if unsafe else []),
        *(["--idempotent-message-timeout-ms", str(idempotent_message_timeout_ms)] if idempotent_message_timeout_ms else []),
        *host_args,
        host=host,
    )


def _stderr_path(out: Path, host: str, client_hosts: tuple[str, ...]) -> Path:
    return out / ("workload.stderr" if len(client_hosts) == 1 else f"workload-{host}.stderr")


def _note_exits(cluster, exits: list[dict], at_s: float) -> None:
    """Processes that died without being killed: note them (``corrupt_halt``:
    the broker halted on a corrupt batch of its own log, as it is meant to),
    start them again."""
    for node in cluster.nodes.values():
        if node.process is not None and node.process.poll() is not None:
            tail = cluster.tail(node, 600)
            exits.append(
                {
                    "node": node.hostname,
                    "at_s": at_s,
                    "returncode": node.process.returncode,
                    "corrupt_halt": CORRUPT_HALT_LINE in tail,
                    "log_tail": tail,
                }
            )
            cluster.start(node)


def passed(summary: dict) -> bool:
    """Nothing lost, duplicated or inconsistent, the final read saw all of it,
    and no two replicas hold different bytes."""
    return (
        bool(summary.get("valid"))
        and summary.get("final_read") == "final-done"
        and not summary.get("replicas", {}).get("diverged")
        and not summary.get("replicas", {}).get("copies_missing")
        and upgrade_passed(summary.get("upgrade"))
    )


def upgrade_passed(upgrade: dict | None) -> bool:
    """No upgrade, or every step came back and every feature check answered as it must."""
    if upgrade is None:
        return True
    return upgrade["feature_checks_as_expected"] and all(step["back"] for step in upgrade["steps"])


def table(summary: dict) -> str:
    if summary.get("workload") == "txn":
        return _txn_table(summary)
    availability = summary.get("availability", {})
    rows = [
        ("settings", summary["settings"]),
        ("seed / seconds", f"{summary['seed']} / {summary['seconds']:.0f}"),
        ("sends attempted", summary.get("attempted")),
        ("acknowledged", summary.get("acknowledged")),
        ("lost", summary.get("lost")),
        ("duplicates (idempotent)", summary.get("duplicates")),
        ("duplicates (idempotent, re-sent by the client after an epoch bump)", summary.get("duplicates_after_epoch_bump")),
        ("duplicates (plain retries)", summary.get("duplicates_non_idempotent")),
        ("inconsistent offsets", summary.get("inconsistent")),
        ("non-monotonic polls", summary.get("nonmonotonic_polls")),
        ("committed offsets backwards", summary.get("commits_backwards")),
        ("reads never written", summary.get("phantom_reads")),
        ("created topics lost", summary.get("topics_lost")),
        ("log starts moved (records deleted)", summary.get("log_starts_moved")),
        (
            "rebalances by fault kind",
            ", ".join(f"{kind} {count}" for kind, count in sorted(summary.get("rebalances_by_kind", {}).items())),
        ),
        ("availability overall", availability.get("overall")),
        ("availability during faults", availability.get("during_faults")),
        ("availability outside faults", availability.get("outside_faults")),
        *upgrade_rows(summary.get("upgrade"), summary.get("recovery", [])),
        *_client_rows(summary),
        *_common_rows(summary),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _client_rows(summary: dict) -> list[tuple]:
    """Availability per client host, where there are several (the five topology)."""
    rows = [] if summary.get("topology", "default") == "default" else [("topology", f"{summary['topology']}, clients on {', '.join(summary.get('client_hosts', []))}")]
    timely_s = summary.get("timely_s")
    for client, shares in summary.get("availability_by_client", {}).items():
        rows.append(
            (
                f"{client}: sends attempted / acknowledged",
                f"{shares['attempted']} / {shares['acknowledged']}",
            )
        )
        rows.append(
            (
                "  availability overall / during / outside faults",
                f"{shares['overall']} / {shares['during_faults']} / {shares['outside_faults']}",
            )
        )
        rows.append(
            (
                f"  acknowledged within {timely_s:g} s",
                f"{shares['timely_overall']} / {shares['timely_during_faults']} / {shares['timely_outside_faults']}",
            )
        )
        rows.append(
            (
                f"  during each kind (ok; within {timely_s:g} s)",
                ", ".join(
                    f"{kind} {share}; {shares['timely_during_by_kind'].get(kind)}"
                    for kind, share in shares["during_by_kind"].items()
                ),
            )
        )
    return rows


def _common_rows(summary: dict) -> list[tuple]:
    return [
        (
            "faults",
            ", ".join(
                f"{w['kind']}@{w['start_s']:.0f}s" + (f" ({w['detail']})" if w.get("detail") else "")
                for w in summary.get("nemeses", [])
            ),
        ),
        (
            "unavailable nemeses",
            "; ".join(f"{k}: {v}" for k, v in summary.get("nemeses_unavailable", {}).items()) or "none",
        ),
        ("unexpected exits", sum(not e.get("corrupt_halt") for e in summary.get("unexpected_exits", []))),
        ("halts on a corrupt batch after its window", sum(bool(e.get("corrupt_halt")) for e in summary.get("unexpected_exits", []))),
        ("replicas diverged (partitions)", summary.get("replicas", {}).get("diverged")),
        ("replicas ending short (partitions)", [e["partition"] for e in summary.get("replicas", {}).get("ends_differ", [])]),
        *[
            ("fewer copies than replicas (partitions)", [e["partition"] for e in missing])
            for missing in [summary.get("replicas", {}).get("copies_missing")]
            if missing
        ],
        ("final read", summary.get("final_read")),
        ("verdict", "PASS" if passed(summary) else "FAIL"),
    ]


def _txn_table(summary: dict) -> str:
    availability = summary.get("availability", {})
    by_kind = summary.get("txn_anomalies_by_kind", {})
    rows = [
        ("workload", "txn"),
        ("settings", summary["settings"]),
        ("seed / seconds", f"{summary['seed']} / {summary['seconds']:.0f}"),
        ("txn committed", summary.get("txn_committed")),
        ("txn aborted (on purpose)", f"{summary.get('txn_aborted')} ({summary.get('txn_aborted_on_purpose')})"),
        ("aborted with data in the log", summary.get("txn_aborted_in_log")),
        (
            "txn indeterminate (resolved committed)",
            f"{summary.get('txn_indeterminate')} ({summary.get('txn_indeterminate_resolved_committed')})",
        ),
        ("inputs with an output", summary.get("inputs_with_output")),
        ("records in the final read", summary.get("final_records")),
        ("txn anomalies", summary.get("txn_anomalies")),
        *((f"  {kind}", by_kind.get(kind, 0)) for kind in txn_checker.KINDS),
        ("committed share, overall", availability.get("overall")),
        ("during faults / outside", f"{availability.get('during_faults')} / {availability.get('outside_faults')}"),
        *_common_rows(summary),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    for anomaly in summary.get("anomalies", [])[:10]:
        lines.append("  " + ", ".join(f"{k}={v}" for k, v in anomaly.items()))
    return "\n".join(lines)

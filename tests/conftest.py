"""Shared fixtures: a real broker process on an ephemeral 127.0.0.1 port.

Every broker a test starts is a child process with its own data directory,
stopped (SIGTERM, then SIGKILL after a grace period) when the test ends.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

STARTED_LINE = re.compile(r"pybroker started: .* listening on (?P<host>[^\s:]+):(?P<port>\d+)")
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 15
PROJECT_ROOT = Path(__file__).resolve().parents[1]


class BrokerProcess:
    """A ``pybroker start`` child process; ``bootstrap`` is its host:port."""

    def __init__(
        self,
        data_dir: Path,
        overrides: dict[str, str] | None = None,
        config_file: Path | None = None,
        command_prefix: list[str] | None = None,
    ):
        """``command_prefix`` runs the broker through another program (e.g. ``ip netns exec NS``)."""
        self.data_dir = Path(data_dir)
        self.command_prefix = list(command_prefix or [])
        self.overrides = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "advertised.listeners": "",
            "log.dirs": str(self.data_dir / "logs"),
            # Kafka's 3 s wait before a new group's first rebalance only slows tests down.
            "group.initial.rebalance.delay.ms": "0",
            # One broker can hold one replica (Kafka's default of 3 needs a cluster).
            "offsets.topic.replication.factor": "1",
            # The same for __transaction_state, whose min.isr default (2) one replica cannot meet.
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            # And for __share_group_state (share groups).
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # The balancer (default node_add) would move partitions that tests
            # place by hand; the balancer's own tests turn it on.
            "balancer.mode": "off",
            **(overrides or {}),
        }
        self.config_file = config_file
        self.process: subprocess.Popen | None = None
        self.host = ""
        self.port = 0
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "BrokerProcess":
        cmd = [*self.command_prefix, sys.executable, "-m", "broker"]
        # PYBROKER_TEST_LOG_LEVEL=DEBUG: every broker a test starts logs at that level (post-mortems).
        if os.environ.get("PYBROKER_TEST_LOG_LEVEL"):
            cmd += ["--log-level", os.environ["PYBROKER_TEST_LOG_LEVEL"]]
        cmd.append("start")
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.process = subprocess.Popen(
            cmd,
            cwd=self.data_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        started = threading.Event()

        def pump() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                match = STARTED_LINE.search(line)
                if match and not started.is_set():
                    self.host, self.port = match.group("host"), int(match.group("port"))
                    started.set()
            started.set()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        if not started.wait(START_TIMEOUT_S) or not self.port:
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.output))
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self._reader is not None:
            self._reader.join(5)
        return self.process.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_text(self) -> str:
        return "".join(self.output)


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers with ``broker_factory(**overrides)``; all are stopped at teardown."""
    started: list[BrokerProcess] = []
    counter = [0]

    def start(overrides: dict[str, str] | None = None, data_dir: Path | None = None, **kwargs) -> BrokerProcess:
        if data_dir is None:
            counter[0] += 1
            data_dir = tmp_path / f"broker{counter[0]}"
        data_dir.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(data_dir, overrides, **kwargs).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for a whole test module (tests use distinct topic names)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared-broker")).start()
    yield broker
    broker.stop()


# --------------------------------------------------------------------------- two workers
# The suite runs on two pytest-xdist workers (``-n 2``, pyproject's addopts) with
# the scheduler below. The tests that start processes (brokers, clusters, Spark, the tools)
# all go to one worker and run one after another, exactly as in a serial run, so
# a cluster test's timing never competes with another cluster. The in-process
# tests (pure units, simulations, property tests) go to the other worker at a
# lower CPU priority: they fill the CPU the process tests leave idle and yield it
# whenever a process test wants it. ``-n 0`` runs everything serially.
#
# The in-process worker is done long before the process worker (about ten minutes
# against most of an hour), so the modules of BESIDE_CLUSTERS are left out of the
# process group: each is a scope of its own, dealt after the two groups, one module
# at a time, to whichever worker runs out of work first, in practice the in-process
# one. They start one broker at most, or a tool (never a cluster, so two clusters
# still never run at once), and their waits are bounds that leave room for a CPU shared with a
# cluster, not timings. On the in-process worker they run at its lower priority (a
# broker inherits its parent's niceness), so a cluster test on the other worker
# keeps the CPU first.
IN_PROCESS_DIRS = {"unit", "sim", "property", "golden", "conformance"}
# Modules in those directories that start processes (a broker, a tool, git, Spark, mkdocs).
STARTS_PROCESSES = {
    "test_api_key_literals.py", "test_arrow_decoder.py", "test_bench_handoff.py", "test_bench_request_cost.py",
    "test_bench_request_path.py", "test_bench_suite.py", "test_cli.py",
    "test_cli_edges.py", "test_compose_files.py", "test_docs_site.py", "test_dump_log.py",
    "test_gitignore.py", "test_layering.py", "test_leader_election_tool.py", "test_many_partitions.py",
    "test_segment_reader.py", "test_segment_reader_txn.py", "test_tls.py",
}  # fmt: skip
# Paths under tests/; a module not named here stays in the process group. Left out on
# purpose: the modules that start two brokers or more (docs pages run as printed among
# them), or time a fetch wait, a quota, a session, idle or reauthentication timeout,
# retention checks, an event loop's lag or a page load, or hold thousands of sockets.
BESIDE_CLUSTERS = {
    "interop/test_acls.py", "interop/test_admin_cluster.py", "interop/test_admin_topics.py",
    "interop/test_authorization.py", "interop/test_authorization_apis.py", "interop/test_auto_create.py",
    "interop/test_bad_input.py", "interop/test_cli_acls.py", "interop/test_cli_configs.py",
    "interop/test_cli_console.py", "interop/test_cli_offsets.py", "interop/test_cli_parsing.py",
    "interop/test_cli_rough_edges.py", "interop/test_cli_security.py", "interop/test_cli_topics.py",
    "interop/test_compaction.py", "interop/test_configs.py", "interop/test_consumer_group_admin.py",
    "interop/test_consumer_protocol.py", "interop/test_container_entrypoint.py", "interop/test_dir_lock.py",
    "interop/test_dump_offsets_decoder.py", "interop/test_dynamic_broker_configs.py",
    "interop/test_every_advertised_version.py", "interop/test_feature_flags.py", "interop/test_fetch_sessions.py",
    "interop/test_first_start.py", "interop/test_group_admin.py", "interop/test_group_protocol.py",
    "interop/test_groups_cli.py", "interop/test_groups_cli_kafka_flags.py", "interop/test_groups_display.py",
    "interop/test_hosted_after_restart.py", "interop/test_idempotent_replay.py", "interop/test_idempotent_restart.py",
    "interop/test_kcat.py", "interop/test_list_offsets.py", "interop/test_metadata_by_topic_id.py",
    "interop/test_metrics.py", "interop/test_oauthbearer_jwks.py", "interop/test_produce_consume_matrix.py",
    "interop/test_produce_record_errors.py", "interop/test_reassign_cli.py", "interop/test_rest_auth.py",
    "interop/test_rest_consumers.py", "interop/test_rest_links.py", "interop/test_rest_openapi.py",
    "interop/test_rest_proxy.py", "interop/test_rest_records_parser.py", "interop/test_share_group_offsets.py",
    "interop/test_share_group_offsets_authorization.py", "interop/test_share_groups.py", "interop/test_smoke.py",
    "interop/test_startup_errors.py", "interop/test_tls.py", "interop/test_tls_reload.py",
    "interop/test_transactions.py", "interop/test_transactions_cli.py", "interop/test_transactions_v2_wire.py",
    "interop/test_txn_coordinator_api.py", "interop/test_txn_offset_commit.py", "compat/test_librdkafka_harness.py",
    "faults/test_checker.py", "links/test_describe_mirrors.py", "links/test_failback_rules.py",
    "links/test_group_translation_rules.py", "links/test_mirror_core.py", "links/test_multi_master_rules.py",
    "links/test_offset_sync_rules.py", "links/test_watch_rules.py", "schemas/test_avro_format.py",
    "schemas/test_formats.py", "schemas/test_json_format.py", "schemas/test_protobuf_format.py",
    "schemas/test_registry_api.py", "schemas/test_registry_console.py", "schemas/test_registry_contexts.py",
    "schemas/test_registry_openapi.py", "schemas/test_registry_state.py", "schemas/test_rest_schema_produce.py",
    "schemas/test_schemas_cli.py", "schemas/test_validation.py", "schemas/test_validation_check.py",
    "schemas/test_validation_rules.py", "unit/test_api_key_literals.py", "unit/test_cli.py", "unit/test_cli_edges.py",
    "unit/test_compose_files.py", "unit/test_docs_site.py", "unit/test_dump_log.py", "unit/test_gitignore.py",
    "unit/test_layering.py", "unit/test_leader_election_tool.py", "unit/test_segment_reader.py",
    "unit/test_segment_reader_txn.py", "unit/test_tls.py",
}  # fmt: skip
IN_PROCESS_GROUP = "in-process"
PROCESSES_GROUP = "processes"
IN_PROCESS_NICE = 10


def xdist_group_of(path: Path) -> str:
    """The scope a test module is dealt in: one of the two groups, or the module itself."""
    relative = path.relative_to(PROJECT_ROOT / "tests")
    if relative.parts[0] in IN_PROCESS_DIRS and path.name not in STARTS_PROCESSES:
        return IN_PROCESS_GROUP
    if relative.as_posix() in BESIDE_CLUSTERS:
        return relative.as_posix()
    return PROCESSES_GROUP


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling over the scopes above: each goes whole to one worker."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(PROJECT_ROOT / nodeid.split("::", 1)[0])

        def _assign_work_unit(self, node) -> None:
            # xdist deals the biggest scopes first; the two groups go first whatever
            # their sizes, so each worker starts with one of them and the modules
            # wait for whichever runs out first.
            for group in (PROCESSES_GROUP, IN_PROCESS_GROUP):
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


_niced = False


def pytest_runtest_setup(item):
    global _niced
    if not _niced and os.environ.get("PYTEST_XDIST_WORKER") and xdist_group_of(Path(str(item.path))) == IN_PROCESS_GROUP:
        os.nice(IN_PROCESS_NICE)
        _niced = True


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value or the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)

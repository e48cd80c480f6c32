"""The cluster under test: the services of docker/compose.yaml as processes,
each in its own network namespace behind one bridge, plus a ``client`` host
for the workload. Every service starts through the image's entrypoint with
its compose environment and the suite's timings on top, so what is tested is
what ``docker compose up`` runs. Each broker keeps its data on its own small
tmpfs, so one can be filled up on purpose. A broker has two log dirs there
(JBOD, ``logs`` and ``logs2``) and its metadata log in a third, so that
either log dir can fail (the eio nemesis) while the broker serves from the
other; both share the one tmpfs, since a disk-full is one disk filling and the
EIO shim fails one dir by its path, not by its file system.

The cluster knows how to hurt itself (signals, cuts in the network, a slow
link, a full disk) and how to heal; it never decides when: the nemesis does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker.tools.groups import KafkaConnection, ToolError
from protocol.errors import ErrorCode
from protocol.records import BATCH_HEADER_BYTES, iter_batches
from broker.tools.metadata_quorum import describe_quorum
from tests.faults import eio
from tests.faults.clock import preload_env, set_offset
from tests.netns import VirtualNetwork

PROJECT_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = PROJECT_ROOT / "docker" / "compose.yaml"
CLIENT_HOST = "client"


@dataclass(frozen=True)
class Topology:
    """A cluster file and the client hosts beside it. With more than one client
    host, the first stays with the majority of a split and the others go with
    the minority (nemesis.py), so that clients sit on both sides."""

    compose_file: Path
    client_hosts: tuple[str, ...]
    start_bound_s: float = 90  # every broker serving (FaultCluster.start_all)


TOPOLOGIES = {
    # 3 controllers + 3 brokers, one client host.
    "default": Topology(COMPOSE_FILE, (CLIENT_HOST,)),
    # 5 combined nodes (a five-voter quorum), a client host on each side of a
    # split. Five brokers importing and starting at once on a busy 2-core
    # machine took over 90 s (a run failed on "node-1 never served").
    "five": Topology(PROJECT_ROOT / "docker" / "compose.five.yaml", ("client-a", "client-b"), start_bound_s=180),
}
INTERNAL_PORT = 19092
CONTROLLER_PORT = 9093
STOP_BOUND_S = 20
REPLICATION_FACTOR = 3  # of every topic a run makes (workload.create_run_topic)
BROKER_TMPFS_BYTES = 512 * 1024 * 1024
# A broker's log.dirs (JBOD) and metadata.log.dir, under its data dir.
BROKER_LOG_DIR_NAMES = ("logs", "logs2")
BROKER_METADATA_DIR_NAME = "metadata"

# Kafka's defaults (9 s sessions, 30 s replica lag) make a fault's aftermath
# last longer than a quick run; these keep the same rules, only faster.
FAULT_TIMINGS = {
    "KAFKA_BROKER_SESSION_TIMEOUT_MS": "3000",
    "KAFKA_BROKER_HEARTBEAT_INTERVAL_MS": "500",
    "KAFKA_REPLICA_LAG_TIME_MAX_MS": "4000",
    "KAFKA_CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS": "1000",
    "KAFKA_CONTROLLER_QUORUM_FETCH_TIMEOUT_MS": "2000",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    # 50 partitions x 3 replicas of __consumer_offsets on 2 cores only slow
    # every fault's recovery; five show the same coordinator moves.
    "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "5",
    # Retention is checked every few seconds (Kafka: 5 minutes, longer than a
    # quick run), so a clock jump that made a broker delete by time would do it
    # within the run; the run's topic keeps an hour (workload.create_topic).
    "KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS": "5000",
    # The scrubber's pass every 2 s instead of every minute, so that a corrupt
    # byte nobody reads is found within a fault window.
    "KAFKA_LOG_SCRUB_INTERVAL_MS": "2000",
}


def load_services(path: Path = COMPOSE_FILE) -> dict:
    from ruamel.yaml import YAML  # comes with check-jsonschema (the test extra)

    return YAML(typ="safe", pure=True).load(path.read_text())["services"]


def wait_until(predicate, bound_s: float, interval_s: float = 0.5):
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval_s)
    return None


@dataclass
class Node:
    service: str
    hostname: str
    node_id: int
    roles: tuple[str, ...]
    environment: dict[str, str]
    data_dir: Path
    process: subprocess.Popen | None = None
    paused: bool = False
    runs: int = 0
    mounted: bool = False
    filler: Path | None = None
    log_paths: list[Path] = field(default_factory=list)
    clock_offset_s: float = 0.0  # how far its wall clock is off the true time (the clock shim)
    failing_dirs: list[Path] = field(default_factory=list)  # log dirs failing with EIO (the EIO shim)
    code_root: Path = PROJECT_ROOT  # the pybroker tree it runs (the upgrade nemesis: an older one)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class FaultCluster:
    def __init__(
        self,
        root: Path,
        *,
        extra_env: dict[str, str] | None = None,
        compose_file: Path = COMPOSE_FILE,
        subnet: int | None = None,
        clock_shim: Path | None = None,
        eio_shim: Path | None = None,
        client_hosts: tuple[str, ...] = (CLIENT_HOST,),
    ):
        """``clock_shim``: the built tests/faults/clock_shim.c, preloaded into
        every broker so that ``jump_clock`` can move its wall clock;
        ``eio_shim``: tests/faults/eio_shim.c, so that ``fail_dir`` can fail a log dir;
        ``client_hosts``: the hosts the workload runs on (Topology)."""
        self.root = Path(root)
        self.client_hosts = tuple(client_hosts)
        self.clock_shim = clock_shim
        self.eio_shim = eio_shim
        self.root.mkdir(parents=True, exist_ok=True)
        services = load_services(compose_file)
        self.nodes: dict[str, Node] = {}
        for name, service in services.items():
            env = {key: str(value) for key, value in service["environment"].items()}
            env.update(FAULT_TIMINGS)
            env.update(extra_env or {})
            node = Node(
                service=name,
                hostname=service["hostname"],
                node_id=int(env["KAFKA_NODE_ID"]),
                roles=tuple(r.strip() for r in env["KAFKA_PROCESS_ROLES"].split(",")),
                environment=env,
                data_dir=self.root / service["hostname"],
            )
            self.nodes[node.hostname] = node
        self.net = VirtualNetwork([*self.nodes, *self.client_hosts], subnet=subnet)
        self.blocked: set[tuple[str, str]] = set()
        self.slowed: set[str] = set()
        try:
            for node in self.nodes.values():
                node.data_dir.mkdir(parents=True, exist_ok=True)
                if node.is_broker:
                    subprocess.run(
                        ["mount", "-t", "tmpfs", "-o", f"size={BROKER_TMPFS_BYTES}", "tmpfs", str(node.data_dir)],
                        check=True,
                        capture_output=True,
                        timeout=20,
                    )
                    node.mounted = True
        except Exception:
            self.close()
            raise

    # ------------------------------------------------------------- who is who

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_controller]

    def by_id(self, node_id: int) -> Node | None:
        return next((n for n in self.nodes.values() if n.node_id == node_id), None)

    def bootstrap(self) -> str:
        """For clients on the client hosts: every broker's INTERNAL listener by hostname."""
        return ",".join(f"{n.hostname}:{INTERNAL_PORT}" for n in self.brokers)

    def client_command(self, *args: str, host: str | None = None) -> list[str]:
        """A program on ``host`` (the first client host by default)."""
        return [*self.net.exec_prefix(host or self.client_hosts[0]), sys.executable, *args]

    def client_env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    # -------------------------------------------------------------- processes

    def start(self, node: Node) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("KAFKA_")}
        env.update(node.environment)
        env["KAFKA_LOG_DIRS"] = ",".join(str(d) for d in self.log_dirs(node))  # the named volume
        if node.is_broker:
            env["KAFKA_METADATA_LOG_DIR"] = str(node.data_dir / BROKER_METADATA_DIR_NAME)
        env["PYBROKER_CONFIG_FILE"] = str(node.data_dir / "server.properties")
        env["PYTHONPATH"] = str(node.code_root) + os.pathsep + env.get("PYTHONPATH", "")
        preloads = []
        if self.clock_shim is not None and node.is_broker:
            # Outside the tmpfs: a full disk (disk-full) must not stop a jump or its heal.
            set_offset(self._clock_file(node), node.clock_offset_s)
            env.update(preload_env(self.clock_shim, self._clock_file(node)))
            preloads.append(env["LD_PRELOAD"])
        if self.eio_shim is not None and node.is_broker:
            eio.set_failing(self._eio_file(node), node.failing_dirs)  # outside the tmpfs too
            env.update(eio.preload_env(self.eio_shim, self._eio_file(node)))
            preloads.append(env["LD_PRELOAD"])
        if preloads:
            env["LD_PRELOAD"] = ":".join(preloads)
        node.runs += 1
        log_path = self.root / f"{node.hostname}.run{node.runs}.log"
        node.log_paths.append(log_path)
        with open(log_path, "w") as log:
            node.process = subprocess.Popen(
                [*self.net.exec_prefix(node.hostname), sys.executable, "-m", "broker.container"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        node.paused = False

    def start_all(self, bound_s: float = 90) -> None:
        for node in self.nodes.values():
            self.start(node)
        for node in self.brokers:
            if not wait_until(lambda node=node: self.serving(node), bound_s):
                raise RuntimeError(f"{node.hostname} never served:\n{self.tail(node)}")

    def kill(self, node: Node) -> None:
        if node.running():
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(STOP_BOUND_S)
        node.paused = False

    def stop(self, node: Node, bound_s: float = STOP_BOUND_S) -> bool:
        """SIGTERM (a controlled shutdown) and wait; SIGKILL past ``bound_s``.
        Whether it stopped by itself."""
        self.resume(node)  # a stopped process cannot act on SIGTERM
        if not node.running():
            return True
        node.process.send_signal(signal.SIGTERM)
        try:
            node.process.wait(bound_s)
            return True
        except subprocess.TimeoutExpired:
            self.kill(node)
            return False

    def pause(self, node: Node) -> None:
        if node.running():
            node.process.send_signal(signal.SIGSTOP)
            node.paused = True

    def resume(self, node: Node) -> None:
        if node.paused and node.running():
            node.process.send_signal(signal.SIGCONT)
        node.paused = False

    def restart_if_down(self, node: Node) -> bool:
        self.resume(node)
        if node.running():
            return False
        self.start(node)
        return True

    def stop_all(self) -> None:
        for node in self.nodes.values():
            self.resume(node)  # a stopped process cannot act on SIGTERM
            if node.running():
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            if node.process is None:
                continue
            try:
                node.process.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(5)

    def tail(self, node: Node, chars: int = 3000) -> str:
        return node.log_paths[-1].read_text(errors="replace")[-chars:] if node.log_paths else ""

    # ---------------------------------------------------------------- queries
    # From the test's own (host) namespace, by IP: names resolve only inside.

    def _connection(self, node: Node, port: int, timeout_s: float) -> KafkaConnection:
        return KafkaConnection(self.net.ips[node.hostname], port, timeout_s)

    def metadata(self, node: Node, timeout_s: float = 3.0):
        connection = self._connection(node, INTERNAL_PORT, timeout_s)
        try:
            return connection.call("Metadata", 12, topics=None, allow_auto_topic_creation=False)
        finally:
            connection.close()

    def serving(self, node: Node) -> bool:
        """The broker answers and lists itself among the live brokers."""
        if not node.running() or node.paused:
            return False
        try:
            return node.node_id in {b.node_id for b in self.metadata(node).brokers}
        except (OSError, ToolError, TimeoutError, ConnectionError):
            return False

    def partitions(self, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] | None:
        """partition -> (leader, replicas, isr) as the first answering broker says."""
        for node in self.brokers:
            if not node.running() or node.paused:
                continue
            try:
                body = self.metadata(node)
            except (OSError, ToolError, TimeoutError, ConnectionError):
                continue
            for t in body.topics:
                if t.name == topic and t.error_code == 0:
                    return {
                        p.partition_index: (p.leader_id, tuple(p.replica_nodes), tuple(sorted(p.isr_nodes)))
                        for p in t.partitions
                    }
            return None
        return None

    def fully_replicated(self, topics: list[str]) -> bool:
        """Every partition of ``topics`` has a leader and all replicas in its ISR."""
        for topic in topics:
            states = self.partitions(topic)
            if not states or any(leader < 0 or len(isr) != len(replicas) for leader, replicas, isr in states.values()):
                return False
        return True

    def active_controller(self) -> Node | None:
        for _, partition in self.quorum_answers():
            if partition.leader_id >= 0:
                return self.by_id(partition.leader_id)
        return None

    def quorum_answers(self):
        """(controller, its DescribeQuorum partition) for each running controller
        that answers, in order."""
        for node in self.controllers:
            if not node.running() or node.paused:
                continue
            try:
                response, _, _ = describe_quorum(f"{self.net.ips[node.hostname]}:{CONTROLLER_PORT}", 3.0)
            except (OSError, ToolError, TimeoutError, ConnectionError):
                continue
            for topic in response.topics:
                yield from ((node, partition) for partition in topic.partitions)

    # ---------------------------------------------------------------- network

    def cut(self, side_a: list[str], side_b: list[str], *, one_way: bool = False) -> None:
        """Frames from every host of ``side_a`` to every host of ``side_b`` are
        lost, and back too unless ``one_way``."""
        for a in side_a:
            for b in side_b:
                pairs = [(a, b)] if one_way else [(a, b), (b, a)]
                for source, target in pairs:
                    if (source, target) not in self.blocked:
                        self.net.block(source, target)
                        self.blocked.add((source, target))

    def heal_network(self) -> None:
        for source, target in sorted(self.blocked):
            self.net.unblock(source, target)
        self.blocked.clear()
        for hostname in sorted(self.slowed):
            self.net.clear_qdisc(hostname)
        self.slowed.clear()

    def slow(self, hostname: str, rate: str) -> None:
        self.net.limit_rate(hostname, rate)
        self.slowed.add(hostname)

    def netem(self, hostname: str, *args: str) -> None:
        self.net.netem(hostname, *args)
        self.slowed.add(hostname)

    # ------------------------------------------------------------------ clock

    def _clock_file(self, node: Node) -> Path:
        return self.root / f"{node.hostname}.clock-offset"

    def jump_clock(self, node: Node, offset_s: float) -> None:
        """From now on (within the shim's reload time) the broker's wall clock
        reads the true time plus ``offset_s``; its monotonic clock is untouched.
        A restart keeps the offset: it is the host's clock, not the process's."""
        if self.clock_shim is None or not node.is_broker:
            raise RuntimeError(f"{node.hostname} does not run under the clock shim")
        node.clock_offset_s = offset_s
        set_offset(self._clock_file(node), offset_s)

    # ------------------------------------------------------------------- disk

    def fill_disk(self, node: Node) -> int:
        """Take every free byte of the broker's tmpfs; the bytes taken."""
        free = shutil.disk_usage(node.data_dir).free
        node.filler = node.data_dir / "filler"
        with open(node.filler, "wb") as f:
            block = b"\0" * (1 << 20)
            try:
                while True:
                    f.write(block)
            except OSError:
                pass  # ENOSPC: full, as meant
        try:
            with open(node.data_dir / "filler-tail", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass
        return free

    def free_disk(self, node: Node) -> None:
        for name in ("filler", "filler-tail"):
            (node.data_dir / name).unlink(missing_ok=True)
        node.filler = None

    def log_dirs(self, node: Node, data_dir: Path | None = None) -> list[Path]:
        """The node's log.dirs: two for a broker (JBOD), one for a controller."""
        names = BROKER_LOG_DIR_NAMES if node.is_broker else BROKER_LOG_DIR_NAMES[:1]
        return [(data_dir or node.data_dir) / name for name in names]

    def partition_dir(self, node: Node, topic: str, partition: int, data_dir: Path | None = None) -> Path:
        """The partition's directory in whichever log dir holds it (the first when none does)."""
        candidates = [d / f"{topic}-{partition}" for d in self.log_dirs(node, data_dir)]
        return next((c for c in candidates if c.is_dir()), candidates[0])

    # -------------------------------------------------------------------- eio

    def _eio_file(self, node: Node) -> Path:
        return self.root / f"{node.hostname}.eio-control"

    def fail_dir(self, node: Node, directory: Path) -> None:
        """From now on (within the shim's reload time) every write and sync of the
        broker under ``directory`` fails with EIO, as on a failing disk."""
        if self.eio_shim is None or not node.is_broker:
            raise RuntimeError(f"{node.hostname} does not run under the EIO shim")
        node.failing_dirs = [directory]
        eio.set_failing(self._eio_file(node), node.failing_dirs)

    def heal_dirs(self, node: Node) -> None:
        """Writes work again. The broker keeps the dir offline until it restarts (KIP-112)."""
        node.failing_dirs = []
        if self.eio_shim is not None and node.is_broker:
            eio.set_failing(self._eio_file(node), [])

    def offline_log_dirs(self, node: Node, timeout_s: float = 3.0) -> list[str] | None:
        """The log dirs the broker's DescribeLogDirs answers KAFKA_STORAGE_ERROR
        for (offline after a failed write), or None when it does not answer."""
        if not node.running() or node.paused:
            return None
        try:
            connection = self._connection(node, INTERNAL_PORT, timeout_s)
            try:
                body = connection.call("DescribeLogDirs", 1, topics=None)
            finally:
                connection.close()
        except (OSError, ToolError, TimeoutError, ConnectionError):
            return None
        return sorted(r.log_dir for r in body.results if r.error_code == ErrorCode.KAFKA_STORAGE_ERROR)

    def restart(self, node: Node) -> None:
        """Stop the broker (SIGTERM: a controlled shutdown, bounded; then SIGKILL) and start it again."""
        self.resume(node)
        if node.running():
            node.process.send_signal(signal.SIGTERM)
            try:
                node.process.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(5)
        self.start(node)

    def corrupt_segment(self, node: Node, topic: str, partition: int, rng, *, closed: bool) -> dict:
        """Flip 1-4 bytes, chosen by ``rng``, inside the records of one batch of
        the partition's segment on the broker's disk: a closed segment (the
        newest but one, if the log has rolled; else the active one) or the
        active one (the newest). Only the records area (after the 61-byte batch
        header) is touched, so the framing still parses and the batch's CRC is
        what must catch it. What was done, for the results."""
        segments = sorted(self.partition_dir(node, topic, partition).glob("*.log"))
        if not segments:
            raise RuntimeError(f"{node.hostname} holds no segment of {topic}-{partition}")
        which = "closed" if closed and len(segments) > 1 else "active"
        path = rng.choice(segments[:-1]) if which == "closed" else segments[-1]
        with open(path, "r+b") as f:
            data = f.read()
            batches = [(p, size, h) for p, size, h in iter_batches(data, allow_truncated_tail=True) if size > BATCH_HEADER_BYTES]
            if not batches:
                raise RuntimeError(f"{path.name} of {node.hostname} holds no batch with records")
            position, size, header = rng.choice(batches)
            length = rng.randint(1, min(4, size - BATCH_HEADER_BYTES))
            at = rng.randrange(position + BATCH_HEADER_BYTES, position + size - length + 1)
            flipped = bytes(b ^ rng.randint(1, 255) for b in data[at : at + length])
            f.seek(at)
            f.write(flipped)
        return {
            "node": node.hostname,
            "partition": partition,
            "segment": which,
            "file": path.name,
            "batch_offset": header.base_offset,
            "position": at,
            "bytes": length,
        }

    def replica_logs(self, topic: str, partition: int) -> dict[str, bytes]:
        """Each broker's log of the partition as its batches' bytes end to end
        (segment boundaries aside), from the copies kept after ``close``. With
        more brokers than replicas, brokers holding no copy of the partition
        are left out (run.compare_replicas counts the copies)."""
        logs = {}
        for node in self.brokers:
            kept = self.partition_dir(node, topic, partition, data_dir=self.root / f"{node.hostname}.data")
            if len(self.brokers) > REPLICATION_FACTOR and not kept.is_dir():
                continue
            chunks = []
            for path in sorted(kept.glob("*.log")):
                data = path.read_bytes()
                end = 0
                for position, size, _ in iter_batches(data, allow_truncated_tail=True):
                    end = position + size
                chunks.append(data[:end])
            logs[node.hostname] = b"".join(chunks)
        return logs

    # --------------------------------------------------------------- teardown

    def close(self) -> None:
        try:
            self.stop_all()
        finally:
            try:
                if hasattr(self, "net"):
                    self.net.close()
            finally:
                for node in self.nodes.values():
                    if node.mounted:
                        self._keep_data(node)
                        subprocess.run(["umount", "-l", str(node.data_dir)], capture_output=True, timeout=20)
                        node.mounted = False

    def _keep_data(self, node: Node) -> None:
        """The broker's logs outlive its tmpfs, for post-mortems (pybroker dump-log)."""
        self.free_disk(node)
        kept = self.root / f"{node.hostname}.data"
        try:
            shutil.copytree(node.data_dir, kept, dirs_exist_ok=True)
        except (OSError, shutil.Error):
            pass  # a partial copy is still worth keeping

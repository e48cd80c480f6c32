"""``pybroker dev-cluster --nodes N``: a local cluster of N combined nodes
(``process.roles=broker,controller``) as child processes, for development.

What it does, in order:

1. Writes ``D/node-<i>.properties`` for i = 1..N (``D`` is ``--data-dir``, or a
   new temporary directory), each node's data in ``D/node-<i>/data``, and formats
   that storage with one new cluster id (as ``pybroker storage format`` does).
   A ``D`` that already holds a dev cluster's files is started again as it is
   (same node count; its ports are those of its files).
2. Starts every node with ``pybroker start --config D/node-<i>.properties``,
   its output appended to ``D/node-<i>.log`` and its pid in ``D/node-<i>.pid``.
3. Once every node answers a Metadata request listing all N brokers, prints
   exactly one ``bootstrap.servers=HOST:PORT,...`` line, then each node's
   console, REST and metrics URLs, log and pid file.
4. Keeps the nodes running and restarts none by itself: a node that exits is
   reported on stderr (which node, its exit code, its log) and the others go
   on. ``restart <i>`` on standard input starts a stopped node again (or run
   ``pybroker start --config D/node-<i>.properties`` yourself; that process is
   then yours to stop). ``add-broker`` adds a broker-only node
   (``process.roles=broker``, ``D/broker-<id>.properties``, free ports) to the
   running cluster, the way an operator grows a cluster: the controllers'
   balancer then moves replicas onto it (``balancer.mode``, default
   ``node_add``). Added brokers are part of the cluster from then on: a later
   run with the same ``D`` starts them too.
5. On SIGINT (Ctrl-C) or SIGTERM, sends SIGTERM to every node, SIGKILL to
   those still running after ``--stop-timeout`` seconds (a second signal does
   it at once), and exits 0.

Ports: with ``--base-port P``, consecutive from P by kind, so that the client
ports come first: clients P..P+N-1, controller listeners P+N..P+2N-1, consoles
P+2N.., REST proxies P+3N.., metrics P+4N.. (5N ports; with P=9092 and N=3:
clients 9092-9094, controllers 9095-9097, consoles 9098-9100, REST 9101-9103,
metrics 9104-9106, the scheme of configs/cluster/). Without it, free ports
the system hands out.

Replication: new topics get min(3, N) replicas and ``min.insync.replicas``
min(2, N); so do ``__consumer_offsets`` and ``__transaction_state``.
"""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from broker.config import ConfigError, load_config_file, parse_properties

READY_POLL_S = 0.25
WATCH_POLL_S = 0.2
# How long an added broker may take to register before dev-cluster says so.
ADD_BROKER_READY_S = 60.0
METADATA_VERSION = 9
PORT_KINDS = ("client", "controller", "console", "rest", "metrics")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class DevClusterError(Exception):
    """One line saying what is wrong; dev-cluster exits 1."""


@dataclass
class NodePlan:
    node_id: int
    host: str
    ports: dict[str, int]
    config_file: Path
    data_dir: Path
    log_file: Path
    pid_file: Path


def plan_ports(nodes: int, base_port: int | None) -> list[dict[str, int]]:
    """Per node, a port of each kind (see the module docstring)."""
    count = nodes * len(PORT_KINDS)
    if base_port is None:
        ports = free_ports(count)
    else:
        if not 1 <= base_port or base_port + count - 1 > 65535:
            raise DevClusterError(f"--base-port {base_port}: {count} ports from it do not fit below 65536")
        ports = list(range(base_port, base_port + count))
    return [{kind: ports[k * nodes + i] for k, kind in enumerate(PORT_KINDS)} for i in range(nodes)]


def free_ports(count: int) -> list[int]:
    """Ports the system hands out now (held together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def node_properties(node_id: int, nodes: int, host: str, ports: list[dict[str, int]], data_dir: Path, cluster_id: str) -> str:
    """A combined node's server.properties for the dev cluster."""
    own = ports[node_id - 1]
    voters = ",".join(f"{i + 1}@{host}:{p['controller']}" for i, p in enumerate(ports))
    return _properties(node_id, f"node {node_id} of {nodes}", "node", True, nodes, host, own, voters, data_dir, cluster_id)


def broker_properties(node_id: int, voter_count: int, host: str, own: dict[str, int], voters: str, data_dir: Path,
                      cluster_id: str) -> str:
    """An added broker-only node's server.properties (``add-broker``): it joins the
    quorum's controllers as a broker, with the replication defaults of the cluster
    it joins (which has ``voter_count`` combined nodes)."""
    return _properties(node_id, f"broker {node_id}, added", "broker", False, voter_count, host, own, voters, data_dir,
                       cluster_id)


def _properties(node_id: int, title: str, prefix: str, combined: bool, nodes: int, host: str, own: dict[str, int],
                voters: str, data_dir: Path, cluster_id: str) -> str:
    replicas, min_isr = min(3, nodes), min(2, nodes)
    bracketed = f"[{host}]" if ":" in host else host
    roles = "broker,controller" if combined else "broker"
    listeners = f"PLAINTEXT://{bracketed}:{own['client']}"
    if combined:
        listeners += f",CONTROLLER://{bracketed}:{own['controller']}"
    return f"""\
# pybroker dev-cluster: {title} (process.roles={roles}).
# Start it again by hand with: pybroker start --config {data_dir.parent.parent / f'{prefix}-{node_id}.properties'}
process.roles={roles}
node.id={node_id}
cluster.id={cluster_id}
controller.quorum.voters={voters}
listeners={listeners}
advertised.listeners=PLAINTEXT://{bracketed}:{own['client']}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs={data_dir}
console.listener=http://{bracketed}:{own['console']}
rest.listener=http://{bracketed}:{own['rest']}
metrics.listener=http://{bracketed}:{own['metrics']}
num.partitions=1
default.replication.factor={replicas}
min.insync.replicas={min_isr}
offsets.topic.replication.factor={replicas}
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
# A development cluster: a group's first rebalance need not wait for more members.
group.initial.rebalance.delay.ms=0
"""


def _node_files(root: Path, node_id: int, prefix: str = "node") -> tuple[Path, Path, Path, Path]:
    """Combined nodes are ``node-<id>``, added brokers ``broker-<id>``."""
    return (root / f"{prefix}-{node_id}.properties", root / f"{prefix}-{node_id}" / "data",
            root / f"{prefix}-{node_id}.log", root / f"{prefix}-{node_id}.pid")


def _format(plan: NodePlan) -> None:
    from storage.meta_properties import format_storage

    config = load_config_file(plan.config_file)
    dirs = list(dict.fromkeys([*config.log_dirs, config.metadata_log_dir]))
    format_storage([Path(d) for d in dirs], config.node_id, config["cluster.id"], ignore_formatted=True)


def prepare(root: Path, nodes: int, host: str, base_port: int | None, say) -> list[NodePlan]:
    """Write (or reuse) the nodes' configs and format their storage."""
    from storage.meta_properties import new_cluster_id

    existing = sorted(root.glob("node-*.properties"))
    plans = []
    if existing:
        if len(existing) != nodes:
            raise DevClusterError(f"{root} holds a dev cluster of {len(existing)} node(s), not --nodes {nodes}")
        say(f"pybroker dev-cluster: starting the cluster in {root} again from its node-*.properties (their ports)")
        for node_id in range(1, nodes + 1):
            config_file, data_dir, log_file, pid_file = _node_files(root, node_id)
            if not config_file.exists():
                raise DevClusterError(f"{root} has no {config_file.name}")
            raw = parse_properties(config_file.read_text())
            ports, advertised_host = _ports_of(raw)
            plans.append(NodePlan(node_id, advertised_host, ports, config_file, data_dir, log_file, pid_file))
        for config_file in sorted(root.glob("broker-*.properties")):  # brokers add-broker added
            node_id = int(config_file.stem.split("-", 1)[1])
            _, data_dir, log_file, pid_file = _node_files(root, node_id, "broker")
            ports, advertised_host = _ports_of(parse_properties(config_file.read_text()), combined=False)
            plans.append(NodePlan(node_id, advertised_host, ports, config_file, data_dir, log_file, pid_file))
    else:
        if host in WILDCARD_HOSTS:
            raise DevClusterError(f"--host {host!r}: give the address clients connect to (it is advertised)")
        cluster_id = new_cluster_id()
        ports = plan_ports(nodes, base_port)
        for node_id in range(1, nodes + 1):
            config_file, data_dir, log_file, pid_file = _node_files(root, node_id)
            config_file.write_text(node_properties(node_id, nodes, host, ports, data_dir, cluster_id))
            plans.append(NodePlan(node_id, host, ports[node_id - 1], config_file, data_dir, log_file, pid_file))
    for plan in plans:
        _format(plan)
    return plans


def _ports_of(raw: dict[str, str], combined: bool = True) -> tuple[dict[str, int], str]:
    """An earlier run's ports by kind, and the host it advertises (an added broker
    has no controller port: 0)."""

    def port_of(text: str) -> int:
        return int(text.rstrip("/").rsplit(":", 1)[1])

    try:
        listeners = dict(item.split("://", 1) for item in raw["listeners"].split(","))
        advertised = raw["advertised.listeners"].split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
        return {
            "client": port_of(listeners["PLAINTEXT"]),
            "controller": port_of(listeners["CONTROLLER"]) if combined else 0,
            "console": port_of(raw["console.listener"]),
            "rest": port_of(raw["rest.listener"]),
            "metrics": port_of(raw["metrics.listener"]),
        }, advertised
    except (KeyError, IndexError, ValueError):
        raise DevClusterError("the node files there are not dev-cluster's (listeners, advertised.listeners, "
                              "console/rest/metrics.listener expected)") from None


class Node:
    """One node's child process."""

    def __init__(self, plan: NodePlan):
        self.plan = plan
        self.host = plan.host
        self.process: subprocess.Popen | None = None
        self.reported = False

    @property
    def node_id(self) -> int:
        return self.plan.node_id

    @property
    def client_address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.plan.ports['client']}"

    def url(self, kind: str, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.plan.ports[kind]}{path}"

    def start(self) -> None:
        command = [sys.executable, "-m", "broker", "start", "--config", str(self.plan.config_file)]
        with open(self.plan.log_file, "ab") as log:
            log.write(f"---- pybroker dev-cluster: starting node {self.node_id} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            log.flush()
            # Its own process group: a Ctrl-C in the terminal reaches dev-cluster
            # only, which stops the nodes itself (and knows they are stopping).
            self.process = subprocess.Popen(
                command, cwd=self.plan.config_file.parent, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.plan.pid_file.write_text(f"{self.process.pid}\n")
        self.reported = False

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def forget_pid(self) -> None:
        try:
            self.plan.pid_file.unlink()
        except FileNotFoundError:
            pass


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def node_view(node: Node, timeout_s: float) -> set[int] | None:
    """The broker ids ``node`` lists in Metadata, or None when it does not answer."""
    from broker.tools.client import KafkaConnection, ToolError

    try:
        connection = KafkaConnection(node.host, node.plan.ports["client"], timeout_s)
    except (OSError, ToolError):
        return None
    try:
        metadata = connection.call(
            "Metadata", METADATA_VERSION, topics=[], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return {b.node_id for b in metadata.brokers}
    except (OSError, ToolError):
        return None
    finally:
        connection.close()


class DevCluster:
    def __init__(self, root: Path, plans: list[NodePlan], out=sys.stdout, err=sys.stderr):
        self.root = root
        self.nodes = [Node(plan) for plan in plans]
        self.out = out
        self.err = err
        self.signals = 0
        self.commands: queue.Queue[str] = queue.Queue()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def warn(self, text: str) -> None:
        print(f"pybroker dev-cluster: {text}", file=self.err, flush=True)

    def on_signal(self, signum, frame) -> None:
        self.signals += 1
        if self.signals > 1:  # asked again while stopping: stop now
            for node in self.nodes:
                if node.running():
                    node.process.kill()

    def report_exits(self, stopping: bool) -> None:
        for node in self.nodes:
            if node.process is None or node.running() or node.reported:
                continue
            node.reported = True
            node.forget_pid()
            if not stopping:
                self.warn(
                    f"node {node.node_id} (pid {node.process.pid}) {_exit_text(node.process.returncode)}; the other "
                    f"nodes keep running. Its log: {node.plan.log_file}. Type 'restart {node.node_id}' to start it again."
                )

    def wait_ready(self, timeout_s: float) -> bool:
        """Every node answers Metadata listing all the nodes; False when time is up,
        a node exited, or a signal came."""
        wanted = {node.node_id for node in self.nodes}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.signals:
            dead = [node for node in self.nodes if not node.running()]
            if dead:
                for node in dead:
                    self.warn(f"node {node.node_id} {_exit_text(node.process.returncode)} while starting; see {node.plan.log_file}")
                    node.reported = True
                    node.forget_pid()
                return False
            if all(node_view(node, 2.0) == wanted for node in self.nodes):
                return True
            time.sleep(READY_POLL_S)
        return False

    def print_ready(self) -> None:
        self.say("bootstrap.servers=" + ",".join(node.client_address for node in self.nodes))
        for node in self.nodes:
            self.say(
                f"node {node.node_id}: console {node.url('console', '/')}  REST {node.url('rest', '/v3')}  "
                f"metrics {node.url('metrics', '/metrics')}  log {node.plan.log_file}  pid file {node.plan.pid_file}"
            )
        self.say("Ctrl-C stops every node. A node that stops is not restarted: type 'restart N' here "
                 f"(or run 'pybroker start --config {self.root}/node-N.properties' yourself). "
                 "'add-broker' adds a broker to the running cluster.")

    def add_broker(self) -> None:
        """A broker-only node with the next free id, formatted with the cluster's id
        and started; once it is registered, say so (the balancer fills it)."""
        combined = [node for node in self.nodes if node.plan.ports["controller"]]
        first = parse_properties(combined[0].plan.config_file.read_text())
        node_id = max(node.node_id for node in self.nodes) + 1
        host = combined[0].host
        own = dict(zip(("client", "console", "rest", "metrics"), free_ports(4)), controller=0)
        config_file, data_dir, log_file, pid_file = _node_files(self.root, node_id, "broker")
        config_file.write_text(broker_properties(node_id, len(combined), host, own, first["controller.quorum.voters"],
                                                 data_dir, first["cluster.id"]))
        plan = NodePlan(node_id, host, own, config_file, data_dir, log_file, pid_file)
        _format(plan)
        node = Node(plan)
        self.nodes.append(node)
        node.start()
        self.warn(f"broker {node_id} starting (pid {node.process.pid}), its config {config_file}")
        deadline = time.monotonic() + ADD_BROKER_READY_S
        while time.monotonic() < deadline and node.running() and not self.signals:
            # Registered and unfenced: its own Metadata lists it.
            if node_id in (node_view(node, 2.0) or ()):
                self.say(f"broker {node_id}: {node.client_address}  console {node.url('console', '/')}  "
                         f"REST {node.url('rest', '/v3')}  metrics {node.url('metrics', '/metrics')}  "
                         f"log {log_file}  pid file {pid_file}")
                self.say(f"broker {node_id} joined; the balancer moves replicas onto it: pybroker cluster balance "
                         f"--bootstrap-server {combined[0].client_address} --describe")
                return
            time.sleep(READY_POLL_S)
        if node.running():
            self.warn(f"broker {node_id} is not registered after {ADD_BROKER_READY_S:g} s; see {log_file}")

    def read_commands(self) -> None:
        """Standard input, line by line, into the command queue (a daemon thread)."""
        try:
            for line in sys.stdin:
                self.commands.put(line.strip())
        except (OSError, ValueError):
            pass

    def run_command(self, line: str) -> None:
        words = line.split()
        if not words:
            return
        if words[0] == "restart" and len(words) == 2 and words[1].isdigit():
            node = next((n for n in self.nodes if n.node_id == int(words[1])), None)
            if node is None:
                self.warn(f"there is no node {words[1]}")
            elif node.running():
                self.warn(f"node {node.node_id} is running (pid {node.process.pid})")
            else:
                node.start()
                self.warn(f"node {node.node_id} started again (pid {node.process.pid})")
        elif words[0] == "status" and len(words) == 1:
            for node in self.nodes:
                state = f"running (pid {node.process.pid})" if node.running() else "stopped"
                self.say(f"node {node.node_id}: {state}")
        elif words == ["add-broker"]:
            try:
                self.add_broker()
            except (OSError, ConfigError) as exc:
                self.warn(f"add-broker: {exc}")
        else:
            self.warn(f"unknown command {line!r}: 'restart N', 'status' or 'add-broker'")

    def watch(self) -> None:
        """Until a signal: report nodes that exit, run commands from stdin."""
        threading.Thread(target=self.read_commands, daemon=True, name="stdin").start()
        while not self.signals:
            self.report_exits(stopping=False)
            try:
                self.run_command(self.commands.get(timeout=WATCH_POLL_S))
            except queue.Empty:
                pass

    def stop(self, timeout_s: float) -> None:
        running = [node for node in self.nodes if node.running()]
        for node in running:
            node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in running:
            try:
                node.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.warn(f"node {node.node_id} did not stop within {timeout_s:g} s: SIGKILL")
                node.process.kill()
                node.process.wait()
        self.report_exits(stopping=True)


def cmd_dev_cluster(args) -> int:
    if args.nodes < 1:
        print("pybroker dev-cluster: --nodes must be at least 1", file=sys.stderr)
        return 2
    root = Path(args.data_dir).absolute() if args.data_dir else Path(tempfile.mkdtemp(prefix="pybroker-dev-cluster-"))
    cluster = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        plans = prepare(root, args.nodes, args.host, args.base_port, lambda text: print(text, flush=True))
        print(f"pybroker dev-cluster: {args.nodes} node(s); configs, data and logs in {root}", flush=True)
        cluster = DevCluster(root, plans)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, cluster.on_signal)
        for node in cluster.nodes:
            node.start()
        if not cluster.wait_ready(args.start_timeout):
            if not cluster.signals:
                cluster.warn(f"the cluster was not ready within {args.start_timeout:g} s; stopping it (logs in {root})")
            cluster.stop(args.stop_timeout)
            return 0 if cluster.signals else 1
        cluster.print_ready()
        cluster.watch()
        cluster.stop(args.stop_timeout)
        print("pybroker dev-cluster: every node stopped", flush=True)
        return 0
    except (DevClusterError, ConfigError, OSError) as exc:
        if cluster is not None:
            cluster.stop(args.stop_timeout)
        print(f"pybroker dev-cluster: {exc}", file=sys.stderr)
        return 1
    except BaseException:
        if cluster is not None:  # never leave nodes behind, whatever went wrong
            cluster.stop(args.stop_timeout)
        raise


def register(commands) -> None:
    parser = commands.add_parser(
        "dev-cluster",
        help="run a local cluster of combined nodes for development (Ctrl-C stops it)",
        description="Starts N combined nodes (broker and controller) as child processes, prints "
        "bootstrap.servers=... once every node is registered and answers, then the console, REST and metrics "
        "URLs. With --base-port P the ports are consecutive by kind: clients P..P+N-1, controllers P+N.., "
        "consoles P+2N.., REST P+3N.., metrics P+4N..; otherwise free ports. Topics default to min(3,N) "
        "replicas and min.insync.replicas min(2,N). Nodes are never restarted by themselves: type 'restart N' "
        "on standard input; 'add-broker' there adds a broker-only node (free ports) that the balancer fills. Ctrl-C or SIGTERM stops every node (SIGTERM, then SIGKILL after --stop-timeout). "
        "Exit code: 0 when stopped by a signal; 1 when the cluster could not start; 2 on usage errors.",
    )
    parser.add_argument("--nodes", type=int, default=3, metavar="N", help="how many nodes (default 3)")
    parser.add_argument("--base-port", type=int, metavar="P", help="the first of 5N consecutive ports (default: free ports)")
    parser.add_argument(
        "--data-dir", metavar="D",
        help="configs, data, logs and pid files (default: a new temporary directory, named on stdout); a "
        "directory of an earlier run is started again as it is",
    )
    parser.add_argument("--host", default="127.0.0.1", metavar="H", help="the address nodes listen on and advertise (default 127.0.0.1)")
    parser.add_argument("--start-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="how long the cluster may take to be ready (default 120)")
    parser.add_argument("--stop-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="how long nodes may take to stop after SIGTERM before SIGKILL (default 30)")
    parser.set_defaults(func=cmd_dev_cluster)

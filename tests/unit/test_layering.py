"""The layering of docs/ARCHITECTURE.md, enforced.

protocol <- storage <- replication, controller <- broker; spark_jobs reads
storage and protocol only. Pure layers never import asyncio or sockets; the
one blocking client inside them (the Spark driver's) is named. Inside broker/,
each sub-package ("room") imports only the rooms below it, and every module
whose docstring says it is pure is held to it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "storage", "replication", "controller", "broker", "spark_jobs")
ALLOWED = {
    "protocol": {"protocol"},
    "storage": {"protocol", "storage"},
    "replication": {"protocol", "storage", "replication"},
    "controller": {"protocol", "storage", "controller"},
    "broker": set(PACKAGES) - {"spark_jobs"},
    "spark_jobs": {"protocol", "storage", "spark_jobs"},
}
IO_MODULES = {"asyncio", "socket", "selectors", "uvloop", "ssl"}
# spark_jobs runs in Spark's driver, outside any broker: the one module that may
# ask a running cluster (ListOffsets for high watermarks at planning time) is a
# blocking client over the sans-IO protocol package, named here.
CLIENT_DRIVERS = {"spark_jobs/kafka_offsets.py"}


def python_files(package: str):
    return sorted((ROOT / package).rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_layers_import_only_downwards(package):
    problems = []
    for path in python_files(package):
        for module in imported_modules(path):
            top = module.split(".")[0]
            if top in PACKAGES and top not in ALLOWED[package]:
                problems.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", ["protocol", "storage", "replication", "controller", "spark_jobs"])
def test_pure_layers_do_not_do_network_io(package):
    problems = []
    for path in python_files(package):
        relative = str(path.relative_to(ROOT))
        if relative in CLIENT_DRIVERS:
            continue
        for module in imported_modules(path):
            if module.split(".")[0] in IO_MODULES:
                problems.append(f"{relative} imports {module}")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_violations(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom broker.app import Broker\n")
    assert {"asyncio", "broker.app"} <= imported_modules(bad)


# Coordination logic inside broker/ is pure too: only its shell does IO.
PURE_BROKER_MODULES = (
    "broker/coordinators/effects.py",
    "broker/coordinators/groups/group.py",
    "broker/coordinators/groups/coordinator.py",
    "broker/coordinators/groups/pending_offsets.py",
    "broker/coordinators/consumer_groups/model.py",
    "broker/coordinators/consumer_groups/assignors.py",
    "broker/coordinators/consumer_groups/reconciliation.py",
    "broker/coordinators/consumer_groups/records.py",
    "broker/coordinators/consumer_groups/coordinator.py",
    "broker/coordinators/transactions/model.py",
    "broker/coordinators/transactions/coordinator.py",
    # SASL mechanisms and the per-connection session: sans-IO, the clock passed in.
    "broker/security/mechanism.py",
    "broker/security/jaas.py",
    "broker/security/plain_server.py",
    "broker/security/scram_server.py",
    "broker/security/oauthbearer_server.py",
    "broker/security/sasl.py",
    # The schema registry's record codec and state (its shell is broker/schemas/service.py).
    "protocol/schema_formats/records.py",
    "broker/schemas/state.py",
    # The schema formats: parsing, compatibility and payload checks.
    "protocol/schema_formats/formats.py",
    "protocol/schema_formats/parsed_schema.py",
    "protocol/schema_formats/avro_format.py",
    "protocol/schema_formats/json_format.py",
    "protocol/schema_formats/protobuf_format.py",
    "protocol/schema_formats/protobuf_compatibility.py",
    "broker/schemas/validation_rules.py",
    "protocol/schema_formats/framing.py",
)


@pytest.mark.parametrize("relative", PURE_BROKER_MODULES)
def test_coordinator_state_machines_do_no_io(relative):
    modules = imported_modules(ROOT / relative)
    tops = {m.split(".")[0] for m in modules}
    assert not tops & (IO_MODULES | {"time"}), tops & (IO_MODULES | {"time"})
    # Nor do they reach their shells or the wiring.
    shells = {"broker.app", "broker.coordinators.shell", "broker.coordinators.groups.service", "broker.coordinators.transactions.service"}
    assert not modules & shells, modules & shells


# --------------------------------------------------------------------------- rooms inside broker/

# broker/'s sub-packages, each allowed to import only the rooms named here (and
# itself). The order reads bottom-up: security (sans-IO SASL), the node's base
# modules (configuration, the load report of heartbeats, the two clocks), net (connections, TLS, SASL listeners, dispatch,
# quotas, the node-to-node client), replica (replica manager shell, fetcher,
# the leader's write), coordinators (groups, transactions, their shell),
# schemas (the schema registry: its pure state (formats and codec are in
# protocol/schema_formats/), its
# ``_schemas`` shell on the coordinators'),
# handlers (one module per API), controller_node (the controller process's
# drivers: quorum controller, Raft driver, forwarding, controller listener).
# tools (the admin command line) and http (metrics, console, REST) are client
# programs of the cluster: neither reaches into the serving rooms, except that
# the HTTP endpoints hand requests to the broker's own dispatcher (net) and the
# schema registry's API reads and writes through its service (schemas).
# The entry points and the wiring (app, cli, container, lifecycle) may import
# anything.
BASE_MODULES = {"config", "config_info", "single_node_profile", "loop_monitor", "load_report", "allocator", "clock"}
TOP_MODULES = {"__main__", "app", "cli", "container", "lifecycle"}
ROOMS_ALLOWED = {
    "security": set(),
    "base": set(),
    "net": {"base", "security"},
    "replica": {"base", "security", "net"},
    "coordinators": {"base", "security", "net", "replica"},
    "links": {"base", "security", "net", "replica", "coordinators"},
    # The schema registry: its _schemas shell stands on the coordinators' (validation on produce reads it).
    "schemas": {"base", "security", "net", "replica", "coordinators"},
    "handlers": {"base", "security", "net", "replica", "coordinators", "links", "schemas"},
    "controller_node": {"base", "security", "net", "replica", "coordinators", "links", "handlers", "schemas"},
    "tools": {"base", "security"},
    "http": {"base", "security", "net", "tools", "schemas"},
}
# Named exceptions, each with its reason.
ROOM_EXCEPTIONS = {
    # The listener limits' settings are parsed with the configuration; the module is pure accounting.
    ("broker/config.py", "broker.net.limits"),
}
# Outside broker/, the admin tools use only the sans-IO layers' vocabulary (the
# protocol, the controller's record and ACL types, config names), never a log.
TOOLS_OUTSIDE_ALLOWED = {"protocol", "controller", "replication.throttle", "storage.meta_properties"}


def room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "broker" or len(parts) < 2:
        return None
    if (ROOT / "broker" / parts[1]).is_dir():
        return parts[1]
    if parts[1] in BASE_MODULES:
        return "base"
    if parts[1] in TOP_MODULES:
        return "top"
    return "loose:" + parts[1]


def test_every_broker_module_has_a_room():
    loose = [p.name for p in (ROOT / "broker").glob("*.py") if p.stem not in BASE_MODULES | TOP_MODULES | {"__init__"}]
    assert not loose, f"broker/ modules outside any room (add a sub-package or name them here): {loose}"
    rooms = {p.name for p in (ROOT / "broker").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(ROOMS_ALLOWED) - {"base"}, rooms ^ (set(ROOMS_ALLOWED) - {"base"})


@pytest.mark.parametrize("room", sorted(ROOMS_ALLOWED))
def test_broker_rooms_import_only_the_rooms_below(room):
    problems = []
    for path in python_files("broker"):
        relative = str(path.relative_to(ROOT))
        if room_of(module_name(path)) != room:
            continue
        for module in imported_modules(path):
            target = room_of(module)
            if target is None or target == room or (relative, module) in ROOM_EXCEPTIONS:
                continue
            if target not in ROOMS_ALLOWED[room]:
                problems.append(f"{relative} ({room}) imports {module} ({target})")
        if room == "tools":
            for module in imported_modules(path):
                top = module.split(".")[0]
                if top in PACKAGES and top != "broker" and not any(
                    module == allowed or module.startswith(allowed + ".") for allowed in TOOLS_OUTSIDE_ALLOWED
                ):
                    problems.append(f"{relative} (tools) imports {module}")
    assert not problems, "\n".join(problems)


def test_the_room_checker_sees_violations():
    assert room_of("broker.handlers.produce") == "handlers"
    assert room_of("broker.config") == "base"
    assert room_of("broker.app") == "top"
    assert "http" not in ROOMS_ALLOWED["handlers"] and "tools" not in ROOMS_ALLOWED["handlers"]


# --------------------------------------------------------------------------- modules that say they are pure

# A module whose docstring calls itself pure (or sans-IO) does no network IO and
# starts no threads or processes; one that says "no clock" reads no clock, one
# that says "no Spark" imports no Spark.
PURITY_CLAIM = re.compile(
    r"(^|[.:]\s+)Pure\b|\bas (a )?pure (rules|functions|core|state machines?)\b|"
    r"\ba pure (state machine|core)\b|: pure\b|\bpure accounting\b|\bsans-IO\b|\bpure codec\b|\bis pure\b",
    re.M,
)
# Docstrings that speak of other modules' purity, not their own.
NOT_A_CLAIM = {
    "broker/replica/manager.py": "it carries out decisions of pure code it imports",
    "storage/log.py": "it names the pure append checks it calls",
    "broker/tools/metadata_quorum.py": "only its formatting functions are pure; it talks to the cluster",
    "broker/coordinators/groups/__init__.py": "it says which of its modules are pure",
    "broker/coordinators/transactions/__init__.py": "it says which of its modules are pure",
}
NO_IO_MODULES = IO_MODULES | {"aiohttp", "subprocess", "threading", "multiprocessing", "http", "urllib"}


def purity_claims() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in python_files(package):
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            relative = str(path.relative_to(ROOT))
            if PURITY_CLAIM.search(doc) and relative not in NOT_A_CLAIM:
                found.append(relative)
    return found


def test_purity_claims_are_found():
    claims = purity_claims()
    for known in ("replication/replica_core.py", "controller/raft/node.py", "broker/coordinators/groups/coordinator.py",
                  "broker/security/scram_server.py", "protocol/scram.py", "storage/producer_state.py"):
        assert known in claims
    assert set(NOT_A_CLAIM) <= {str(p.relative_to(ROOT)) for package in PACKAGES for p in python_files(package)}


@pytest.mark.parametrize("relative", purity_claims())
def test_modules_that_say_they_are_pure_are(relative):
    path = ROOT / relative
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    forbidden = set(NO_IO_MODULES)
    if re.search(r"\bno clock\b", doc):
        forbidden |= {"time", "datetime"}
    if re.search(r"\bno Spark\b", doc):
        forbidden.add("pyspark")
    imported = {m.split(".")[0] for m in imported_modules(path)}
    assert not imported & forbidden, f"{relative} says it is pure but imports {sorted(imported & forbidden)}"


# --------------------------------------------------------------------------- import circles


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root_files: dict[str, Path]) -> dict[str, set[str]]:
    """Project module -> project modules it imports (relative imports resolved;
    ``from package import name`` counts the submodule when ``name`` is one, else
    the package; imports under TYPE_CHECKING count too)."""

    def known(name: str) -> str | None:
        while name and name not in root_files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in root_files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (known(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                for alias in node.names:
                    full = f"{name}.{alias.name}"
                    target = full if full in root_files else known(name)
                    if target:
                        deps.add(target)
        deps.discard(module)
        graph[module] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_no_import_circles():
    files = {module_name(p): p for package in PACKAGES for p in python_files(package)}
    circles = import_circles(import_graph(files))
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_sees_circles(tmp_path):
    (tmp_path / "a.py").write_text("from b import x\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import c\n")
    (tmp_path / "c.py").write_text("import a\n")
    (tmp_path / "d.py").write_text("import a\n")
    files = {name: tmp_path / f"{name}.py" for name in "abcd"}
    assert import_circles(import_graph(files)) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []

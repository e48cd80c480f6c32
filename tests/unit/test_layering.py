"""The layering of docs/ARCHITECTURE.md, enforced.

protocol <- storage <- replication, controller <- broker; spark_jobs reads
storage and protocol only. Pure layers never import asyncio or sockets; the
few async drivers inside controller/ and replication/ are listed by name.
"""

from __future__ import annotations

import ast
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
# Thin IO drivers that may use asyncio inside otherwise pure layers.
ASYNC_DRIVERS: set[str] = set()
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
        if relative in ASYNC_DRIVERS or relative in CLIENT_DRIVERS:
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
    "broker/coordinator_effects.py",
    "broker/groups/group.py",
    "broker/groups/coordinator.py",
    "broker/groups/pending_offsets.py",
    "broker/transactions/model.py",
    "broker/transactions/coordinator.py",
    # SASL mechanisms and the per-connection session: sans-IO, the clock passed in.
    "broker/security/mechanism.py",
    "broker/security/jaas.py",
    "broker/security/plain_server.py",
    "broker/security/scram_server.py",
    "broker/security/oauthbearer_server.py",
    "broker/security/sasl.py",
)


@pytest.mark.parametrize("relative", PURE_BROKER_MODULES)
def test_coordinator_state_machines_do_no_io(relative):
    imported = {m.split(".")[0] for m in imported_modules(ROOT / relative)}
    assert not imported & (IO_MODULES | {"time", "broker.app"}), imported & IO_MODULES
    assert "broker.groups.service" not in imported_modules(ROOT / relative)


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

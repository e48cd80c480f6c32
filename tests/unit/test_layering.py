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
PURE_BROKER_MODULES = ("broker/groups/records.py", "broker/groups/group.py", "broker/groups/coordinator.py")


@pytest.mark.parametrize("relative", PURE_BROKER_MODULES)
def test_coordinator_state_machines_do_no_io(relative):
    imported = {m.split(".")[0] for m in imported_modules(ROOT / relative)}
    assert not imported & (IO_MODULES | {"time", "broker.app"}), imported & IO_MODULES
    assert "broker.groups.service" not in imported_modules(ROOT / relative)

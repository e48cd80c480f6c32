"""API keys come from one table: the protocol layer's declarations
(``protocol/messages``), looked up by name through ``protocol.registry``.
Outside ``protocol/``, no module names an API by its number, so a key is
written once and a reader finds every user of an API by its name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "controller", "replication", "storage", "spark_jobs")
# APIS_BY_KEY[27], or a constant such as FETCH_KEY = 1 / SASL_HANDSHAKE_KEY = 17.
LITERAL = re.compile(r"APIS_BY_KEY\[\s*\d+\s*\]|^\s*[A-Z_]*_KEY\s*=\s*\d+\s*(#.*)?$", re.M)


def test_no_module_outside_protocol_names_an_api_by_its_number():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for match in LITERAL.finditer(path.read_text(encoding="utf-8")):
                line = path.read_text(encoding="utf-8").count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0).strip()}")
    assert not found, "use APIS_BY_NAME[...] (or its .key) instead:\n" + "\n".join(found)

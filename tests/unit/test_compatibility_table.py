"""docs/COMPATIBILITY.md's API table says exactly what the broker advertises."""

from __future__ import annotations

import re
from pathlib import Path

from broker.app import Broker
from broker.config import load_config
from protocol.registry import APIS_BY_NAME

COMPATIBILITY = Path(__file__).resolve().parents[2] / "docs" / "COMPATIBILITY.md"


def documented_table() -> dict[str, tuple[int, int]]:
    rows = {}
    for line in COMPATIBILITY.read_text().splitlines():
        match = re.match(r"^\|\s*([A-Za-z]+)\s*\|\s*(\d+)(?:-(\d+))?\s*\|", line)
        if match and match.group(1) in APIS_BY_NAME:
            low = int(match.group(2))
            rows[match.group(1)] = (low, int(match.group(3) or low))
    return rows


def test_documented_table_matches_the_handler_registry(tmp_path):
    broker = Broker(load_config({"log.dirs": str(tmp_path / "logs")}))
    try:
        advertised = {
            next(a.name for a in APIS_BY_NAME.values() if a.key == key): (low, high)
            for key, low, high in broker.dispatcher.supported_versions()
        }
    finally:
        broker.close_storage()
    assert documented_table() == advertised

"""``meta.properties``: which cluster and node a log directory belongs to.

Written once when a directory is formatted, checked at every start so that a
directory from another cluster or node is never served by mistake.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from storage.checkpoint import write_atomically

META_PROPERTIES = "meta.properties"


class MetaPropertiesError(RuntimeError):
    pass


def new_cluster_id() -> str:
    # Kafka's cluster ids are a random UUID in URL-safe base64 without padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read_meta_properties(path: Path) -> dict[str, str]:
    values = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        values[key.strip()] = value.strip()
    return values


def ensure_meta_properties(log_dirs: list[Path], node_id: int, cluster_id: str | None) -> str:
    """Check (or create) meta.properties in every log dir; returns the cluster id."""
    found: dict[Path, dict[str, str]] = {}
    for directory in log_dirs:
        path = Path(directory) / META_PROPERTIES
        if path.exists():
            found[Path(directory)] = read_meta_properties(path)
    cluster_ids = {v.get("cluster.id") for v in found.values()}
    if len(cluster_ids) > 1:
        raise MetaPropertiesError(f"log dirs belong to different clusters: {sorted(c or '?' for c in cluster_ids)}")
    existing = cluster_ids.pop() if cluster_ids else None
    if cluster_id and existing and cluster_id != existing:
        raise MetaPropertiesError(f"cluster.id {cluster_id} does not match {existing} in meta.properties")
    for directory, values in found.items():
        if values.get("node.id") != str(node_id):
            raise MetaPropertiesError(f"{directory} belongs to node {values.get('node.id')}, not node.id={node_id}")
    cluster_id = existing or cluster_id or new_cluster_id()
    for directory in log_dirs:
        directory = Path(directory)
        if directory in found:
            continue
        directory.mkdir(parents=True, exist_ok=True)
        text = (
            "#\n"
            f"cluster.id={cluster_id}\n"
            f"directory.id={base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip('=')}\n"
            f"node.id={node_id}\n"
            "version=1\n"
        )
        write_atomically(directory / META_PROPERTIES, text.encode())
    return cluster_id

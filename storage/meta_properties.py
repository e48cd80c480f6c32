"""``meta.properties``: which cluster and node a log directory belongs to.

Written once when a directory is formatted, checked at every start so that a
directory from another cluster or node is never served by mistake.

A single node formats its own directories on first start
(`ensure_meta_properties`). The nodes of a multi-node cluster must agree on the
cluster id before they first meet, so they are formatted beforehand with
``pybroker storage format`` (`format_storage`), as with kafka-storage.sh, and
refuse to start on unformatted storage (`require_formatted`).

The file is Kafka's version 1 (KRaft) layout::

    cluster.id=<22-character base64url UUID>
    directory.id=<22-character base64url UUID, one per directory>
    node.id=<node.id>
    version=1
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from pathlib import Path

from storage.checkpoint import write_atomically

META_PROPERTIES = "meta.properties"


class MetaPropertiesError(RuntimeError):
    pass


META_PROPERTIES_VERSION = 1  # KRaft's layout; version 0 was ZooKeeper's broker.id file
CLUSTER_ID_CHARS = 22  # 16 bytes in base64 without the two padding characters


def new_cluster_id() -> str:
    # Kafka's cluster ids are a random UUID in URL-safe base64 without padding.
    # Kafka never hands out ids starting with "-" (they would read as a command
    # line option) nor the all-zero id, which it reserves.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def check_cluster_id(text: str) -> str:
    """``text`` if it is a cluster id Kafka accepts: 16 bytes as 22 characters of
    URL-safe base64 without padding, not the reserved all-zero id."""
    if len(text) != CLUSTER_ID_CHARS or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        raise MetaPropertiesError(
            f"cluster id {text!r} is not a base64url-encoded UUID of {CLUSTER_ID_CHARS} characters "
            "(make one with 'pybroker storage random-uuid')"
        )
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError:
        raise MetaPropertiesError(f"cluster id {text!r} is not valid base64url") from None
    # 22 characters carry 132 bits; the last 4 must be zero for the text to be
    # the one encoding of its 16 bytes.
    if base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:
        raise MetaPropertiesError(f"cluster id {text!r} is not the canonical encoding of a UUID")
    if raw == bytes(16):
        raise MetaPropertiesError(f"cluster id {text!r} is the reserved all-zero UUID")
    return text


def _write_meta_properties(directory: Path, node_id: int, cluster_id: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    text = (
        "#\n"
        f"cluster.id={cluster_id}\n"
        f"directory.id={new_cluster_id()}\n"
        f"node.id={node_id}\n"
        f"version={META_PROPERTIES_VERSION}\n"
    )
    write_atomically(directory / META_PROPERTIES, text.encode())


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
    # The first directory to name a cluster is the one the others are compared with.
    first = next(iter(found), None)
    existing = found[first].get("cluster.id") if first is not None else None
    for directory, values in found.items():
        if values.get("cluster.id") != existing:
            raise MetaPropertiesError(
                f"cluster id mismatch: {directory / META_PROPERTIES} says cluster.id={values.get('cluster.id')} but "
                f"{first / META_PROPERTIES} says cluster.id={existing}; every log dir of a node belongs to one "
                "cluster: remove the directory that belongs to another from log.dirs"
            )
    if cluster_id and existing and cluster_id != existing:
        raise MetaPropertiesError(
            f"cluster id mismatch: {first / META_PROPERTIES} says cluster.id={existing} but the config's cluster.id "
            f"is {cluster_id}; set cluster.id={existing}, or point log.dirs at this cluster's data"
        )
    for directory, values in found.items():
        if values.get("node.id") != str(node_id):
            raise MetaPropertiesError(
                f"node id mismatch: {directory / META_PROPERTIES} says node.id={values.get('node.id')} but the "
                f"config's node.id is {node_id}; set node.id={values.get('node.id')}, or point log.dirs at this node's data"
            )
    cluster_id = existing or cluster_id or new_cluster_id()
    for directory in log_dirs:
        directory = Path(directory)
        if directory in found:
            continue
        _write_meta_properties(directory, node_id, cluster_id)
    return cluster_id


def require_formatted(log_dirs: list[Path]) -> None:
    """A node of a multi-node cluster starts only on storage formatted with the
    cluster's id (``pybroker storage format``), as Kafka's KRaft nodes do."""
    missing = [str(d) for d in log_dirs if not (Path(d) / META_PROPERTIES).exists()]
    if missing:
        raise MetaPropertiesError(
            f"{', '.join(missing)}: not formatted; run 'pybroker storage format --config <file> --cluster-id <id>' "
            "with the same cluster id on every node (or set cluster.id)"
        )


def format_storage(
    log_dirs: list[Path],
    node_id: int,
    cluster_id: str,
    *,
    ignore_formatted: bool = False,
    before_meta_properties: Callable[[Path], None] | None = None,
) -> list[tuple[Path, str]]:
    """Write meta.properties into each directory (``pybroker storage format``).

    Nothing is written when some directory is already formatted, unless
    ``ignore_formatted``: then those keep their file and the others are
    formatted. ``before_meta_properties(directory)`` runs for each directory
    being formatted before its meta.properties is written (the bootstrap
    metadata goes first, as Kafka's formatter writes it: a directory with
    meta.properties counts as formatted, so it must be complete by then).
    Returns (directory, "formatted" or "already formatted")."""
    check_cluster_id(cluster_id)
    directories = list(dict.fromkeys(Path(d) for d in log_dirs))
    formatted = [d for d in directories if (d / META_PROPERTIES).exists()]
    if formatted and not ignore_formatted:
        raise MetaPropertiesError(
            f"{formatted[0]} is already formatted; use --ignore-formatted to leave formatted directories "
            "as they are and format the others"
        )
    outcome = []
    for directory in directories:
        if directory in formatted:
            outcome.append((directory, "already formatted"))
            continue
        if before_meta_properties is not None:
            directory.mkdir(parents=True, exist_ok=True)
            before_meta_properties(directory)
        _write_meta_properties(directory, node_id, cluster_id)
        outcome.append((directory, "formatted"))
    return outcome


def describe_storage(log_dirs: list[Path], node_id: int | None = None) -> tuple[list[tuple[Path, dict[str, str] | None]], list[str]]:
    """What ``pybroker storage info`` reports: each directory's meta.properties
    (None when it has none), and the problems that would stop the node."""
    found: list[tuple[Path, dict[str, str] | None]] = []
    problems: list[str] = []
    for directory in dict.fromkeys(Path(d) for d in log_dirs):
        path = directory / META_PROPERTIES
        if not directory.is_dir():
            problems.append(f"{directory} does not exist")
            found.append((directory, None))
        elif not path.exists():
            problems.append(f"{directory} is not formatted")
            found.append((directory, None))
        else:
            values = read_meta_properties(path)
            found.append((directory, values))
            if node_id is not None and values.get("node.id") != str(node_id):
                problems.append(f"{directory} belongs to node {values.get('node.id')}, not node.id={node_id}")
    cluster_ids = sorted({values.get("cluster.id", "?") for _, values in found if values is not None})
    if len(cluster_ids) > 1:
        problems.append(f"the directories belong to different clusters: {', '.join(cluster_ids)}")
    return found, problems

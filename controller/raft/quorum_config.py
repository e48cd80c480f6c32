"""The quorum's static configuration, from Kafka's `controller.quorum.*` keys.

`controller.quorum.voters` names every voter with the address its peers reach
it at: ``1@host1:9093,2@host2:9093,3@host3:9093``. Kafka requires the ids to
be unique and refuses a malformed entry at start-up; so do we, with a message
naming the entry. `controller.quorum.bootstrap.servers` (KIP-853's way to find a
dynamic quorum) lists addresses only, ``host:port,...``.

Pure: parsing and validation only. The caller (the broker's configuration)
decides which keys are set and reports a `QuorumConfigError` as its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.raft.node import RaftConfig


class QuorumConfigError(ValueError):
    """A `controller.quorum.*` value that does not parse or does not make sense."""


@dataclass(frozen=True, slots=True)
class VoterAddress:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"


# Kafka's key -> RaftConfig field; Kafka's defaults are RaftConfig's.
TIMING_KEYS = {
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
}


def _parse_port(text: str, entry: str, key: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise QuorumConfigError(f"{key}: {entry!r} has no valid port")
    return int(text)


def _split_host_port(text: str, entry: str, key: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise QuorumConfigError(f"{key}: {entry!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):  # an IPv6 literal
        host = host[1:-1]
    return host, _parse_port(port, entry, key)


def parse_voters(value: str, key: str = "controller.quorum.voters") -> tuple[VoterAddress, ...]:
    """``id@host:port,...`` -> voter addresses, in the order given; an empty value is no voters."""
    voters: list[VoterAddress] = []
    seen: set[int] = set()
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        node_text, at, address = entry.partition("@")
        if not at:
            raise QuorumConfigError(f"{key}: {entry!r} is not id@host:port")
        if not node_text.isdigit():
            raise QuorumConfigError(f"{key}: {entry!r} does not start with a node id")
        node_id = int(node_text)
        if node_id in seen:
            raise QuorumConfigError(f"{key}: node id {node_id} appears twice")
        seen.add(node_id)
        host, port = _split_host_port(address, entry, key)
        voters.append(VoterAddress(node_id, host, port))
    return tuple(voters)


def parse_bootstrap_servers(value: str, key: str = "controller.quorum.bootstrap.servers") -> tuple[tuple[str, int], ...]:
    """``host:port,...`` -> addresses, in the order given."""
    return tuple(_split_host_port(entry, entry, key) for entry in (p.strip() for p in value.split(",")) if entry)


def raft_config(values: Mapping[str, int]) -> RaftConfig:
    """RaftConfig from the `controller.quorum.*` timing keys present in ``values``;
    absent keys keep Kafka's defaults. Every timing must be positive, and an
    election backoff cap below the base backoff would make the cap meaningless."""
    fields = {}
    for key, field_name in TIMING_KEYS.items():
        if key in values:
            milliseconds = int(values[key])
            if milliseconds <= 0:
                raise QuorumConfigError(f"{key}: must be positive, not {milliseconds}")
            fields[field_name] = milliseconds
    config = RaftConfig(**fields)
    if config.election_backoff_max_ms < config.election_backoff_base_ms:
        raise QuorumConfigError(
            f"controller.quorum.election.backoff.max.ms: must be at least {config.election_backoff_base_ms}"
        )
    return config


def check_node_in_quorum(node_id: int, roles: frozenset[str] | set[str], voters: tuple[VoterAddress, ...]) -> None:
    """Kafka's start-up rule: a node with the controller role must be one of the
    voters, and a broker-only node must not be (a voter that never runs a
    controller would count against every majority)."""
    voter_ids = {voter.node_id for voter in voters}
    if "controller" in roles and node_id not in voter_ids:
        raise QuorumConfigError(
            f"controller.quorum.voters: node.id {node_id} has the controller role but is not a voter"
        )
    if "controller" not in roles and node_id in voter_ids:
        raise QuorumConfigError(
            f"controller.quorum.voters: node.id {node_id} is a voter but process.roles has no controller"
        )

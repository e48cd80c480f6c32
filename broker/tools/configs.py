"""``pybroker configs``: describe and alter configs, quotas and SCRAM users, as kafka-configs.sh does.

``--entity-type topics|brokers`` (``--entity-name N`` or, for brokers,
``--entity-default``):

- ``--describe [--all]``: DescribeConfigs (with synonyms). Without ``--all``
  only the entity's dynamic configs are shown (topic overrides; for a broker,
  its dynamic configs; for the default, the cluster-wide dynamic defaults), as
  Kafka does: ``Dynamic configs for topic t are:`` then ``  k=v sensitive=false
  synonyms={SOURCE:k=v, ...}`` lines. Without ``--entity-name``, every topic
  (or every live broker) is described.
- ``--alter --add-config k=v,k2=[a,b] --delete-config k,k2``:
  IncrementalAlterConfigs (SET and DELETE operations); prints ``Completed
  updating config for topic t.``.

``--entity-type users|clients|ips``:

- quotas (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
  ``controller_mutation_rate``) through DescribeClientQuotas/AlterClientQuotas,
  and, for ips (``--entity-name ADDRESS`` or ``--entity-default``),
  ``connection_creation_rate`` (new connections per second from one address),
  printed as Kafka's ``Quota configs for user-principal 'u' are k=v, ...``; a
  broker that does not list those APIs in ApiVersions is said to lack them
  (for users, their SCRAM credentials are still shown);
- for users, SCRAM credentials through DescribeUserScramCredentials/
  AlterUserScramCredentials: ``--add-config 'SCRAM-SHA-256=[iterations=8192,password=secret]'``
  (the salted password is computed here, with a random salt, as Kafka's tool
  does; the password never goes on the wire) and ``--delete-config SCRAM-SHA-256``.

Whatever the broker answers is printed as it is: an error it returns for a
resource is shown (and the exit code is 1), never hidden. ``--output json``
prints the described entities as ``{"entities": [{"entity_type", "entity_name",
"configs": {name: {"value", "source", "sensitive", "read_only"}}}]}``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from broker.tools.client import Refused, ToolClient, ToolError
from broker.tools.topics import error_text, fetch_metadata
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from protocol.scram import ScramMechanism, salted_password

_DESCRIBE = struct_classes(APIS_BY_NAME["DescribeConfigs"].request)
_ALTER = struct_classes(APIS_BY_NAME["IncrementalAlterConfigs"].request)
_QUOTAS = struct_classes(APIS_BY_NAME["DescribeClientQuotas"].request)
_ALTER_QUOTAS = struct_classes(APIS_BY_NAME["AlterClientQuotas"].request)
_SCRAM = struct_classes(APIS_BY_NAME["DescribeUserScramCredentials"].request)
_ALTER_SCRAM = struct_classes(APIS_BY_NAME["AlterUserScramCredentials"].request)
DESCRIBE_CONFIGS_VERSION = 4
ALTER_CONFIGS_VERSION = 1
QUOTAS_VERSION = 1
SCRAM_VERSION = 0
RESOURCE_TYPES = {"topics": 2, "brokers": 4}
OP_SET, OP_DELETE = 0, 1
# Kafka's ConfigEntry.ConfigSource ids, by name.
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
# DescribeClientQuotas match types: a name, the default entity, any specified name.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
SCRAM_ITERATIONS_DEFAULT = 4096
SCRAM_SALT_BYTES = 32


def split_config_list(text: str) -> list[tuple[str, str]]:
    """Kafka's ``k1=v1,k2=[a,b],k3=v3``: commas inside brackets belong to the value (brackets dropped)."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ToolError(f"--add-config: unbalanced ']' in {text!r}")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ToolError(f"--add-config: unbalanced '[' in {text!r}")
    items.append(current)
    pairs = []
    for item in items:
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"--add-config expects k=v,k2=[a,b], got {item!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs.append((key.strip(), value))
    return pairs


def split_names(texts: list[str] | None) -> list[str]:
    return [n.strip() for text in texts or [] for n in text.split(",") if n.strip()]


@dataclass
class ConfigValue:
    name: str
    value: str | None
    source: str
    sensitive: bool
    read_only: bool
    synonyms: list[tuple[str, str, str | None]] = field(default_factory=list)  # (source, name, value)


@dataclass
class Described:
    entity_type: str
    entity_name: str | None  # None: the default entity
    configs: list[ConfigValue]
    error: str | None = None
    heading: str = ""


def _heading(entity_type: str, name: str | None, describe_all: bool) -> str:
    if entity_type == "brokers" and name is None:
        return "Default configs for brokers in the cluster are:"
    kind = "All" if describe_all else "Dynamic"
    return f"{kind} configs for {entity_type[:-1]} {name} are:"


class ConfigsTool(ToolClient):

    # ------------------------------------------------------------ topics/brokers

    def entity_names(self, entity_type: str) -> list[str]:
        metadata = fetch_metadata(self)
        if entity_type == "topics":
            return sorted(metadata.topics)
        return [str(b) for b in sorted(metadata.brokers)]

    def describe_configs(self, entity_type: str, names: list[str | None], describe_all: bool) -> list[Described]:
        resource_type = RESOURCE_TYPES[entity_type]
        response = self.bootstrap_connection().call(
            "DescribeConfigs", DESCRIBE_CONFIGS_VERSION,
            resources=[
                _DESCRIBE.DescribeConfigsResource(resource_type=resource_type, resource_name=n or "", configuration_keys=None)
                for n in names
            ],
            include_synonyms=True, include_documentation=False,
        )
        wanted_source = {
            ("topics", False): "DYNAMIC_TOPIC_CONFIG",
            ("brokers", False): "DYNAMIC_BROKER_CONFIG",
            ("brokers", True): "DYNAMIC_DEFAULT_BROKER_CONFIG",
        }
        out = []
        for name, result in zip(names, response.results):
            described = Described(entity_type, name, [], heading=_heading(entity_type, name, describe_all))
            if result.error_code != ErrorCode.NONE:
                described.error = error_text(result.error_code, result.error_message)
                out.append(described)
                continue
            only = None if describe_all else wanted_source[(entity_type, name is None)]
            for entry in sorted(result.configs, key=lambda e: e.name):
                source = CONFIG_SOURCES.get(entry.config_source, str(entry.config_source))
                if only is not None and source != only:
                    continue
                described.configs.append(ConfigValue(
                    entry.name, entry.value, source, entry.is_sensitive, entry.read_only,
                    [(CONFIG_SOURCES.get(s.source, str(s.source)), s.name, s.value) for s in entry.synonyms],
                ))
            out.append(described)
        return out

    def alter_configs(self, entity_type: str, name: str | None, add: list[tuple[str, str]], delete: list[str]) -> None:
        configs = [_ALTER.AlterableConfig(name=k, config_operation=OP_SET, value=v) for k, v in add]
        configs += [_ALTER.AlterableConfig(name=k, config_operation=OP_DELETE, value=None) for k in delete]
        response = self.bootstrap_connection().call(
            "IncrementalAlterConfigs", ALTER_CONFIGS_VERSION,
            resources=[_ALTER.AlterConfigsResource(resource_type=RESOURCE_TYPES[entity_type], resource_name=name or "", configs=configs)],
            validate_only=False,
        )
        for result in response.responses:
            if result.error_code != ErrorCode.NONE:
                raise Refused(f"cannot alter {entity_type[:-1]} {name or '(default)'}: {error_text(result.error_code, result.error_message)}")

    # ------------------------------------------------------------ users/clients

    def describe_quotas(self, entity_type: str, name: str | None, default: bool) -> list[tuple[str, dict[str, float]]]:
        """(entity text as Kafka prints it, quota values) per matching entity."""
        self.require("DescribeClientQuotas", "client quotas")
        kind = QUOTA_ENTITY_TYPES[entity_type]
        if default:
            component = _QUOTAS.ComponentData(entity_type=kind, match_type=MATCH_DEFAULT, match=None)
        elif name is not None:
            component = _QUOTAS.ComponentData(entity_type=kind, match_type=MATCH_EXACT, match=name)
        else:
            component = _QUOTAS.ComponentData(entity_type=kind, match_type=MATCH_SPECIFIED, match=None)
        response = self.bootstrap_connection().call("DescribeClientQuotas", QUOTAS_VERSION, components=[component], strict=False)
        if response.error_code != ErrorCode.NONE:
            raise Refused(f"DescribeClientQuotas: {error_text(response.error_code, response.error_message)}")
        out = []
        for entry in response.entries or []:
            entity = ", ".join(
                f"{e.entity_type}-principal '{e.entity_name}'" if e.entity_type == "user" and e.entity_name is not None
                else f"{e.entity_type} '{e.entity_name}'" if e.entity_name is not None
                else f"the default {e.entity_type}"
                for e in entry.entity
            )
            out.append((entity, {v.key: v.value for v in entry.values}))
        return sorted(out)

    def alter_quotas(self, entity_type: str, name: str | None, add: list[tuple[str, str]], delete: list[str]) -> None:
        self.require("AlterClientQuotas", "client quotas")
        ops = []
        for key, value in add:
            try:
                number = float(value)
            except ValueError:
                raise ToolError(f"--add-config: quota {key} needs a number, got {value!r}") from None
            ops.append(_ALTER_QUOTAS.OpData(key=key, value=number, remove=False))
        ops += [_ALTER_QUOTAS.OpData(key=key, value=0.0, remove=True) for key in delete]
        entity = [_ALTER_QUOTAS.EntityData(entity_type=QUOTA_ENTITY_TYPES[entity_type], entity_name=name)]
        response = self.bootstrap_connection().call(
            "AlterClientQuotas", QUOTAS_VERSION, entries=[_ALTER_QUOTAS.EntryData(entity=entity, ops=ops)], validate_only=False
        )
        for entry in response.entries:
            if entry.error_code != ErrorCode.NONE:
                raise Refused(f"cannot alter quotas of {entity_type[:-1]} {name or '(default)'}: "
                              f"{error_text(entry.error_code, entry.error_message)}")

    def describe_scram(self, name: str | None) -> list[tuple[str, list[tuple[str, int]]]]:
        self.require("DescribeUserScramCredentials", "SCRAM credentials")
        users = None if name is None else [_SCRAM.UserName(name=name)]
        response = self.bootstrap_connection().call("DescribeUserScramCredentials", SCRAM_VERSION, users=users)
        if response.error_code != ErrorCode.NONE:
            raise Refused(f"DescribeUserScramCredentials: {error_text(response.error_code, response.error_message)}")
        out = []
        for result in response.results:
            if result.error_code == ErrorCode.RESOURCE_NOT_FOUND:
                continue  # a user without credentials: nothing to show, as Kafka's tool
            if result.error_code != ErrorCode.NONE:
                raise Refused(f"SCRAM credentials of user {result.user}: {error_text(result.error_code, result.error_message)}")
            infos = []
            for info in result.credential_infos:
                mechanism = ScramMechanism.for_type_code(info.mechanism)
                infos.append((mechanism.value if mechanism else str(info.mechanism), info.iterations))
            out.append((result.user, infos))
        return out

    def alter_scram(self, name: str, add: list[tuple[str, str]], delete: list[str]) -> None:
        self.require("AlterUserScramCredentials", "SCRAM credentials")
        upsertions, deletions = [], []
        for key, value in add:
            mechanism = ScramMechanism.for_name(key)
            settings = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
            password = settings.get("password")
            if password is None:
                raise ToolError(f"--add-config {key}=[...] needs password=... (and optionally iterations=N)")
            iterations_text = settings.get("iterations", str(SCRAM_ITERATIONS_DEFAULT))
            if not iterations_text.isdigit():
                raise ToolError(f"--add-config {key}: iterations must be a number, got {iterations_text!r}")
            iterations = int(iterations_text)
            salt = os.urandom(SCRAM_SALT_BYTES)
            try:
                salted = salted_password(mechanism, password, salt, iterations)
            except ValueError as exc:
                raise ToolError(f"--add-config {key}: {exc}") from None
            upsertions.append(_ALTER_SCRAM.ScramCredentialUpsertion(
                name=name, mechanism=mechanism.type_code, iterations=iterations, salt=salt, salted_password=salted
            ))
        for key in delete:
            deletions.append(_ALTER_SCRAM.ScramCredentialDeletion(name=name, mechanism=ScramMechanism.for_name(key).type_code))
        response = self.bootstrap_connection().call(
            "AlterUserScramCredentials", SCRAM_VERSION, deletions=deletions, upsertions=upsertions
        )
        for result in response.results:
            if result.error_code != ErrorCode.NONE:
                raise Refused(f"cannot alter SCRAM credentials of user {result.user}: "
                              f"{error_text(result.error_code, result.error_message)}")


def is_scram_key(key: str) -> bool:
    return ScramMechanism.for_name(key.upper()) is not None and key.upper() == key


def config_lines(described: Described) -> list[str]:
    lines = [described.heading]
    if described.error is not None:
        return lines
    for c in described.configs:
        value = "null" if c.sensitive or c.value is None else c.value
        synonyms = ", ".join(f"{source}:{name}={'null' if c.sensitive or v is None else v}" for source, name, v in c.synonyms)
        lines.append(f"  {c.name}={value} sensitive={str(c.sensitive).lower()} synonyms={{{synonyms}}}")
    return lines


def configs_json(entries: list[Described]) -> dict:
    return {
        "entities": [
            {
                "entity_type": d.entity_type,
                "entity_name": d.entity_name,
                "error": d.error,
                "configs": {
                    c.name: {"value": None if c.sensitive else c.value, "source": c.source, "sensitive": c.sensitive,
                             "read_only": c.read_only}
                    for c in d.configs
                },
            }
            for d in entries
        ]
    }

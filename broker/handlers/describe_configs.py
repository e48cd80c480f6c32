"""DescribeConfigs (key 32), versions 0-4 (Kafka 4's range).

TOPIC resources (type 2) list every topic config pybroker knows with its
effective value: the topic's override, else the broker-level default from
server.properties, else Kafka's default. BROKER resources (type 4) named with
this node's id list every key of broker/config.py and the dynamic replication
throttle rates, each with Kafka's precedence: this broker's dynamic value, else
the cluster-wide dynamic one, else server.properties, else the default (null
when unset); the empty name (cluster-wide defaults) lists only the dynamic
default broker configs that are set. ``configuration_keys`` null or
empty asks for everything; names the resource does not have are left out.

Per entry: ``config_source`` (v1+) is the source of the first synonym, with
Kafka's ids: TOPIC_CONFIG 1, DYNAMIC_BROKER_CONFIG 2, DYNAMIC_DEFAULT_BROKER_CONFIG 3,
STATIC_BROKER_CONFIG 4 (set in server.properties or by --override), DEFAULT_CONFIG 5;
v0's ``is_default`` is ``source == DEFAULT_CONFIG``. Synonyms (v1+, when
``include_synonyms``) are in order of precedence: the topic override, then
the broker keys that supply the default (``segment.bytes`` <-
``log.segment.bytes``; ``segment.ms`` <- ``log.roll.ms``, ``log.roll.hours``):
their per-broker dynamic values, then cluster-wide dynamic, then static, then
default ones (Kafka's order). As Kafka does, leading synonyms that are not
the primary broker key itself are dropped (so ``segment.ms`` shows no
``log.roll.hours`` synonym unless ``log.roll.ms`` is set). ``config_type``
(v3+) uses Kafka's ids (BOOLEAN 1, STRING 2, INT 3, SHORT 4, LONG 5, DOUBLE 6,
LIST 7, CLASS 8, PASSWORD 9) and ``documentation`` (v3+, when
``include_documentation``) is a short description. Topic configs are
writable (read_only false); broker configs are read-only except the dynamic
ones pybroker applies at run time (controller.dynamic_broker_configs). Nothing
is sensitive.

Errors per resource: an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION, an
illegal topic name INVALID_TOPIC_EXCEPTION; a broker name that is not this
node's id (or empty) INVALID_REQUEST. BROKER_LOGGER (8), CLIENT_METRICS (16)
and GROUP (32) resources are not supported (INVALID_REQUEST), nor are unknown
types.

Authorization (with an authorizer; Kafka's ConfigHelper): DESCRIBE_CONFIGS on
the topic (else TOPIC_AUTHORIZATION_FAILED), on the group for GROUP resources
(GROUP_AUTHORIZATION_FAILED), on the cluster for BROKER, BROKER_LOGGER and
CLIENT_METRICS (CLUSTER_AUTHORIZATION_FAILED); a refused resource is answered
with no configs.
"""

from __future__ import annotations

from broker.config import BROKER_CONFIG_INFO, format_broker_value
from broker.config import KEYS as BROKER_KEYS
from broker.security.authorization import MESSAGES, config_refusal, split_entries
from controller.authorizer import AclOperation
from controller.config_commands import (
    DYNAMIC_BROKER_CONFIGS,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
)
from controller.dynamic_broker_configs import HONOURED as DYNAMIC_HONOURED
from controller.metadata.records import RESOURCE_BROKER, RESOURCE_TOPIC
from controller.topic_commands import topic_name_error
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.throttle import FOLLOWER_THROTTLED_RATE, LEADER_THROTTLED_RATE, UNLIMITED_RATE
from storage.topic_config import (
    CONFIG_TYPE_IDS,
    TOPIC_CONFIG_DOCS,
    TOPIC_CONFIG_KEYS,
    TOPIC_CONFIG_TYPES,
    broker_synonyms,
    format_config_value,
    is_sensitive_config,
)

API = APIS_BY_NAME["DescribeConfigs"]
R = struct_classes(API.response)

# DescribeConfigsResponse.ConfigSource ids.
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# Broker keys whose value other keys can supply (Kafka's broker config synonyms, in precedence order).
_BROKER_KEY_SYNONYMS = {
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}


def _broker_key_names() -> list[str]:
    """Every canonical broker key of broker/config.py, in declaration order."""
    return list(dict.fromkeys(key.name for key in BROKER_KEYS.values()))


def _broker_type(name: str) -> str:
    if name in BROKER_CONFIG_INFO:
        return BROKER_CONFIG_INFO[name][0]
    default = BROKER_KEYS[name].default if name in BROKER_KEYS else None
    if isinstance(default, bool):
        return "BOOLEAN"
    if isinstance(default, int):
        return "INT" if -(2**31) <= default < 2**31 else "LONG"
    if isinstance(default, (list, tuple)):
        return "LIST"
    return "STRING" if isinstance(default, str) else "UNKNOWN"


class DescribeError(Exception):
    def __init__(self, code: ErrorCode, message: str | None):
        super().__init__(message)
        self.code = code
        self.message = message


def _wanted(resource, names):
    keys = resource.configuration_keys
    if not keys:  # null or empty: everything
        return list(names)
    asked = set(keys)
    return [n for n in names if n in asked]


def _static_value(config, name: str) -> str | None:
    """The server.properties / --override value of broker key ``name``, when it was set."""
    key = BROKER_KEYS.get(name)
    if key is None or key.name != name or name not in config.explicit or config[name] is None:
        return None
    return config.explicit[name].strip()


def _default_value(name: str, kafka_default: str | None) -> str | None:
    key = BROKER_KEYS.get(name)
    if key is not None and key.name == name:
        return format_broker_value(key.default)
    return kafka_default


def _broker_chain(
    config, own: dict[str, str], cluster: dict[str, str], names_and_defaults, primary: str
) -> list[tuple[str, str | None, int]]:
    """Synonyms ``(name, value, source)`` of broker key ``primary`` in precedence order:
    this broker's dynamic, then cluster-wide dynamic, then static, then default values of each name."""
    chain: list[tuple[str, str | None, int]] = []
    for dynamic, source in ((own, SOURCE_DYNAMIC_BROKER), (cluster, SOURCE_DYNAMIC_DEFAULT_BROKER)):
        for name, _ in names_and_defaults:
            if name in dynamic:
                chain.append((name, dynamic[name], source))
    for name, _ in names_and_defaults:
        value = _static_value(config, name)
        if value is not None:
            chain.append((name, value, SOURCE_STATIC_BROKER))
    for name, kafka_default in names_and_defaults:
        value = _default_value(name, kafka_default)
        if value is not None:
            chain.append((name, value, SOURCE_DEFAULT))
    # Kafka drops synonyms listed before the primary key's own first entry.
    while chain and chain[0][0] != primary:
        chain.pop(0)
    return chain


def _entry(name, value, source, synonyms, *, read_only, type_name, doc, include_synonyms, include_documentation):
    return R.DescribeConfigsResourceResult(
        name=name,
        value=value,
        read_only=read_only,
        is_default=source == SOURCE_DEFAULT,
        config_source=source,
        is_sensitive=False,
        synonyms=[R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in synonyms]
        if include_synonyms
        else [],
        config_type=CONFIG_TYPE_IDS.get(type_name, 0),
        documentation=doc if include_documentation else None,
    )


def _dynamic_layers(broker) -> tuple[dict[str, str], dict[str, str]]:
    """This broker's dynamic configs and the cluster-wide ones."""
    image = broker.image
    return dict(image.configs_of(RESOURCE_BROKER, str(broker.node_id))), dict(image.broker_configs)


def topic_entries(broker, topic, resource, include_synonyms: bool, include_documentation: bool):
    overrides = dict(topic.configs)
    own, cluster = _dynamic_layers(broker)
    effective = broker.topic_config(topic)
    entries = []
    for name in _wanted(resource, sorted(TOPIC_CONFIG_KEYS)):
        type_name = TOPIC_CONFIG_TYPES[name]
        value = None if is_sensitive_config(name) else format_config_value(type_name, effective[name])
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, value, SOURCE_TOPIC))
        names_and_defaults = broker_synonyms(name)
        if names_and_defaults:
            synonyms += _broker_chain(broker.config, own, cluster, names_and_defaults, names_and_defaults[0][0])
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        entries.append(
            _entry(
                name,
                value,
                source,
                synonyms,
                read_only=False,
                type_name=type_name,
                doc=TOPIC_CONFIG_DOCS.get(name),
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
        )
    return entries


def broker_entries(broker, resource, include_synonyms: bool, include_documentation: bool):
    config = broker.config
    own, dynamic = _dynamic_layers(broker)
    entries = []
    for name in _wanted(resource, _broker_key_names()):
        type_name, doc = _broker_type(name), BROKER_CONFIG_INFO.get(name, (None, None))[1]
        names = tuple(n for n in _BROKER_KEY_SYNONYMS.get(name, (name,)) if n in BROKER_KEYS)
        synonyms = _broker_chain(config, own, dynamic, [(n, None) for n in names], name)
        value = next((layer[name] for layer in (own, dynamic) if name in layer), format_broker_value(config[name]))
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        entries.append(
            _entry(
                name,
                value,
                source,
                synonyms,
                read_only=name not in DYNAMIC_HONOURED,
                type_name=type_name,
                doc=doc,
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
        )
    # The dynamic-only broker configs (the replication throttle rates): this
    # broker's value, else the cluster-wide default, else no limit.
    for name in _wanted(resource, DYNAMIC_BROKER_CONFIGS):
        chain = []
        if name in own:
            chain.append((name, own[name], SOURCE_DYNAMIC_BROKER))
        if name in dynamic:
            chain.append((name, dynamic[name], SOURCE_DYNAMIC_DEFAULT_BROKER))
        chain.append((name, str(UNLIMITED_RATE), SOURCE_DEFAULT))
        entries.append(
            _entry(
                name,
                chain[0][1],
                chain[0][2],
                chain,
                read_only=False,
                type_name="LONG",
                doc=_THROTTLE_RATE_DOCS[name],
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
        )
    return entries


_THROTTLE_RATE_DOCS = {
    LEADER_THROTTLED_RATE: "Bytes/s a leader sends for the partitions whose leader.replication.throttled.replicas names it; followers out of the ISR wait while it is exceeded.",
    FOLLOWER_THROTTLED_RATE: "Bytes/s a follower fetches for the partitions whose follower.replication.throttled.replicas names it; it holds back those not caught up while it is exceeded.",
}


def cluster_default_entries(broker, resource, include_synonyms: bool, include_documentation: bool):
    """Resource BROKER "": only dynamic cluster-wide defaults, as Kafka lists them
    (synonyms: the cluster-wide value, then static and default ones, never a broker's own)."""
    entries = []
    dynamic = dict(broker.image.broker_configs)
    for name in _wanted(resource, sorted(dynamic)):
        if name in DYNAMIC_BROKER_CONFIGS:
            type_name, doc = "LONG", _THROTTLE_RATE_DOCS[name]
            synonyms = [(name, dynamic[name], SOURCE_DYNAMIC_DEFAULT_BROKER), (name, str(UNLIMITED_RATE), SOURCE_DEFAULT)]
        else:
            type_name, doc = _broker_type(name), BROKER_CONFIG_INFO.get(name, (None, None))[1]
            names = tuple(n for n in _BROKER_KEY_SYNONYMS.get(name, (name,)) if n in BROKER_KEYS) or (name,)
            synonyms = _broker_chain(broker.config, {}, dynamic, [(n, None) for n in names], name)
        entries.append(
            _entry(
                name,
                dynamic[name],
                SOURCE_DYNAMIC_DEFAULT_BROKER,
                synonyms,
                read_only=name not in DYNAMIC_HONOURED,
                type_name=type_name,
                doc=doc,
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
        )
    return entries


def _broker_id(name: str, what: str = "Broker id") -> int:
    try:
        return int(name)
    except ValueError:
        raise DescribeError(ErrorCode.INVALID_REQUEST, f"{what} must be an integer, but it is: {name}") from None


def describe_resource(broker, resource, include_synonyms: bool, include_documentation: bool):
    kind, name = resource.resource_type, resource.resource_name
    if kind == RESOURCE_TOPIC:
        problem = topic_name_error(name)
        if problem:
            raise DescribeError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        topic = broker.image.topics.get(name)
        if topic is None:
            raise DescribeError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        return topic_entries(broker, topic, resource, include_synonyms, include_documentation)
    if kind == RESOURCE_BROKER:
        if not name:
            return cluster_default_entries(broker, resource, include_synonyms, include_documentation)
        if _broker_id(name) != broker.node_id:
            raise DescribeError(
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
            )
        return broker_entries(broker, resource, include_synonyms, include_documentation)
    if kind == RESOURCE_BROKER_LOGGER:
        if not name:
            raise DescribeError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        if _broker_id(name) != broker.node_id:
            raise DescribeError(
                ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker.node_id} but received {name}"
            )
        raise DescribeError(
            ErrorCode.INVALID_REQUEST, "Broker log levels (BROKER_LOGGER resources) are not supported by pybroker."
        )
    if kind in (RESOURCE_CLIENT_METRICS, RESOURCE_GROUP):
        label = "CLIENT_METRICS" if kind == RESOURCE_CLIENT_METRICS else "GROUP"
        raise DescribeError(ErrorCode.INVALID_REQUEST, f"{label} configs are not supported by pybroker.")
    raise DescribeError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}")


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py): the resources the caller may describe are described."""
    if broker.authorizer is None:
        return None

    def refusal(resource):
        error = config_refusal(broker, ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
        if error is None:
            return None
        return R.DescribeConfigsResult(
            error_code=error, error_message=MESSAGES[error], resource_type=resource.resource_type,
            resource_name=resource.resource_name, configs=[],
        )

    return split_entries(request, "resources", refusal, "results", lambda: R.DescribeConfigsResponse(throttle_time_ms=0, results=[]))


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        include_synonyms = bool(request.include_synonyms) and ctx.api_version >= 1
        include_documentation = bool(request.include_documentation) and ctx.api_version >= 3
        results = []
        for resource in request.resources:
            try:
                configs = describe_resource(broker, resource, include_synonyms, include_documentation)
                error, message = ErrorCode.NONE, None
            except DescribeError as exc:
                configs, error, message = [], exc.code, exc.message
            results.append(
                R.DescribeConfigsResult(
                    error_code=error,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=configs,
                )
            )
        return R.DescribeConfigsResponse(throttle_time_ms=0, results=results)

    dispatcher.register(API.key, 0, 4, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))

"""CreateTopics (key 19), versions 2-7 (Kafka 4's range).

num_partitions / replication_factor of -1 take the broker's num.partitions and
default.replication.factor; explicit replica assignments are validated against
the registered brokers. Topic configs are validated (unknown names and bad
values: INVALID_CONFIG). validate_only checks everything and creates nothing.
From v5 the response carries the partition count, replication factor and every
topic config with its source; from v7 the topic id.

Authorization (with an authorizer; Kafka's ControllerApis.createTopics), decided
by the broker the client asked, before the request is forwarded: CREATE on the
cluster, or else CREATE on each topic (a topic without it answers
TOPIC_AUTHORIZATION_FAILED, "Authorization failed.", and is not sent on; a
name given twice, and ``__cluster_metadata``, are left to the handler's
INVALID_REQUEST). A created topic the caller may not DESCRIBE_CONFIGS is
answered (v5+) without its configs, partition count and replication factor,
with ``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED.

A client with a ``controller_mutation_rate`` quota (broker/net/quotas.py) is
charged each new topic's partitions, in request order; once it is over, the
next topics answer THROTTLING_QUOTA_EXCEEDED from v6 (Kafka's strict mode) and
are not sent on, while older versions are served and only throttled. The
answer carries the throttle time either way; validate_only is not charged.
"""

from __future__ import annotations

from types import MappingProxyType, SimpleNamespace

from broker.handlers.describe_configs import topic_entries
from broker.net.quotas import THROTTLED_MESSAGE, mutation_quota
from broker.security.authorization import TOPIC, cluster_allowed, denied, split_entries, with_fields
from controller.authorizer import AclOperation
from controller.metadata.image import TopicImage
from controller.raft.wire import METADATA_TOPIC
from controller.topic_commands import CreateTopicSpec
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

API = APIS_BY_NAME["CreateTopics"]
R = struct_classes(API.response)
CONFIGS_VERSION = 5
AUTHORIZATION_FAILED = "Authorization failed."


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py): the topics the caller may create, and
    whose partitions its controller_mutation_rate admits, go on."""
    quota = mutation_quota(broker, ctx, request)
    if broker.authorizer is None and quota is None:
        return None
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    # Like Kafka, the metadata topic and duplicated names get the handler's INVALID_REQUEST.
    unique = [name for name, count in counts.items() if count == 1 and name != METADATA_TOPIC]
    refused, hidden = set(), set()
    if broker.authorizer is not None:
        if not cluster_allowed(broker, ctx, AclOperation.CREATE):
            refused = denied(broker, ctx, AclOperation.CREATE, TOPIC, unique)
        if ctx.api_version >= CONFIGS_VERSION:
            hidden = denied(broker, ctx, AclOperation.DESCRIBE_CONFIGS, TOPIC, unique)
    if not refused and not hidden and quota is None:
        return None
    unique_names = set(unique)

    def refusal(t):
        if t.name in refused:
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED
        elif quota is not None and t.name in unique_names and t.name not in broker.image.topics and _admitted_not(quota, broker, t):
            error, message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE
        else:
            return None
        return R.CreatableTopicResult(
            name=t.name, topic_id=ZERO_UUID, error_code=error,
            error_message=message, num_partitions=-1, replication_factor=-1, configs=None,
        )

    def finish(result):
        if result.name not in hidden or result.error_code != ErrorCode.NONE:
            return result
        return with_fields(
            result, configs=[], num_partitions=-1, replication_factor=-1,
            topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        )

    partial = split_entries(
        request, "topics", refusal, "topics", lambda: R.CreateTopicsResponse(throttle_time_ms=0, topics=[]),
        finish if hidden else None,
    )
    if quota is not None:
        ctx.throttle_time_ms = max(ctx.throttle_time_ms, quota.throttle_time_ms())
    return partial


def _admitted_not(quota, broker, t) -> bool:
    """Charge the partitions ``t`` would create (its assignments, its count, or num.partitions);
    True when the quota refuses them."""
    if t.assignments:
        partitions = len(t.assignments)
    else:
        partitions = t.num_partitions if t.num_partitions > 0 else broker.config["num.partitions"]
    return quota.admit(partitions) > 0


def register(dispatcher, broker, *, allow_internal: bool = False) -> None:
    """``allow_internal``: on the controller listener, where brokers ask for their
    internal topics (``__consumer_offsets``) to be created."""

    def config_entries(name: str, overrides: dict[str, str]):
        # The same values and sources DescribeConfigs reports for the topic.
        topic = TopicImage(name, ZERO_UUID, configs=MappingProxyType(dict(overrides)))
        every_key = SimpleNamespace(configuration_keys=None)
        return [
            R.CreatableTopicConfigs(
                name=e.name, value=e.value, read_only=e.read_only, config_source=e.config_source, is_sensitive=e.is_sensitive
            )
            for e in topic_entries(broker, topic, every_key, include_synonyms=False, include_documentation=False)
        ]

    async def handle(ctx, request):
        specs = []
        for t in request.topics:
            specs.append(
                CreateTopicSpec(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    assignments={a.partition_index: list(a.broker_ids) for a in t.assignments},
                    configs={c.name: c.value for c in t.configs},
                )
            )
        results = await broker.controller.create_topics(specs, validate_only=request.validate_only, internal=allow_internal)
        topics = []
        for result in results:
            ok = result.error_code == ErrorCode.NONE
            topics.append(
                R.CreatableTopicResult(
                    name=result.name,
                    topic_id=result.topic_id if ok and not request.validate_only else ZERO_UUID,
                    error_code=result.error_code,
                    error_message=result.error_message,
                    num_partitions=result.num_partitions if ok else -1,
                    replication_factor=result.replication_factor if ok else -1,
                    configs=config_entries(result.name, result.configs) if ok else None,
                )
            )
        return R.CreateTopicsResponse(throttle_time_ms=0, topics=topics)

    dispatcher.register(API.key, 2, 7, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))

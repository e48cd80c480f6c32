"""DeleteTopics (key 20), versions 1-6 (Kafka 4's range).

By name, or from v6 by name or topic id. Unknown names answer
UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID; with
``delete.topic.enable=false`` every topic answers TOPIC_DELETION_DISABLED.
The partition logs are removed from disk when the deletion is committed to
the metadata log.

Authorization (with an authorizer; Kafka's ControllerApis.deleteTopics),
decided by the broker the client asked, before the request is forwarded, from
its image: DELETE on each topic. A name the caller may not DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED whether or not it exists; one it may describe but
not delete, TOPIC_AUTHORIZATION_FAILED when it exists (else the handler's
UNKNOWN_TOPIC_OR_PARTITION). An id that names a topic the caller may not delete
answers TOPIC_AUTHORIZATION_FAILED with the name only when the caller may
describe it (unknown ids: the handler's UNKNOWN_TOPIC_ID). Names and ids given
twice are left to the handler.

A client with a ``controller_mutation_rate`` quota (broker/net/quotas.py) is
charged each existing topic's partitions, in request order; once it is over,
the next topics answer THROTTLING_QUOTA_EXCEEDED from v5 (Kafka's strict mode)
and are not sent on, while older versions are served and only throttled. The
answer carries the throttle time either way.
"""

from __future__ import annotations

from broker.net.quotas import THROTTLED_MESSAGE, mutation_quota
from broker.security.authorization import MESSAGES, TOPIC, allowed, split_entries
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

API = APIS_BY_NAME["DeleteTopics"]
R = struct_classes(API.response)
TOPIC_IDS_VERSION = 6
_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py): the topics the caller may delete, and
    whose partitions its controller_mutation_rate admits, go on."""
    quota = mutation_quota(broker, ctx)
    if broker.authorizer is None and quota is None:
        return None
    image = broker.image
    by_id = ctx.api_version >= TOPIC_IDS_VERSION

    def may(operation: int, name: str) -> bool:
        return allowed(broker, ctx, operation, TOPIC, name)

    def refused_name(name):
        """The response entry of a name refused (None: allowed, or left to the handler)."""
        if not may(AclOperation.DESCRIBE, name):
            return name
        if name in image.topics and not may(AclOperation.DELETE, name):
            return name
        return None

    if not by_id:
        counts: dict[str, int] = {}
        for name in request.topic_names:
            counts[name] = counts.get(name, 0) + 1

        def refusal(name):
            if counts[name] > 1 or refused_name(name) is None:
                return None
            return R.DeletableTopicResult(name=name, topic_id=ZERO_UUID, error_code=_DENIED, error_message=MESSAGES[_DENIED])

        field = "topic_names"
    else:
        seen: dict[object, int] = {}
        for t in request.topics:
            key = t.name if t.name is not None else t.topic_id
            seen[key] = seen.get(key, 0) + 1

        def refusal(t):
            if seen[t.name if t.name is not None else t.topic_id] > 1:
                return None
            if t.name is not None:
                if t.topic_id != ZERO_UUID or refused_name(t.name) is None:
                    return None  # both given: the handler's INVALID_REQUEST
                return R.DeletableTopicResult(name=t.name, topic_id=ZERO_UUID, error_code=_DENIED, error_message=MESSAGES[_DENIED])
            name = image.topic_names_by_id.get(t.topic_id)
            if name is None or may(AclOperation.DELETE, name):
                return None
            shown = name if may(AclOperation.DESCRIBE, name) else None
            return R.DeletableTopicResult(name=shown, topic_id=t.topic_id, error_code=_DENIED, error_message=MESSAGES[_DENIED])

        field = "topics"

    def refusal_or_throttle(entry):
        refused = refusal(entry) if broker.authorizer is not None else None
        if refused is not None or quota is None:
            return refused
        name = entry if not by_id else (entry.name if entry.name is not None else image.topic_names_by_id.get(entry.topic_id))
        topic = image.topics.get(name) if name is not None else None
        duplicated = (counts[entry] if not by_id else seen[entry.name if entry.name is not None else entry.topic_id]) > 1
        if topic is None or duplicated or quota.admit(len(topic.partitions)) == 0:
            return None  # the handler answers unknown and duplicated topics
        return R.DeletableTopicResult(
            name=name, topic_id=ZERO_UUID if not by_id else entry.topic_id,
            error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED_MESSAGE,
        )

    partial = split_entries(
        request, field, refusal_or_throttle, "responses", lambda: R.DeleteTopicsResponse(throttle_time_ms=0, responses=[])
    )
    if quota is not None:
        ctx.throttle_time_ms = max(ctx.throttle_time_ms, quota.throttle_time_ms())
    return partial


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        if ctx.api_version >= 6:
            targets = [(t.name, t.topic_id) for t in request.topics]
        else:
            targets = [(name, None) for name in request.topic_names]
        if not broker.config["delete.topic.enable"]:
            results = [
                (ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.", name, topic_id) for name, topic_id in targets
            ]
        else:
            results = await broker.controller.delete_topics(targets)
        responses = [
            R.DeletableTopicResult(
                name=name,
                topic_id=topic_id or ZERO_UUID,
                error_code=error,
                error_message=message,
            )
            for error, message, name, topic_id in results
        ]
        return R.DeleteTopicsResponse(throttle_time_ms=0, responses=responses)

    dispatcher.register(API.key, 1, 6, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))

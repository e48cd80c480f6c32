"""CreatePartitions (key 37), versions 0-3.

Raises a topic's partition count. The new partitions take the ids after the
existing ones and the topic's replication factor; with ``assignments`` null
they are placed by the controller (on a single node: on this broker), else
each new partition gets the replica list given for it. The new partitions
are written to the metadata log, then applied; their logs are created as the
broker sees the new image, so Produce, Fetch and Metadata serve them at once.

Errors per topic, as Kafka's controller answers them: UNKNOWN_TOPIC_OR_PARTITION;
INVALID_PARTITIONS when the count does not grow ("Topic already has N
partition(s)." / "The topic T currently has N partition(s); M would not be an
increase."); INVALID_REPLICA_ASSIGNMENT when the assignments do not number the
new partitions, repeat a broker, name an unregistered one or have another
replica count than the existing partitions; INVALID_REQUEST ("Duplicate topic
name.") for a topic named twice, none of whose copies is applied.
``validate_only`` checks everything and changes nothing. ``timeout_ms`` is not
waited on: a single node has applied the change when it answers.

Authorization (with an authorizer; Kafka's ControllerApis.createPartitions),
decided by the broker the client asked, before the request is forwarded: ALTER
on each topic, else TOPIC_AUTHORIZATION_FAILED (no message) and the topic is not
sent on; a name given twice is left to the handler's INVALID_REQUEST.

A client with a ``controller_mutation_rate`` quota (broker/net/quotas.py) is
charged the partitions each topic would add, in request order; once it is over,
the next topics answer THROTTLING_QUOTA_EXCEEDED from v3 (Kafka's strict mode)
and are not sent on, while older versions are served and only throttled. The
answer carries the throttle time either way.
"""

from __future__ import annotations

from broker.net.quotas import THROTTLED_MESSAGE, mutation_quota
from broker.security.authorization import TOPIC, denied, split_entries
from controller.authorizer import AclOperation
from controller.topic_commands import CreatePartitionsSpec
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["CreatePartitions"]
R = struct_classes(API.response)


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py): the topics the caller may ALTER, and
    whose new partitions its controller_mutation_rate admits, go on."""
    quota = mutation_quota(broker, ctx, request)
    if broker.authorizer is None and quota is None:
        return None
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    unique = [name for name, count in counts.items() if count == 1]
    refused = denied(broker, ctx, AclOperation.ALTER, TOPIC, unique) if broker.authorizer is not None else set()
    if not refused and quota is None:
        return None
    image = broker.image

    def refusal(t):
        if t.name in refused:
            return R.CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None)
        if quota is not None and counts[t.name] == 1 and t.name in image.topics:
            # The partitions this request would add (the handler answers the other cases).
            added = t.count - len(image.topics[t.name].partitions)
            if added > 0 and quota.admit(added) > 0:
                return R.CreatePartitionsTopicResult(
                    name=t.name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED_MESSAGE
                )
        return None

    partial = split_entries(request, "topics", refusal, "results", lambda: R.CreatePartitionsResponse(throttle_time_ms=0, results=[]))
    if quota is not None:
        ctx.throttle_time_ms = max(ctx.throttle_time_ms, quota.throttle_time_ms())
    return partial


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        specs = [
            CreatePartitionsSpec(
                name=t.name,
                count=t.count,
                assignments=None if t.assignments is None else [list(a.broker_ids) for a in t.assignments],
            )
            for t in request.topics
        ]
        results = await broker.controller.create_partitions(specs, validate_only=request.validate_only)
        return R.CreatePartitionsResponse(
            throttle_time_ms=0,
            results=[
                R.CreatePartitionsTopicResult(name=r.name, error_code=r.error_code, error_message=r.error_message)
                for r in results
            ],
        )

    dispatcher.register(API.key, 0, 3, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))

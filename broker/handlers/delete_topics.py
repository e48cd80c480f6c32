"""DeleteTopics (key 20), versions 1-6 (Kafka 4's range).

By name, or from v6 by name or topic id. Unknown names answer
UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID; with
``delete.topic.enable=false`` every topic answers TOPIC_DELETION_DISABLED.
The partition logs are removed from disk when the deletion is committed to
the metadata log.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import ZERO_UUID, struct_classes

API = APIS_BY_KEY[20]
R = struct_classes(API.response)


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

    dispatcher.register(API.key, 1, 6, handle)

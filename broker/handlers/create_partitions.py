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
"""

from __future__ import annotations

from controller.topic_commands import CreatePartitionsSpec
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[37]
R = struct_classes(API.response)


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

    dispatcher.register(API.key, 0, 3, handle)

"""The controller's commands as pure functions of an image: (image, command) -> (results, records).

Nothing here writes: the caller (the active controller, see
``broker/controller_node/quorum_controller.py``) proposes the records to the Raft quorum and answers the request only
when they are committed. A request naming several topics or resources plans
each against the image the earlier ones left, and all their records go into
one batch, so a request applies whole or not at all.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

from controller.config_commands import AlterConfigsResult, ConfigChange, plan_alter_configs
from controller.link_commands import mirror_partitions_refusal
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import PRODUCER_IDS_RECORD, record_api_key
from controller.producer_origins import next_block
from controller.topic_commands import (
    ClusterDefaults,
    CreatePartitionsResult,
    CreatePartitionsSpec,
    CreateTopicResult,
    CreateTopicSpec,
    plan_create_partitions,
    plan_create_topic,
    plan_delete_topic,
)
from protocol.errors import ErrorCode


def _applied(image: MetadataImage, records: list) -> MetadataImage:
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset)


def _plan_per_topic(image: MetadataImage, specs, plan, result_class, validate_only: bool):
    """Plan one command per topic against the image as the earlier ones in the
    request left it. A name given twice is answered once with INVALID_REQUEST
    and none of its copies is applied (Kafka's ControllerApis; the response is
    keyed by name)."""
    results = []
    records: list = []
    planned = image
    counts = Counter(spec.name for spec in specs)
    answered: set[str] = set()
    for spec in specs:
        if counts[spec.name] > 1:
            if spec.name not in answered:
                answered.add(spec.name)
                results.append(result_class(spec.name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        result, topic_records = plan(planned, spec)
        results.append(result)
        if topic_records and not validate_only:
            records.extend(topic_records)
            planned = _applied(planned, topic_records)
    return results, records


def create_topics(
    image: MetadataImage,
    specs: list[CreateTopicSpec],
    defaults: ClusterDefaults,
    new_uuid: Callable[[], uuid.UUID],
    *,
    validate_only: bool = False,
    internal: bool = False,
) -> tuple[list[CreateTopicResult], list]:
    return _plan_per_topic(
        image,
        specs,
        lambda planned, spec: plan_create_topic(planned, spec, defaults, new_uuid(), internal=internal),
        CreateTopicResult,
        validate_only,
    )


def create_partitions(
    image: MetadataImage, specs: list[CreatePartitionsSpec], defaults: ClusterDefaults, *, validate_only: bool = False
) -> tuple[list[CreatePartitionsResult], list]:
    def plan(planned, spec):
        refusal = mirror_partitions_refusal(planned, spec.name)
        if refusal is not None:
            return CreatePartitionsResult(spec.name, ErrorCode.INVALID_REQUEST, refusal), []
        return plan_create_partitions(planned, spec, defaults)

    return _plan_per_topic(image, specs, plan, CreatePartitionsResult, validate_only)


def delete_topics(image: MetadataImage, targets: list[tuple[str | None, uuid.UUID | None]]):
    """One (error_code, message, name, topic_id) per target, and the records."""
    results = []
    records: list = []
    planned = image
    counts = Counter(targets)
    answered: set = set()
    for name, topic_id in targets:
        if counts[(name, topic_id)] > 1:
            if (name, topic_id) not in answered:
                answered.add((name, topic_id))
                results.append((ErrorCode.INVALID_REQUEST, "Duplicate topic in request.", name, topic_id))
            continue
        error, message, found_name, found_id, topic_records = plan_delete_topic(planned, name, topic_id)
        results.append((error, message, found_name, found_id))
        if topic_records:
            records.extend(topic_records)
            planned = _applied(planned, topic_records)
    return results, records


def alter_configs(
    image: MetadataImage,
    changes: list[ConfigChange],
    *,
    incremental: bool,
    validate_only: bool = False,
    local_node_id: int,
) -> tuple[list[AlterConfigsResult], list]:
    """IncrementalAlterConfigs (``incremental``) or legacy AlterConfigs; one result per change, in order."""
    results = []
    records: list = []
    planned = image
    counts = Counter((c.resource_type, c.resource_name) for c in changes)
    for change in changes:
        if counts[(change.resource_type, change.resource_name)] > 1:
            results.append(
                AlterConfigsResult(
                    change.resource_type, change.resource_name, ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
                )
            )
            continue
        result, resource_records = plan_alter_configs(planned, change, incremental=incremental, local_node_id=local_node_id)
        results.append(result)
        if resource_records and not validate_only:
            records.extend(resource_records)
            planned = _applied(planned, resource_records)
    return results, records


def allocate_producer_ids(
    image: MetadataImage, broker_id: int, broker_epoch: int, block_size: int, origin_id: int = 0
) -> tuple[range, list]:
    """The next block of producer ids, inside ``origin_id``'s range
    (controller/producer_origins.py; ProducerIdOriginError when the ids handed
    out so far belong to another origin); it is durable (and so never handed
    out twice, even across controller failovers) once the record is committed."""
    block = next_block(image.next_producer_id, origin_id, block_size)
    record = PRODUCER_IDS_RECORD(broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=block.stop)
    return block, [record]

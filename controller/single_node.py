"""The metadata controller of a single-node cluster.

It is the precursor of the Raft quorum: commands become KRaft records, the
records are appended (one batch per command, so a command applies whole or
not at all) to the ``__cluster_metadata-0`` log and fsynced, and only then
applied to the in-memory image. At start-up the log is replayed into the image.
"""

from __future__ import annotations

import logging
from collections import Counter
import time
import uuid
from pathlib import Path
from typing import Callable

from controller.config_commands import AlterConfigsResult, ConfigChange, plan_alter_configs
from controller.metadata.image import MetadataImage, apply_records
from controller.metadata.records import PRODUCER_IDS_RECORD, decode_record, encode_record, record_api_key
from controller.topic_commands import (
    METADATA_TOPIC,
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
from protocol.records import build_batch, decode_batch_records, iter_batches
from storage.log import LogConfig, PartitionLog

log = logging.getLogger(__name__)

METADATA_DIR_NAME = f"{METADATA_TOPIC}-0"

ImageListener = Callable[[MetadataImage, MetadataImage], None]


class MetadataController:
    def __init__(
        self,
        metadata_dir: Path,
        defaults: ClusterDefaults,
        *,
        clock_ms: Callable[[], int] | None = None,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
    ):
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._new_uuid = new_uuid
        self.defaults = defaults
        self._log = PartitionLog(Path(metadata_dir) / METADATA_DIR_NAME, LogConfig(segment_bytes=64 << 20), clock_ms=self._clock_ms)
        self.image = MetadataImage()
        self._listeners: list[ImageListener] = []
        self._replay()

    def _replay(self) -> None:
        offset = self._log.log_start_offset
        image = self.image
        count = 0
        while offset < self._log.log_end_offset:
            data = self._log.read(offset, 1 << 20)
            if not data:
                break
            for position, size, _ in iter_batches(data):
                header, records = decode_batch_records(data[position : position + size])
                decoded = [decode_record(r.value) for r in records]
                count += len(decoded)
                last = header.base_offset + header.last_offset_delta
                image = apply_records(image, decoded, last)
                offset = last + 1
        self.image = image
        log.info("metadata: replayed %d records up to offset %d, %d topics", count, image.offset, len(image.topics))

    def subscribe(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    def _commit(self, records: list) -> None:
        if not records:
            return
        now = self._clock_ms()
        batch = build_batch([(None, encode_record(r), [], now) for r in records])
        result = self._log.append(batch)
        self._log.flush(fsync=True)
        old = self.image
        self.image = apply_records(old, [(record_api_key(r), r) for r in records], result.last_offset)
        for listener in self._listeners:
            listener(old, self.image)

    # ----------------------------------------------------------------- commands

    def create_topics(
        self, specs: list[CreateTopicSpec], *, validate_only: bool = False, internal: bool = False
    ) -> list[CreateTopicResult]:
        return self._plan_per_topic(
            specs,
            lambda image, spec: plan_create_topic(image, spec, self.defaults, self._new_uuid(), internal=internal),
            CreateTopicResult,
            validate_only,
        )

    def create_partitions(
        self, specs: list[CreatePartitionsSpec], *, validate_only: bool = False
    ) -> list[CreatePartitionsResult]:
        """Add partitions to existing topics; one result per distinct name, in request
        order. The new partitions of every topic that passes are committed in one
        batch (appended and fsynced, then applied); ``validate_only`` checks
        everything and writes nothing."""
        return self._plan_per_topic(
            specs, lambda image, spec: plan_create_partitions(image, spec, self.defaults), CreatePartitionsResult, validate_only
        )

    def _plan_per_topic(self, specs, plan, result_class, validate_only: bool) -> list:
        """Plan one command per topic against the image as the earlier ones in the
        request left it, then commit all their records as one batch. A name given
        twice is answered once with INVALID_REQUEST and none of its copies is
        applied (Kafka's ControllerApis; the response is keyed by name)."""
        results = []
        records: list = []
        planned = self.image
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
                planned = apply_records(planned, [(record_api_key(r), r) for r in topic_records], planned.offset)
        self._commit(records)
        return results

    def delete_topics(self, targets: list[tuple[str | None, uuid.UUID | None]]):
        """Returns a list of (error_code, message, name, topic_id) per target."""
        results = []
        records: list = []
        planned = self.image
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
                planned = apply_records(planned, [(record_api_key(r), r) for r in topic_records], planned.offset)
        self._commit(records)
        return results

    def alter_configs(
        self,
        changes: list[ConfigChange],
        *,
        incremental: bool,
        validate_only: bool = False,
        local_node_id: int,
    ) -> list[AlterConfigsResult]:
        """IncrementalAlterConfigs (``incremental``) or legacy AlterConfigs; one result per
        change, in order. The records of every resource that passes are committed in one
        batch; ``validate_only`` checks everything and writes nothing."""
        results = []
        records: list = []
        planned = self.image
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
                planned = apply_records(planned, [(record_api_key(r), r) for r in resource_records], planned.offset)
        self._commit(records)
        return results

    def allocate_producer_ids(self, broker_id: int, block_size: int) -> range:
        """Reserve ``block_size`` producer ids; the reservation is durable before it is used,
        so an id is never handed out twice, even across restarts."""
        start = self.image.next_producer_id
        self._commit([PRODUCER_IDS_RECORD(broker_id=broker_id, broker_epoch=-1, next_producer_id=start + block_size)])
        return range(start, start + block_size)

    def close(self) -> None:
        self._log.flush(fsync=True)
        self._log.close()


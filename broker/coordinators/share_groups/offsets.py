"""The group coordinator's side of the share group offset admin APIs: it asks
the share coordinators of a group's share-partitions, as Kafka's group
coordinator does through its persister.

A share-partition's state lives on the leader of the ``__share_group_state``
partition its key hashes to (broker/coordinators/share_groups/service.py),
often not the group's coordinator. Every call here takes the share-partitions
of one group, asks this broker's share coordinator directly for the state
partitions it leads, and each other leader once per state partition with the
inter-broker API (ReadShareGroupStateSummary, InitializeShareGroupState,
DeleteShareGroupState v0), the state partitions concurrently. A share
coordinator that cannot be reached answers COORDINATOR_NOT_AVAILABLE for its
share-partitions; nothing here retries (the admin client does).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from controller.topic_commands import INTERNAL_TOPICS
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

Key = tuple[str, uuid.UUID, int]  # group id, topic id, partition
SUMMARY = APIS_BY_NAME["ReadShareGroupStateSummary"]
INITIALIZE = APIS_BY_NAME["InitializeShareGroupState"]
DELETE = APIS_BY_NAME["DeleteShareGroupState"]
_S = struct_classes(SUMMARY.request)
_I = struct_classes(INITIALIZE.request)
_D = struct_classes(DELETE.request)


@dataclass(frozen=True)
class Summary:
    error: ErrorCode
    # Without state (UNKNOWN_TOPIC_OR_PARTITION): the state epoch the next state must have.
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1

    @property
    def has_state(self) -> bool:
        return self.error == ErrorCode.NONE


def all_partition_keys(image, group_id: str) -> list[Key]:
    """The share-partition key of every partition of every topic a share group
    can read (internal topics are not)."""
    return [(group_id, topic.topic_id, p) for name, topic in sorted(image.topics.items())
            if name not in INTERNAL_TOPICS for p in sorted(topic.partitions)]


async def _ask(service, keys: Iterable[Key], local: Callable[[Key], Awaitable], remote, failed) -> dict:
    """The answer for every key: from ``local(key)`` where this broker is its share
    coordinator, else from ``remote(state partition, keys)``; ``failed(error)``
    for keys whose coordinator cannot be asked."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return {}
    error = await service.shell.ensure_topic()
    if error != ErrorCode.NONE:
        return {key: failed(error) for key in keys}
    by_partition: dict[int, list[Key]] = defaultdict(list)
    for key in keys:
        by_partition[service.state_partition_for(key)].append(key)

    async def one(state_partition: int, partition_keys: list[Key]) -> dict:
        wrong = service.shell.not_coordinator(state_partition)
        if wrong is None:
            return {key: await local(key) for key in partition_keys}
        if wrong != ErrorCode.NOT_COORDINATOR:
            return {key: failed(wrong) for key in partition_keys}
        return await remote(state_partition, partition_keys)

    answers: dict = {}
    for part in await asyncio.gather(*(one(p, ks) for p, ks in sorted(by_partition.items()))):
        answers.update(part)
    return answers


def _by_topic(keys: list[Key]) -> dict[uuid.UUID, list[int]]:
    topics: dict[uuid.UUID, list[int]] = defaultdict(list)
    for _, topic_id, partition in keys:
        topics[topic_id].append(partition)
    return topics


def _results(response, partition_keys: list[Key], parse, failed) -> dict:
    group_id = partition_keys[0][0]
    answers = {(group_id, r.topic_id, p.partition): parse(p) for r in response.results for p in r.partitions}
    return {key: answers.get(key, failed(ErrorCode.UNKNOWN_SERVER_ERROR)) for key in partition_keys}


async def summaries(service, keys: Iterable[Key]) -> dict[Key, Summary]:
    """ReadShareGroupStateSummary of every key."""
    async def local(key: Key) -> Summary:
        return Summary(*(await service.read_summary(key)))

    def parse(p) -> Summary:
        return Summary(ErrorCode(p.error_code), p.state_epoch, p.leader_epoch, p.start_offset)

    async def remote(state_partition: int, partition_keys: list[Key]) -> dict:
        body = _S.ReadShareGroupStateSummaryRequest(group_id=partition_keys[0][0], topics=[
            _S.ReadStateSummaryData(topic_id=t, partitions=[_S.PartitionData(partition=p, leader_epoch=-1) for p in ps])
            for t, ps in _by_topic(partition_keys).items()])
        error, response = await service.call_coordinator(state_partition, SUMMARY, body)
        if response is None:
            return {key: Summary(error) for key in partition_keys}
        return _results(response, partition_keys, parse, Summary)

    return await _ask(service, keys, local, remote, Summary)


async def initialize(service, states: dict[Key, tuple[int, int]]) -> dict[Key, ErrorCode]:
    """InitializeShareGroupState: each key's (state epoch, start offset)."""
    async def local(key: Key) -> ErrorCode:
        return await service.initialize_state(key, *states[key])

    async def remote(state_partition: int, partition_keys: list[Key]) -> dict:
        body = _I.InitializeShareGroupStateRequest(group_id=partition_keys[0][0], topics=[
            _I.InitializeStateData(topic_id=t, partitions=[
                _I.PartitionData(partition=p, state_epoch=states[(partition_keys[0][0], t, p)][0],
                                 start_offset=states[(partition_keys[0][0], t, p)][1]) for p in ps])
            for t, ps in _by_topic(partition_keys).items()])
        error, response = await service.call_coordinator(state_partition, INITIALIZE, body)
        if response is None:
            return {key: error for key in partition_keys}
        return _results(response, partition_keys, lambda p: ErrorCode(p.error_code), lambda e: e)

    return await _ask(service, states, local, remote, lambda e: e)


async def delete(service, keys: Iterable[Key]) -> dict[Key, ErrorCode]:
    """DeleteShareGroupState of every key (nothing to do for one without state)."""
    async def remote(state_partition: int, partition_keys: list[Key]) -> dict:
        body = _D.DeleteShareGroupStateRequest(group_id=partition_keys[0][0], topics=[
            _D.DeleteStateData(topic_id=t, partitions=[_D.PartitionData(partition=p) for p in ps])
            for t, ps in _by_topic(partition_keys).items()])
        error, response = await service.call_coordinator(state_partition, DELETE, body)
        if response is None:
            return {key: error for key in partition_keys}
        return _results(response, partition_keys, lambda p: ErrorCode(p.error_code), lambda e: e)

    return await _ask(service, keys, service.delete_state, remote, lambda e: e)


async def reset(service, start_offsets: dict[Key, int]) -> dict[Key, ErrorCode]:
    """AlterShareGroupOffsets: each share-partition's state set anew at its start
    offset, one state epoch past the held one (or at the epoch a deleted state
    left), so that a partition leader holding the old state is fenced."""
    held = await summaries(service, start_offsets)
    results: dict[Key, ErrorCode] = {}
    states: dict[Key, tuple[int, int]] = {}
    for key, offset in start_offsets.items():
        summary = held[key]
        if summary.has_state:
            states[key] = (summary.state_epoch + 1, offset)
        elif summary.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            states[key] = (max(summary.state_epoch, 1), offset)
        else:
            results[key] = summary.error
    results.update(await initialize(service, states))
    return results

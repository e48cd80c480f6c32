"""Consumer group offsets of multi-master topics, translated from a link's source.

The consumer offset sync (broker/links/offset_sync.py) hands this module a
source group's committed offsets on the topics of the link's
``multi.master.topics``; for each partition it reads the source partition
below the committed offset (Fetch at the source partition's leader) and the
destination partition (Fetch at its leader here, over the inter-broker
listener) as broker/links/group_translation_rules.py says, and answers the
place the group resumes at here, with the number of records it will get
again. Reads are bounded per round (``FETCHES_PER_ROUND`` Fetch requests a
partition and side); a translation that needs more goes on in the next
round of the sync from where it stopped.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.links.group_translation_rules import ConsumedFrontier, DestinationScan
from broker.links.source import SourceCluster
from broker.links.source_fetch import FETCH, FetchWanted, consumer_fetch_request, fetched_partitions, topic_leaders
from protocol.errors import ErrorCode
from protocol.records import iter_batches

log = logging.getLogger(__name__)

# Fetch by topic name at this cluster's leaders (they speak every version).
DESTINATION_FETCH_VERSION = 12
FETCH_MAX_WAIT_MS = 100
# How many Fetch requests one partition's translation may send to each side
# in one round of the offset sync before it waits for the next round.
FETCHES_PER_ROUND = 16
# Records delivered again are counted this far past the place (Fetch requests).
AGAIN_FETCHES_PER_ROUND = 4
SCAN_ROUNDS_MAX = 2 * (FETCHES_PER_ROUND + AGAIN_FETCHES_PER_ROUND)
DESTINATION_TIMEOUT_MS = 30_000


class Translated(NamedTuple):
    """Where a group resumes here: ``offset``; ``again_records``: records
    within what it consumed at the source after it (at least that many when
    ``again_counted`` is False: the count stopped at its read budget)."""

    offset: int
    again_records: int
    again_counted: bool


@dataclass
class _PartitionTranslation:
    frontier: ConsumedFrontier = field(default_factory=ConsumedFrontier)
    scan: DestinationScan = field(default_factory=DestinationScan)
    last: Translated | None = None


class GroupTranslator:
    """The translations of the groups one broker syncs, kept between rounds."""

    def __init__(self, broker, leader_connection):
        """``leader_connection(image, node)``: a connection to this cluster's broker ``node`` (None: no endpoint)."""
        self._broker = broker
        self._leader_connection = leader_connection
        self._partitions: dict[tuple[uuid.UUID, str, str, int], _PartitionTranslation] = {}

    def results(self) -> dict[tuple[uuid.UUID, str, str, int], Translated]:
        """The last translation of each (link id, group, topic, partition)."""
        return {key: state.last for key, state in self._partitions.items() if state.last is not None}

    def forget_links(self, kept: set[uuid.UUID]) -> None:
        for key in [k for k in self._partitions if k[0] not in kept]:
            del self._partitions[key]

    async def translate(
        self, link, source: SourceCluster, group: str, committed: dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], Translated]:
        """The places of ``group`` here for its source offsets ``committed``
        (by (topic, partition), multi-master topics only) whose translation
        finished this round."""
        states = {key: self._partitions.setdefault((link.link_id, group, *key), _PartitionTranslation()) for key in committed}
        for key in [k for k in self._partitions if k[0] == link.link_id and k[1] == group and (k[2], k[3]) not in committed]:
            del self._partitions[key]  # no longer committed at the source
        folding = {key: state for key, state in states.items() if not state.frontier.target(committed[key])}
        if folding:
            await self._fold(source, folding, committed)
        done: dict[tuple[str, int], Translated] = {}
        ready = {key: state for key, state in states.items() if state.frontier.offset >= committed[key]}
        for state in ready.values():
            state.scan.restart(state.frontier.generation)
        if ready:
            for key, (offset, counted) in (await self._scan(ready)).items():
                state = ready[key]
                state.last = done[key] = Translated(offset, state.scan.again_records, counted)
        return done

    # ----------------------------------------------------------------- the source

    async def _fold(self, source: SourceCluster, folding: dict, committed: dict) -> None:
        metadata = await source.metadata(sorted({name for name, _ in folding}))
        leaders: dict[tuple[str, int], int] = {}
        topic_ids: dict[str, uuid.UUID] = {}
        for topic in metadata.topics:
            if topic.error_code == ErrorCode.NONE:
                topic_leaders(topic, leaders, topic_ids)
        names = {v: k for k, v in topic_ids.items()}
        max_bytes = self._broker.config["replica.fetch.max.bytes"]
        pending = {key: state for key, state in folding.items() if key in leaders}
        for _ in range(FETCHES_PER_ROUND):
            if not pending:
                return
            by_leader: dict[int, list] = {}
            for key in pending:
                by_leader.setdefault(leaders[key], []).append(key)
            for leader, keys in sorted(by_leader.items()):
                wanted = [FetchWanted(name, index, pending[(name, index)].frontier.offset, max_bytes) for name, index in keys]

                def body(version: int, wanted=wanted):
                    return consumer_fetch_request(
                        version, wanted, topic_ids, max_wait_ms=FETCH_MAX_WAIT_MS,
                        response_max_bytes=self._broker.config["replica.fetch.response.max.bytes"],
                    )

                version, response = await source.request_node(leader, FETCH, body, timeout_ms=FETCH_MAX_WAIT_MS + source.request_timeout_ms)
                answered = set()
                for name, data in fetched_partitions(version, response, names):
                    key = (name, data.partition_index)
                    state = pending.get(key)
                    if state is None:
                        continue
                    answered.add(key)
                    frontier = state.frontier
                    error = ErrorCode(data.error_code)
                    if error == ErrorCode.OFFSET_OUT_OF_RANGE and version >= 5 and frontier.offset < data.log_start_offset:
                        frontier.start_at(data.log_start_offset)
                        continue
                    if error != ErrorCode.NONE:
                        log.debug("group translation: Fetch of the source's %s-%d: %s", name, data.partition_index, error.name)
                        del pending[key]
                        continue
                    headers = [header for _, _, header in iter_batches(memoryview(data.records or b""), allow_truncated_tail=True)]
                    if frontier.fold(headers, committed[key]):
                        del pending[key]
                    elif not headers:
                        if frontier.offset >= data.high_watermark:
                            # Committed past what the source holds (an admin tool
                            # can do that): the batches there are all folded.
                            frontier.offset = committed[key]
                        del pending[key]  # nothing came back: on next round
                for key in keys:
                    if key not in answered:
                        pending.pop(key, None)

    # ----------------------------------------------------------------- this cluster

    async def _scan(self, ready: dict) -> dict[tuple[str, int], tuple[int, bool]]:
        """Scan this cluster's partitions of ``ready``; (place, whether the
        records again were counted to the high watermark) of those whose
        place is known this round."""
        image = self._broker.image
        max_bytes = self._broker.config["replica.fetch.max.bytes"]
        response_max_bytes = self._broker.config["replica.fetch.response.max.bytes"]
        placed: dict[tuple[str, int], tuple[int, bool]] = {}
        pending = dict(ready)
        fetches = dict.fromkeys(ready, 0)  # Fetch requests for a partition this round (reset once placed)
        # Bounded as a whole too: a log cut under the scan starts it over.
        for _ in range(SCAN_ROUNDS_MAX):
            if not pending:
                break
            by_leader: dict[int, list] = {}
            for key in list(pending):
                topic = image.topics.get(key[0])
                partition = None if topic is None else topic.partitions.get(key[1])
                if partition is None or partition.leader < 0:
                    del pending[key]
                    continue
                by_leader.setdefault(partition.leader, []).append(key)
            answered = set()
            for leader, keys in sorted(by_leader.items()):
                connection = self._leader_connection(image, leader)
                if connection is None:
                    continue
                wanted = [FetchWanted(name, index, pending[(name, index)].scan.next_fetch_offset, max_bytes) for name, index in keys]
                body = consumer_fetch_request(
                    DESTINATION_FETCH_VERSION, wanted, {}, max_wait_ms=FETCH_MAX_WAIT_MS, response_max_bytes=response_max_bytes
                )
                try:
                    response = await connection.request(FETCH, DESTINATION_FETCH_VERSION, body, timeout_ms=DESTINATION_TIMEOUT_MS)
                except (ConnectionError, OSError, TimeoutError) as exc:
                    log.debug("group translation: Fetch at broker %d failed: %s", leader, exc)
                    continue
                for name, data in fetched_partitions(DESTINATION_FETCH_VERSION, response, {}):
                    key = (name, data.partition_index)
                    state = pending.get(key)
                    if state is None:
                        continue
                    scan = state.scan
                    error = ErrorCode(data.error_code)
                    if error == ErrorCode.OFFSET_OUT_OF_RANGE and scan.next_fetch_offset < data.log_start_offset:
                        scan.start_at(data.log_start_offset)
                    elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
                        # Past the log's end: it was truncated (a leader change
                        # lost records), so the earlier place is no lower bound.
                        scan.start_over()
                    elif error != ErrorCode.NONE:
                        log.debug("group translation: Fetch of %s-%d here: %s", name, data.partition_index, error.name)
                        continue
                    else:
                        was_placed = scan.place >= 0
                        headers = [h for _, _, h in iter_batches(memoryview(data.records or b""), allow_truncated_tail=True)]
                        scan.scan(headers, state.frontier.frontier)
                        if not was_placed and scan.place >= 0:
                            fetches[key] = 0  # the count of records again has its own budget
                        if scan.next_fetch_offset >= data.high_watermark or not headers:
                            placed[key] = (scan.answer(data.high_watermark), True)
                            del pending[key]
                            continue
                    answered.add(key)
            for key in list(pending):
                fetches[key] += 1
                state = pending[key]
                if key not in answered:
                    del pending[key]  # the next round asks again
                elif state.scan.place >= 0 and fetches[key] >= AGAIN_FETCHES_PER_ROUND:
                    placed[key] = (state.scan.place, False)
                    del pending[key]
                elif state.scan.place < 0 and fetches[key] >= FETCHES_PER_ROUND:
                    del pending[key]  # on from here next round
        return placed

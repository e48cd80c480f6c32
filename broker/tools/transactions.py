"""``pybroker transactions``: inspect and abort transactions, as kafka-transactions.sh does.

A plain Kafka client over the wire protocol (``--bootstrap-server``):

- ``list``: ListTransactions on every broker (each coordinator knows only its
  own transactional ids), with Kafka's state and duration filters;
- ``describe --transactional-id ID``: DescribeTransactions at the id's
  coordinator (FindCoordinator with key type 1);
- ``describe-producers --topic T --partition P``: DescribeProducers at the
  partition's leader, with each producer's open transaction start offset;
- ``abort --topic T --partition P (--start-offset O | --producer-id ID
  --producer-epoch E --coordinator-epoch C)``: writes an ABORT marker to that
  one partition with WriteTxnMarkers, for a transaction left hanging there
  (its coordinator lost it). With ``--start-offset`` the producer whose open
  transaction starts at that offset is looked up first, and the marker
  carries its epoch and the coordinator epoch the partition last saw, as
  Kafka's admin client does.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.tools.client import ToolClient, ToolError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_METADATA = struct_classes(APIS_BY_NAME["Metadata"].request)
_DESCRIBE_PRODUCERS = struct_classes(APIS_BY_NAME["DescribeProducers"].request)
_MARKERS = struct_classes(APIS_BY_NAME["WriteTxnMarkers"].request)
KEY_TYPE_TRANSACTION = 1


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int
    partitions: list[tuple[str, int]]


@dataclass(frozen=True)
class ProducerRow:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    current_txn_start_offset: int


class TransactionsTool(ToolClient):

    def _metadata(self, topics: list[str] | None):
        return self._connection(self._bootstrap).call(
            "Metadata", 9,
            topics=None if topics is None else [_METADATA.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        )

    def list_transactions(self, states: list[str] | None = None, duration_ms: int | None = None) -> list[ListedTransaction]:
        metadata = self._metadata([])
        found = []
        for broker in sorted(metadata.brokers, key=lambda b: b.node_id):
            response = self._connection((broker.host, broker.port)).call(
                "ListTransactions", 1, state_filters=states or [], producer_id_filters=[],
                duration_filter=-1 if duration_ms is None else duration_ms,
            )
            if response.error_code != ErrorCode.NONE:
                raise ToolError(f"ListTransactions at broker {broker.node_id}: {ErrorCode(response.error_code).name}")
            if response.unknown_state_filters:
                raise ToolError(f"unknown transaction states: {', '.join(response.unknown_state_filters)}")
            found.extend(
                ListedTransaction(t.transactional_id, broker.node_id, t.producer_id, t.transaction_state)
                for t in response.transaction_states
            )
        return sorted(found, key=lambda t: t.transactional_id)

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        found = self._connection(self._bootstrap).call("FindCoordinator", 3, key=transactional_id, key_type=KEY_TYPE_TRANSACTION)
        if found.error_code != ErrorCode.NONE:
            raise ToolError(f"no coordinator for transactional id {transactional_id!r}: {ErrorCode(found.error_code).name}")
        response = self._connection((found.host, found.port)).call("DescribeTransactions", 0, transactional_ids=[transactional_id])
        state = response.transaction_states[0]
        if state.error_code != ErrorCode.NONE:
            raise ToolError(f"DescribeTransactions {transactional_id!r}: {ErrorCode(state.error_code).name}")
        return TransactionDescription(
            found.node_id, state.transactional_id, state.producer_id, state.producer_epoch, state.transaction_state,
            state.transaction_timeout_ms, state.transaction_start_time_ms,
            sorted((t.topic, p) for t in state.topics for p in t.partitions),
        )

    def _leader(self, topic: str, partition: int) -> tuple[str, int]:
        metadata = self._metadata([topic])
        brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
        described = metadata.topics[0]
        if described.error_code != ErrorCode.NONE:
            raise ToolError(f"topic {topic!r}: {ErrorCode(described.error_code).name}")
        for p in described.partitions:
            if p.partition_index == partition:
                if p.leader_id not in brokers:
                    raise ToolError(f"{topic}-{partition} has no leader now")
                return brokers[p.leader_id]
        raise ToolError(f"{topic} has no partition {partition}")

    def describe_producers(self, topic: str, partition: int) -> list[ProducerRow]:
        response = self._connection(self._leader(topic, partition)).call(
            "DescribeProducers", 0,
            topics=[_DESCRIBE_PRODUCERS.TopicRequest(name=topic, partition_indexes=[partition])],
        )
        answer = response.topics[0].partitions[0]
        if answer.error_code != ErrorCode.NONE:
            raise ToolError(f"DescribeProducers {topic}-{partition}: {ErrorCode(answer.error_code).name}")
        return [
            ProducerRow(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
                        p.current_txn_start_offset)
            for p in answer.active_producers
        ]

    def abort(self, topic: str, partition: int, *, start_offset: int | None = None, producer_id: int | None = None,
              producer_epoch: int | None = None, coordinator_epoch: int | None = None) -> tuple[int, int, int]:
        """Write an ABORT marker; returns (producer id, producer epoch, coordinator epoch) used."""
        if start_offset is not None:
            matching = [p for p in self.describe_producers(topic, partition) if p.current_txn_start_offset == start_offset]
            if not matching:
                raise ToolError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
            producer = matching[0]
            producer_id, producer_epoch = producer.producer_id, producer.producer_epoch
            coordinator_epoch = max(producer.coordinator_epoch, 0)
        if producer_id is None or producer_epoch is None or coordinator_epoch is None:
            raise ToolError("abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch")
        marker = _MARKERS.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            topics=[_MARKERS.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
            coordinator_epoch=coordinator_epoch,
        )
        response = self._connection(self._leader(topic, partition)).call("WriteTxnMarkers", 1, markers=[marker])
        error = ErrorCode(response.markers[0].topics[0].partitions[0].error_code)
        if error != ErrorCode.NONE:
            raise ToolError(f"WriteTxnMarkers {topic}-{partition}: {error.name}")
        return producer_id, producer_epoch, coordinator_epoch


def table(header: list[str], rows: list[list]) -> list[str]:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]

"""protocol.leader_offsets: ListOffsets to partition leaders, the pure steps every
client shares (grouping by leader, one request per leader, reading the answers)."""

from __future__ import annotations

from protocol.framing import SIZE_PREFIX_BYTES, decode_request, decode_response, encode_request, encode_response
from protocol.leader_offsets import (
    CONSUMER_REPLICA_ID,
    LATEST_TIMESTAMP,
    LIST_OFFSETS,
    LIST_OFFSETS_VERSION,
    READ_COMMITTED,
    group_by_leader,
    list_offsets_answers,
    list_offsets_fields,
    list_offsets_request,
)
from protocol.schema import struct_classes

R = struct_classes(LIST_OFFSETS.response)


def test_partitions_group_by_leader_in_the_order_given_and_leaderless_ones_apart():
    leaders = {("a", 0): 2, ("b", 0): 1, ("a", 1): 2, ("c", 0): None, ("a", 2): 1}
    by_leader, leaderless = group_by_leader(leaders, leaders.get)
    assert by_leader == {2: [("a", 0), ("a", 1)], 1: [("b", 0), ("a", 2)]}
    assert list(by_leader) == [2, 1]
    assert leaderless == [("c", 0)]
    assert group_by_leader([], leaders.get) == ({}, [])


def test_one_request_groups_a_leaders_partitions_by_topic():
    body = list_offsets_request([("a", 2), ("b", 0), ("a", 0)], LATEST_TIMESTAMP)
    frame = encode_request(LIST_OFFSETS, LIST_OFFSETS_VERSION, 5, "c", body)
    header, decoded = decode_request(memoryview(frame)[SIZE_PREFIX_BYTES:])
    assert (header.request_api_key, header.request_api_version) == (2, 7)
    assert (decoded.replica_id, decoded.isolation_level) == (CONSUMER_REPLICA_ID, 0)
    assert [(t.name, [(p.partition_index, p.current_leader_epoch, p.timestamp) for p in t.partitions]) for t in decoded.topics] == [
        ("a", [(2, -1, -1), (0, -1, -1)]),
        ("b", [(0, -1, -1)]),
    ]


def test_leader_epochs_and_isolation_level_go_into_the_request():
    fields = list_offsets_fields([("a", 0), ("a", 1)], 1234, isolation_level=READ_COMMITTED, leader_epochs={("a", 0): 7, ("a", 1): 8})
    assert fields["isolation_level"] == READ_COMMITTED
    assert [(p.partition_index, p.current_leader_epoch, p.timestamp) for p in fields["topics"][0].partitions] == [(0, 7, 1234), (1, 8, 1234)]
    assert list_offsets_request([("a", 0)], -2, leader_epochs={("a", 0): 3}).topics[0].partitions[0].current_leader_epoch == 3


def test_answers_by_partition_in_the_responses_order():
    response = R.ListOffsetsResponse(topics=[
        R.ListOffsetsTopicResponse(name="b", partitions=[R.ListOffsetsPartitionResponse(partition_index=1, error_code=0, offset=42)]),
        R.ListOffsetsTopicResponse(name="a", partitions=[
            R.ListOffsetsPartitionResponse(partition_index=0, error_code=6, offset=-1),
            R.ListOffsetsPartitionResponse(partition_index=3, error_code=0, offset=7),
        ]),
    ])
    frame = encode_response(LIST_OFFSETS, LIST_OFFSETS_VERSION, 5, response)
    # What a client decodes off the wire reads the same as the value itself.
    _, wire = decode_response(LIST_OFFSETS, LIST_OFFSETS_VERSION, memoryview(frame)[SIZE_PREFIX_BYTES:])
    for value in (response, wire):
        answers = list_offsets_answers(value)
        assert list(answers) == [("b", 1), ("a", 0), ("a", 3)]
        assert [(p.error_code, p.offset) for p in answers.values()] == [(0, 42), (6, -1), (0, 7)]


def test_the_client_core_does_no_io_and_reads_no_clock():
    """Every client's transport (asyncio streams, blocking sockets) and clock stay its own."""
    from tests.unit.test_layering import IO_MODULES, ROOT, imported_modules

    for relative in ("protocol/client.py", "protocol/leader_offsets.py"):
        tops = {module.split(".")[0] for module in imported_modules(ROOT / relative)}
        assert not tops & (IO_MODULES | {"time", "threading"}), relative


def test_a_caller_whose_routes_include_none_names_its_own_no_leader():
    routes = {("a", 0): None, ("a", 1): 3, ("b", 0): -1}  # None: answered here; -1: no leader
    assert group_by_leader(routes, routes.get, no_leader=-1) == ({None: [("a", 0)], 3: [("a", 1)]}, [("b", 0)])

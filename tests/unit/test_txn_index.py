"""The aborted-transaction index (storage/txn_index.py) and its dump.

Covers the 34-byte entry layout byte by byte, the collect rules (overlap of
[fetch, upper) and the "complete" stop on an entry's last stable offset),
truncation, reset, the lazily made file, a stale file under a new segment's
name, damaged files, and ``pybroker dump-log`` of a ``.txnindex``.
"""

from __future__ import annotations

import struct

import pytest

from storage.dump import DumpOptions, DumpStats, dump_file
from storage.txn_index import (
    ENTRY_BYTES,
    AbortedTxn,
    CorruptTxnIndexError,
    TransactionIndex,
    decode_entries,
    encode_entry,
)


def test_entry_layout_is_kafkas():
    txn = AbortedTxn(producer_id=0x0102030405060708, first_offset=17, last_offset=42, last_stable_offset=20)
    data = encode_entry(txn)
    assert ENTRY_BYTES == 34 == len(data)
    assert data[:2] == b"\x00\x00"  # version 0
    assert data[2:10] == bytes.fromhex("0102030405060708")
    assert struct.unpack(">qqq", data[10:]) == (17, 42, 20)
    assert decode_entries(data + encode_entry(txn._replace(last_offset=50))) == [txn, txn._replace(last_offset=50)]


@pytest.mark.parametrize(
    "data, why",
    [
        (b"\x00" * 33, "whole number"),
        (encode_entry(AbortedTxn(1, 2, 3, 4)) + b"\x00", "whole number"),
        (b"\x00\x01" + encode_entry(AbortedTxn(1, 2, 3, 4))[2:], "version 1"),
    ],
)
def test_damaged_bytes_are_refused(data, why):
    with pytest.raises(CorruptTxnIndexError, match=why):
        decode_entries(data)


def test_the_file_is_made_with_the_first_entry_and_entries_read_back(tmp_path):
    path = tmp_path / "00000000000000000010.txnindex"
    index = TransactionIndex.empty(path)
    assert not path.exists() and len(index) == 0
    index.append(AbortedTxn(5, 10, 12, 13))
    index.append(AbortedTxn(6, 11, 15, 16))
    assert path.stat().st_size == 2 * ENTRY_BYTES
    assert index.take_unsynced() and not index.take_unsynced()
    reread = TransactionIndex(path)
    assert reread.entries == [AbortedTxn(5, 10, 12, 13), AbortedTxn(6, 11, 15, 16)]
    with pytest.raises(ValueError, match="not after"):
        reread.append(AbortedTxn(7, 14, 15, 16))


def test_a_stale_file_under_a_new_segments_name_is_replaced(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(encode_entry(AbortedTxn(9, 0, 99, 100)))
    index = TransactionIndex.empty(path)
    index.append(AbortedTxn(1, 0, 3, 4))
    assert decode_entries(path.read_bytes()) == [AbortedTxn(1, 0, 3, 4)]


def test_collect_finds_overlapping_entries_and_stops_when_complete(tmp_path):
    index = TransactionIndex.empty(tmp_path / "x.txnindex")
    # (pid, first, last, lso)
    index.append(AbortedTxn(1, 0, 5, 0))  # another transaction was open from 0
    index.append(AbortedTxn(2, 3, 8, 9))
    index.append(AbortedTxn(3, 10, 12, 13))
    found, complete = index.collect(6, 9)
    # (1, 0) ends at 5, below the fetch offset; (2, 3) overlaps; its LSO 9 >= 9 stops the walk.
    assert [(t.producer_id, t.first_offset) for t in found] == [(2, 3)] and complete
    found, complete = index.collect(0, 100)
    assert [t.producer_id for t in found] == [1, 2, 3] and not complete
    found, complete = index.collect(13, 20)
    assert found == [] and not complete
    # A transaction starting at the upper bound is not listed.
    found, _ = index.collect(0, 10)
    assert [t.producer_id for t in found] == [1, 2]


def test_truncate_drops_entries_whose_marker_is_cut(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex.empty(path)
    for pid, last in ((1, 3), (2, 6), (3, 9)):
        index.append(AbortedTxn(pid, 0, last, last + 1))
    index.truncate_to(7)
    assert [t.producer_id for t in index.entries] == [1, 2]
    assert [t.producer_id for t in TransactionIndex(path).entries] == [1, 2]
    index.truncate_to(3)
    assert index.entries == [] and not path.exists()
    index.append(AbortedTxn(4, 0, 1, 2))  # usable again after being emptied
    assert TransactionIndex(path).entries == [AbortedTxn(4, 0, 1, 2)]


def test_reset_and_delete_remove_the_file(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex.empty(path)
    index.append(AbortedTxn(1, 0, 3, 4))
    index.reset()
    assert not path.exists() and index.entries == []
    index.append(AbortedTxn(1, 0, 3, 4))
    index.delete()
    assert not path.exists()


def test_a_damaged_file_raises_on_load_and_keeps_nothing(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(b"\x00" * 35)
    index = TransactionIndex(path)
    with pytest.raises(CorruptTxnIndexError):
        index.load()
    index.reset()
    assert index.entries == [] and not path.exists()


def dump(path, **options):
    stats = DumpStats()
    return list(dump_file(path, DumpOptions(**options), stats)), stats


def test_dump_log_prints_each_entry_as_kafka_does(tmp_path):
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(encode_entry(AbortedTxn(7, 95, 101, 96)) + encode_entry(AbortedTxn(8, 102, 104, 105)))
    lines, stats = dump(path)
    assert lines == [
        f"Dumping {path}",
        "version: 0 producerId: 7 firstOffset: 95 lastOffset: 101 lastStableOffset: 96",
        "version: 0 producerId: 8 firstOffset: 102 lastOffset: 104 lastStableOffset: 105",
    ]
    assert stats.exit_code == 0
    lines, stats = dump(path, verify=True)
    assert lines[-1] == f"Verified {path}: 2 aborted transactions, no problems" and stats.exit_code == 0


def test_dump_log_reports_a_damaged_or_disordered_txnindex(tmp_path):
    torn = tmp_path / "00000000000000000000.txnindex"
    torn.write_bytes(encode_entry(AbortedTxn(7, 0, 1, 2))[:20])
    lines, stats = dump(torn)
    assert lines[1].startswith(f"Corrupt {torn}:") and stats.exit_code == 1
    disordered = tmp_path / "00000000000000000050.txnindex"
    disordered.write_bytes(encode_entry(AbortedTxn(7, 50, 60, 61)) + encode_entry(AbortedTxn(8, 40, 55, 61)))
    lines, stats = dump(disordered, verify=True)
    assert any("does not follow" in line for line in lines) and stats.exit_code == 1
    below = tmp_path / "00000000000000000070.txnindex"
    below.write_bytes(encode_entry(AbortedTxn(7, 50, 60, 61)))
    lines, stats = dump(below, verify=True)
    assert any("below the segment's base offset" in line for line in lines)

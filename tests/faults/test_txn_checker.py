"""The transactional checker on small synthetic histories: a legal history
has no anomaly, and each history that breaks one rule is reported under that
rule's kind (and, where it matters, no other)."""

from __future__ import annotations

from tests.faults.txn_checker import check, parse_output
from tests.faults.txn_workload import output_value

IN, OUT = "in", "out"


def txn(name, start_s, writes, *, outcome="committed", intended="commit", process=None, inputs=None, offsets=None):
    op = {
        "f": "txn",
        "type": {"committed": "ok", "aborted": "fail"}.get(outcome, "info"),
        "process": process or name.split(":")[0],
        "start_s": start_s,
        "end_s": start_s + 0.05,
        "txn": name,
        "intended": intended,
        "commit_requested": intended == "commit",
        "outcome": outcome,
        "writes": [list(w) for w in writes],
    }
    if inputs is not None:
        op.update(inputs=[list(i) for i in inputs], offsets=offsets, group="g")
    return op


def poll(records, start_s, process="reader-0"):
    return {"f": "poll", "type": "ok", "process": process, "start_s": start_s, "end_s": start_s + 0.1,
            "records": [list(r) for r in records]}


def final(records, committed=((IN, 0, 0), (IN, 1, 0)), complete=True):
    return [
        {"f": "final_read", "type": "ok", "process": "final", "start_s": 100, "end_s": 101,
         "records": [list(r) for r in records], "complete": complete},
        {"f": "final_committed", "type": "ok", "process": "final", "start_s": 101, "end_s": 102, "group": "g",
         "offsets": [list(c) for c in committed]},
    ]


# A legal history: p0 commits a txn over partitions 0 and 1, aborts one, and
# the processor turns the committed inputs into outputs with the offsets.
T1 = txn("p0:0", 1.0, [(IN, 0, 0, "p0:0:0"), (IN, 1, 0, "p0:0:1")])
T2 = txn("p0:1", 2.0, [(IN, 0, 2, "p0:1:0"), (IN, 1, 2, "p0:1:1")], outcome="aborted", intended="abort")
T3 = txn("p0:2", 3.0, [(IN, 0, 4, "p0:2:0"), (IN, 1, 4, "p0:2:1")])
OUT_A = output_value("processor-0", 0, IN, 0, 0, "p0:0:0")
OUT_B = output_value("processor-0", 0, IN, 1, 0, "p0:0:1")
PROCESS = txn(
    "processor-0:0",
    4.0,
    [(OUT, 0, 0, OUT_A), (OUT, 1, 0, OUT_B)],
    process="processor-0",
    inputs=[(IN, 0, 0, "p0:0:0"), (IN, 1, 0, "p0:0:1")],
    offsets=[[IN, 0, 1], [IN, 1, 1]],
)
FINAL_RECORDS = [
    (IN, 0, 0, "p0:0:0"), (IN, 0, 4, "p0:2:0"), (IN, 1, 0, "p0:0:1"), (IN, 1, 4, "p0:2:1"),
    (OUT, 0, 0, OUT_A), (OUT, 1, 0, OUT_B),
]
COMMITTED = ((IN, 0, 1), (IN, 1, 1))


def legal(**changes):
    parts = {
        "txns": [T1, T2, T3, PROCESS],
        "polls": [poll([(IN, 0, 0, "p0:0:0"), (IN, 1, 0, "p0:0:1")], 5.0), poll([(IN, 0, 4, "p0:2:0")], 6.0)],
        "final": final(FINAL_RECORDS, COMMITTED),
    }
    parts.update(changes)
    return parts["txns"] + parts["polls"] + parts["final"]


def kinds(history) -> dict:
    return check(history, [], 100)["txn_anomalies_by_kind"]


def test_legal_history_has_no_anomaly():
    summary = check(legal(), [{"kind": "kill", "start_s": 2.5, "end_s": 3.5}], 100)
    assert summary["txn_anomalies"] == 0, summary["anomalies"]
    assert summary["valid"]
    assert (summary["txn_committed"], summary["txn_aborted"], summary["txn_indeterminate"]) == (3, 1, 0)
    assert summary["txn_aborted_in_log"] == 1
    assert summary["inputs_with_output"] == 2
    assert summary["availability"]["during_faults"] == 1.0


def test_output_values_name_their_input():
    assert parse_output(OUT_A)["input"] == (IN, 0, 0)
    assert parse_output(OUT_A)["input_value"] == "p0:0:0"
    assert parse_output("p0:0:0") is None


def test_aborted_read():
    found = kinds(legal(polls=[poll([(IN, 0, 0, "p0:0:0"), (IN, 0, 2, "p0:1:0")], 5.0)]))
    assert found == {"aborted-read": 1}


def test_aborted_read_by_a_processor_and_its_output():
    out = output_value("processor-0", 1, IN, 0, 2, "p0:1:0")
    bad = txn("processor-0:1", 5.0, [(OUT, 0, 1, out)], process="processor-0",
              inputs=[(IN, 0, 2, "p0:1:0")], offsets=[[IN, 0, 3]])
    history = legal(txns=[T1, T2, T3, PROCESS, bad], final=final(FINAL_RECORDS + [(OUT, 0, 1, out)], ((IN, 0, 3), (IN, 1, 1))))
    found = kinds(history)
    assert found.get("aborted-read") == 1  # the processor's read; its output is not blamed twice
    assert "never-written" not in found


def test_indeterminate_resolved_by_the_final_read():
    maybe = txn("p1:0", 7.0, [(IN, 0, 6, "p1:0:0"), (IN, 1, 6, "p1:0:1")], outcome="indeterminate")
    # Not in the final read: it aborted, so reading it was an aborted read.
    read = poll([(IN, 0, 0, "p0:0:0"), (IN, 0, 4, "p0:2:0"), (IN, 0, 6, "p1:0:0")], 8.0)
    history = legal(txns=[T1, T2, T3, PROCESS, maybe], polls=[read])
    assert kinds(history) == {"aborted-read": 1}
    # In the final read whole: it committed, and the read was fine.
    history = legal(
        txns=[T1, T2, T3, PROCESS, maybe],
        polls=[read],
        final=final(FINAL_RECORDS + [(IN, 0, 6, "p1:0:0"), (IN, 1, 6, "p1:0:1")], COMMITTED),
    )
    summary = check(history, [], 100)
    assert summary["txn_anomalies"] == 0, summary["anomalies"]
    assert summary["txn_indeterminate_resolved_committed"] == 1


def test_lost_write():
    records = [r for r in FINAL_RECORDS if r[3] != "p0:2:1"]
    assert kinds(legal(final=final(records, COMMITTED))) == {"lost-write": 1}


def test_lost_write_needs_a_complete_final_read():
    records = [r for r in FINAL_RECORDS if r[3] != "p0:2:1"]
    summary = check(legal(final=final(records, COMMITTED, complete=False)), [], 100)
    assert "lost-write" not in summary["txn_anomalies_by_kind"]


def test_partial_read_by_a_reader():
    # reader-0 saw p0:2's value on partition 0 and read partition 1 past offset 4 without its other value.
    later = txn("p0:3", 5.0, [(IN, 1, 6, "p0:3:1")])
    history = legal(
        txns=[T1, T2, T3, PROCESS, later],
        polls=[poll([(IN, 0, 4, "p0:2:0"), (IN, 1, 0, "p0:0:1"), (IN, 1, 6, "p0:3:1")], 6.0)],
        final=final(FINAL_RECORDS + [(IN, 1, 6, "p0:3:1")], COMMITTED),
    )
    found = check(history, [], 100)
    # p0:0 is partial too: its value on partition 1 was seen, the one at offset 0 of partition 0 not.
    assert found["txn_anomalies_by_kind"] == {"partial-read": 2}
    partial = next(a for a in found["anomalies"] if a["txn"] == "p0:2")
    assert (partial["txn"], partial["value"], partial["read_past_offset"], partial["seen"]) == ("p0:2", "p0:2:1", 6, ["p0:2:0"])


def test_partial_transaction_in_the_final_read():
    maybe = txn("p1:0", 7.0, [(IN, 0, 6, "p1:0:0"), (IN, 1, 6, "p1:0:1")], outcome="indeterminate")
    history = legal(txns=[T1, T2, T3, PROCESS, maybe], final=final(FINAL_RECORDS + [(IN, 0, 6, "p1:0:0")], COMMITTED))
    assert kinds(history) == {"partial-read": 1}


def test_duplicate_value():
    records = FINAL_RECORDS + [(IN, 0, 5, "p0:2:0")]
    # The second copy is also away from its acknowledged offset.
    assert kinds(legal(final=final(records, COMMITTED))) == {"duplicate": 1, "wrong-offset": 1}


def test_duplicate_output_across_a_fencing():
    # processor-0's first producer committed, then its fenced successor processed the same input again.
    again = output_value("processor-0", 1, IN, 0, 0, "p0:0:0")
    redo = txn("processor-0:1", 6.0, [(OUT, 0, 1, again)], process="processor-0",
               inputs=[(IN, 0, 0, "p0:0:0")], offsets=[[IN, 0, 1]])
    history = legal(txns=[T1, T2, T3, PROCESS, redo], final=final(FINAL_RECORDS + [(OUT, 0, 1, again)], COMMITTED))
    found = check(history, [], 100)
    assert found["txn_anomalies_by_kind"] == {"duplicate": 1}
    assert found["anomalies"][0]["input"] == [IN, 0, 0]


def test_offsets_inconsistent_input_without_output():
    # The group committed past p0:2:0 (offset 4) but no output names it.
    assert kinds(legal(final=final(FINAL_RECORDS, ((IN, 0, 5), (IN, 1, 1))))) == {"offsets-inconsistent": 1}


def test_offsets_inconsistent_output_without_offset():
    # Outputs committed, offsets not (an output outside the offsets' transaction).
    assert kinds(legal(final=final(FINAL_RECORDS, ((IN, 0, 0), (IN, 1, 1))))) == {"offsets-inconsistent": 1}


def test_out_of_order_read():
    polls = [poll([(IN, 0, 4, "p0:2:0")], 5.0), poll([(IN, 0, 0, "p0:0:0")], 6.0)]
    assert kinds(legal(polls=polls)) == {"out-of-order": 1}


def test_never_written_and_wrong_offset():
    assert kinds(legal(polls=[poll([(IN, 0, 0, "p9:9:9")], 5.0)])) == {"never-written": 1}
    assert kinds(legal(polls=[poll([(IN, 0, 1, "p0:0:0")], 5.0)])) == {"wrong-offset": 1}


def test_no_committed_offsets_is_not_valid():
    history = [op for op in legal() if op["f"] != "final_committed"]
    assert not check(history, [], 100)["valid"]


def test_skipped_read():
    # reader-0 read partition 0 at offset 4 without ever getting p0:0's value at offset 0.
    assert kinds(legal(polls=[poll([(IN, 0, 4, "p0:2:0")], 5.0)])) == {"skipped-read": 1}


def test_a_transaction_whose_end_was_never_recorded_is_indeterminate():
    begun = {"f": "txn_begin", "type": "info", "process": "p1", "start_s": 7.0, "end_s": 7.01, "txn": "p1:0",
             "intended": "commit", "writes": [[IN, 0, None, "p1:0:0"], [IN, 1, None, "p1:0:1"]]}
    records = FINAL_RECORDS + [(IN, 0, 6, "p1:0:0"), (IN, 1, 6, "p1:0:1")]
    summary = check(legal(txns=[T1, T2, T3, PROCESS, begun], final=final(records, COMMITTED)), [], 100)
    assert summary["txn_anomalies"] == 0, summary["anomalies"]  # its values were written by someone known
    assert (summary["txn_indeterminate"], summary["txn_indeterminate_resolved_committed"]) == (1, 1)
    # Half of it in the final read is still a partial transaction.
    summary = check(legal(txns=[T1, T2, T3, PROCESS, begun], final=final(FINAL_RECORDS + [(IN, 0, 6, "p1:0:0")], COMMITTED)), [], 100)
    assert summary["txn_anomalies_by_kind"] == {"partial-read": 1}

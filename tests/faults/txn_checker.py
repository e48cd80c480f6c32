"""Checks the history of the transactional workload (txn_workload.py) in the
manner of Elle's list-append over Kafka: each partition is a list that
transactions append unique values to, reads return prefixes of it, and the
final read_committed read is the list as committed.

Pure functions over plain dicts, stdlib only. A transaction's outcome is what
its client was told: "committed", "aborted", or "indeterminate" (the commit
was asked for and no answer settled it). An indeterminate transaction is
resolved by the final read: committed if any of its values is there, aborted
otherwise; one that never asked for a commit cannot have committed.

Anomalies, each with its kind and evidence (txn, values, offsets, times):

- aborted-read: a read returned a value of an aborted transaction (a poller,
  a processor's input, or the final read).
- lost-write: a committed transaction's value is missing from the final read.
- partial-read: a reader saw some of a transaction's values and read past
  the offset of another of its values without seeing it (or the final read
  holds part of an indeterminate transaction); skipped-read is the same with
  none of the transaction seen.
- duplicate: a value at two offsets, or one input with two committed outputs.
- offsets-inconsistent: an input below the group's committed offset without
  a committed output, or an output committed for an input at or above it.
- out-of-order: a reader's offsets on a partition not increasing.
- never-written: a value read that no transaction wrote, or read at another
  offset than its delivery report gave (wrong-offset), or an output naming
  an input that is not in the log at that offset.
"""

from __future__ import annotations

from collections import defaultdict

from tests.faults.checker import _merged_windows, _share

ANOMALIES_MAX = 50
OUTPUT_SEPARATOR = "|"
KINDS = (
    "aborted-read",
    "lost-write",
    "partial-read",
    "skipped-read",
    "duplicate",
    "offsets-inconsistent",
    "out-of-order",
    "never-written",
    "wrong-offset",
)


def parse_output(value: str) -> dict | None:
    """An output record's value (txn_workload.output_value) as its parts; None if it is not one."""
    parts = value.split(OUTPUT_SEPARATOR, 5)
    if len(parts) != 6:
        return None
    processor, txn_seq, topic, partition, offset, input_value = parts
    try:
        return {
            "processor": processor,
            "txn_seq": int(txn_seq),
            "input": (topic, int(partition), int(offset)),
            "input_value": input_value,
        }
    except ValueError:
        return None


class _Anomalies:
    def __init__(self):
        self.by_kind: dict[str, int] = defaultdict(int)
        self.examples: list[dict] = []
        self.examples_by_kind: dict[str, int] = defaultdict(int)
        self.by_reader: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def add(self, kind: str, **evidence) -> None:
        self.by_kind[kind] += 1
        self.by_reader[kind][evidence.get("reader") or "final state"] += 1
        # Every kind gets a share of the examples, so a flood of one hides no other.
        if self.examples_by_kind[kind] < ANOMALIES_MAX // 5 or len(self.examples) < ANOMALIES_MAX:
            self.examples_by_kind[kind] += 1
            self.examples.append({"kind": kind, **evidence})


def check(history: list[dict], nemeses: list[dict], run_seconds: float) -> dict:
    """The summary of one transactional run (see the module doc)."""
    txns = _transactions(history)
    polls = [op for op in history if op["f"] == "poll" and op["type"] == "ok"]
    final_reads = [op for op in history if op["f"] == "final_read"]
    final_records = [record for op in final_reads for record in op.get("records") or ()]
    final_complete = any(op.get("complete") for op in final_reads)
    committed_offsets = next(
        (op["offsets"] for op in reversed(history) if op["f"] == "final_committed" and op["type"] == "ok"), None
    )
    anomalies = _Anomalies()

    writer: dict[str, dict] = {}  # value -> its txn
    for op in txns:
        for _topic, _partition, _offset, value in op["writes"]:
            writer[value] = op
    final_position: dict[str, tuple] = {}
    for topic, partition, offset, value in final_records:
        final_position.setdefault(value, (topic, partition, offset))
    status = {op["txn"]: _resolve(op, final_position, final_complete) for op in txns}

    reads = _reads_by_reader(polls, txns, final_records)
    _check_reads(reads, writer, status, anomalies)
    _check_final(txns, status, final_position, final_complete, anomalies)
    _check_visibility(reads, txns, status, final_position, anomalies)
    _check_duplicates(reads, anomalies)
    outputs = _check_outputs(final_records, final_position, writer, status, committed_offsets, anomalies)

    intended = [op for op in txns if op["intended"] == "commit"]
    summary = {
        "workload": "txn",
        "txn_committed": sum(op["outcome"] == "committed" for op in txns),
        "txn_aborted": sum(op["outcome"] == "aborted" for op in txns),
        "txn_aborted_on_purpose": sum(op["intended"] == "abort" and op["outcome"] == "aborted" for op in txns),
        # Aborted transactions with a write acknowledged, so in the log for readers to skip.
        "txn_aborted_in_log": sum(
            op["outcome"] == "aborted" and any(offset is not None for _t, _p, offset, _v in op["writes"]) for op in txns
        ),
        "txn_indeterminate": sum(op["outcome"] == "indeterminate" for op in txns),
        "txn_indeterminate_resolved_committed": sum(
            op["outcome"] == "indeterminate" and status[op["txn"]] == "committed" for op in txns
        ),
        "txn_by_process": _by_process(txns),
        "inputs_with_output": outputs,
        "committed_offsets": committed_offsets,
        "txn_anomalies": sum(anomalies.by_kind.values()),
        "txn_anomalies_by_kind": dict(anomalies.by_kind),
        "txn_anomalies_by_reader": {kind: dict(readers) for kind, readers in anomalies.by_reader.items()},
        "anomalies": anomalies.examples,
        "final_records": len(final_records),
        "availability": _availability(intended, nemeses),
        "counts": _counts(history),
    }
    summary["valid"] = summary["txn_anomalies"] == 0 and committed_offsets is not None
    return summary


def _transactions(history: list[dict]) -> list[dict]:
    """The recorded transactions, and as indeterminate those that began (a
    "txn_begin") but whose end was never recorded (a client stopped or
    fenced in the middle)."""
    txns = [op for op in history if op["f"] == "txn"]
    ended = {op["txn"] for op in txns}
    for op in history:
        if op["f"] == "txn_begin" and op["txn"] not in ended:
            txns.append(
                {
                    **op,
                    "f": "txn",
                    "type": "info",
                    "outcome": "indeterminate",
                    "commit_requested": op["intended"] == "commit",
                    "end_s": None,
                    "unfinished": True,
                }
            )
    return txns


def _resolve(op: dict, final_position: dict, final_complete: bool) -> str:
    if op["outcome"] in ("committed", "aborted"):
        return op["outcome"]
    if not op.get("commit_requested"):
        return "aborted"
    if any(value in final_position for _t, _p, _o, value in op["writes"]):
        return "committed"
    return "aborted" if final_complete else "unknown"


def _evidence(op: dict) -> dict:
    return {
        "txn": op["txn"],
        "outcome": op["outcome"],
        "txn_start_s": op["start_s"],
        "txn_end_s": op["end_s"],
    }


def _reads_by_reader(polls, txns, final_records) -> dict[str, list[tuple]]:
    """Each reader's records in the order it got them: (topic, partition, offset, value, read_start_s).

    A processor's inputs count as its reads; the final read is the reader "final"."""
    reads: dict[str, list[tuple]] = defaultdict(list)
    for op in sorted(polls, key=lambda op: op["end_s"]):
        for topic, partition, offset, value in op["records"]:
            reads[op["process"]].append((topic, partition, offset, value, op["start_s"]))
    for op in sorted(txns, key=lambda op: op["start_s"]):
        for topic, partition, offset, value in op.get("inputs") or ():
            reads[op["process"]].append((topic, partition, offset, value, op["start_s"]))
    for topic, partition, offset, value in final_records:
        reads["final"].append((topic, partition, offset, value, None))
    return reads


def _check_reads(reads, writer, status, anomalies: _Anomalies) -> None:
    """aborted-read, never-written, wrong-offset: each record read against its write."""
    for reader, records in reads.items():
        for topic, partition, offset, value, read_s in records:
            op = writer.get(value)
            where = {"reader": reader, "topic": topic, "partition": partition, "offset": offset, "read_s": read_s}
            if op is None:
                anomalies.add("never-written", value=value, **where)
                continue
            if status[op["txn"]] == "aborted":
                anomalies.add("aborted-read", value=value, **where, **_evidence(op))
            written = next((w for w in op["writes"] if w[3] == value), None)
            if written and written[2] is not None and (written[0], written[1], written[2]) != (topic, partition, offset):
                anomalies.add("wrong-offset", value=value, written_at=written[:3], **where, **_evidence(op))


def _check_final(txns, status, final_position, final_complete, anomalies: _Anomalies) -> None:
    """lost-write and the final read's partial transactions."""
    if not final_complete:
        return  # the summary's final_read says so; nothing can be called lost
    for op in txns:
        values = [value for _t, _p, _o, value in op["writes"]]
        seen = [value for value in values if value in final_position]
        if status[op["txn"]] == "committed" and op["outcome"] == "committed":
            for topic, partition, offset, value in op["writes"]:
                if value not in final_position:
                    anomalies.add("lost-write", value=value, topic=topic, partition=partition, offset=offset, **_evidence(op))
        elif seen and len(seen) < len(values):
            anomalies.add(
                "partial-read",
                reader="final",
                seen=seen,
                missing=[value for value in values if value not in final_position],
                **_evidence(op),
            )


def _check_visibility(reads, txns, status, final_position, anomalies: _Anomalies) -> None:
    """partial-read / skipped-read: a reader past a committed value's offset never saw it."""
    for reader, records in reads.items():
        if reader == "final" or reader.startswith("processor"):
            continue  # the final read is judged whole; processors rewind and seek
        seen = {value for _t, _p, _o, value, _s in records}
        furthest: dict[tuple, tuple[int, float]] = {}
        for topic, partition, offset, _value, read_s in records:
            if offset > furthest.get((topic, partition), (-1, 0.0))[0]:
                furthest[(topic, partition)] = (offset, read_s)
        for op in txns:
            if status[op["txn"]] != "committed":
                continue
            for topic, partition, offset, value in op["writes"]:
                if offset is None and value in final_position:
                    topic, partition, offset = final_position[value]
                if offset is None or value in seen:
                    continue
                beyond = furthest.get((topic, partition))
                if beyond is None or beyond[0] <= offset:
                    continue
                seen_of_txn = [v for _t, _p, _o, v in op["writes"] if v in seen]
                anomalies.add(
                    "partial-read" if seen_of_txn else "skipped-read",
                    reader=reader,
                    value=value,
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    read_past_offset=beyond[0],
                    read_past_s=beyond[1],
                    seen=seen_of_txn,
                    **_evidence(op),
                )


def _check_duplicates(reads, anomalies: _Anomalies) -> None:
    """duplicate values (one value, two offsets) and out-of-order reads, per reader."""
    for reader, records in reads.items():
        position: dict[str, tuple] = {}
        last: dict[tuple, int] = {}
        for topic, partition, offset, value, read_s in records:
            where = (topic, partition, offset)
            first = position.setdefault(value, where)
            if first != where:
                anomalies.add("duplicate", reader=reader, value=value, positions=[list(first), list(where)], read_s=read_s)
            if reader.startswith("processor"):
                continue  # a processor rewinds after every transaction it does not commit
            previous = last.get((topic, partition))
            if previous is not None and offset <= previous:
                anomalies.add(
                    "out-of-order",
                    reader=reader,
                    topic=topic,
                    partition=partition,
                    previous_offset=previous,
                    offset=offset,
                    read_s=read_s,
                )
            last[(topic, partition)] = offset


def _check_outputs(final_records, final_position, writer, status, committed_offsets, anomalies: _Anomalies) -> int:
    """Exactly-once of consume-transform-produce, from the final read: each
    input below the committed offset has one committed output, none above.
    Returns how many inputs have an output."""
    at: dict[tuple, str] = {(t, p, o): v for t, p, o, v in final_records}
    outputs: dict[tuple, list[dict]] = defaultdict(list)
    for topic, partition, offset, value in final_records:
        parsed = parse_output(value)
        if parsed is None:
            continue
        parsed["at"] = [topic, partition, offset]
        parsed["value"] = value
        outputs[parsed["input"]].append(parsed)
    for key, made in outputs.items():
        input_writer = writer.get(made[0]["input_value"])
        if at.get(key) != made[0]["input_value"] and not (
            input_writer is not None and status[input_writer["txn"]] == "aborted"
        ):  # an aborted input is the processor's aborted read, reported from its inputs
            anomalies.add("never-written", value=made[0]["value"], names_input=list(key), input_in_log=at.get(key))
        if len(made) > 1:
            anomalies.add(
                "duplicate",
                input=list(key),
                outputs=[{"value": o["value"], "at": o["at"], "processor": o["processor"]} for o in made],
            )
    if committed_offsets is None:
        return len(outputs)
    committed = {(t, p): o for t, p, o in committed_offsets}
    for topic, partition, offset, value in final_records:
        if parse_output(value) is not None or (topic, partition) not in committed:
            continue
        below = offset < committed[(topic, partition)]
        made = outputs.get((topic, partition, offset), [])
        if below and not made:
            op = writer.get(value)
            anomalies.add(
                "offsets-inconsistent",
                problem="input below the committed offset without a committed output",
                input=[topic, partition, offset],
                value=value,
                committed_offset=committed[(topic, partition)],
                **(_evidence(op) if op else {}),
            )
        elif not below and made:
            anomalies.add(
                "offsets-inconsistent",
                problem="output committed for an input at or above the committed offset",
                input=[topic, partition, offset],
                value=value,
                committed_offset=committed[(topic, partition)],
                outputs=[o["value"] for o in made],
            )
    return len(outputs)


def _by_process(txns) -> dict[str, dict[str, int]]:
    by_process: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for op in txns:
        by_process[op["process"]][op["outcome"]] += 1
    return {process: dict(outcomes) for process, outcomes in sorted(by_process.items())}


def _counts(history) -> dict:
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for op in history:
        counts[op["f"]][op["type"]] += 1
    return {f: dict(types) for f, types in sorted(counts.items())}


def _availability(intended: list[dict], nemeses: list[dict]) -> dict:
    """Committed share of the transactions meant to commit, by when they started."""
    starts, ends = _merged_windows(nemeses)
    ok, total = [0, 0], [0, 0]  # outside, during
    for op in intended:
        during = int(any(start <= op["start_s"] <= end for start, end in zip(starts, ends)))
        total[during] += 1
        ok[during] += op["outcome"] == "committed"
    return {
        "overall": _share(sum(ok), sum(total)),
        "during_faults": _share(ok[1], total[1]),
        "outside_faults": _share(ok[0], total[0]),
    }

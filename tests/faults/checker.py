"""Checks a fault run's history of client operations for safety violations
and summarises availability and recovery around each nemesis window.

Pure functions over plain dicts (the harness reads them from JSONL), stdlib
only, so a run's verdict can be recomputed from its history file alone.

Semantics worth knowing when reading a summary:
- "info" operations are indeterminate: they may or may not have taken effect
  at any time after they started; no check treats them as definitely applied
  or definitely not.
- An ok send claims "my value is at (topic, partition, offset)"; that claim
  counts towards `inconsistent` the same as a read does.
- Sends with acks="1" may be lost by Kafka itself when a leader fails before
  followers copy the record; `lost_by_acks` and `inconsistent_acks_1_only`
  split those out so the caller can decide whether they fail a run.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict

EXAMPLES_MAX = 20


def check(history: list[dict], nemeses: list[dict], run_seconds: float) -> dict:
    """Return the JSON-serialisable summary of one run (see the module doc)."""
    by_f: dict[str, list[dict]] = defaultdict(list)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"ok": 0, "fail": 0, "info": 0})
    for op in history:
        by_f[op["f"]].append(op)
        per_type = counts[op["f"]]
        per_type[op["type"]] = per_type.get(op["type"], 0) + 1

    sends = by_f.get("send", [])
    polls = [op for op in by_f.get("poll", []) if op["type"] == "ok"]
    final_reads = by_f.get("final_read", [])
    send_by_value = {op["value"]: op for op in sends}

    summary: dict = {"attempted": len(sends)}
    summary.update(_reads(sends, send_by_value, polls, final_reads, by_f.get("epoch_bump", [])))
    summary.update(_poll_order(by_f.get("poll", []) + by_f.get("assign", [])))
    summary.update(_commits(by_f.get("commit", []), by_f.get("committed", []), by_f.get("assign", [])))
    summary.update(_topics(by_f.get("create_topic", []), final_reads))
    summary.update(_log_starts(final_reads))
    summary["rebalances_by_kind"] = _rebalances_by_kind(by_f.get("assign", []), nemeses)
    summary["availability"] = _availability(sends, nemeses, run_seconds)
    summary.update(_availability_by_client(sends, nemeses))
    summary.update(_recovery(sends, nemeses))
    summary["valid"] = all(
        summary[key] == 0
        for key in (
            "lost",
            "duplicates",
            "inconsistent",
            "nonmonotonic_polls",
            "commits_backwards",
            "phantom_reads",
            "topics_lost",
            "log_starts_moved",
        )
    )
    summary["counts"] = {f: dict(per_type) for f, per_type in sorted(counts.items())}
    return summary


def _read_records(ops: list[dict]):
    """Yield (topic, partition, offset, value, op) for every record the ops delivered."""
    for op in ops:
        for topic, partition, offset, value in op.get("records") or ():
            yield topic, partition, offset, value, op


def _reads(sends, send_by_value, polls, final_reads, epoch_bumps=()) -> dict:
    """lost, duplicates, inconsistent and phantom reads: everything that compares
    what producers were told with what consumers saw. An idempotent producer's
    duplicate whose send was still open when that producer's client bumped its
    epoch (``epoch_bump`` ops) is counted apart: the client wrote it again
    under a new epoch from sequence 0, which Kafka's sequence rules accept."""
    bumps_by_process: dict[str, list[float]] = defaultdict(list)
    for op in epoch_bumps:
        bumps_by_process[op["process"]].append(op["start_s"])
    holder: dict[tuple, str] = {}  # (topic, partition, offset) -> first value seen there
    conflicted: set[tuple] = set()
    acked = []
    for op in sends:
        if op["type"] != "ok":
            continue
        acked.append(op)
        if op.get("partition") is None or op.get("offset") is None:
            continue  # acknowledged without a position: only the lost check can use it
        where = (op["topic"], op["partition"], op["offset"])
        if holder.setdefault(where, op["value"]) != op["value"]:
            conflicted.add(where)

    final_values: set[str] = set()
    first_position: dict[str, tuple] = {}
    extra_positions: dict[str, set[tuple]] = {}  # only values seen at more than one position
    phantoms: dict[str, tuple] = {}
    for source, ops in (("final_read", final_reads), ("poll", polls)):
        for topic, partition, offset, value, _op in _read_records(ops):
            where = (topic, partition, offset)
            if holder.setdefault(where, value) != value:
                conflicted.add(where)
            if source == "final_read":
                final_values.add(value)
            first = first_position.setdefault(value, where)
            if first != where:
                extra_positions.setdefault(value, {first}).add(where)
            if value not in send_by_value and value not in phantoms:
                phantoms[value] = where

    lost = [op for op in acked if op["value"] not in final_values]
    lost_by_acks: dict[str, int] = defaultdict(int)
    for op in lost:
        lost_by_acks[str(op.get("acks"))] += 1

    duplicate_idempotent = []
    duplicate_after_bump = []
    duplicate_plain = []
    for value, positions in extra_positions.items():
        send = send_by_value.get(value)
        if send is None:
            continue  # a phantom: reported as such, no producer to blame
        example = {
            "value": value,
            "idempotent": bool(send.get("idempotent")),
            "positions": [list(where) for where in sorted(positions)],
        }
        if not example["idempotent"]:
            duplicate_plain.append(example)
        elif any(send["start_s"] <= at_s <= send["end_s"] for at_s in bumps_by_process.get(send.get("process"), ())):
            duplicate_after_bump.append(example)
        else:
            duplicate_idempotent.append(example)

    inconsistent_examples, acks_1_only = _explain_conflicts(conflicted, sends, polls, final_reads)
    return {
        "acknowledged": len(acked),
        "lost": len(lost),
        "lost_by_acks": dict(lost_by_acks),
        "lost_values": [
            {"value": op["value"], "topic": op["topic"], "partition": op.get("partition"), "offset": op.get("offset")}
            for op in lost[:EXAMPLES_MAX]
        ],
        "duplicates": len(duplicate_idempotent),
        "duplicates_after_epoch_bump": len(duplicate_after_bump),
        "duplicates_non_idempotent": len(duplicate_plain),
        # Idempotent ones first: they are the failures, the others are context.
        "duplicate_values": (duplicate_idempotent + duplicate_after_bump + duplicate_plain)[:EXAMPLES_MAX],
        "inconsistent": len(conflicted),
        "inconsistent_acks_1_only": acks_1_only,
        "inconsistent_examples": inconsistent_examples,
        "phantom_reads": len(phantoms),
        "phantom_examples": [
            {"value": value, "topic": where[0], "partition": where[1], "offset": where[2]}
            for value, where in list(phantoms.items())[:EXAMPLES_MAX]
        ],
    }


def _explain_conflicts(conflicted: set[tuple], sends, polls, final_reads) -> tuple[list[dict], int]:
    """Second pass over the (normally empty) conflicted positions: who claimed which value.

    Returns the examples and how many conflicts disappear once acks="1"
    acknowledgements are ignored (a leader failover may legally truncate those).
    """
    if not conflicted:
        return [], 0
    claims: dict[tuple, dict[str, set[str]]] = {where: defaultdict(set) for where in conflicted}
    for op in sends:
        if op["type"] == "ok" and (op["topic"], op.get("partition"), op.get("offset")) in claims:
            source = "ack(acks=1)" if str(op.get("acks")) == "1" else "ack"
            claims[(op["topic"], op["partition"], op["offset"])][op["value"]].add(source)
    for source, ops in (("final_read", final_reads), ("poll", polls)):
        for topic, partition, offset, value, op in _read_records(ops):
            if (topic, partition, offset) in claims:
                label = source if source == "final_read" else f"poll:{op.get('process')}"
                claims[(topic, partition, offset)][value].add(label)
    acks_1_only = 0
    for by_value in claims.values():
        firm = [value for value, sources in by_value.items() if sources != {"ack(acks=1)"}]
        if len(firm) <= 1:
            acks_1_only += 1
    examples = [
        {
            "topic": where[0],
            "partition": where[1],
            "offset": where[2],
            "values": {value: sorted(sources) for value, sources in claims[where].items()},
        }
        for where in sorted(conflicted, key=repr)[:EXAMPLES_MAX]
    ]
    return examples, acks_1_only


def _per_process_in_order(ops: list[dict]) -> dict[str, list[dict]]:
    """Each process's ops in completion order, an assign before an op ending at the same instant.

    Completion order, not start order: a consumer's rebalance callback (the
    assign) runs inside poll(), so it starts after the poll that returns the
    re-fetched records, yet those records already follow the new assignment.
    """
    by_process: dict[str, list[tuple]] = defaultdict(list)
    for index, op in enumerate(ops):
        by_process[op.get("process")].append((op["end_s"], op["f"] != "assign", index, op))
    return {process: [item[3] for item in sorted(items)] for process, items in by_process.items()}


def _poll_order(polls_and_assigns: list[dict]) -> dict:
    violations = 0
    examples = []
    for process, ops in _per_process_in_order(polls_and_assigns).items():
        last_offset: dict[tuple, int] = {}
        for op in ops:
            if op["f"] == "assign":
                last_offset.clear()
                continue
            if op["type"] != "ok":
                continue
            for topic, partition, offset, _value in op.get("records") or ():
                previous = last_offset.get((topic, partition))
                if previous is not None and offset <= previous:
                    violations += 1
                    if len(examples) < EXAMPLES_MAX:
                        examples.append(
                            {
                                "process": process,
                                "topic": topic,
                                "partition": partition,
                                "previous_offset": previous,
                                "offset": offset,
                                "poll_start_s": op["start_s"],
                            }
                        )
                # Resume from the rewound offset so one rewind counts once, not once per record after it.
                last_offset[(topic, partition)] = offset
    return {"nonmonotonic_polls": violations, "nonmonotonic_examples": examples}


def _commits(commits: list[dict], committed_reads: list[dict], assigns: list[dict]) -> dict:
    violations = 0
    examples: list[dict] = []

    def report(example: dict) -> None:
        nonlocal violations
        violations += 1
        if len(examples) < EXAMPLES_MAX:
            examples.append(example)

    # ok commits per (group, topic, partition) in end order, with the running maximum offset,
    # so a read needs a bisect unless it is actually suspicious.
    ok_commits: dict[tuple, list[tuple[float, float, int]]] = defaultdict(list)
    # Commits that might have set an offset, indeterminate ones ending "never".
    candidates: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for op in commits:
        if op["type"] == "fail":
            continue
        end_s = op["end_s"] if op["type"] == "ok" else math.inf
        for topic, partition, offset in op.get("offsets") or ():
            key = (op["group"], topic, partition)
            candidates[key + (offset,)].append((op["start_s"], end_s))
            if op["type"] == "ok":
                ok_commits[key].append((op["end_s"], op["start_s"], offset))
    ends_by_key: dict[tuple, list[float]] = {}
    max_offset_by_key: dict[tuple, list[int]] = {}
    keys_by_group: dict[str, list[tuple]] = defaultdict(list)
    for key, entries in ok_commits.items():
        entries.sort()
        keys_by_group[key[0]].append(key)
        ends_by_key[key] = [entry[0] for entry in entries]
        running, highest = [], -1
        for entry in entries:
            highest = max(highest, entry[2])
            running.append(highest)
        max_offset_by_key[key] = running

    for read in committed_reads:
        if read["type"] != "ok":
            continue
        seen = {(topic, partition): offset for topic, partition, offset in read.get("offsets") or ()}
        for key in keys_by_group.get(read["group"], ()):
            ends = ends_by_key[key]
            returned = seen.get(key[1:], -1)
            done = bisect.bisect_left(ends, read["start_s"])  # commits that ended before the read started
            if done == 0 or max_offset_by_key[key][done - 1] <= returned:
                continue
            # Suspicious: a higher offset was committed first. It is still legal if a
            # commit of exactly the returned offset may have landed after all those.
            latest_higher_start_s = max(
                start_s for _end_s, start_s, offset in ok_commits[key][:done] if offset > returned
            )
            if any(
                start_s < read["start_s"] and end_s > latest_higher_start_s
                for start_s, end_s in candidates.get(key + (returned,), ())
            ):
                continue
            report(
                {
                    "kind": "committed_read",
                    "group": key[0],
                    "topic": key[1],
                    "partition": key[2],
                    "read_offset": returned,
                    "committed_before_offset": max_offset_by_key[key][done - 1],
                    "read_start_s": read["start_s"],
                }
            )

    own_ops = [op for op in commits if op["type"] == "ok"] + assigns
    for process, ops in _per_process_in_order(own_ops).items():
        last_offset: dict[tuple, int] = {}
        for op in ops:
            if op["f"] == "assign":
                last_offset.clear()
                continue
            for topic, partition, offset in op.get("offsets") or ():
                key = (op["group"], topic, partition)
                previous = last_offset.get(key)
                if previous is not None and offset < previous:
                    report(
                        {
                            "kind": "own_commit",
                            "process": process,
                            "group": key[0],
                            "topic": topic,
                            "partition": partition,
                            "previous_offset": previous,
                            "offset": offset,
                            "commit_start_s": op["start_s"],
                        }
                    )
                last_offset[key] = offset
    return {"commits_backwards": violations, "commits_backwards_examples": examples}


def _topics(creates: list[dict], final_reads: list[dict]) -> dict:
    listings = [op["topics"] for op in final_reads if op.get("topics") is not None]
    if not listings:
        return {"topics_lost": 0, "topics_lost_names": []}
    listed = set().union(*listings)
    created = {op["topic"] for op in creates if op["type"] == "ok"}
    missing = sorted(created - listed)
    return {"topics_lost": len(missing), "topics_lost_names": missing}


def _log_starts(final_reads: list[dict]) -> dict:
    """Partitions whose log no longer starts at 0: records deleted. Nothing in
    a run deletes (no DeleteRecords, retention longer than the run and its
    largest clock jump: nemesis.retention_ms_for), so a broker that
    deleted by a jumped wall clock shows here, even before a record is missed."""
    starts: dict[str, int] = {}
    for op in final_reads:
        starts.update(op.get("log_start_offsets") or {})
    moved = {partition: start for partition, start in sorted(starts.items()) if start > 0}
    return {"log_starts_moved": len(moved), "log_starts_moved_partitions": moved}


REBALANCE_AFTER_HEAL_S = 10.0


def _rebalances_by_kind(assigns: list[dict], nemeses: list[dict]) -> dict[str, int]:
    """Per fault kind, the consumers' revocations (an assign op with no
    partitions, not the one of closing at the end) within its windows or REBALANCE_AFTER_HEAL_S after them, each
    counted for the latest window started before it: the group rebalances each
    kind caused. A clock jump should cause none, since sessions are timed on
    the monotonic clock."""
    counts: dict[str, int] = {window["kind"]: 0 for window in nemeses}
    windows = sorted(nemeses, key=lambda window: window["start_s"])
    starts = [window["start_s"] for window in windows]
    for op in assigns:
        if op["type"] != "ok" or op.get("partitions") or op.get("closing"):
            continue
        index = bisect.bisect_right(starts, op["start_s"]) - 1
        if index >= 0 and op["start_s"] <= windows[index]["end_s"] + REBALANCE_AFTER_HEAL_S:
            counts[windows[index]["kind"]] += 1
    return counts


def _share(ok: int, total: int) -> float | None:
    return round(ok / total, 4) if total else None


def _merged_windows(nemeses: list[dict]) -> tuple[list[float], list[float]]:
    """Overlapping windows merged, as sorted starts and their ends, for bisecting."""
    starts: list[float] = []
    ends: list[float] = []
    for window in sorted(nemeses, key=lambda window: window["start_s"]):
        if ends and window["start_s"] <= ends[-1]:
            ends[-1] = max(ends[-1], window["end_s"])
        else:
            starts.append(window["start_s"])
            ends.append(window["end_s"])
    return starts, ends


def _availability(sends: list[dict], nemeses: list[dict], run_seconds: float) -> dict:
    starts, ends = _merged_windows(nemeses)
    seconds = math.ceil(run_seconds) + 1
    per_second = [{"second": second, "ok": 0, "fail": 0, "info": 0} for second in range(seconds)]
    ok = [0, 0]  # outside, during
    total = [0, 0]
    for op in sends:
        start_s = op["start_s"]
        index = bisect.bisect_right(starts, start_s) - 1
        during = int(index >= 0 and start_s <= ends[index])
        total[during] += 1
        ok[during] += op["type"] == "ok"
        bucket = per_second[min(max(int(op["end_s"]), 0), seconds - 1)]
        bucket[op["type"]] = bucket.get(op["type"], 0) + 1
    return {
        "overall": _share(ok[0] + ok[1], total[0] + total[1]),
        "during_faults": _share(ok[1], total[1]),
        "outside_faults": _share(ok[0], total[0]),
        "per_second": per_second,
    }


TIMELY_S = 2.0


def _availability_by_client(sends: list[dict], nemeses: list[dict]) -> dict:
    """Per client host, where sends name one (several hosts, as in the five
    topology, whose client-b sits on the minority side of every split): the ok
    share of its sends overall, during and outside fault windows and during
    each kind's windows; and the same shares counting only sends acknowledged
    within TIMELY_S. An idempotent producer retries for 300 s, so a send it
    started on the minority side ends ok after the heal: the ok share alone
    cannot tell the two sides apart, the time to the acknowledgement does."""
    by_client: dict[str, list[dict]] = defaultdict(list)
    for op in sends:
        if op.get("client"):
            by_client[op["client"]].append(op)
    if not by_client:
        return {}
    windows = sorted(nemeses, key=lambda window: window["start_s"])
    starts = [window["start_s"] for window in windows]
    result = {}
    for client, ops in sorted(by_client.items()):
        # [ok, timely, total] per bucket: "overall", "during_faults", "outside_faults", a kind
        tallies: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for op in ops:
            index = bisect.bisect_right(starts, op["start_s"]) - 1
            kind = windows[index]["kind"] if index >= 0 and op["start_s"] <= windows[index]["end_s"] else None
            ok = op["type"] == "ok"
            timely = ok and op["end_s"] - op["start_s"] <= TIMELY_S
            for bucket in ("overall", "during_faults" if kind else "outside_faults", *([kind] if kind else [])):
                tally = tallies[bucket]
                tally[0] += ok
                tally[1] += timely
                tally[2] += 1
        shares: dict = {"attempted": tallies["overall"][2], "acknowledged": tallies["overall"][0]}
        for prefix, position in (("", 0), ("timely_", 1)):
            for bucket in ("overall", "during_faults", "outside_faults"):
                tally = tallies.get(bucket, [0, 0, 0])
                shares[prefix + bucket] = _share(tally[position], tally[2])
            shares[prefix + "during_by_kind"] = {
                kind: _share(tally[position], tally[2])
                for kind, tally in sorted(tallies.items())
                if kind not in ("overall", "during_faults", "outside_faults")
            }
        result[client] = shares
    return {"availability_by_client": result, "timely_s": TIMELY_S}


def _recovery(sends: list[dict], nemeses: list[dict]) -> dict:
    # A fault stalls only the partitions it touches (those its target leads),
    # so a window's recovery is that of its slowest partition: per partition,
    # the earliest end_s among ok sends starting at the moment or later.
    by_partition: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for op in sends:
        if op["type"] == "ok":
            by_partition[(op.get("topic"), op.get("partition"))].append((op["start_s"], op["end_s"]))
    earliest: dict[tuple, tuple[list[float], list[float]]] = {}
    for key, pairs in by_partition.items():
        pairs.sort()
        ends_from = [math.inf] * (len(pairs) + 1)
        for index in range(len(pairs) - 1, -1, -1):
            ends_from[index] = min(pairs[index][1], ends_from[index + 1])
        earliest[key] = ([start_s for start_s, _ in pairs], ends_from)
    all_sends = sorted((op["start_s"], op["type"] == "ok") for op in sends)
    all_starts = [start_s for start_s, _ok in all_sends]
    ok_before = [0]  # ok_before[i]: ok sends among all_sends[:i]
    for _start_s, was_ok in all_sends:
        ok_before.append(ok_before[-1] + was_ok)

    def first_ok_after(moment_s: float) -> float | None:
        """Seconds until every partition had an ok send started at moment_s or later."""
        worst = None
        for starts, ends_from in earliest.values():
            end_s = ends_from[bisect.bisect_left(starts, moment_s)]
            if end_s == math.inf:
                continue  # no send to it after the moment: nothing to wait for
            worst = end_s if worst is None else max(worst, end_s)
        return None if worst is None else round(worst - moment_s, 4)

    recovery = []
    worst_by_kind: dict[str, float | None] = {}
    for window in nemeses:
        low = bisect.bisect_left(all_starts, window["start_s"])
        high = bisect.bisect_right(all_starts, window["end_s"])
        after_heal_s = first_ok_after(window["end_s"])
        recovery.append(
            {
                "kind": window["kind"],
                "targets": list(window.get("targets") or ()),
                "start_s": window["start_s"],
                "end_s": window["end_s"],
                "first_ok_after_start_s": first_ok_after(window["start_s"]),
                "first_ok_after_heal_s": after_heal_s,
                "ok_share_during": _share(ok_before[high] - ok_before[low], high - low),
            }
        )
        worst = worst_by_kind.get(window["kind"])
        if after_heal_s is not None and (worst is None or after_heal_s > worst):
            worst = after_heal_s
        worst_by_kind[window["kind"]] = worst
    return {"recovery": recovery, "recovery_by_kind": worst_by_kind}

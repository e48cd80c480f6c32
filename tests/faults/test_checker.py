"""The fault checker on small synthetic histories: each check fires on a
history that breaks it and stays quiet on the nearest legal one."""

from __future__ import annotations

import pytest

from tests.faults.checker import check

TOPIC = "t"


def send(
    value,
    start_s,
    end_s=None,
    *,
    type="ok",
    partition=0,
    offset=None,
    idempotent=True,
    acks="all",
    process="producer-0",
):
    op = {
        "f": "send",
        "type": type,
        "process": process,
        "start_s": start_s,
        "end_s": start_s + 0.01 if end_s is None else end_s,
        "topic": TOPIC,
        "value": value,
        "idempotent": idempotent,
        "acks": acks,
    }
    if type == "ok":
        op.update(partition=partition, offset=offset)
    else:
        op["error"] = "timed out"
    return op


def poll(records, start_s, process="consumer-0"):
    return {
        "f": "poll",
        "type": "ok",
        "process": process,
        "start_s": start_s,
        "end_s": start_s + 0.1,
        "records": records,
    }


def assign(at_s, process="consumer-0", partitions=((TOPIC, 0),)):
    return {
        "f": "assign",
        "type": "ok",
        "process": process,
        "start_s": at_s,
        "end_s": at_s,
        "partitions": list(partitions),
    }


def commit(offset, start_s, end_s, *, type="ok", process="consumer-0", group="g"):
    op = {"f": "commit", "type": type, "process": process, "start_s": start_s, "end_s": end_s, "group": group}
    op["offsets"] = [[TOPIC, 0, offset]]
    return op


def committed(offsets, start_s, group="g"):
    return {
        "f": "committed",
        "type": "ok",
        "process": "admin",
        "start_s": start_s,
        "end_s": start_s + 0.05,
        "group": group,
        "offsets": offsets,
    }


def final_read(records, topics=None):
    op = {"f": "final_read", "type": "ok", "process": "final", "start_s": 90.0, "end_s": 91.0, "records": records}
    if topics is not None:
        op["topics"] = topics
    return op


def healthy_history():
    """Three acknowledged sends, read back once by a poll and once at the end."""
    sends = [send(f"v{i}", 1.0 + i, offset=i) for i in range(3)]
    records = [[TOPIC, 0, i, f"v{i}"] for i in range(3)]
    return sends + [assign(0.5), poll(records, 5.0), final_read(records, topics=[TOPIC])]


def run(history, nemeses=(), run_seconds=100.0):
    return check(history, list(nemeses), run_seconds)


def test_healthy_history_is_valid():
    summary = run(healthy_history())
    assert summary["valid"] is True
    assert summary["attempted"] == summary["acknowledged"] == 3
    for key in ("lost", "duplicates", "inconsistent", "nonmonotonic_polls", "commits_backwards", "phantom_reads"):
        assert summary[key] == 0, key
    assert summary["counts"]["send"] == {"ok": 3, "fail": 0, "info": 0}
    assert summary["counts"]["final_read"]["ok"] == 1


def test_acknowledged_send_missing_from_final_read_is_lost():
    history = healthy_history() + [send("v3", 4.0, offset=3), send("never-acked", 4.5, type="info")]
    summary = run(history)
    assert summary["lost"] == 1
    assert summary["lost_values"] == [{"value": "v3", "topic": TOPIC, "partition": 0, "offset": 3}]
    assert summary["lost_by_acks"] == {"all": 1}
    assert summary["valid"] is False


def test_lost_found_at_another_offset_is_not_lost():
    # The broker acknowledged offset 7, the value sits at 3: not lost (any offset counts).
    history = healthy_history() + [send("v3", 4.0, offset=7), final_read([[TOPIC, 0, 3, "v3"]])]
    assert run(history)["lost"] == 0


def test_idempotent_duplicate_fails_and_plain_duplicate_is_only_reported():
    history = healthy_history()
    history.append(send("dup-idem", 4.0, offset=3))
    history.append(send("dup-plain", 4.1, offset=5, idempotent=False))
    history.append(final_read([[TOPIC, 0, 3, "dup-idem"], [TOPIC, 0, 4, "dup-idem"], [TOPIC, 0, 5, "dup-plain"]]))
    history.append(poll([[TOPIC, 0, 6, "dup-plain"]], 6.0, process="consumer-1"))
    summary = run(history)
    assert summary["duplicates"] == 1
    assert summary["duplicates_non_idempotent"] == 1
    assert summary["duplicate_values"][0] == {
        "value": "dup-idem",
        "idempotent": True,
        "positions": [[TOPIC, 0, 3], [TOPIC, 0, 4]],
    }
    assert summary["valid"] is False

    plain_only = [op for op in history if op.get("value") != "dup-idem"]
    plain_only[-2] = final_read([[TOPIC, 0, 5, "dup-plain"]])
    summary = run(plain_only)
    assert (summary["duplicates"], summary["duplicates_non_idempotent"]) == (0, 1)
    assert summary["valid"] is True


def test_idempotent_duplicate_across_its_producers_epoch_bump_is_counted_apart():
    def bump(at_s, process="producer-0"):
        return {"f": "epoch_bump", "type": "ok", "process": process, "start_s": at_s, "end_s": at_s}

    history = healthy_history()
    history.append(send("dup", 4.0, 9.0, offset=3))  # open from 4 s to 9 s
    history.append(final_read([[TOPIC, 0, 3, "dup"], [TOPIC, 0, 4, "dup"]]))
    summary = run(history + [bump(6.0)])
    assert (summary["duplicates"], summary["duplicates_after_epoch_bump"]) == (0, 1)
    assert summary["valid"] is True
    # A bump of another producer, or one outside the send, explains nothing.
    for other in (bump(6.0, process="producer-1"), bump(9.5)):
        summary = run(history + [other])
        assert (summary["duplicates"], summary["duplicates_after_epoch_bump"]) == (1, 0)
        assert summary["valid"] is False


def test_offset_holding_two_values_is_inconsistent():
    history = healthy_history() + [send("v3", 4.0, offset=3), send("v4", 4.1, offset=3)]
    history.append(final_read([[TOPIC, 0, 3, "v3"], [TOPIC, 0, 4, "v4"]]))
    summary = run(history)
    assert summary["inconsistent"] == 1
    example = summary["inconsistent_examples"][0]
    assert (example["topic"], example["partition"], example["offset"]) == (TOPIC, 0, 3)
    assert example["values"] == {"v3": ["ack", "final_read"], "v4": ["ack"]}
    assert summary["inconsistent_acks_1_only"] == 0
    assert summary["valid"] is False


def test_poll_disagreeing_with_final_read_is_inconsistent():
    history = healthy_history() + [poll([[TOPIC, 0, 1, "v2"]], 7.0, process="consumer-1")]
    summary = run(history)
    assert summary["inconsistent"] == 1
    assert summary["inconsistent_examples"][0]["values"]["v2"] == ["poll:consumer-1"]


def test_conflict_only_from_acks_1_acknowledgement_is_split_out():
    history = healthy_history() + [send("truncated", 4.0, offset=2, acks="1")]
    summary = run(history)
    assert summary["inconsistent"] == 1
    assert summary["inconsistent_acks_1_only"] == 1
    assert summary["lost_by_acks"] == {"1": 1}


def test_backwards_poll_without_assign_is_nonmonotonic():
    history = healthy_history() + [poll([[TOPIC, 0, 1, "v1"], [TOPIC, 0, 2, "v2"]], 6.0)]
    summary = run(history)
    assert summary["nonmonotonic_polls"] == 1  # one rewind, counted once
    example = summary["nonmonotonic_examples"][0]
    assert (example["previous_offset"], example["offset"]) == (2, 1)
    assert summary["valid"] is False


def test_backwards_within_one_poll_is_nonmonotonic():
    history = healthy_history() + [poll([[TOPIC, 0, 1, "v1"], [TOPIC, 0, 1, "v1"]], 6.0, process="consumer-2")]
    assert run(history)["nonmonotonic_polls"] == 1


def test_rewind_after_assign_is_legal():
    history = healthy_history() + [assign(5.5), poll([[TOPIC, 0, 1, "v1"], [TOPIC, 0, 2, "v2"]], 6.0)]
    assert run(history)["nonmonotonic_polls"] == 0


def test_assign_inside_the_poll_that_rewinds_is_legal():
    # The rebalance callback runs inside poll(): the assign starts after the poll does.
    history = healthy_history() + [assign(6.05), poll([[TOPIC, 0, 1, "v1"]], 6.0)]
    assert run(history)["nonmonotonic_polls"] == 0


def test_other_process_may_read_the_same_offsets():
    history = healthy_history() + [poll([[TOPIC, 0, 0, "v0"]], 6.0, process="consumer-1")]
    assert run(history)["nonmonotonic_polls"] == 0


def test_committed_read_below_an_earlier_acknowledged_commit_goes_backwards():
    history = healthy_history() + [commit(3, 10.0, 10.5), committed([[TOPIC, 0, 1]], 11.0)]
    summary = run(history)
    assert summary["commits_backwards"] == 1
    example = summary["commits_backwards_examples"][0]
    assert (example["kind"], example["read_offset"], example["committed_before_offset"]) == ("committed_read", 1, 3)
    assert summary["valid"] is False


def test_committed_read_missing_the_partition_goes_backwards():
    history = healthy_history() + [commit(3, 10.0, 10.5), committed([], 11.0)]
    assert run(history)["commits_backwards"] == 1


def test_committed_read_started_before_the_commit_ended_is_legal():
    history = healthy_history() + [commit(3, 10.0, 10.5), committed([[TOPIC, 0, 1]], 10.2)]
    assert run(history)["commits_backwards"] == 0


def test_committed_read_of_the_latest_commit_is_legal():
    history = healthy_history() + [commit(1, 9.0, 9.5), commit(3, 10.0, 10.5), committed([[TOPIC, 0, 3]], 11.0)]
    assert run(history)["commits_backwards"] == 0


def test_committed_read_explained_by_an_indeterminate_lower_commit_is_legal():
    # The timed-out commit of 1 may still have been applied after the commit of 3.
    history = healthy_history() + [
        commit(1, 9.0, 9.5, type="info", process="consumer-1"),
        commit(3, 10.0, 10.5),
        committed([[TOPIC, 0, 1]], 11.0),
    ]
    assert run(history)["commits_backwards"] == 0


def test_own_commits_going_down_without_assign_go_backwards():
    history = healthy_history() + [commit(3, 10.0, 10.5), commit(2, 11.0, 11.5)]
    summary = run(history)
    assert summary["commits_backwards"] == 1
    assert summary["commits_backwards_examples"][0]["kind"] == "own_commit"

    history = healthy_history() + [commit(3, 10.0, 10.5), assign(10.8), commit(2, 11.0, 11.5)]
    assert run(history)["commits_backwards"] == 0


def test_value_nobody_sent_is_a_phantom_read():
    history = healthy_history() + [poll([[TOPIC, 0, 9, "ghost"]], 8.0, process="consumer-1")]
    summary = run(history)
    assert summary["phantom_reads"] == 1
    assert summary["phantom_examples"] == [{"value": "ghost", "topic": TOPIC, "partition": 0, "offset": 9}]
    assert summary["duplicates"] == 0
    assert summary["valid"] is False


def test_failed_send_read_back_is_not_a_phantom():
    history = healthy_history() + [send("maybe", 4.0, type="fail"), final_read([[TOPIC, 0, 3, "maybe"]])]
    summary = run(history)
    assert summary["phantom_reads"] == 0
    assert summary["lost"] == 0


def test_created_topic_missing_at_the_end_is_lost():
    create = {"f": "create_topic", "type": "ok", "process": "admin", "start_s": 0.1, "end_s": 0.2, "topic": "gone"}
    failed = dict(create, type="fail", topic="never", error="timeout")
    summary = run(healthy_history() + [create, failed])
    assert (summary["topics_lost"], summary["topics_lost_names"]) == (1, ["gone"])
    assert summary["valid"] is False

    listed = healthy_history() + [create, final_read([], topics=["gone"])]
    assert run(listed)["topics_lost"] == 0
    unlisted = [op for op in healthy_history() if op["f"] != "final_read"] + [create]
    assert run(unlisted)["topics_lost"] == 0  # no listing at all: nothing to compare with


def test_availability_inside_and_outside_windows():
    history = [
        send("a", 1.0, offset=0),  # outside
        send("b", 2.0, offset=1),  # outside
        send("c", 10.0, type="fail"),  # inside
        send("d", 11.0, type="info"),  # inside
        send("e", 12.0, 12.4, offset=2),  # inside
        send("f", 20.0, offset=3),  # outside
    ]
    nemeses = [{"kind": "kill", "targets": ["broker-1"], "start_s": 9.5, "end_s": 12.5}]
    availability = run(history, nemeses, run_seconds=20.5)["availability"]
    assert availability["overall"] == round(4 / 6, 4)
    assert availability["during_faults"] == round(1 / 3, 4)
    assert availability["outside_faults"] == 1.0
    per_second = availability["per_second"]
    assert [bucket["second"] for bucket in per_second] == list(range(22))
    assert per_second[10] == {"second": 10, "ok": 0, "fail": 1, "info": 0}
    assert per_second[12]["ok"] == 1 and per_second[20]["ok"] == 1


def test_availability_by_client_splits_each_hosts_sends_and_counts_late_acks_apart():
    def on(client, op):
        return op | {"client": client, "process": f"{client}/{op['process']}"}

    history = [
        on("client-a", send("a0", 1.0, offset=0)),  # outside
        on("client-a", send("a1", 10.0, 10.2, offset=1)),  # split, timely
        on("client-a", send("a2", 11.0, 11.3, offset=2)),  # split, timely
        on("client-b", send("b0", 1.5, offset=3)),  # outside
        on("client-b", send("b1", 10.0, 16.0, offset=4)),  # split: ok only after the heal
        on("client-b", send("b2", 11.0, type="info")),  # split: timed out
        on("client-b", send("b3", 31.0, offset=5)),  # kill, timely
    ]
    nemeses = [
        {"kind": "split", "targets": ["node-1", "node-2"], "start_s": 9.5, "end_s": 14.5},
        {"kind": "kill", "targets": ["node-3"], "start_s": 30.0, "end_s": 35.0},
    ]
    summary = run(history, nemeses, run_seconds=40.0)
    by_client = summary["availability_by_client"]
    assert sorted(by_client) == ["client-a", "client-b"]
    a, b = by_client["client-a"], by_client["client-b"]
    assert (a["attempted"], a["acknowledged"], b["attempted"], b["acknowledged"]) == (3, 3, 4, 3)
    assert (a["overall"], a["during_faults"], a["outside_faults"]) == (1.0, 1.0, 1.0)
    assert a["during_by_kind"] == a["timely_during_by_kind"] == {"split": 1.0}
    assert (b["overall"], b["during_faults"], b["outside_faults"]) == (0.75, round(2 / 3, 4), 1.0)
    assert b["during_by_kind"] == {"kill": 1.0, "split": 0.5}
    assert b["timely_during_by_kind"] == {"kill": 1.0, "split": 0.0}
    assert b["timely_during_faults"] == round(1 / 3, 4) and b["timely_overall"] == 0.5
    assert summary["timely_s"] == 2.0
    # One host's history names no client: no per-client figures.
    assert "availability_by_client" not in run(healthy_history())


def test_availability_without_sends_is_null():
    availability = run([], run_seconds=0.0)["availability"]
    assert availability["overall"] is None and availability["per_second"] == [
        {"second": 0, "ok": 0, "fail": 0, "info": 0}
    ]


def test_recovery_figures_per_window_and_kind():
    history = [
        send("a", 1.0, offset=0),
        send("b", 10.0, 10.3, type="info"),
        send("c", 10.5, 13.0, offset=1),  # first ok started in the window, done after heal
        send("d", 12.5, 12.8, offset=2),  # first ok started after the heal
        send("e", 30.0, 30.1, offset=3),
        send("f", 41.0, 41.2, offset=4),
    ]
    nemeses = [
        {"kind": "pause", "targets": ["broker-2"], "start_s": 10.0, "end_s": 12.0},
        {"kind": "pause", "targets": ["broker-3"], "start_s": 25.0, "end_s": 26.0},
        {"kind": "split", "targets": ["broker-1", "broker-2"], "start_s": 40.0, "end_s": 45.0},
    ]
    summary = run(history, nemeses, run_seconds=50.0)
    first, second, third = summary["recovery"]
    assert first == {
        "kind": "pause",
        "targets": ["broker-2"],
        "start_s": 10.0,
        "end_s": 12.0,
        "first_ok_after_start_s": 2.8,
        "first_ok_after_heal_s": 0.8,
        "ok_share_during": 0.5,
    }
    assert second["first_ok_after_heal_s"] == 4.1 and second["ok_share_during"] is None
    assert third["first_ok_after_start_s"] == 1.2 and third["first_ok_after_heal_s"] is None
    assert summary["recovery_by_kind"] == {"pause": 4.1, "split": None}


def test_final_read_chunks_are_read_together():
    history = [send(f"v{i}", float(i), offset=i) for i in range(4)]
    history += [final_read([[TOPIC, 0, 0, "v0"], [TOPIC, 0, 1, "v1"]], topics=[TOPIC])]
    history += [final_read([[TOPIC, 0, 2, "v2"], [TOPIC, 0, 3, "v3"]])]
    summary = run(history)
    assert summary["lost"] == 0 and summary["valid"] is True


def test_summary_is_json_serialisable():
    import json

    nemeses = [{"kind": "kill", "targets": ["b1"], "start_s": 0.0, "end_s": 2.0}]
    json.dumps(run(healthy_history() + [poll([[TOPIC, 0, 9, "ghost"]], 8.0, "c9")], nemeses))


def test_timeline_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from tests.faults.timeline import draw

    history = healthy_history()
    for i in range(2000):
        kind = ("ok", "ok", "ok", "info", "fail")[i % 5]
        history.append(send(f"p{i}", i * 0.03, i * 0.03 + 0.002 + (i % 97) * 0.004, type=kind, offset=100 + i))
    history.append(commit(3, 10.0, 10.5))
    history.append(committed([[TOPIC, 0, 3]], 11.0))
    history.append(
        {"f": "create_topic", "type": "ok", "process": "admin", "start_s": 0.0, "end_s": 0.3, "topic": TOPIC}
    )
    nemeses = [
        {"kind": "kill", "targets": ["broker-1"], "start_s": 10.0, "end_s": 20.0},
        {"kind": "split", "targets": ["broker-1", "broker-2"], "start_s": 30.0, "end_s": 40.0},
        {"kind": "unheard-of", "targets": [], "start_s": 45.0, "end_s": 50.0},
    ]
    summary = check(history, nemeses, 60.0)
    path = tmp_path / "timeline.png"
    draw(history, nemeses, summary, path, "test run")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000

    empty = tmp_path / "empty.png"
    draw([], nemeses, check([], nemeses, 0.0), empty, "empty run")
    assert empty.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_log_starts_moved_fails_the_run():
    final = {"f": "final_read", "type": "ok", "process": "final", "start_s": 1, "end_s": 2, "records": [],
             "log_start_offsets": {"0": 0, "1": 17}}
    summary = check([final], [], 10)
    assert summary["log_starts_moved"] == 1 and summary["log_starts_moved_partitions"] == {"1": 17}
    assert not summary["valid"]
    final["log_start_offsets"] = {"0": 0, "1": 0}
    assert check([final], [], 10)["valid"]


def test_rebalances_count_once_for_the_latest_window():
    def revoke(at_s, partitions=()):
        return {"f": "assign", "type": "ok", "process": "consumer-0", "start_s": at_s, "end_s": at_s,
                "partitions": list(partitions)}

    windows = [{"kind": "clock-jump", "start_s": 10, "end_s": 15}, {"kind": "kill", "start_s": 18, "end_s": 22}]
    history = [revoke(12), revoke(19), revoke(20, [["t", 0]]), revoke(40), revoke(5), revoke(21) | {"closing": True}]
    assert check(history, windows, 60)["rebalances_by_kind"] == {"clock-jump": 1, "kill": 1}

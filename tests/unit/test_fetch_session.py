"""replication.fetch_session: KIP-227 fetch sessions against Kafka's rules.

Longer than ~700 lines on purpose: the targeted rules, the fetcher's side and
the stateful model share one set of helpers for building requests and answers.
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.fetch_session import (
    FINAL_EPOCH,
    MAX_EPOCH,
    ContextKind,
    FetchSessionBuilder,
    FetchSessionCache,
    next_epoch,
)

API = APIS_BY_NAME["Fetch"]
Q = struct_classes(API.request)
R = struct_classes(API.response)
EVICTION_MS = 1000


def fp(partition: int, offset: int = 0, max_bytes: int = 1024, **fields):
    return Q.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes, **fields)


def pd(partition: int, hw: int = 10, *, lso: int | None = None, log_start: int = 0, error: int = 0,
       records: bytes = b"", **fields):
    return R.PartitionData(
        partition_index=partition, error_code=error, high_watermark=hw,
        last_stable_offset=hw if lso is None else lso, log_start_offset=log_start, records=records, **fields,
    )


def k(partition: int, topic: str = "t"):
    return (topic, partition)


def asks(*partitions: int, topic: str = "t"):
    return [(k(p, topic), fp(p)) for p in partitions]


def read_all(ctx, data=None, records=()):
    """What a handler would read: every partition of the context, HW 10 unless
    ``data`` says otherwise, records for the keys in ``records``."""
    data = data or {}
    out = []
    for key, _request in ctx.partitions_to_read():
        partition = data.get(key, pd(key[1]))
        if key in records:
            partition.records = b"batch"
        out.append((key, partition))
    return out


def open_session(cache, partitions=(0, 1, 2), *, now_ms=0, privileged=False, uses_topic_ids=False, data=None):
    ctx = cache.new_context(0, 0, asks(*partitions), [], privileged=privileged, now_ms=now_ms,
                            uses_topic_ids=uses_topic_ids)
    reply = ctx.respond(read_all(ctx, data), now_ms=now_ms)
    assert reply.error == ErrorCode.NONE
    return reply.session_id


def incremental(cache, session_id, epoch, requested=(), forgotten=(), *, now_ms=0, data=None, records=(),
                uses_topic_ids=False):
    ctx = cache.new_context(session_id, epoch, list(requested), list(forgotten), privileged=False, now_ms=now_ms,
                            uses_topic_ids=uses_topic_ids)
    return ctx, ctx.respond(read_all(ctx, data, records), now_ms=now_ms)


def keys_of(pairs):
    return [key for key, _ in pairs]


# ----------------------------------------------------------------- metadata


def test_next_epoch_wraps_to_one_and_final_stays_final():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    assert next_epoch(-7) == FINAL_EPOCH


def test_sessionless_fetch_creates_nothing_and_answers_everything():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    ctx = cache.new_context(0, -1, asks(0, 1), [], privileged=False, now_ms=0, uses_topic_ids=False)
    assert ctx.kind is ContextKind.SESSIONLESS
    assert keys_of(ctx.partitions_to_read()) == [k(0), k(1)]
    results = read_all(ctx)
    reply = ctx.respond(results, now_ms=0)
    assert (reply.error, reply.session_id, reply.partitions) == (ErrorCode.NONE, 0, results)
    assert len(cache) == 0 and cache.total_partitions == 0


def test_full_fetch_with_epoch_zero_creates_a_session():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    ctx = cache.new_context(0, 0, asks(0, 1, 2), [], privileged=False, now_ms=5, uses_topic_ids=False)
    assert ctx.kind is ContextKind.FULL
    assert len(cache) == 0  # created only when the answer is built, as Kafka does
    results = read_all(ctx)
    reply = ctx.respond(results, now_ms=7)
    assert reply.session_id != 0 and reply.session_id in cache
    assert reply.partitions == results  # a full answer has every partition
    session = cache.session(reply.session_id)
    assert session.epoch == 1 and session.creation_ms == 7 and session.last_used_ms == 7
    assert list(session.partitions) == [k(0), k(1), k(2)]
    assert (len(cache), cache.total_partitions) == (1, 3)


def test_full_fetch_without_room_answers_with_session_id_zero():
    cache = FetchSessionCache(1, EVICTION_MS, random.Random(1))
    first = open_session(cache, (0,))
    ctx = cache.new_context(0, 0, asks(0, 1), [], privileged=False, now_ms=10, uses_topic_ids=False)
    results = read_all(ctx)
    reply = ctx.respond(results, now_ms=10)
    assert (reply.error, reply.session_id, reply.partitions) == (ErrorCode.NONE, 0, results)
    assert list(cache._sessions) == [first]


def test_full_fetch_naming_a_session_closes_it_and_opens_another():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    old = open_session(cache, (0, 1))
    ctx = cache.new_context(old, 0, asks(2), [], privileged=False, now_ms=1, uses_topic_ids=False)
    assert old not in cache  # closed when the request arrives
    reply = ctx.respond(read_all(ctx), now_ms=1)
    assert reply.session_id not in (0, old)
    assert list(cache.session(reply.session_id).partitions) == [k(2)]
    assert (len(cache), cache.total_partitions) == (1, 1)
    _, stale = incremental(cache, old, 1)
    assert (stale.error, stale.session_id, stale.partitions) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])


def test_final_epoch_closes_the_session_without_a_new_one():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    old = open_session(cache, (0, 1))
    ctx = cache.new_context(old, -1, asks(0, 1), [], privileged=False, now_ms=1, uses_topic_ids=False)
    assert ctx.kind is ContextKind.SESSIONLESS
    reply = ctx.respond(read_all(ctx), now_ms=1)
    assert (reply.session_id, len(reply.partitions)) == (0, 2)
    assert (len(cache), cache.total_partitions) == (0, 0)


def test_closing_an_unknown_session_is_not_an_error():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    ctx = cache.new_context(12345, 0, asks(0), [], privileged=False, now_ms=0, uses_topic_ids=False)
    reply = ctx.respond(read_all(ctx), now_ms=0)
    assert reply.error == ErrorCode.NONE and reply.session_id != 0


def test_unknown_session_id_is_not_found():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    ctx = cache.new_context(777, 1, asks(0), [], privileged=False, now_ms=0, uses_topic_ids=False)
    assert (ctx.kind, ctx.error) == (ContextKind.SESSION_ERROR, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert ctx.partitions_to_read() == []
    reply = ctx.respond([], now_ms=0)
    assert (reply.error, reply.session_id, reply.partitions) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    # Session id 0 with a positive epoch is incremental too, and never found.
    assert cache.new_context(0, 3, [], [], privileged=False, now_ms=0,
                             uses_topic_ids=False).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_wrong_epoch_is_rejected_and_leaves_the_session_alone():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1))
    for wrong in (2, 5, -2):
        ctx = cache.new_context(sid, wrong, asks(7), [k(0)], privileged=False, now_ms=50, uses_topic_ids=False)
        assert ctx.error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        reply = ctx.respond([], now_ms=50)
        assert (reply.error, reply.session_id, reply.partitions) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    session = cache.session(sid)
    assert (session.epoch, list(session.partitions), session.last_used_ms) == (1, [k(0), k(1)], 0)
    ctx, reply = incremental(cache, sid, 1)
    assert reply.error == ErrorCode.NONE and session.epoch == 2


def test_epochs_advance_per_request_and_wrap_after_the_largest():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0,))
    for epoch in (1, 2, 3):
        _, reply = incremental(cache, sid, epoch)
        assert (reply.error, reply.session_id) == (ErrorCode.NONE, sid)
    cache.session(sid).epoch = MAX_EPOCH  # 2**31 requests would take a while
    _, reply = incremental(cache, sid, MAX_EPOCH)
    assert reply.error == ErrorCode.NONE
    assert cache.session(sid).epoch == 1
    _, reply = incremental(cache, sid, 1)
    assert reply.error == ErrorCode.NONE


def test_topic_naming_must_match_the_session():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    by_name = open_session(cache, (0,))
    ctx = cache.new_context(by_name, 1, [], [], privileged=False, now_ms=0, uses_topic_ids=True)
    assert ctx.error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert ctx.respond([], now_ms=0).session_id == 0
    topic_id = uuid.UUID(int=42)
    ctx = cache.new_context(0, 0, [((topic_id, 3), fp(3))], [], privileged=False, now_ms=0, uses_topic_ids=True)
    by_id = ctx.respond([((topic_id, 3), pd(3))], now_ms=0).session_id
    assert cache.session(by_id).uses_topic_ids
    assert cache.new_context(by_id, 1, [], [], privileged=False, now_ms=0,
                             uses_topic_ids=False).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    ctx = cache.new_context(by_id, 1, [], [], privileged=False, now_ms=0, uses_topic_ids=True)
    assert keys_of(ctx.partitions_to_read()) == [(topic_id, 3)]


# ----------------------------------------------------------------- partitions of a session


def test_incremental_requests_update_in_place_append_and_forget():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1, 2))
    moved = fp(1, offset=99, max_bytes=7, current_leader_epoch=4, last_fetched_epoch=3, log_start_offset=5)
    ctx = cache.new_context(sid, 1, [(k(1), moved), (k(5), fp(5))], [k(0)], privileged=False, now_ms=0,
                            uses_topic_ids=False)
    to_read = ctx.partitions_to_read()
    assert keys_of(to_read) == [k(1), k(2), k(5)]  # updated keeps its place, new one goes last
    assert to_read[0][1] is moved  # the request's parameters as given
    assert (len(cache), cache.total_partitions) == (1, 3)


def test_a_partition_both_added_and_forgotten_is_gone():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1))
    ctx = cache.new_context(sid, 1, asks(3), [k(3), k(9)], privileged=False, now_ms=0, uses_topic_ids=False)
    assert keys_of(ctx.partitions_to_read()) == [k(0), k(1)]


def test_forgetting_every_partition_closes_the_session():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1))
    ctx = cache.new_context(sid, 1, [], [k(0), k(1)], privileged=False, now_ms=0, uses_topic_ids=False)
    assert ctx.kind is ContextKind.SESSIONLESS and ctx.partitions_to_read() == []
    reply = ctx.respond([], now_ms=0)
    assert (reply.error, reply.session_id) == (ErrorCode.NONE, 0)
    assert (len(cache), cache.total_partitions, cache.evictions) == (0, 0, 0)


def test_partitions_that_return_records_move_to_the_end():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1, 2, 3))
    ctx, reply = incremental(cache, sid, 1, records={k(0), k(2)})
    assert keys_of(reply.partitions) == [k(0), k(2)]
    assert list(cache.session(sid).partitions) == [k(1), k(3), k(0), k(2)]
    # An update does not move a partition; only records do.
    ctx = cache.new_context(sid, 2, [(k(0), fp(0, offset=5))], [], privileged=False, now_ms=0, uses_topic_ids=False)
    assert keys_of(ctx.partitions_to_read()) == [k(1), k(3), k(0), k(2)]


def test_full_fetch_with_duplicate_partitions_keeps_the_first_place_and_last_values():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    late = fp(0, offset=8)
    ctx = cache.new_context(0, 0, [(k(0), fp(0)), (k(1), fp(1)), (k(0), late)], [], privileged=False, now_ms=0,
                            uses_topic_ids=False)
    assert ctx.partitions_to_read() == [(k(0), late), (k(1), fp(1))]


# ----------------------------------------------------------------- response filtering


@pytest.mark.parametrize(
    "changed",
    [
        dict(hw=11),
        dict(lso=9),
        dict(log_start=3),
        dict(records=b"batch"),
        dict(error=ErrorCode.NOT_LEADER_OR_FOLLOWER),
        dict(diverging_epoch=R.EpochEndOffset(epoch=2, end_offset=5)),
        dict(preferred_read_replica=3),
        dict(current_leader=R.LeaderIdAndEpoch(leader_id=1, leader_epoch=7)),
    ],
    ids=lambda d: next(iter(d)),
)
def test_incremental_answer_has_only_partitions_with_news(changed):
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1))
    _, reply = incremental(cache, sid, 1)
    assert reply.partitions == []  # nothing changed since the full answer
    _, reply = incremental(cache, sid, 2, data={k(1): pd(1, **changed)})
    assert keys_of(reply.partitions) == [k(1)]


def test_offsets_are_sent_once_but_signals_every_time():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0,))
    _, reply = incremental(cache, sid, 1, data={k(0): pd(0, 20)})
    assert len(reply.partitions) == 1
    _, reply = incremental(cache, sid, 2, data={k(0): pd(0, 20)})
    assert reply.partitions == []  # the fetcher already knows HW 20
    signal = {k(0): pd(0, 20, diverging_epoch=R.EpochEndOffset(epoch=1, end_offset=4), preferred_read_replica=2)}
    for epoch in (3, 4):
        _, reply = incremental(cache, sid, epoch, data=signal)
        assert len(reply.partitions) == 1


def test_an_error_is_always_sent_and_its_partition_resent_when_it_clears():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1))
    # The error keeps the real HW, as our OFFSET_OUT_OF_RANGE answers do.
    broken = {k(0): pd(0, 10, error=ErrorCode.OFFSET_OUT_OF_RANGE, log_start=0)}
    for epoch in (1, 2):
        _, reply = incremental(cache, sid, epoch, data=broken)
        assert keys_of(reply.partitions) == [k(0)]
    # Same offsets as before the error, yet the fetcher ignored them meanwhile.
    _, reply = incremental(cache, sid, 3)
    assert keys_of(reply.partitions) == [k(0)]
    _, reply = incremental(cache, sid, 4)
    assert reply.partitions == []


def test_a_full_answer_with_an_error_does_not_count_as_told():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0, 1), data={k(1): pd(1, 10, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)})
    _, reply = incremental(cache, sid, 1)
    assert keys_of(reply.partitions) == [k(1)]


def test_answers_for_partitions_outside_the_session_are_dropped():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0,))
    ctx = cache.new_context(sid, 1, [], [], privileged=False, now_ms=0, uses_topic_ids=False)
    reply = ctx.respond([(k(0), pd(0, 11)), (k(9), pd(9, records=b"x"))], now_ms=0)
    assert keys_of(reply.partitions) == [k(0)]


def test_a_request_overtaken_by_a_later_one_of_its_session_fails_at_answer_time():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    sid = open_session(cache, (0,))
    slow = cache.new_context(sid, 1, [], [], privileged=False, now_ms=0, uses_topic_ids=False)
    fast = cache.new_context(sid, 2, [], [], privileged=False, now_ms=0, uses_topic_ids=False)
    assert fast.respond(read_all(fast, {k(0): pd(0, 12)}), now_ms=0).error == ErrorCode.NONE
    reply = slow.respond(read_all(slow, {k(0): pd(0, 13)}), now_ms=0)
    # Kafka names the session here: the session is fine, this request is stale.
    assert (reply.error, reply.session_id, reply.partitions) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, sid, [])
    assert cache.session(sid).partitions[k(0)].high_watermark == 12


def test_a_context_answers_once():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    ctx = cache.new_context(0, 0, asks(0), [], privileged=False, now_ms=0, uses_topic_ids=False)
    ctx.respond(read_all(ctx), now_ms=0)
    with pytest.raises(RuntimeError):
        ctx.respond(read_all(ctx), now_ms=0)
    assert len(cache) == 1


# ----------------------------------------------------------------- capacity and eviction


def test_capacity_counts_sessions_not_partitions():
    cache = FetchSessionCache(2, EVICTION_MS, random.Random(1))
    open_session(cache, range(50))
    open_session(cache, range(50))
    assert (len(cache), cache.total_partitions) == (2, 100)
    assert open_session(cache, (0,), now_ms=1) == 0


def test_zero_slots_disable_sessions():
    cache = FetchSessionCache(0, EVICTION_MS, random.Random(1))
    assert open_session(cache, (0,)) == 0
    assert open_session(cache, (0,), privileged=True, now_ms=10 * EVICTION_MS) == 0


def test_a_stale_session_is_evicted_first_strictly_after_eviction_ms():
    cache = FetchSessionCache(2, EVICTION_MS, random.Random(1))
    old = open_session(cache, (0, 1, 2), privileged=True, now_ms=0)
    newer = open_session(cache, (0, 1, 2), privileged=True, now_ms=10)
    # Unused for exactly eviction_ms is not stale yet, and a consumer cannot
    # evict recently created follower sessions.
    assert open_session(cache, (0,), now_ms=EVICTION_MS) == 0
    fresh = open_session(cache, (0,), now_ms=EVICTION_MS + 1)
    assert fresh != 0 and old not in cache and newer in cache
    assert cache.evictions == 1
    assert (len(cache), cache.total_partitions) == (2, 4)


def test_the_least_recently_used_session_is_the_stale_one():
    cache = FetchSessionCache(2, EVICTION_MS, random.Random(1))
    first = open_session(cache, (0,), now_ms=0)
    second = open_session(cache, (0,), now_ms=1)
    incremental(cache, first, 1, now_ms=2)
    assert open_session(cache, (0,), now_ms=EVICTION_MS + 2) != 0
    assert first in cache and second not in cache


def test_a_follower_session_evicts_a_consumer_session_at_once():
    cache = FetchSessionCache(1, EVICTION_MS, random.Random(1))
    consumer = open_session(cache, range(10), now_ms=0)
    follower = open_session(cache, (0,), privileged=True, now_ms=1)
    assert follower != 0 and consumer not in cache and cache.evictions == 1
    # ... but not another follower's recently created session, however small.
    assert open_session(cache, range(10), privileged=True, now_ms=2) == 0
    # And a consumer cannot evict a follower.
    assert open_session(cache, range(100), now_ms=3) == 0


def test_consumer_sessions_evict_each_other_only_when_settled_and_smaller():
    cache = FetchSessionCache(1, EVICTION_MS, random.Random(1))
    small = open_session(cache, (0, 1), now_ms=0)
    # Recently created: not evictable by another consumer, even a larger one.
    assert open_session(cache, range(5), now_ms=1) == 0
    # Used after eviction_ms from its creation: now evictable by all.
    incremental(cache, small, 1, now_ms=EVICTION_MS + 1)
    assert open_session(cache, (0, 1), now_ms=EVICTION_MS + 2) == 0  # a tie keeps the old one
    bigger = open_session(cache, (0, 1, 2), now_ms=EVICTION_MS + 3)
    assert bigger != 0 and small not in cache


def test_evictability_is_settled_when_a_session_is_used_not_as_time_passes():
    cache = FetchSessionCache(1, EVICTION_MS, random.Random(1))
    small = open_session(cache, (0,), now_ms=0)
    incremental(cache, small, 1, now_ms=EVICTION_MS)  # exactly eviction_ms after creation: not settled
    assert open_session(cache, range(5), now_ms=EVICTION_MS + 5) == 0
    assert small in cache


def test_follower_sessions_evict_settled_smaller_follower_sessions():
    cache = FetchSessionCache(1, EVICTION_MS, random.Random(1))
    follower = open_session(cache, (0, 1), privileged=True, now_ms=0)
    incremental(cache, follower, 1, now_ms=EVICTION_MS + 1)
    assert open_session(cache, (0, 1), privileged=True, now_ms=EVICTION_MS + 2) == 0
    # A consumer never outranks a follower, settled or not.
    assert open_session(cache, range(9), now_ms=EVICTION_MS + 2) == 0
    other = open_session(cache, (0, 1, 2), privileged=True, now_ms=EVICTION_MS + 3)
    assert other != 0 and follower not in cache


def test_the_least_valuable_candidate_is_evicted():
    cache = FetchSessionCache(3, EVICTION_MS, random.Random(1))
    follower = open_session(cache, (0,), privileged=True, now_ms=0)
    big = open_session(cache, range(4), now_ms=0)
    small = open_session(cache, range(2), now_ms=0)
    for sid in (follower, big, small):
        incremental(cache, sid, 1, now_ms=EVICTION_MS + 1)
    # Unprivileged first, then fewest partitions: the small consumer goes,
    # although the follower session has fewer partitions.
    assert open_session(cache, range(3), now_ms=EVICTION_MS + 2) != 0
    assert small not in cache and big in cache and follower in cache
    # The size ranked is the size at the last use (Kafka's cachedSize).
    assert cache.session(big).cached_size == 4


def test_eviction_uses_the_size_of_the_new_full_answer():
    cache = FetchSessionCache(1, EVICTION_MS, random.Random(1))
    small = open_session(cache, (0,), now_ms=0)
    incremental(cache, small, 1, now_ms=EVICTION_MS + 1)
    assert open_session(cache, (5,), now_ms=EVICTION_MS + 2) == 0
    assert open_session(cache, (5, 6), now_ms=EVICTION_MS + 2) != 0


# ----------------------------------------------------------------- session ids


class ScriptedIds:
    """A random source that returns the ids it is given, in order."""

    def __init__(self, ids):
        self.ids = list(ids)

    def randint(self, low, high):
        value = self.ids.pop(0)
        assert low <= 1 and high == 2**31 - 1
        return value


def test_session_ids_are_never_zero_or_live():
    cache = FetchSessionCache(10, EVICTION_MS, ScriptedIds([5, 0, 5, 5, 9]))
    assert open_session(cache) == 5
    assert open_session(cache) == 9


def test_seeded_ids_repeat_and_stay_in_range():
    def ids(seed):
        cache = FetchSessionCache(50, EVICTION_MS, random.Random(seed))
        return [open_session(cache, (0,)) for _ in range(20)]

    assert ids(7) == ids(7)
    assert ids(7) != ids(8)
    assert all(0 < i < 2**31 and len(set(ids(7))) == 20 for i in ids(7))


# ----------------------------------------------------------------- model-based


PARTITIONS = [k(p) for p in range(3)]
ERROR_KINDS = {
    # Kafka's own errors carry no offsets; ours may carry the high watermark, and
    # one carrying every offset shows the fetcher must not be trusted to keep them.
    1: lambda p, hw, lso, ls: pd(p, -1, lso=-1, log_start=-1, error=ErrorCode.NOT_LEADER_OR_FOLLOWER),
    2: lambda p, hw, lso, ls: pd(p, hw, lso=lso, log_start=-1, error=ErrorCode.OFFSET_OUT_OF_RANGE),
    3: lambda p, hw, lso, ls: pd(p, hw, lso=lso, log_start=ls, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
}


class Broker:
    """The partitions' true state, as a sessionless (full) fetch reports it."""

    def __init__(self):
        self.truth = {key: [10, 5, 0, 0] for key in PARTITIONS}  # hw, lso, log start, error kind

    def answer(self, key, with_records: bool = False):
        hw, lso, ls, error = self.truth[key]
        if error:
            return ERROR_KINDS[error](key[1], hw, lso, ls)
        return pd(key[1], hw, lso=lso, log_start=ls, records=b"batch" if with_records else b"")

    # Each offset moves on its own (the others stay put), so a fetcher told
    # about only some of them is caught.
    def change(self, what: str, key, kind: int = 3) -> None:
        hw, lso, ls, error = self.truth[key]
        if what == "hw":
            self.truth[key][0] = hw + 1
        elif what == "lso":
            self.truth[key][1] = lso + 1 if lso < hw else lso
        elif what == "log_start":
            self.truth[key][2] = ls + 1 if ls < lso else ls
        elif error:
            self.truth[key][3] = 0
        else:
            # The high watermark moves too, so the errored answer carries news
            # the fetcher ignores and must be told again once the error is gone.
            self.truth[key][0] = hw + 1
            self.truth[key][3] = kind


class Client:
    """A fetcher as Kafka's FetchSessionHandler behaves, with what it knows."""

    def __init__(self, privileged: bool = False, wanted=()):
        self.privileged = privileged
        self.session_id = 0
        self.epoch = 0
        self.wanted = {key: fp(key[1]) for key in wanted}  # key -> FetchPartition to send
        self.session_model: OrderedDict = OrderedDict()  # what the broker's session should hold
        self.known: dict = {}  # key -> (hw, lso, log start) learned from answers

    def fetch(self, cache, broker, *, mode="next", records_for=None, now_ms=0):
        """One request and its answer, checked against the model; the reply."""
        with_records = {records_for}
        if self.session_id == 0 or mode != "next":
            epoch = FINAL_EPOCH if mode == "close" else 0
            ctx = cache.new_context(self.session_id, epoch, list(self.wanted.items()), [],
                                    privileged=self.privileged, now_ms=now_ms, uses_topic_ids=False)
            assert self.session_id == 0 or self.session_id not in cache
            assert ctx.partitions_to_read() == list(self.wanted.items())
            results = [(key, broker.answer(key, key in with_records)) for key, _ in ctx.partitions_to_read()]
            reply = ctx.respond(results, now_ms=now_ms)
            assert reply.error == ErrorCode.NONE and reply.partitions == results
            assert epoch == 0 or reply.session_id == 0
            self.session_id, self.epoch = reply.session_id, 1
            self.session_model = OrderedDict(self.wanted) if reply.session_id else OrderedDict()
        else:
            requested = [(key, f) for key, f in self.wanted.items() if self.session_model.get(key) is not f]
            forgotten = [key for key in self.session_model if key not in self.wanted]
            evicted = self.session_id not in cache
            ctx = cache.new_context(self.session_id, self.epoch, requested, forgotten,
                                    privileged=self.privileged, now_ms=now_ms, uses_topic_ids=False)
            if evicted:
                assert ctx.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
                reply = ctx.respond([], now_ms=now_ms)
                assert (reply.session_id, reply.partitions) == (0, [])
                # Kafka's client starts over with a full fetch.
                self.session_id, self.session_model = 0, OrderedDict()
                return reply
            model = self.session_model
            for key, f in requested:
                model[key] = f  # an existing key keeps its place
            for key in forgotten:
                model.pop(key, None)
            assert ctx.partitions_to_read() == list(model.items())
            results = [(key, broker.answer(key, key in with_records)) for key, _ in ctx.partitions_to_read()]
            reply = ctx.respond(results, now_ms=now_ms)
            assert reply.error == ErrorCode.NONE
            assert [pair for pair in results if pair in reply.partitions] == reply.partitions
            if not model:
                # Forgetting everything closed the session.
                assert reply.session_id == 0 and self.session_id not in cache
                self.session_id = 0
            else:
                assert reply.session_id == self.session_id
                self.epoch = next_epoch(self.epoch)
                for key, data in results:
                    if len(data.records):
                        assert (key, data) in reply.partitions
                        model.move_to_end(key)
        for key, data in reply.partitions:
            if data.error_code == ErrorCode.NONE:
                self.known[key] = (data.high_watermark, data.last_stable_offset, data.log_start_offset)
        self.check_knows_what_a_full_fetch_says(cache, broker, now_ms)
        return reply

    def check_knows_what_a_full_fetch_says(self, cache, broker, now_ms):
        ctx = cache.new_context(0, FINAL_EPOCH, list(self.wanted.items()), [], privileged=self.privileged,
                                now_ms=now_ms, uses_topic_ids=False)
        full = ctx.respond([(key, broker.answer(key)) for key, _ in ctx.partitions_to_read()], now_ms=now_ms)
        for key, data in full.partitions:
            if data.error_code == ErrorCode.NONE:
                expected = (data.high_watermark, data.last_stable_offset, data.log_start_offset)
                assert self.known.get(key) == expected, key

    def check_session(self, cache):
        session = cache.session(self.session_id) if self.session_id else None
        if session is not None:
            assert session.epoch == self.epoch
            assert [(key, cp.request) for key, cp in session.partitions.items()] == list(self.session_model.items())


STEPS = st.one_of(
    st.tuples(st.sampled_from(["hw", "lso", "log_start"]), st.sampled_from(PARTITIONS), st.just(0)),
    st.tuples(st.just("error"), st.sampled_from(PARTITIONS), st.sampled_from(sorted(ERROR_KINDS))),
    st.tuples(st.sampled_from(["want", "drop"]), st.sampled_from(PARTITIONS), st.integers(0, 9)),
    st.tuples(st.sampled_from(["next", "next", "next", "reset", "close"]),
              st.one_of(st.none(), st.none(), st.sampled_from(PARTITIONS)), st.just(0)),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(PARTITIONS), min_size=1, unique=True),
    st.dictionaries(st.sampled_from(PARTITIONS), st.sampled_from(sorted(ERROR_KINDS)), max_size=2),
    st.lists(STEPS, max_size=60),
)
def test_one_session_reads_the_model_and_keeps_its_fetcher_up_to_date(wanted, errors_at_start, steps):
    """Partitions read = a plain ordered-dict model of the session; a fetcher
    applying only the answers knows every error-free partition's offsets as a
    full fetch gives them."""
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(0))
    broker = Broker()
    for key, kind in errors_at_start.items():  # errors in the answer that creates the session
        broker.change("error", key, kind)
    client = Client(wanted=wanted)
    client.fetch(cache, broker)
    assert client.session_id != 0
    for op, key, arg in steps:
        if op in ("hw", "lso", "log_start", "error"):
            broker.change(op, key, arg)
        elif op == "want":
            client.wanted[key] = fp(key[1], offset=arg)
        elif op == "drop":
            client.wanted.pop(key, None)
        else:
            # Records force a partition into the answer, so most fetches have none.
            client.fetch(cache, broker, mode=op, records_for=key)
        client.check_session(cache)
        assert cache.total_partitions == sum(len(s.partitions) for s in cache._sessions.values())


class FetchSessionMachine(RuleBasedStateMachine):
    """Two fetchers share a small cache: sessions are evicted as time passes.

    Besides the single-session checks: the cache never exceeds its capacity,
    a session goes only to make room for a new one, its counters add up, and a
    fetcher whose session was evicted gets FETCH_SESSION_ID_NOT_FOUND.
    """

    @initialize(max_sessions=st.integers(1, 3), privileged=st.lists(st.booleans(), min_size=2, max_size=2),
                wanted=st.lists(st.lists(st.sampled_from(PARTITIONS), min_size=1, unique=True), min_size=2, max_size=2),
                seed=st.integers(0, 2**16))
    def setup(self, max_sessions, privileged, wanted, seed):
        self.cache = FetchSessionCache(max_sessions, EVICTION_MS, random.Random(seed))
        self.now_ms = 0
        self.broker = Broker()
        self.clients = [Client(p, w) for p, w in zip(privileged, wanted)]

    @rule(ms=st.sampled_from([0, 1, 10, EVICTION_MS, EVICTION_MS + 1]))
    def advance_time(self, ms):
        self.now_ms += ms

    @rule(what=st.sampled_from(["hw", "lso", "log_start", "error"]), key=st.sampled_from(PARTITIONS),
          kind=st.sampled_from(sorted(ERROR_KINDS)))
    def broker_changes(self, what, key, kind):
        self.broker.change(what, key, kind)

    @rule(c=st.integers(0, 1), key=st.sampled_from(PARTITIONS), offset=st.integers(0, 9))
    def client_wants(self, c, key, offset):
        self.clients[c].wanted[key] = fp(key[1], offset=offset)

    @rule(c=st.integers(0, 1), key=st.sampled_from(PARTITIONS))
    def client_drops(self, c, key):
        self.clients[c].wanted.pop(key, None)

    @rule(c=st.integers(0, 1), mode=st.sampled_from(["next", "next", "next", "reset", "close"]),
          records_for=st.one_of(st.none(), st.none(), st.sampled_from(PARTITIONS)))
    def fetch(self, c, mode, records_for):
        client = self.clients[c]
        full_before = len(self.cache) >= self.cache.max_sessions
        before = set(self.cache._sessions) - {client.session_id}
        reply = client.fetch(self.cache, self.broker, mode=mode, records_for=records_for, now_ms=self.now_ms)
        lost = before - set(self.cache._sessions)
        # Only a new session makes room, one session at a time.
        assert not lost or (len(lost) == 1 and full_before and reply.session_id not in (0, *before))

    @invariant()
    def cache_bounds_and_counters(self):
        if not hasattr(self, "cache"):
            return
        sessions = self.cache._sessions
        assert len(self.cache) <= self.cache.max_sessions
        assert all(session_id > 0 for session_id in sessions)
        assert self.cache.total_partitions == sum(len(s.partitions) for s in sessions.values())
        holders = [client.session_id for client in self.clients if client.session_id in sessions]
        assert len(holders) == len(set(holders))  # a live id belongs to one fetcher
        assert set(sessions) == set(holders)  # each session went to the fetcher that asked
        for client in self.clients:
            client.check_session(self.cache)


FetchSessionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestFetchSessionMachine = FetchSessionMachine.TestCase


# ----------------------------------------------------------------- the fetcher's side


def exchange(builder, cache, wanted, *, now_ms=0, records=()):
    """One request built by ``builder`` for ``wanted`` (partition -> offset) and
    answered by ``cache``; returns (request plan, reply)."""
    plan = builder.build({k(p): offset for p, offset in wanted.items()})
    requested = [(key, fp(key[1], offset)) for key, offset in plan.to_send]
    ctx = cache.new_context(plan.session_id, plan.session_epoch, requested, plan.forgotten,
                            privileged=True, now_ms=now_ms, uses_topic_ids=False)
    reply = ctx.respond(read_all(ctx, records=records), now_ms=now_ms)
    builder.handle_response(reply.error, reply.session_id)
    return plan, reply


def test_fetcher_sends_only_changes_and_forgets_what_it_no_longer_wants():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(1))
    builder = FetchSessionBuilder()
    plan, reply = exchange(builder, cache, {0: 0, 1: 0, 2: 0})
    assert plan.full and plan.session_epoch == 0 and reply.session_id != 0
    session = reply.session_id
    plan, reply = exchange(builder, cache, {0: 0, 1: 0, 2: 0})
    assert not plan.full and (plan.session_id, plan.session_epoch) == (session, 1)
    assert plan.to_send == [] and plan.forgotten == [] and reply.partitions == []
    plan, reply = exchange(builder, cache, {0: 5, 1: 0}, records={k(0)})
    assert plan.to_send == [(k(0), 5)] and plan.forgotten == [k(2)]
    assert keys_of(reply.partitions) == [k(0)]
    assert list(cache.session(session).partitions) == [k(1), k(0)]  # 0 got records: last
    assert cache.session(session).partitions[k(0)].request.fetch_offset == 5


def test_fetcher_starts_over_in_full_after_a_lost_answer_or_a_session_error():
    cache = FetchSessionCache(10, EVICTION_MS, random.Random(2))
    builder = FetchSessionBuilder()
    _, reply = exchange(builder, cache, {0: 0})
    first = reply.session_id
    builder.build({k(0): 1})
    builder.handle_error()  # the connection dropped: the broker may have moved on
    plan, reply = exchange(builder, cache, {0: 1})
    assert plan.full and (plan.session_id, plan.session_epoch) == (first, 0)  # closes the old one
    assert first not in cache and reply.session_id in cache
    cache.remove(reply.session_id)  # evicted, or the broker restarted
    plan, reply = exchange(builder, cache, {0: 1})
    assert not plan.full and reply.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    plan, reply = exchange(builder, cache, {0: 1})
    assert plan.full and reply.error == ErrorCode.NONE and reply.session_id in cache


def test_fetcher_without_a_session_keeps_sending_full_requests():
    cache = FetchSessionCache(0, EVICTION_MS, random.Random(3))
    builder = FetchSessionBuilder()
    for offset in range(3):
        plan, reply = exchange(builder, cache, {0: offset, 1: 0})
        assert plan.full and reply.session_id == 0 and keys_of(plan.to_send) == [k(0), k(1)]

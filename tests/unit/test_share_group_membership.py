"""Share group membership (broker/coordinators/share_groups/membership.py):
heartbeats, the simple assignor, session expiry, replay of its records."""

from __future__ import annotations

import uuid

from broker.coordinators.share_groups.membership import (
    ShareGroupConfig,
    ShareGroupCoordinator,
    ShareHeartbeatRequest,
    simple_assign,
)
from protocol.errors import ErrorCode

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)


def _coordinator():
    c = ShareGroupCoordinator(ShareGroupConfig(session_timeout_ms=1000, max_size=3))
    c.set_topics({"t": (T, 1), "u": (U, 4)})
    return c


def _beat(c, now, member_id, epoch, names=None, group="g"):
    answers = []
    stores = c.heartbeat(now, ShareHeartbeatRequest(group, member_id, epoch, subscribed_topic_names=names), answers.append)
    for store in stores:
        c.store_done(store.token, ErrorCode.NONE)
    (answer,) = answers
    return answer, stores


def test_simple_assignor_shares_a_partition_and_spreads_many():
    members = {f"m{i}": ("t",) for i in range(3)}
    assert all(tps == {(T, 0)} for tps in simple_assign(members, {"t": (T, 1)}).values())
    spread = simple_assign({"a": ("u",), "b": ("u",)}, {"u": (U, 4)})
    assert spread["a"] | spread["b"] == {(U, p) for p in range(4)} and len(spread["a"]) == 2


def test_members_join_share_and_leave():
    c = _coordinator()
    a, stores = _beat(c, 0, "a", 0, ("t",))
    assert a.error == ErrorCode.NONE and a.member_epoch == 1 and a.assignment == {(T, 0)} and stores
    b, _ = _beat(c, 0, "b", 0, ("t",))
    assert b.member_epoch == 2 and b.assignment == {(T, 0)}
    # a catches up with the new epoch; no assignment change, none sent.
    a2, _ = _beat(c, 1, "a", 1)
    assert a2.member_epoch == 2 and a2.assignment is None
    assert _beat(c, 1, "a", 7)[0].error == ErrorCode.FENCED_MEMBER_EPOCH
    assert _beat(c, 1, "zz", 2)[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    _beat(c, 1, "c", 0, ("t",))
    assert _beat(c, 1, "d", 0, ("t",))[0].error == ErrorCode.GROUP_MAX_SIZE_REACHED
    left, _ = _beat(c, 2, "b", -1)
    assert left.member_epoch == -1 and set(c.groups["g"].members) == {"a", "c"}


def test_session_expiry_and_replay():
    c = _coordinator()
    log = []

    def beat(now, member_id, epoch, names=None):
        answers = []
        for store in c.heartbeat(now, ShareHeartbeatRequest("g", member_id, epoch, subscribed_topic_names=names), answers.append):
            log.extend(store.records)
            c.store_done(store.token, ErrorCode.NONE)
        return answers[0]

    beat(0, "a", 0, ("t", "u"))
    beat(500, "b", 0, ("u",))
    assert beat(900, "a", 1).member_epoch == 2
    for store in c.tick(1000):
        log.extend(store.records)
        c.store_done(store.token, ErrorCode.NONE)
    assert set(c.groups["g"].members) == {"a", "b"}
    for store in c.tick(1500):  # b's session ended
        log.extend(store.records)
        c.store_done(store.token, ErrorCode.NONE)
    assert set(c.groups["g"].members) == {"a"}
    replayed = ShareGroupCoordinator(c.config)
    replayed.set_topics(c.topics)
    for key, value in log:
        replayed.load_record(key, value)
    replayed.finish_loading(2000)
    before, after = c.groups["g"], replayed.groups["g"]
    assert (after.group_epoch, after.assignment_epoch, after.members, after.target) == (
        before.group_epoch, before.assignment_epoch, before.members, before.target,
    )
    assert after.target["a"] == {(T, 0)} | {(U, p) for p in range(4)}


def test_failed_store_undoes_the_join():
    c = _coordinator()
    answers = []
    (store,) = c.heartbeat(0, ShareHeartbeatRequest("g", "a", 0, subscribed_topic_names=("t",)), answers.append)
    c.store_done(store.token, ErrorCode.NOT_COORDINATOR)
    assert answers[0].error == ErrorCode.NOT_COORDINATOR and "g" not in c.groups

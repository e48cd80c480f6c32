"""The lease a broker holds while the controller cannot yet have fenced it:
from the send time of its last heartbeat answered "not fenced", one session long."""

from __future__ import annotations

from broker.lifecycle import HeartbeatLease


def test_no_lease_before_the_first_answer():
    lease = HeartbeatLease(3000)
    assert not lease.held(0.0)
    assert not lease.held(100.0)


def test_an_answer_holds_the_lease_for_a_session_from_when_the_heartbeat_was_sent():
    lease = HeartbeatLease(3000)
    lease.answered(sent_at_s=10.0, fenced=False)
    assert lease.held(10.5)
    assert lease.held(12.999)
    # Counted from the send, not from the answer: the controller may have
    # received it at once and fences three seconds after that.
    assert not lease.held(13.0)


def test_each_answered_heartbeat_extends_it():
    lease = HeartbeatLease(3000)
    for sent_at_s in (10.0, 10.5, 11.0, 11.5):
        lease.answered(sent_at_s, fenced=False)
    assert lease.held(14.4)
    assert not lease.held(14.5)


def test_a_late_answer_to_an_older_heartbeat_does_not_shorten_it():
    lease = HeartbeatLease(3000)
    lease.answered(sent_at_s=20.0, fenced=False)
    lease.answered(sent_at_s=19.0, fenced=False)
    assert lease.held(22.5)


def test_fenced_ends_the_lease_until_an_unfenced_answer():
    lease = HeartbeatLease(3000)
    lease.answered(sent_at_s=10.0, fenced=False)
    lease.answered(sent_at_s=11.0, fenced=True)
    assert not lease.held(11.5)
    lease.answered(sent_at_s=12.0, fenced=False)
    assert lease.held(14.9)


def test_silence_past_the_session_loses_it():
    # A broker cut off at 10.4 s: its last answered heartbeat was sent at 10 s.
    lease = HeartbeatLease(3000)
    lease.answered(sent_at_s=10.0, fenced=False)
    assert [lease.held(t) for t in (11.0, 12.0, 13.5, 20.0)] == [True, True, False, False]


def _service_on_a_coordinator(lease_held: bool):
    from types import SimpleNamespace

    from broker.config import load_config
    from broker.coordinators.groups.service import OFFSETS_TOPIC, GroupService

    config = load_config({"offsets.topic.num.partitions": "1"})
    partition = SimpleNamespace(leader=config["node.id"], leader_epoch=3)
    broker = SimpleNamespace(
        config=config,
        node_id=config["node.id"],
        image=SimpleNamespace(topics={OFFSETS_TOPIC: SimpleNamespace(partitions={0: partition})}),
        lifecycle=SimpleNamespace(may_serve_as_leader=lambda: lease_held),
    )
    service = GroupService(broker)
    service.loaded[0] = 3
    return service


def test_the_coordinator_answers_while_its_lease_is_held():
    assert _service_on_a_coordinator(lease_held=True).not_coordinator("g") is None


def test_a_coordinator_without_its_lease_sends_clients_to_look_again():
    # The metadata still names this broker, but it may be replaced already:
    # serving an OffsetFetch could return offsets older than acknowledged ones.
    from protocol.errors import ErrorCode

    assert _service_on_a_coordinator(lease_held=False).not_coordinator("g") == ErrorCode.NOT_COORDINATOR

"""Incremental fetch sessions (KIP-227) over TCP: raw requests for the session
rules a client relies on, and kafka-python (which fetches through sessions)
reading everything through one."""

from __future__ import annotations

from protocol.errors import ErrorCode
from tests.interop._support import (
    FETCH,
    REQ,
    Msg,
    RawConnection,
    consume,
    create_topic,
    fetch_request,
    produce,
    unique_topic,
)

F = REQ[1]


def session_fetch(conn, topic: str, session_id: int, epoch: int, partitions: dict[int, int], forgotten=()):
    """A Fetch v12 in a session; ``partitions`` maps partition -> fetch offset."""
    body = fetch_request(topic, 0, 0)
    body.session_id = session_id
    body.session_epoch = epoch
    body.topics = (
        [F.FetchTopic(topic=topic, partitions=[F.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in partitions.items()])]
        if partitions
        else []
    )
    body.forgotten_topics_data = [F.ForgottenTopic(topic=topic, partitions=list(forgotten))] if forgotten else []
    return conn.request(FETCH, 12, body)


def answered(response) -> dict[int, object]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def test_a_session_answers_only_partitions_with_news(shared_broker):
    topic = unique_topic("sessions")
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    produce("confluent", shared_broker.bootstrap, topic, [Msg(b"k", b"a")], partition=0)
    with RawConnection(shared_broker.bootstrap) as conn:
        full = session_fetch(conn, topic, 0, 0, {0: 0, 1: 0, 2: 0})
        assert full.error_code == ErrorCode.NONE and full.session_id != 0
        assert set(answered(full)) == {0, 1, 2}  # a full answer has every partition
        assert answered(full)[0].records and answered(full)[0].high_watermark == 1
        session = full.session_id
        # Partition 0 moves on to offset 1; nothing new anywhere: an empty answer.
        quiet = session_fetch(conn, topic, session, 1, {0: 1})
        assert quiet.error_code == ErrorCode.NONE and quiet.session_id == session
        assert answered(quiet) == {}
        # New records in partition 2: only it is sent, though the request names none.
        produce("confluent", shared_broker.bootstrap, topic, [Msg(b"k", b"b")], partition=2)
        news = session_fetch(conn, topic, session, 2, {})
        assert set(answered(news)) == {2} and answered(news)[2].high_watermark == 1
        # A wrong epoch and an unknown session are refused without touching the session.
        stale = session_fetch(conn, topic, session, 2, {})
        assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and stale.responses == []
        unknown = session_fetch(conn, topic, session + 1 if session < 2**31 - 1 else 1, 1, {})
        assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # Forgetting partitions keeps the rest; the final epoch closes the session.
        forgot = session_fetch(conn, topic, session, 3, {}, forgotten=[1, 2])
        assert forgot.error_code == ErrorCode.NONE and answered(forgot) == {}
        closed = session_fetch(conn, topic, session, -1, {0: 1})
        assert closed.error_code == ErrorCode.NONE and closed.session_id == 0
        again = session_fetch(conn, topic, session, 4, {})
        assert again.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_no_session_when_the_cache_has_no_slots(broker_factory):
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": "0"})
    topic = unique_topic("no-sessions")
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        full = session_fetch(conn, topic, 0, 0, {0: 0})
        assert full.error_code == ErrorCode.NONE and full.session_id == 0


def test_kafka_python_consumes_through_incremental_sessions(shared_broker):
    topic = unique_topic("sessions-kp")
    create_topic(shared_broker.bootstrap, topic, partitions=4)
    values = []
    for partition in range(4):
        batch = [Msg(b"k", f"p{partition}-{i}".encode()) for i in range(100)]
        produce("confluent", shared_broker.bootstrap, topic, batch, partition=partition)
        values += [m.value for m in batch]
    # Small fetches, so the 400 records take many incremental rounds.
    got = consume(
        "kafka-python", shared_broker.bootstrap, topic, len(values), partitions=[0, 1, 2, 3],
        extra={"max_partition_fetch_bytes": 512, "fetch_max_bytes": 1024},
    )
    assert sorted(m.value for m in got) == sorted(values)
    for partition in range(4):
        offsets = [m.offset for m in got if m.partition == partition]
        assert offsets == list(range(100)), f"partition {partition}: {offsets[:10]}..."

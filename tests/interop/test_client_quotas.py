"""Client quotas (issue 19, item 4): AlterClientQuotas / DescribeClientQuotas and the throttling.

confluent-kafka's AdminClient (2.16) has no client-quota calls, nor has
kafka-python's, so quotas are set and read with raw requests; producers and
consumers are confluent-kafka's, whose ``throttle_cb`` shows the
``throttle_time_ms`` of the broker's answers. The issue's test: a producer
over its producer_byte_rate is held within 10 % of it over 10 s while another
producer (another client id, no quota) keeps its throughput.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID as ZERO
from protocol.schema import struct_classes
from tests.interop._support import RawConnection, create_topic, unique_topic

ALTER = APIS_BY_NAME["AlterClientQuotas"]
DESCRIBE = APIS_BY_NAME["DescribeClientQuotas"]
METADATA = APIS_BY_NAME["Metadata"]
API_VERSIONS = APIS_BY_NAME["ApiVersions"]
_A = struct_classes(ALTER.request)
_D = struct_classes(DESCRIBE.request)
_M = struct_classes(METADATA.request)
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def alter_request(entries, validate_only=False):
    """``entries``: [(entity pairs, {key: value or None to remove})]."""
    return _A.AlterClientQuotasRequest(
        entries=[
            _A.EntryData(
                entity=[_A.EntityData(entity_type=kind, entity_name=name) for kind, name in pairs],
                ops=[_A.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()],
            )
            for pairs, ops in entries
        ],
        validate_only=validate_only,
    )


def describe_request(components, strict=False):
    return _D.DescribeClientQuotasRequest(
        components=[_D.ComponentData(entity_type=kind, match_type=match_type, match=match) for kind, match_type, match in components],
        strict=strict,
    )


def alter(bootstrap, entries, validate_only=False, version=1):
    with RawConnection(bootstrap) as connection:
        return connection.request(ALTER, version, alter_request(entries, validate_only))


def describe(bootstrap, components, strict=False, version=1):
    with RawConnection(bootstrap) as connection:
        return connection.request(DESCRIBE, version, describe_request(components, strict))


def described(response):
    """{entity pairs: {key: value}} of a DescribeClientQuotas answer."""
    assert response.error_code == ErrorCode.NONE, response
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


def set_quota(bootstrap, pairs, **values):
    response = alter(bootstrap, [(pairs, values)])
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE], response


def wait_for_quota(bootstrap, pairs, key, value, timeout_s=10.0):
    """Until Describe (the broker's image) shows it: the broker enforces what its image holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = described(describe(bootstrap, [(kind, EXACT if name is not None else DEFAULT, name) for kind, name in pairs], strict=True))
        if got.get(tuple(sorted(pairs)), {}).get(key) == value:
            return
        time.sleep(0.05)
    raise AssertionError(f"quota {pairs} {key}={value} not seen")


# ----------------------------------------------------------------------------- the APIs


def test_quota_apis_are_advertised(shared_broker):
    with RawConnection(shared_broker) as connection:
        response = connection.request(API_VERSIONS, 3, struct_classes(API_VERSIONS.request).ApiVersionsRequest(
            client_software_name="t", client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[48] == (0, 1) and ranges[49] == (0, 1)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_and_describe(shared_broker, version):
    bootstrap = shared_broker.bootstrap
    user = f"u{uuid.uuid4().hex[:8]}"
    entity = [("user", user), ("client-id", None)]

    # validate_only answers as a real change would and changes nothing.
    response = alter(bootstrap, [(entity, {"producer_byte_rate": 1024})], validate_only=True, version=version)
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE]
    assert described(describe(bootstrap, [("user", EXACT, user)], version=version)) == {}

    response = alter(bootstrap, [(entity, {"producer_byte_rate": 1024, "request_percentage": 12.5})], version=version)
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE]
    assert [(e.entity_type, e.entity_name) for e in response.entries[0].entity] == entity
    key = (("client-id", None), ("user", user))
    want = {key: {"producer_byte_rate": 1024.0, "request_percentage": 12.5}}
    wait_for_quota(bootstrap, entity, "request_percentage", 12.5)
    assert described(describe(bootstrap, [("user", EXACT, user)], version=version)) == want
    assert described(describe(bootstrap, [("user", EXACT, user), ("client-id", DEFAULT, None)], version=version)) == want
    # strict: the entity must have no other type than the filter names.
    assert described(describe(bootstrap, [("user", EXACT, user)], strict=True, version=version)) == {}
    assert key in described(describe(bootstrap, [("client-id", DEFAULT, None)], version=version))
    assert key in described(describe(bootstrap, [("user", SPECIFIED, None)], version=version))

    # Kafka's refusals, entry by entry.
    response = alter(bootstrap, [
        (entity, {"no_such_key": 1}),
        ([("user", user + "x")], {"producer_byte_rate": -5}),
        ([("user", user + "y")], {"producer_byte_rate": 1.5}),
        ([("client-id", "")], {"consumer_byte_rate": 1}),
    ], version=version)
    assert [e.error_code for e in response.entries] == [ErrorCode.INVALID_REQUEST] * 4
    assert "no_such_key" in response.entries[0].error_message

    # A bad filter fails the whole request with null entries.
    response = describe(bootstrap, [("user", EXACT, None)], version=version)
    assert response.error_code == ErrorCode.INVALID_REQUEST and response.entries is None
    assert describe(bootstrap, [("group", EXACT, "g")], version=version).error_code == ErrorCode.UNSUPPORTED_VERSION

    # Removal: a key whose op has ``remove``; the entity goes with its last key.
    response = alter(bootstrap, [(entity, {"producer_byte_rate": None})], version=version)
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE]
    wait_for_quota(bootstrap, entity, "producer_byte_rate", None)
    assert described(describe(bootstrap, [("user", EXACT, user)])) == {key: {"request_percentage": 12.5}}
    alter(bootstrap, [(entity, {"request_percentage": None})])
    deadline = time.monotonic() + 10
    while described(describe(bootstrap, [("user", EXACT, user)])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert described(describe(bootstrap, [("user", EXACT, user)])) == {}


# ----------------------------------------------------------------------------- producers


def _produce_for(bootstrap, topic, client_id, seconds, results, extra=None):
    """Send 1 KB messages as fast as the client lets us for ``seconds``: (ack times and
    sizes, throttle times seen)."""
    acked = []
    throttles = []
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "linger.ms": 5,
        "batch.size": 65536,
        "queue.buffering.max.kbytes": 4096,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
        **(extra or {}),
    })
    payload = b"q" * 1000

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg)))

    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    # What is still queued is not part of the measurement.
    producer.purge(in_queue=True)
    producer.flush(30)
    results[client_id] = (acked, throttles)


def _rate_over(acked, begin_s, length_s):
    return sum(size for at, size in acked if begin_s <= at < begin_s + length_s) / length_s


def test_producer_over_its_byte_rate_is_throttled_and_another_keeps_its_throughput(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("quota-produce")
    create_topic(bootstrap, topic)
    slow, fast = f"slow-{uuid.uuid4().hex[:6]}", f"fast-{uuid.uuid4().hex[:6]}"
    quota = 500_000.0
    set_quota(bootstrap, [("client-id", slow)], producer_byte_rate=quota)
    wait_for_quota(bootstrap, [("client-id", slow)], "producer_byte_rate", quota)

    # The unquoted producer alone first: its throughput without the other.
    alone: dict = {}
    _produce_for(bootstrap, topic, fast, 4, alone)
    acked, _ = alone[fast]
    baseline = _rate_over(acked, acked[0][0] + 1, 2.5)

    results: dict = {}
    threads = [
        threading.Thread(target=_produce_for, args=(bootstrap, topic, slow, 12, results)),
        threading.Thread(target=_produce_for, args=(bootstrap, topic, fast, 12, results)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    slow_acked, slow_throttles = results[slow]
    fast_acked, fast_throttles = results[fast]
    # From its first acknowledgement on: the first 10 s, and 10 s from 1 s later.
    first = slow_acked[0][0]
    measured = [_rate_over(slow_acked, first + offset, 10) for offset in (0.0, 1.0)]
    print(f"producer quota {quota:.0f} B/s: measured {[round(m) for m in measured]} B/s over 10 s, "
          f"{len(slow_throttles)} throttles; unquoted producer {_rate_over(fast_acked, first + 1, 10):.0f} B/s "
          f"(alone {baseline:.0f} B/s)")
    for rate in measured:
        assert abs(rate - quota) <= 0.1 * quota, measured
    assert slow_throttles and max(slow_throttles) > 0  # the client saw throttle_time_ms
    assert not fast_throttles
    fast_rate = _rate_over(fast_acked, first + 1, 10)
    assert fast_rate > 10 * quota
    # Two cores are shared with the broker and the other producer's client: allow the noise.
    assert fast_rate >= 0.5 * baseline, (fast_rate, baseline)


# ----------------------------------------------------------------------------- consumers


def test_consumer_over_its_byte_rate_is_throttled(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("quota-fetch")
    create_topic(bootstrap, topic)
    # Batches of about 16 KB: a fetch brings whole batches, so they set its granularity.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    for _ in range(6000):
        producer.produce(topic, b"c" * 1000)
        producer.poll(0)
    assert producer.flush(30) == 0

    reader = f"reader-{uuid.uuid4().hex[:6]}"
    quota = 300_000.0
    set_quota(bootstrap, [("client-id", reader)], consumer_byte_rate=quota)
    wait_for_quota(bootstrap, [("client-id", reader)], "consumer_byte_rate", quota)

    def consume(client_id, seconds):
        throttles = []
        got = []
        consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        })
        consumer.subscribe([topic])
        started = time.monotonic()
        try:
            while time.monotonic() - started < seconds and len(got) < 6000:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    got.append((time.monotonic(), len(msg.value())))
        finally:
            consumer.close()
        return got, throttles

    free, free_throttles = consume(f"free-{uuid.uuid4().hex[:6]}", 30)
    assert len(free) == 6000 and not free_throttles
    got, throttles = consume(reader, 10)
    # The responses, as bursts of messages: the rate is what came before the last one over
    # the time from the first to the last (a window's edges would cut responses).
    bursts = [[got[0]]]
    for previous, current in zip(got, got[1:]):
        if current[0] - previous[0] > 0.2:
            bursts.append([])
        bursts[-1].append(current)
    assert len(bursts) >= 5, [len(b) for b in bursts]
    span_s = bursts[-1][0][0] - bursts[0][0][0]
    rate = sum(size for burst in bursts[:-1] for _, size in burst) / span_s
    print(f"consumer quota {quota:.0f} B/s: measured {rate:.0f} B/s over {span_s:.1f} s "
          f"({len(bursts)} responses), {len(throttles)} throttles")
    assert abs(rate - quota) <= 0.1 * quota, rate
    assert throttles and max(throttles) > 0


# ----------------------------------------------------------------------------- request_percentage


def test_request_percentage_throttles_and_mutes_the_connection(shared_broker):
    bootstrap = shared_broker.bootstrap
    client = f"busy-{uuid.uuid4().hex[:6]}"
    set_quota(bootstrap, [("client-id", client)], request_percentage=0.5)
    wait_for_quota(bootstrap, [("client-id", client)], "request_percentage", 0.5)
    request = _M.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with RawConnection(bootstrap, client_id=client) as connection:
        throttle_ms = 0
        for _ in range(5000):
            throttle_ms = connection.request(METADATA, 12, request).throttle_time_ms
            if throttle_ms > 0:
                break
        assert throttle_ms > 0, "no throttle after 5000 Metadata requests at 0.5 % of a thread"
        # KIP-219: answered at once, then muted: the next request waits out the throttle.
        started = time.monotonic()
        connection.request(METADATA, 12, request)
        waited_ms = (time.monotonic() - started) * 1000
    assert waited_ms >= 0.8 * throttle_ms, (waited_ms, throttle_ms)
    # Another client id is not throttled.
    with RawConnection(bootstrap, client_id="other-" + client) as connection:
        assert connection.request(METADATA, 12, request).throttle_time_ms == 0


def test_controller_mutation_rate_refuses_topics_over_it(shared_broker):
    """Strict from CreateTopics v6 / CreatePartitions v3 / DeleteTopics v5: the topics past the
    quota answer THROTTLING_QUOTA_EXCEEDED and are not made; older versions are served and throttled."""
    bootstrap = shared_broker.bootstrap
    client = f"mutator-{uuid.uuid4().hex[:6]}"
    # One partition a second, with Kafka's burst of the 11 samples of controller.quota.window.*.
    set_quota(bootstrap, [("client-id", client)], controller_mutation_rate=1.0)
    wait_for_quota(bootstrap, [("client-id", client)], "controller_mutation_rate", 1.0)
    create = APIS_BY_NAME["CreateTopics"]
    _C = struct_classes(create.request)
    names = [f"mut-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]

    def create_topics(version: int, topic_names, partitions: int):
        body = _C.CreateTopicsRequest(
            topics=[_C.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]) for n in topic_names],
            timeout_ms=10000, validate_only=False,
        )
        with RawConnection(bootstrap, client_id=client) as connection:
            return connection.request(create, version, body)

    # 12 partitions pass (the burst is 11: a request may take the bucket below zero once), then
    # the next topics are refused.
    answer = create_topics(7, names, 12)
    errors = [t.error_code for t in answer.topics]
    assert errors == [ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED, ErrorCode.THROTTLING_QUOTA_EXCEEDED], answer
    assert answer.throttle_time_ms > 0
    with RawConnection(bootstrap) as connection:
        metadata = connection.request(METADATA, 12, _M.MetadataRequest(topics=None, allow_auto_topic_creation=False))
    existing = {t.name for t in metadata.topics}
    assert names[0] in existing and not set(names[1:]) & existing
    # CreateTopics v5 (permissive): created, and the answer throttled.
    late = [f"mut-{uuid.uuid4().hex[:6]}-late"]
    answer = create_topics(5, late, 1)
    assert [t.error_code for t in answer.topics] == [ErrorCode.NONE] and answer.throttle_time_ms > 0, answer
    # Another client id has no quota.
    with RawConnection(bootstrap, client_id="free-" + client) as connection:
        free = connection.request(create, 7, _C.CreateTopicsRequest(
            topics=[_C.CreatableTopic(name=names[1], num_partitions=12, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False,
        ))
    assert [t.error_code for t in free.topics] == [ErrorCode.NONE] and free.throttle_time_ms == 0, free
    # DeleteTopics v6 is strict too: the bucket is still below zero.
    delete = APIS_BY_NAME["DeleteTopics"]
    _X = struct_classes(delete.request)
    with RawConnection(bootstrap, client_id=client) as connection:
        gone = connection.request(delete, 6, _X.DeleteTopicsRequest(topics=[_X.DeleteTopicState(name=names[1], topic_id=ZERO)], timeout_ms=10000))
    assert [r.error_code for r in gone.responses] == [ErrorCode.THROTTLING_QUOTA_EXCEEDED], gone


# ----------------------------------------------------------------------------- users and authorization


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from tests.interop.test_authorization import InProcessBroker

    broker = InProcessBroker(tmp_path_factory.mktemp("quota-authz"))
    yield broker
    broker.close()


def test_quota_apis_need_cluster_config_permissions(secured):
    from confluent_kafka.admin import AclOperation, ResourceType

    from tests.interop.test_authorization import acl, add_acls
    from tests.interop.test_authorization_apis import Raw

    entity = [("user", "someone")]
    with Raw(secured, "alice") as alice:
        response = alice.connection.request(DESCRIBE, 1, describe_request([]))
        assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and response.entries is None
        response = alice.connection.request(ALTER, 1, alter_request([(entity, {"producer_byte_rate": 100})]))
        assert [e.error_code for e in response.entries] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    with Raw(secured, "admin") as admin:
        assert described(admin.connection.request(DESCRIBE, 1, describe_request([("user", EXACT, "someone")]))) == {}
    add_acls(
        secured,
        acl(ResourceType.BROKER, "kafka-cluster", "User:alice", AclOperation.DESCRIBE_CONFIGS),
        acl(ResourceType.BROKER, "kafka-cluster", "User:alice", AclOperation.ALTER_CONFIGS),
    )
    deadline = time.monotonic() + 10
    while True:
        with Raw(secured, "alice") as alice:
            response = alice.connection.request(ALTER, 1, alter_request([(entity, {"producer_byte_rate": 100})]))
            if response.entries[0].error_code == ErrorCode.NONE or time.monotonic() > deadline:
                break
        time.sleep(0.1)
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE]
    with Raw(secured, "alice") as alice:
        got = described(alice.connection.request(DESCRIBE, 1, describe_request([("user", EXACT, "someone")])))
    assert got == {(("user", "someone"),): {"producer_byte_rate": 100.0}}


def test_a_user_quota_follows_the_sasl_principal(secured):
    from confluent_kafka.admin import AclOperation, ResourceType

    from tests.interop.test_authorization import acl, add_acls, new_topic, settings
    from tests.interop.test_authorization_apis import Raw

    topic = new_topic(secured, "quota-user")
    add_acls(
        secured,
        acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE),
        acl(ResourceType.TOPIC, topic, "User:carol", AclOperation.WRITE),
    )
    quota = 200_000.0
    with Raw(secured, "admin") as admin:
        response = admin.connection.request(ALTER, 1, alter_request([([("user", "bob")], {"producer_byte_rate": quota})]))
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE]
    deadline = time.monotonic() + 10
    while secured.broker.quotas.quota("producer_byte_rate", "User:bob", "any") != quota:
        assert time.monotonic() < deadline
        time.sleep(0.05)

    results: dict = {}
    for user in ("bob", "carol"):
        extra = {k: v for k, v in settings(secured, user).items() if k != "bootstrap.servers"}
        # The same client id for both: the quota is the user's.
        _produce_for(secured.bootstrap, topic, "same-client", 5, results, extra)
        results[user] = results.pop("same-client")
    bob_acked, bob_throttles = results["bob"]
    carol_acked, carol_throttles = results["carol"]
    bob_rate = _rate_over(bob_acked, bob_acked[0][0], 4)
    assert bob_throttles and bob_rate <= 1.15 * quota, bob_rate
    assert not carol_throttles
    assert _rate_over(carol_acked, carol_acked[0][0], 4) > 5 * quota

"""broker/net/quota_windows.py and broker/net/quotas.py: sampled rates, throttle times, Kafka's quota precedence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.net.quota_windows import (
    SampledRate,
    max_value_in_window,
    resolve_quota,
    throttle_time_ms,
    user_of_principal,
)
from broker.net.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
)
from controller.metadata.image import quota_entity

# ----------------------------------------------------------------------------- rates


def test_rate_counts_values_since_the_first_one_held():
    rate = SampledRate(11, 1000)
    rate.record(1000, 5_000)
    rate.record(1000, 5_500)
    assert rate.window_ms(6_000) == 1_001
    assert rate.rate(6_000) == pytest.approx(2000 / 1.001)


def test_samples_expire_after_the_whole_window():
    rate = SampledRate(3, 1000)
    rate.record(300, 0)
    rate.record(600, 1_000)
    assert rate.total(2_999) == 900
    assert rate.total(3_000) == 600  # the sample of [0, 1000) is three samples old
    assert rate.window_ms(3_000) == 2_001
    assert rate.total(4_000) == 0
    assert rate.rate(4_000) == 0.0


def test_samples_are_aligned_and_reused_in_a_ring():
    rate = SampledRate(2, 1000)
    for t in (100, 900, 1_100, 2_050):
        rate.record(1, t)
    # [0, 1000) expired at 2000; [1000, 2000) and [2000, 3000) remain.
    assert rate.total(2_100) == 2
    assert rate.window_ms(2_100) == 1_001  # since the first value of [1000, 2000)


def test_throttle_formula():
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0
    assert throttle_time_ms(99.0, 100.0, 10_000) == 0
    # (O - T) / T * W
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5_000
    assert throttle_time_ms(110.0, 100.0, 1_000) == 100
    assert throttle_time_ms(100.1, 100.0, 1_000) == 1  # rounded up: waiting that long is enough


def test_first_request_waits_its_own_cost():
    rate = SampledRate(11, 1000)
    rate.record(16_000, 10_000)
    # 16 KB at 100 KB/s costs 160 ms (measured over its own millisecond).
    assert rate.throttle_time_ms(100_000, 10_000) == 159


def test_bad_parameters():
    with pytest.raises(ValueError):
        SampledRate(0, 1000)
    with pytest.raises(ValueError):
        SampledRate(11, 0)


def test_max_value_in_window():
    assert max_value_in_window(1000.0, 1000) == 1000.0
    assert max_value_in_window(1000.0, 2500) == 2500.0


def _greedy_client(bound: float, chunk: int, num: int, sample_ms: int, start_ms: int, duration_ms: int):
    """A client that sends ``chunk`` as soon as it is let through: [(time, bytes)]."""
    rate = SampledRate(num, sample_ms)
    now = start_ms
    sent = []
    for _ in range(200_000):
        if now >= start_ms + duration_ms:
            break
        rate.record(chunk, now)
        sent.append((now - start_ms, chunk))
        now += max(rate.throttle_time_ms(bound, now), 1)
    return sent


@settings(max_examples=60, deadline=None)
@given(
    bound=st.integers(10_000, 2_000_000),
    chunk_share=st.floats(0.001, 0.3),
    num=st.integers(2, 15),
    sample_ms=st.sampled_from([500, 1000, 2000]),
    start_ms=st.integers(0, 10_000),
)
def test_a_greedy_client_is_held_to_its_quota_in_every_window(bound, chunk_share, num, sample_ms, start_ms):
    """Any 10 s of a client that sends whenever it is let through carry the quota within
    10 %, from its first request on (the issue's test, on the arithmetic alone)."""
    chunk = max(1, int(bound * chunk_share))
    duration_ms = 40_000
    sent = _greedy_client(bound, chunk, num, sample_ms, start_ms, duration_ms)
    for begin in range(0, duration_ms - 10_000 + 1, 500):
        in_window = sum(c for t, c in sent if begin <= t < begin + 10_000)
        assert abs(in_window / 10 - bound) <= 0.1 * bound, (begin, in_window / 10 / bound)


@settings(max_examples=100, deadline=None)
@given(
    records=st.lists(st.tuples(st.integers(0, 3_000), st.integers(1, 50_000)), min_size=1, max_size=40),
    bound=st.integers(1_000, 100_000),
)
def test_after_the_throttle_the_rate_is_within_the_quota(records, bound):
    """Waiting the throttle time with nothing sent brings the rate back within the quota."""
    rate = SampledRate(11, 1000)
    now = 0
    for gap, value in records:
        now += gap
        rate.record(value, now)
    over = rate.rate(now) > bound
    wait = rate.throttle_time_ms(bound, now)
    assert (wait > 0) == over
    assert rate.rate(now + wait) <= bound


# ----------------------------------------------------------------------------- precedence


def _quotas(*entries):
    return {quota_entity(pairs): values for pairs, values in entries}


U, C = "user", "client-id"
LEVELS = [
    ([(U, "alice"), (C, "app")], ("alice", "app")),
    ([(U, "alice"), (C, None)], ("alice", "app")),
    ([(U, "alice")], ("alice", "")),
    ([(U, None), (C, "app")], ("alice", "app")),
    ([(U, None), (C, None)], ("alice", "app")),
    ([(U, None)], ("alice", "")),
    ([(C, "app")], ("", "app")),
    ([(C, None)], ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_each_level_beats_the_ones_after_it(level):
    key = "producer_byte_rate"
    quotas = _quotas(*[(pairs, {key: 1000.0 + i}) for i, (pairs, _) in enumerate(LEVELS[level:], start=level)])
    bound, owner = resolve_quota(quotas, key, "alice", "app")
    assert bound == 1000.0 + level
    assert owner == LEVELS[level][1]


def test_a_level_without_the_key_is_skipped():
    quotas = _quotas(
        ([(U, "alice"), (C, "app")], {"consumer_byte_rate": 5.0}),
        ([(C, None)], {"producer_byte_rate": 7.0}),
    )
    assert resolve_quota(quotas, "producer_byte_rate", "alice", "app") == (7.0, ("", "app"))
    assert resolve_quota(quotas, "consumer_byte_rate", "alice", "app") == (5.0, ("alice", "app"))
    assert resolve_quota(quotas, "consumer_byte_rate", "bob", "app") == (None, ("", "app"))


def test_other_names_do_not_match():
    quotas = _quotas(([(U, "bob")], {"producer_byte_rate": 1.0}), ([(C, "other")], {"producer_byte_rate": 2.0}))
    assert resolve_quota(quotas, "producer_byte_rate", "alice", "app") == (None, ("", "app"))


@settings(max_examples=200, deadline=None)
@given(
    present=st.lists(st.booleans(), min_size=8, max_size=8),
    user=st.sampled_from(["alice", "bob"]),
    client=st.sampled_from(["app", "tool", ""]),
)
def test_precedence_against_a_naive_reading(present, user, client):
    """The first level (in Kafka's order) whose entity matches the client and has the key."""
    entities = [pairs for pairs, _ in LEVELS]
    quotas = _quotas(*[(pairs, {"request_percentage": float(i + 1)}) for i, pairs in enumerate(entities) if present[i]])

    def matches(pairs):
        wanted = {U: user, C: client}
        return all(name is None or name == wanted[kind] for kind, name in pairs)

    def named(pairs):
        # The levels as written name alice/app: rename to the client asked about.
        return [(kind, None if name is None else (user if kind == U else client)) for kind, name in pairs]

    quotas = _quotas(*[(named(pairs), {"request_percentage": float(i + 1)}) for i, pairs in enumerate(entities) if present[i]])
    expected = next((float(i + 1) for i, pairs in enumerate(entities) if present[i] and matches(named(pairs))), None)
    bound, _ = resolve_quota(quotas, "request_percentage", user, client)
    assert bound == expected


def test_user_of_principal():
    assert user_of_principal("User:alice") == "alice"
    assert user_of_principal("User:CN=x,O=y") == "CN=x,O=y"
    assert user_of_principal("ANONYMOUS") == "ANONYMOUS"


# ----------------------------------------------------------------------------- the manager


class _Clock:
    def __init__(self):
        self.now_ms = 1_000_000

    def __call__(self):
        return self.now_ms


def _manager(quotas_by_entity):
    holder = {"quotas": _quotas(*quotas_by_entity)}
    clock = _Clock()
    return ClientQuotaManager(lambda: holder["quotas"], 11, 1, clock_ms=clock), holder, clock


def test_nothing_is_measured_without_a_quota():
    manager, _, _ = _manager([])
    assert not manager.any_enabled
    assert manager.record_produce("User:alice", "app", 10**9) == 0
    assert len(manager) == 0
    assert manager.fetch_max_bytes("User:alice", "app") is None


def test_produce_over_quota_is_throttled_and_others_are_not():
    manager, _, clock = _manager([([(C, "slow")], {PRODUCER_BYTE_RATE: 1000.0})])
    assert manager.record_produce("User:ANONYMOUS", "slow", 500) > 0  # 500 B in 1 ms
    clock.now_ms += 10_000
    assert manager.record_produce("User:ANONYMOUS", "slow", 500) == 0  # 1000 B over 10 s
    assert manager.record_produce("User:ANONYMOUS", "fast", 10**9) == 0
    assert manager.record(CONSUMER_BYTE_RATE, "User:ANONYMOUS", "slow", 10**9) == 0
    assert manager.throttles == 1


def test_a_new_image_changes_the_quota_from_the_next_request():
    manager, holder, clock = _manager([])
    assert manager.record_produce("User:a", "app", 10**6) == 0
    holder["quotas"] = _quotas(([(U, None)], {PRODUCER_BYTE_RATE: 1000.0}))
    assert manager.record_produce("User:a", "app", 10**6) > 0
    assert manager.quota(PRODUCER_BYTE_RATE, "User:b", None) == 1000.0


def test_default_user_quota_gives_each_user_its_own_rate():
    manager, _, clock = _manager([([(U, None)], {PRODUCER_BYTE_RATE: 1000.0})])
    assert manager.record_produce("User:alice", "x", 900) > 0
    clock.now_ms += 1_000
    assert manager.record_produce("User:alice", "y", 200) > 0  # same user, another client id: shared
    assert manager.record_produce("User:bob", "x", 1) == 0
    assert len(manager) == 2


def test_request_percentage_is_a_share_of_one_thread():
    manager, _, clock = _manager([([(C, None)], {REQUEST_PERCENTAGE: 50.0})])
    manager.record_request_time("User:a", "app", 0.0)
    clock.now_ms += 1_000
    assert manager.record_request_time("User:a", "app", 0.4) == 0  # 40 % of the second
    clock.now_ms += 1
    assert manager.record_request_time("User:a", "app", 0.4) > 0  # 80 %


def test_fetch_bound_is_one_sample_of_the_quota():
    manager, _, _ = _manager([([(U, "alice")], {CONSUMER_BYTE_RATE: 4096.0})])
    assert manager.fetch_max_bytes("User:alice", "app") == 4096
    assert manager.fetch_max_bytes("User:bob", "app") is None


def test_idle_rates_are_dropped():
    manager, _, clock = _manager([([(C, None)], {PRODUCER_BYTE_RATE: 10**12})])
    for i in range(5000):
        manager.record_produce("User:a", f"client-{i}", 1)
        clock.now_ms += 10
    # Sweeps every 4096 records drop the rates idle for the whole window (11 s).
    assert len(manager) < 5000


# ----------------------------------------------------------------------------- controller mutations


def test_token_bucket_lets_a_burst_through_and_holds_the_rate():
    from broker.net.quota_windows import TokenBucket

    bucket = TokenBucket(11, 1000)
    # 2 mutations/s: a burst of 22 at once is within it, the 23rd owes 0.5 s.
    assert bucket.record(22, 2.0, 0) == 0
    assert bucket.record(1, 2.0, 0) == 500
    assert bucket.throttle_time_ms(2.0, 250) == 250
    assert bucket.throttle_time_ms(2.0, 500) == 0
    # Refilled at the quota, never above the burst.
    assert bucket.record(0, 2.0, 100_000) == 0 and bucket.tokens == 22.0


@settings(max_examples=100, deadline=None)
@given(
    quota=st.floats(0.5, 50.0),
    requests=st.lists(st.tuples(st.integers(0, 2000), st.integers(1, 40)), min_size=1, max_size=60),
)
def test_a_strict_client_never_gets_more_than_burst_plus_rate(quota, requests):
    """Over any run, the mutations admitted by the strict rules are at most the burst, plus
    the quota times the time passed, plus the last request that took the bucket below zero."""
    from broker.net.quota_windows import TokenBucket
    from broker.net.quotas import MutationQuota

    now = [0]
    bucket = TokenBucket(11, 1000)
    admitted = 0
    largest = 0
    for gap, permits in requests:
        now[0] += gap
        quota_of_request = MutationQuota(bucket, quota, True, lambda: now[0])
        if quota_of_request.admit(permits) == 0:
            admitted += permits
            largest = max(largest, permits)
        else:
            assert quota_of_request.throttle_time_ms() > 0
    assert admitted <= quota * 11 + quota * now[0] / 1000 + largest + 1e-6


def test_controller_mutations_strict_from_kafkas_versions():
    manager, _, clock = _manager([([(U, "alice")], {"controller_mutation_rate": 1.0})])
    assert manager.controller_mutations("User:bob", "x", 19, 7) is None
    strict = manager.controller_mutations("User:alice", "x", 19, 6)  # CreateTopics v6+: strict
    assert strict.strict
    assert strict.admit(11) == 0  # the burst: 1/s over 11 samples
    assert strict.admit(5) == 0  # the bucket was not below zero yet: admitted, now owes 5 s
    assert strict.admit(1) == 5000  # refused: THROTTLING_QUOTA_EXCEEDED, 5 s
    assert strict.throttle_time_ms() == 5000
    permissive = manager.controller_mutations("User:alice", "y", 20, 4)  # DeleteTopics v4: permissive
    assert not permissive.strict
    assert permissive.admit(3) == 0  # always admitted ...
    assert permissive.throttle_time_ms() == 8000  # ... and throttled
    clock.now_ms += 8000
    assert manager.controller_mutations("User:alice", "x", 37, 3).admit(1) == 0

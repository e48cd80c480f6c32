"""Client-quota arithmetic: sampled rates, throttle times and which quota applies.

Pure (no asyncio, no clock of its own: every call is given ``now_ms``), so the
broker's quota manager (broker/net/quotas.py) and the tests share it.

Rates follow Kafka's sampled ``Rate`` (KIP-13) in how much they remember: a
quota's rate is measured over ``quota.window.num`` samples of
``quota.window.size.seconds`` each, and samples that started a whole window
ago count nothing. It is the samples' sum over the time since the first value
they still hold. Two differences from Kafka, on purpose, both for a steady
rate: samples start at multiples of their length (Kafka starts one at the
first value after the previous one ended), and there is no allowance for a
first burst (Kafka measures over at least ``num - 1`` whole samples, so a new
client may send ten samples' worth at once). With Kafka's rules, a producer
that sends as fast as it is let through sends that burst, is then held back
until the burst's sample expires, and does it again: 10 s windows of its
traffic swing between 10 % and 110 % of the quota. Here each value is paid for
when it is sent (a first request of B bytes under a quota of Q bytes/s waits
about B / Q), and any 10 s of such a producer's traffic is within a few per
cent of the quota.

A client over its quota is throttled for the time that brings the measured
rate back to the quota if nothing more came: with rate O, quota T and window
W, O * W / (W + X) = T, so X = (O - T) / T * W (KIP-13, KIP-219), unless a
sample expires meanwhile: then the rate after each expiry must be within the
quota too (SampledRate.throttle_time_ms), or a client whose oldest sample held
little would be let through early.

controller_mutation_rate is measured by a :class:`TokenBucket` instead, as
Kafka does (KIP-599): mutations come in bursts (a topic with 100 partitions
is 100 of them at once), and a bucket lets a burst through while holding the
long-run rate.

Which quota applies (Kafka's eight levels, the most specific first) for a
user U and client id C, each level naming the entity that must carry the
quota key:

1. (user=U, client-id=C)          5. (user=<default>, client-id=<default>)
2. (user=U, client-id=<default>)  6. (user=<default>)
3. (user=U)                       7. (client-id=C)
4. (user=<default>, client-id=C)  8. (client-id=<default>)

The level also decides who shares the rate (Kafka's metric tags): a quota
on a user alone (levels 3 and 6) is shared by all the user's client ids, one
on a client id alone (7 and 8) by every user of that client id, the others
are per (user, client id). Defaults give each user or client id its own
rate, not one shared by all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

USER = "user"
CLIENT_ID = "client-id"

# The entity keys of the eight levels, as controller.metadata.image.QuotaEntity
# tuples (pairs sorted by type: "client-id" before "user"); a None name is the default.
# Each level: (entity(U, C), whether the rate is per user, whether per client id).


def _levels(user: str, client_id: str):
    return (
        (((CLIENT_ID, client_id), (USER, user)), True, True),
        (((CLIENT_ID, None), (USER, user)), True, True),
        (((USER, user),), True, False),
        (((CLIENT_ID, client_id), (USER, None)), True, True),
        (((CLIENT_ID, None), (USER, None)), True, True),
        (((USER, None),), True, False),
        (((CLIENT_ID, client_id),), False, True),
        (((CLIENT_ID, None),), False, True),
    )


def user_of_principal(principal: str) -> str:
    """The user name quotas know a principal by: ``User:alice`` -> ``alice`` (Kafka takes the
    principal's name whatever its type)."""
    _, sep, name = principal.partition(":")
    return name if sep else principal


def resolve_quota(
    quotas: Mapping[tuple, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[float | None, tuple[str, str]]:
    """(the quota ``key`` of the first level that has one, or None; the rate's owner as
    (user or "", client id or "")). Without a quota the owner is ("", client id), as in Kafka."""
    for entity, per_user, per_client in _levels(user, client_id):
        values = quotas.get(entity)
        if values is not None:
            bound = values.get(key)
            if bound is not None:
                return bound, (user if per_user else "", client_id if per_client else "")
    return None, ("", client_id)


class SampledRate:
    """A rate over ``num_samples`` samples of ``sample_ms`` each; values per second. Memory:
    ``num_samples`` triples of numbers."""

    __slots__ = ("num_samples", "sample_ms", "_starts", "_firsts", "_totals", "_current", "last_record_ms")

    def __init__(self, num_samples: int, sample_ms: int):
        if num_samples < 1 or sample_ms < 1:
            raise ValueError("a sampled rate needs at least one sample of at least 1 ms")
        self.num_samples = num_samples
        self.sample_ms = sample_ms
        # Sample i covers [_starts[i], _starts[i] + sample_ms) (None: unused or expired), got
        # its first value at _firsts[i] and holds _totals[i].
        self._starts: list[int | None] = [None] * num_samples
        self._firsts = [0] * num_samples
        self._totals = [0.0] * num_samples
        self._current = 0
        self.last_record_ms: int | None = None

    def _purge(self, now_ms: int) -> None:
        """Samples that started a whole window ago or more count nothing."""
        expire_ms = self.num_samples * self.sample_ms
        starts = self._starts
        for i in range(self.num_samples):
            start = starts[i]
            if start is not None and now_ms - start >= expire_ms:
                starts[i] = None
                self._totals[i] = 0.0

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        aligned_ms = now_ms - now_ms % self.sample_ms
        start = self._starts[self._current]
        if start is None or aligned_ms > start:
            if start is not None:
                self._current = (self._current + 1) % self.num_samples
            self._starts[self._current] = aligned_ms
            self._firsts[self._current] = now_ms
            self._totals[self._current] = 0.0
        self._totals[self._current] += value
        self.last_record_ms = now_ms

    def window_ms(self, now_ms: int) -> int:
        """The time the rate is measured over: since the first value the samples still hold,
        that value's millisecond included (so never 0)."""
        self._purge(now_ms)
        firsts = [self._firsts[i] for i, start in enumerate(self._starts) if start is not None]
        return max(now_ms - min(firsts), 0) + 1 if firsts else 1

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(self._totals)

    def rate(self, now_ms: int) -> float:
        """Values per second."""
        window_ms = self.window_ms(now_ms)
        return sum(self._totals) * 1000.0 / window_ms

    def throttle_time_ms(self, bound: float, now_ms: int) -> int:
        """0 while the rate is within ``bound``, else how long to send nothing for it to be, and
        stay, within it. Without a sample expiring meanwhile that is Kafka's (O - T) / T * W
        (:func:`throttle_time_ms`); an expiring sample takes its values and its time, and when
        it held little for its time the rate goes up again, so each span between expiries
        is solved on its own: after the expiries that come before ``t``, with total V and
        first value at f, the rate is V / (t - f + 1), within the bound from f - 1 + V / T.
        A rate within the bound now answers 0 at once (as Kafka checks only the present)."""
        self._purge(now_ms)
        total = 0.0
        first_ms = None
        for i, start in enumerate(self._starts):
            if start is not None:
                total += self._totals[i]
                if first_ms is None or self._firsts[i] < first_ms:
                    first_ms = self._firsts[i]
        if first_ms is None or total * 1000.0 <= bound * (now_ms - first_ms + 1):
            return 0
        held = sorted(
            (start, self._firsts[i], self._totals[i]) for i, start in enumerate(self._starts) if start is not None
        )
        expire_ms = self.num_samples * self.sample_ms
        until_ms = float(now_ms)
        span_start_ms = float(now_ms)
        for i, (start, first, _) in enumerate(held):
            span_end_ms = start + expire_ms  # when sample i, the oldest left, expires
            total = sum(value for _, _, value in held[i:])
            if total > 0:
                within_from_ms = first - 1 + total * 1000.0 / bound
                if within_from_ms > span_start_ms:
                    until_ms = max(until_ms, min(within_from_ms, span_end_ms))
            span_start_ms = span_end_ms
        return max(0, math.ceil(until_ms - now_ms - 1e-9))


def throttle_time_ms(rate: float, bound: float, window_ms: int) -> int:
    """(rate - bound) / bound * window, rounded up (waiting that long is enough); 0 when the
    rate is within the bound."""
    if rate <= bound:
        return 0
    return math.ceil((rate - bound) / bound * window_ms)


def max_value_in_window(bound: float, sample_ms: int) -> float:
    """What one request should bring at most (a Fetch under consumer_byte_rate asks for no
    more): one sample's worth of the quota, so that no single answer is throttled for longer
    than about a sample."""
    return bound * sample_ms / 1000.0


class TokenBucket:
    """controller_mutation_rate's measure (KIP-599): tokens refill at the quota per second up
    to a burst of the quota over ``num_samples`` samples, and each mutation (a partition
    created or deleted) takes one. A bucket below zero is over its quota, for -tokens / quota
    seconds. Bursty on purpose, as Kafka's: an admin creating a few topics at once is not
    slowed down, one creating thousands is."""

    __slots__ = ("burst_s", "tokens", "last_ms", "last_record_ms")

    def __init__(self, num_samples: int, sample_ms: int):
        if num_samples < 1 or sample_ms < 1:
            raise ValueError("a token bucket needs at least one sample of at least 1 ms")
        self.burst_s = num_samples * sample_ms / 1000.0
        self.tokens: float | None = None  # full at the first use, whatever the quota then
        self.last_ms = 0
        self.last_record_ms: int | None = None

    def _refill(self, quota: float, now_ms: int) -> float:
        burst = quota * self.burst_s
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * max(now_ms - self.last_ms, 0) / 1000.0)
        self.last_ms = now_ms
        return self.tokens

    def throttle_time_ms(self, quota: float, now_ms: int) -> int:
        """0 while the bucket holds a token or more (or none is owed), else how long until it is
        back at zero."""
        tokens = self._refill(quota, now_ms)
        return 0 if tokens >= 0 else math.ceil(-tokens / quota * 1000.0 - 1e-9)

    def record(self, permits: float, quota: float, now_ms: int) -> int:
        """Take ``permits`` tokens (the bucket may go below zero) and return the throttle time."""
        self._refill(quota, now_ms)
        self.tokens -= permits
        self.last_record_ms = now_ms
        return self.throttle_time_ms(quota, now_ms)

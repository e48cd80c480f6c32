"""The broker's client quotas: who is over its byte or request rate, and for how long to throttle.

Quotas live in the metadata image (ClientQuotaRecord, set with
AlterClientQuotas); this manager reads ``image.client_quotas`` on each call
and notices a new image by identity, so a changed quota counts from the next
request. As in Kafka, nothing is measured for a quota key no entity has:
without quotas a request costs one dictionary lookup.

Kafka's four client quotas are measured here; three are enforced by the
handlers already:

- ``producer_byte_rate``: the bytes of each Produce request (its whole frame);
- ``consumer_byte_rate``: the record bytes of each Fetch response to a consumer
  (followers are never throttled by client quotas);
- ``request_percentage``: the time the event loop spent on the client's
  requests (decoding, handling, encoding), as a percentage of one thread over
  the window, for every API but the ones Kafka exempts (EXEMPT_API_KEYS, and
  a follower's Fetch); its throttle is at most one sample long, as in Kafka.

The fourth, ``controller_mutation_rate`` (partitions created or deleted per
second by CreateTopics, CreatePartitions and DeleteTopics, KIP-599), has its
token buckets and Kafka's strict and permissive rules here
(:meth:`ClientQuotaManager.controller_mutations`, :class:`MutationQuota`),
applied by the pre-authorization hooks of CreateTopics, CreatePartitions and
DeleteTopics (:func:`mutation_quota`) on the broker the client sent the
request to. Kafka counts mutations at the active controller, so its quota is
cluster-wide; here each broker counts what its own clients ask, so a client
spreading its admin requests over N brokers gets up to N times the rate.

Each is measured per owner as broker/net/quota_windows.py resolves it (per user,
per client id or per both, Kafka's eight levels). A request that brings its
owner's rate over the quota is still served, and answered at once with
``throttle_time_ms`` (KIP-219); the connection then reads nothing for that
time (broker/net/connection.py), as Kafka mutes the channel, and the client backs
off too. The throttle time is the one that brings the rate back to the quota,
so a client that keeps sending is held to it over the window. A Fetch asks
for at most what the quota allows in one sample (Kafka bounds it by
``quota.window.num - 1`` samples, which its allowance for a first burst
permits; see broker/net/quota_windows.py), so one response cannot overshoot for
long.

Rates of owners that sent nothing for the whole window are dropped (they
measure zero), so the manager's memory follows the active clients.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from broker.net.quota_windows import SampledRate, TokenBucket, max_value_in_window, resolve_quota, user_of_principal

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

# Requests request_percentage never throttles (Kafka's exempt list as far as
# pybroker serves them): the node-to-node and controller APIs, and the SASL
# and ApiVersions exchange that precede everything else.
EXEMPT_API_KEYS = frozenset({4, 5, 6, 7, 17, 18, 27, 36, 52, 53, 54, 56, 58, 59, 62, 63, 64, 67})

# The request versions from which an exhausted controller_mutation_rate refuses
# (THROTTLING_QUOTA_EXCEEDED) instead of only throttling: CreateTopics,
# CreatePartitions, DeleteTopics (Kafka's strictSinceVersion).
MUTATION_STRICT_SINCE = {19: 6, 37: 3, 20: 5}

# Check for idle rates to drop every this many records.
_SWEEP_EVERY = 4096
_BUCKET_EXPIRY_MS = 3_600_000


class ClientQuotaManager:
    """``image_quotas()`` gives the image's ``client_quotas`` mapping; ``clock_ms`` the time in
    milliseconds (monotonic)."""

    def __init__(
        self,
        image_quotas: Callable[[], object],
        num_samples: int = 11,
        sample_seconds: int = 1,
        clock_ms: Callable[[], int] | None = None,
        mutation_samples: int = 11,
        mutation_sample_seconds: int = 1,
    ):
        self._image_quotas = image_quotas
        self.num_samples = num_samples
        self.sample_ms = sample_seconds * 1000
        # controller.quota.window.num / .size.seconds: the token buckets' burst.
        self.mutation_samples = mutation_samples
        self.mutation_sample_ms = mutation_sample_seconds * 1000
        self._clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self._seen = None
        # The quota keys some entity has; the rest cost nothing.
        self._enabled: frozenset[str] = frozenset()
        # (quota key, user tag, client id tag) -> SampledRate (TokenBucket for controller mutations)
        self._rates: dict[tuple[str, str, str], SampledRate | TokenBucket] = {}
        self._records = 0
        # Figures for operators and tests: throttles given and their total time.
        self.throttles = 0
        self.throttled_ms = 0

    # ----------------------------------------------------------------- image

    def _quotas(self):
        quotas = self._image_quotas()
        if quotas is not self._seen:
            self._seen = quotas
            self._enabled = frozenset(key for values in quotas.values() for key in values)
        return quotas

    def enabled(self, key: str) -> bool:
        self._quotas()
        return key in self._enabled

    @property
    def any_enabled(self) -> bool:
        self._quotas()
        return bool(self._enabled)

    def quota(self, key: str, principal: str, client_id: str | None) -> float | None:
        """The quota ``key`` that applies to the client, None when none does."""
        bound, _ = resolve_quota(self._quotas(), key, user_of_principal(principal), client_id or "")
        return bound

    # ----------------------------------------------------------------- recording

    def record(self, key: str, principal: str, client_id: str | None, value: float, now_ms: int | None = None) -> int:
        """Record ``value`` for the client's ``key`` and return the throttle time in ms (0: within
        its quota, or no quota)."""
        quotas = self._quotas()
        if key not in self._enabled:
            return 0
        bound, (user_tag, client_tag) = resolve_quota(quotas, key, user_of_principal(principal), client_id or "")
        if bound is None:
            return 0
        now_ms = self._clock_ms() if now_ms is None else now_ms
        rate_key = (key, user_tag, client_tag)
        rate = self._rates.get(rate_key)
        if rate is None:
            rate = self._rates[rate_key] = SampledRate(self.num_samples, self.sample_ms)
        rate.record(value, now_ms)
        self._records += 1
        if self._records % _SWEEP_EVERY == 0:
            self._sweep(now_ms)
        throttle_ms = rate.throttle_time_ms(bound, now_ms)
        if throttle_ms > 0:
            self.throttles += 1
            self.throttled_ms += throttle_ms
        return throttle_ms

    def record_produce(self, principal: str, client_id: str | None, request_bytes: int) -> int:
        return self.record(PRODUCER_BYTE_RATE, principal, client_id, request_bytes)

    def record_fetch(self, principal: str, client_id: str | None, response_bytes: int) -> int:
        return self.record(CONSUMER_BYTE_RATE, principal, client_id, response_bytes)

    def record_request_time(self, principal: str, client_id: str | None, busy_s: float) -> int:
        """``busy_s`` seconds of the event loop, recorded as percentage-seconds so that the
        rate reads as a percentage of one thread. The throttle is at most one sample, as
        Kafka bounds it for this quota."""
        return min(self.record(REQUEST_PERCENTAGE, principal, client_id, busy_s * 100.0), self.sample_ms)

    def fetch_max_bytes(self, principal: str, client_id: str | None) -> int | None:
        """The most one Fetch may return to the client under its consumer_byte_rate, None
        without one."""
        if CONSUMER_BYTE_RATE not in self._enabled and not self.enabled(CONSUMER_BYTE_RATE):
            return None
        bound = self.quota(CONSUMER_BYTE_RATE, principal, client_id)
        if bound is None:
            return None
        return max(1, int(max_value_in_window(bound, self.sample_ms)))

    def controller_mutations(self, principal: str, client_id: str | None, api_key: int, api_version: int):
        """The client's controller_mutation_rate for one CreateTopics, CreatePartitions or
        DeleteTopics request (a :class:`MutationQuota`), None when it has none."""
        quotas = self._quotas()
        if CONTROLLER_MUTATION_RATE not in self._enabled:
            return None
        bound, (user_tag, client_tag) = resolve_quota(
            quotas, CONTROLLER_MUTATION_RATE, user_of_principal(principal), client_id or ""
        )
        if bound is None:
            return None
        rate_key = (CONTROLLER_MUTATION_RATE, user_tag, client_tag)
        bucket = self._rates.get(rate_key)
        if bucket is None:
            bucket = self._rates[rate_key] = TokenBucket(self.mutation_samples, self.mutation_sample_ms)
        strict = api_version >= MUTATION_STRICT_SINCE.get(api_key, 0)
        return MutationQuota(bucket, bound, strict, self._clock_ms)

    def rate(self, key: str, principal: str, client_id: str | None, now_ms: int | None = None) -> float | None:
        """The client's measured rate of ``key`` (None when it is not measured)."""
        _, (user_tag, client_tag) = resolve_quota(self._quotas(), key, user_of_principal(principal), client_id or "")
        rate = self._rates.get((key, user_tag, client_tag))
        if rate is None or not isinstance(rate, SampledRate):
            return None
        return rate.rate(self._clock_ms() if now_ms is None else now_ms)

    def _sweep(self, now_ms: int) -> None:
        # A rate idle for its whole window measures zero; a token bucket may still owe
        # tokens then, so it goes after an hour (Kafka's inactive sensor expiry).
        expire_ms = self.num_samples * self.sample_ms
        idle = [
            k
            for k, r in self._rates.items()
            if r.last_record_ms is not None
            and now_ms - r.last_record_ms >= (expire_ms if isinstance(r, SampledRate) else _BUCKET_EXPIRY_MS)
        ]
        for k in idle:
            del self._rates[k]

    def __len__(self) -> int:
        return len(self._rates)


class MutationQuota:
    """One request's controller_mutation_rate (Kafka's Strict/PermissiveControllerMutationQuota).

    ``admit(permits)`` for each topic in request order: strict (the request
    versions of MUTATION_STRICT_SINCE and later), a topic is refused (the
    answer is the throttle time, for THROTTLING_QUOTA_EXCEEDED) once the bucket
    is below zero, and a topic that takes it below zero still passes; permissive
    (older versions), every topic passes and only the response is throttled.
    ``throttle_time_ms()`` is the request's throttle time, for its
    ``throttle_time_ms`` and the connection's mute."""

    __slots__ = ("_bucket", "_clock_ms", "_quota", "_throttle_ms", "strict")

    def __init__(self, bucket: TokenBucket, quota: float, strict: bool, clock_ms: Callable[[], int]):
        self._bucket = bucket
        self._quota = quota
        self.strict = strict
        self._clock_ms = clock_ms
        self._throttle_ms = 0

    def admit(self, permits: int) -> int:
        """0: admitted and recorded; else refused, this many ms before the bucket is back."""
        now_ms = self._clock_ms()
        if self.strict:
            owed_ms = self._bucket.throttle_time_ms(self._quota, now_ms)
            if owed_ms > 0:
                self._throttle_ms = max(self._throttle_ms, owed_ms)
                return owed_ms
            self._bucket.record(permits, self._quota, now_ms)
            return 0
        self._throttle_ms = max(self._throttle_ms, self._bucket.record(permits, self._quota, now_ms))
        return 0

    def throttle_time_ms(self) -> int:
        return max(self._throttle_ms, self._bucket.throttle_time_ms(self._quota, self._clock_ms()))


# Kafka's message of THROTTLING_QUOTA_EXCEEDED (ThrottlingQuotaExceededException).
THROTTLED_MESSAGE = "The throttling quota has been exceeded."


def mutation_quota(broker, ctx, request=None) -> MutationQuota | None:
    """The controller_mutation_rate of this CreateTopics, CreatePartitions or DeleteTopics
    request (None: no such quota applies). Only on the listeners clients use: a request a
    broker forwards to the controller was counted where its client sent it. A
    ``validate_only`` request mutates nothing and is not counted."""
    quotas = getattr(broker, "quotas", None)
    if quotas is None or ctx.listener in broker.config.controller_listener_names:
        return None
    if request is not None and getattr(request, "validate_only", False):
        return None
    return quotas.controller_mutations(ctx.principal, ctx.client_id, ctx.api_key, ctx.api_version)

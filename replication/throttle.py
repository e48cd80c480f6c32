"""Replication throttles (Kafka's replication quotas, KIP-73) as pure rules.

A reassignment copies whole partitions to new replicas; unthrottled, that
copying can take the disks and network that clients need. Kafka bounds it
with two rates per broker, ``leader.replication.throttled.rate`` (bytes/s a
leader sends to throttled followers) and ``follower.replication.throttled.rate``
(bytes/s a follower fetches for throttled partitions), applied only to the
replicas a topic lists in ``leader.replication.throttled.replicas`` /
``follower.replication.throttled.replicas`` (``partition:broker`` pairs, or
``*`` for every replica of the topic).

Each broker reads the pairs that name itself, as Kafka's config handler does:
a leader throttles the partitions whose entry in the leader list names the
leader's own replica (the reassignment tools list a partition's current
replicas there, any of which may lead), a follower those whose entry in the
follower list names its replica (the replicas being added). Bytes of listed
partitions always count against the rate; holding data back applies only to
replicas out of sync (Kafka's ReplicaManager.shouldLeaderThrottle and
ReplicaFetcherThread.shouldFollowerThrottle), so a throttle never slows the
followers that acks=all produces wait for.

The rate is measured over sliding one-second windows (Kafka's
``replication.quota.window.num`` 11 windows of
``replication.quota.window.size.seconds`` 1 s): the bytes in the kept windows
divided by the time they span. While it is above the limit, throttled
replicas get no data (the leader answers without their records; the follower
leaves them out of its request), and the rest of replication goes on.
"""

from __future__ import annotations

from collections import deque

# The config keys (topic configs for the lists, dynamic broker configs for the rates).
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"

WINDOW_MS = 1000
WINDOWS = 11
# Kafka's default rate: Long.MAX_VALUE, i.e. no limit.
UNLIMITED_RATE = 2**63 - 1


def is_throttled(throttled_replicas: str, partition: int, broker_id: int) -> bool:
    """Whether ``broker_id``'s replica of ``partition`` is in the (normalised) list."""
    if not throttled_replicas:
        return False
    if throttled_replicas == "*":
        return True
    return f"{partition}:{broker_id}" in throttled_replicas.split(",")


def leader_holds_back(leader_throttled_replicas: str, partition: int, leader_id: int, follower_in_isr: bool) -> bool:
    """Whether the leader ``leader_id`` may hold back a follower's fetch of
    ``partition`` while over ``leader.replication.throttled.rate``: its own
    replica is listed, and the follower is not in the ISR."""
    return not follower_in_isr and is_throttled(leader_throttled_replicas, partition, leader_id)


def follower_holds_back(follower_throttled_replicas: str, partition: int, follower_id: int, caught_up: bool) -> bool:
    """Whether follower ``follower_id`` leaves ``partition`` out of its fetches
    while over ``follower.replication.throttled.rate``: its replica is listed,
    and the leader's last answer did not find it at the high watermark (Kafka's
    fetch state ``isReplicaInSync``: lag known and zero)."""
    return not caught_up and is_throttled(follower_throttled_replicas, partition, follower_id)


class ReplicationQuota:
    """Bytes per second over sliding windows, against a limit that may change."""

    def __init__(self, window_ms: int = WINDOW_MS, windows: int = WINDOWS):
        self.window_ms = window_ms
        self.windows = windows
        self._samples: deque[list[int]] = deque()  # [window start ms, bytes]

    def _prune(self, now_ms: int) -> None:
        oldest_kept_ms = now_ms - self.window_ms * self.windows
        while self._samples and self._samples[0][0] + self.window_ms <= oldest_kept_ms:
            self._samples.popleft()

    def record(self, size_bytes: int, now_ms: int) -> None:
        start_ms = now_ms - now_ms % self.window_ms
        if self._samples and self._samples[-1][0] == start_ms:
            self._samples[-1][1] += size_bytes
        else:
            self._samples.append([start_ms, size_bytes])
        self._prune(now_ms)

    def rate_bytes_per_s(self, now_ms: int) -> float:
        self._prune(now_ms)
        if not self._samples:
            return 0.0
        total = sum(size for _, size in self._samples)
        # At least one whole window, so a burst just after a window starts is
        # not taken for an enormous rate (Kafka measures the same way).
        elapsed_ms = max(now_ms - self._samples[0][0], self.window_ms)
        return total * 1000 / elapsed_ms

    def exceeded(self, rate_limit_bytes_per_s: int, now_ms: int) -> bool:
        if rate_limit_bytes_per_s >= UNLIMITED_RATE:
            return False
        return self.rate_bytes_per_s(now_ms) > rate_limit_bytes_per_s

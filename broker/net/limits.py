"""Connection limits, pure accounting (Kafka's ConnectionQuotas: KIP-402, KIP-612).

No asyncio, no sockets, no clock of its own (every call that needs time is given
``now_ms``), so the unit and property tests drive it directly; the event-loop side
is broker/net/gate.py.

What is counted and limited, with Kafka's keys:

- ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections``:
  open connections. A connection over either waits for a slot (reading nothing)
  as Kafka's acceptor does. The inter-broker listener is *protected* when the
  broker has more than one listener: its connections are counted in the total but
  are never held back by the broker-wide maximum (only by its own listener
  maximum), and while the total is over the maximum because of them, the other
  listeners give up their least recently active connection (:meth:`over_broker_max`).
- ``max.connections.per.ip`` with ``max.connections.per.ip.overrides``
  (``host:count,...``): connections of one source address, counted from the moment
  a connection arrives (so the connections of an address waiting for a slot count
  too). One over it is refused at once, before it can wait for anything: a flood
  from one address never queues ahead of the others.
- ``max.connection.creation.rate`` (broker-wide, not counting the protected
  listener) and ``listener.name.<l>.max.connection.creation.rate``: new
  connections per second, measured as Kafka's sampled ``Rate`` over
  ``quota.window.num`` samples of ``quota.window.size.seconds`` (the window is at
  least ``num - 1`` samples long, so a burst of about ``(num - 1) * size * rate``
  connections after a quiet period goes through at once, as in Kafka). A
  connection over the rate is recorded and then delayed by
  ``(rate - limit) / limit * window`` (at most one sample's length), as Kafka
  delays accepting; connections behind it wait their turn.
- ``connection_creation_rate`` client quotas of ``ip`` entities (AlterClientQuotas;
  a named IP's own quota, else the ``<default>`` ip entity's): each address's new
  connections per second, same rate. An address over its quota has the new
  connection refused after the throttle time, as Kafka closes it after that delay.

:class:`LogLimiter` keeps the log to one line per peer and reason per interval.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# What Kafka's defaults mean: no limit.
UNLIMITED = 2**31 - 1
IP_ENTITY = "ip"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Per-IP creation rates kept before the idle ones (nothing in their window) are dropped.
IP_RATES_KEPT = 4096


def normalize_ip(address: str) -> str:
    """A source address as limits and quotas know it: the canonical text of the IP,
    an IPv4-mapped IPv6 address as its IPv4 form; anything else unchanged."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def parse_ip_overrides(text: str, resolve: Callable[[str], list[str]] | None = None) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` entries separated by commas
    (the count after the last colon, so IPv6 addresses need no brackets; brackets are
    accepted). A host that is not an IP is resolved with ``resolve`` (every address
    it names gets the count), as Kafka resolves host names. Raises ValueError naming
    the bad entry."""
    overrides: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        host, sep, count_text = entry.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host:
            raise ValueError(f"{entry!r} is not host:count")
        try:
            count = int(count_text.strip())
        except ValueError:
            raise ValueError(f"{entry!r}: the count is not an integer") from None
        if count < 0:
            raise ValueError(f"{entry!r}: the count must be at least 0")
        try:
            addresses = [str(ipaddress.ip_address(host))]
        except ValueError:
            if resolve is None:
                raise ValueError(f"{entry!r}: {host} is not an IP address") from None
            addresses = resolve(host)
            if not addresses:
                raise ValueError(f"{entry!r}: {host} does not resolve")
        for address in addresses:
            overrides[normalize_ip(address)] = count
    return overrides


_LISTENER_KEY = re.compile(r"listener\.name\.([^.]+)\.(max\.connections|max\.connection\.creation\.rate)")


def limit_settings(
    values: Mapping[str, Any],
    listener_values: Mapping[str, str],
    listeners: list[str],
    protected_listener: str | None,
    warn: Callable[[str], None],
    resolve: Callable[[str], list[str]],
) -> LimitSettings:
    """The limits from the parsed broker keys (``values``) and the raw
    ``listener.name.<l>.max.connections`` / ``.max.connection.creation.rate`` keys, by
    Kafka's rules: overrides are host:count (host names resolved now, by ``resolve``),
    max.connections.per.ip may be 0 only with overrides, a listener key must name a
    listener (else a warning) and be an integer >= 0. Raises ValueError naming the key."""
    key = "max.connections.per.ip.overrides"
    try:
        overrides = parse_ip_overrides(values[key], resolve)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None
    if values["max.connections.per.ip"] == 0 and not overrides:
        raise ValueError("max.connections.per.ip: may be 0 only when max.connections.per.ip.overrides is set")
    per_listener: dict[str, dict[str, int]] = {"max.connections": {}, "max.connection.creation.rate": {}}
    for raw_key, raw_value in listener_values.items():
        match = _LISTENER_KEY.fullmatch(raw_key)
        if match is None:
            raise ValueError(f"{raw_key}: not a listener connection limit")
        name = match.group(1).upper()
        if name not in listeners:
            warn(f"config key {raw_key} names no listener (the name is the listener's, lower-cased); ignored")
            continue
        try:
            limit = int(raw_value.strip())
        except ValueError:
            raise ValueError(f"{raw_key}: expected an integer, got {raw_value!r}") from None
        if not 0 <= limit <= UNLIMITED:
            raise ValueError(f"{raw_key}: must be between 0 and {UNLIMITED}")
        per_listener[match.group(2)][name] = limit
    return LimitSettings(
        max_connections=values["max.connections"],
        listener_max_connections=per_listener["max.connections"],
        max_connections_per_ip=values["max.connections.per.ip"],
        per_ip_overrides=overrides,
        max_creation_rate=values["max.connection.creation.rate"],
        listener_creation_rate=per_listener["max.connection.creation.rate"],
        protected_listener=protected_listener,
        num_samples=values["quota.window.num"],
        sample_ms=values["quota.window.size.seconds"] * 1000,
    )


def ip_connection_rates(client_quotas: Mapping[tuple, Mapping[str, float]]) -> tuple[dict[str, float], float | None]:
    """(connection_creation_rate per named IP, the ``<default>`` ip entity's) from the
    metadata image's client quotas."""
    rates: dict[str, float] = {}
    default = None
    for entity, values in client_quotas.items():
        if len(entity) != 1 or entity[0][0] != IP_ENTITY:
            continue
        rate = values.get(CONNECTION_CREATION_RATE)
        if rate is None:
            continue
        name = entity[0][1]
        if name is None:
            default = rate
        else:
            rates[normalize_ip(name)] = rate
    return rates, default


class CreationRate:
    """New connections per second over ``num_samples`` samples of ``sample_ms``, measured as
    Kafka's sampled Rate: a sample starts at the first connection after the previous one
    ended, samples older than the whole window count nothing, and the rate is their sum
    over the time since the oldest one started, but over at least ``num_samples - 1``
    samples. Memory: at most ``num_samples`` pairs."""

    __slots__ = ("_samples", "num_samples", "sample_ms")

    def __init__(self, num_samples: int, sample_ms: int):
        if num_samples < 1 or sample_ms < 1:
            raise ValueError("a rate needs at least one sample of at least 1 ms")
        self.num_samples = num_samples
        self.sample_ms = sample_ms
        self._samples: deque[list[int]] = deque()  # [start ms, count], oldest first

    def _purge(self, now_ms: int) -> None:
        horizon_ms = self.num_samples * self.sample_ms
        samples = self._samples
        while samples and now_ms - samples[0][0] >= horizon_ms:
            samples.popleft()

    def record(self, now_ms: int) -> None:
        self._purge(now_ms)
        samples = self._samples
        if not samples or now_ms - samples[-1][0] >= self.sample_ms:
            if len(samples) == self.num_samples:
                samples.popleft()
            samples.append([now_ms, 0])
        samples[-1][1] += 1

    def window_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        elapsed_ms = now_ms - self._samples[0][0] if self._samples else 0
        return max(elapsed_ms, (self.num_samples - 1) * self.sample_ms, 1)

    def rate(self, now_ms: int) -> float:
        """Connections per second."""
        window_ms = self.window_ms(now_ms)
        return sum(count for _, count in self._samples) * 1000.0 / window_ms

    def throttle_time_ms(self, limit: float, now_ms: int) -> int:
        """0 within ``limit``, else Kafka's (rate - limit) / limit * window, at most one sample."""
        rate = self.rate(now_ms)
        if rate <= limit:
            return 0
        if limit <= 0:
            return self.sample_ms
        return min(math.ceil((rate - limit) / limit * self.window_ms(now_ms)), self.sample_ms)

    @property
    def idle(self) -> bool:
        return not self._samples

    def expired(self, now_ms: int) -> bool:
        """Nothing recorded within the window: the rate can be dropped."""
        self._purge(now_ms)
        return not self._samples


@dataclass(frozen=True)
class LimitSettings:
    """The limits, as read from the config (broker/config.py: ``connection_limit_settings``)."""

    max_connections: int = UNLIMITED
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    max_connections_per_ip: int = UNLIMITED
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_creation_rate: int = UNLIMITED
    listener_creation_rate: Mapping[str, int] = field(default_factory=dict)
    # The inter-broker listener, exempt from the broker-wide limits when there are several listeners.
    protected_listener: str | None = None
    num_samples: int = 11
    sample_ms: int = 1000

    def limits_anything(self, listeners: list[str]) -> bool:
        return (
            self.max_connections < UNLIMITED
            or self.max_connections_per_ip < UNLIMITED
            or bool(self.per_ip_overrides)
            or self.max_creation_rate < UNLIMITED
            or any(self.listener_max_connections.get(l, UNLIMITED) < UNLIMITED for l in listeners)
            or any(self.listener_creation_rate.get(l, UNLIMITED) < UNLIMITED for l in listeners)
        )


class ConnectionLimits:
    """The counts and rates of one broker's listeners (see the module docstring).

    The caller's protocol for each accepted socket: :meth:`arrive` (per-IP count and
    IP quota: refused, refused after a delay, or counted); then, in arrival order per
    listener, :meth:`record_creation` once (the delay the creation rates impose),
    and after that delay, as soon as :meth:`slot_available`, :meth:`open`; finally
    :meth:`close` (or :meth:`leave` for one counted that never opened)."""

    def __init__(
        self,
        settings: LimitSettings,
        listeners: list[str],
        ip_quotas: Callable[[], Mapping[tuple, Mapping[str, float]]] | None = None,
    ):
        self.settings = settings
        self.listeners = list(listeners)
        self._ip_quotas = ip_quotas
        self._ip_quota_source: object = None
        self._ip_rates: dict[str, float] = {}
        self._ip_default_rate: float | None = None
        self.total = 0
        self.by_listener = {name: 0 for name in self.listeners}
        self.by_ip: dict[str, int] = {}
        s = settings
        self._listener_rates = {
            name: CreationRate(s.num_samples, s.sample_ms)
            for name in self.listeners
            if s.listener_creation_rate.get(name, UNLIMITED) < UNLIMITED
        }
        self._broker_rate = CreationRate(s.num_samples, s.sample_ms) if s.max_creation_rate < UNLIMITED else None
        self._ip_creation: dict[str, CreationRate] = {}
        # Figures for operators and tests.
        self.refused_per_ip = 0
        self.refused_ip_rate = 0
        self.delayed = 0

    # ------------------------------------------------------------ who is protected

    def protected(self, listener: str) -> bool:
        """Kafka's rule: the inter-broker listener, when the broker has other listeners too."""
        return listener == self.settings.protected_listener and len(self.listeners) > 1

    def max_for_ip(self, ip: str) -> int:
        return self.settings.per_ip_overrides.get(ip, self.settings.max_connections_per_ip)

    def ip_rate_limit(self, ip: str) -> float | None:
        if self._ip_quotas is None:
            return None
        quotas = self._ip_quotas()
        if quotas is not self._ip_quota_source:
            self._ip_quota_source = quotas
            self._ip_rates, self._ip_default_rate = ip_connection_rates(quotas)
        return self._ip_rates.get(ip, self._ip_default_rate)

    # ------------------------------------------------------------ arrival

    def arrive(self, ip: str, now_ms: int) -> tuple[str, int]:
        """A connection from ``ip`` was accepted: ("refuse", 0) over the per-IP maximum;
        ("throttle", ms) over the IP's creation-rate quota (refuse it after ms); else
        ("counted", 0), and the IP's count includes it until :meth:`leave` or :meth:`close`."""
        count = self.by_ip.get(ip, 0)
        if count >= self.max_for_ip(ip):
            self.refused_per_ip += 1
            return "refuse", 0
        limit = self.ip_rate_limit(ip)
        if limit is not None:
            rate = self._ip_creation.get(ip)
            if rate is None:
                if len(self._ip_creation) >= IP_RATES_KEPT:
                    self.forget_idle_rates(now_ms)
                rate = self._ip_creation[ip] = CreationRate(self.settings.num_samples, self.settings.sample_ms)
            rate.record(now_ms)
            throttle_ms = rate.throttle_time_ms(limit, now_ms)
            if throttle_ms > 0:
                self.refused_ip_rate += 1
                return "throttle", throttle_ms
        self.by_ip[ip] = count + 1
        return "counted", 0

    def leave(self, ip: str) -> None:
        """A counted connection goes before it opened (refused, or its peer went away)."""
        count = self.by_ip.get(ip, 0) - 1
        if count > 0:
            self.by_ip[ip] = count
        else:
            self.by_ip.pop(ip, None)

    # ------------------------------------------------------------ slots and listener rates

    def slot_available(self, listener: str) -> bool:
        if self.by_listener.get(listener, 0) >= self.settings.listener_max_connections.get(listener, UNLIMITED):
            return False
        return self.protected(listener) or self.total < self.settings.max_connections

    def record_creation(self, listener: str, now_ms: int) -> int:
        """Record a new connection on ``listener`` in its rate and the broker's (unless
        protected): the time it must wait for them, the longer of the two."""
        throttle_ms = 0
        rate = self._listener_rates.get(listener)
        if rate is not None:
            rate.record(now_ms)
            throttle_ms = rate.throttle_time_ms(self.settings.listener_creation_rate[listener], now_ms)
        if self._broker_rate is not None and not self.protected(listener):
            self._broker_rate.record(now_ms)
            throttle_ms = max(throttle_ms, self._broker_rate.throttle_time_ms(self.settings.max_creation_rate, now_ms))
        if throttle_ms > 0:
            self.delayed += 1
        return throttle_ms

    def open(self, listener: str) -> None:
        self.total += 1
        self.by_listener[listener] = self.by_listener.get(listener, 0) + 1

    def close(self, listener: str, ip: str) -> None:
        self.total -= 1
        self.by_listener[listener] -= 1
        self.leave(ip)

    def over_broker_max(self, listener: str) -> bool:
        """Kafka's maxConnectionsExceeded: the protected listener took the total past
        max.connections, and ``listener`` (not protected) should give a connection up."""
        return self.total > self.settings.max_connections and not self.protected(listener)

    def forget_idle_rates(self, now_ms: int) -> None:
        """Drop the per-IP rates with nothing left in their window (bounded memory)."""
        for ip in [ip for ip, rate in self._ip_creation.items() if rate.expired(now_ms)]:
            del self._ip_creation[ip]

    def summary(self) -> str:
        return (
            f"connection limits: refused over max.connections.per.ip {self.refused_per_ip} times, over an ip "
            f"connection_creation_rate quota {self.refused_ip_rate} times, delayed by a creation rate {self.delayed} times"
        )


class LogLimiter:
    """One log line per key (peer address and reason) per ``interval_ms``; at most
    ``keys_max`` keys remembered (past that, the oldest are forgotten first)."""

    def __init__(self, interval_ms: int = 60_000, keys_max: int = 10_000):
        self.interval_ms = interval_ms
        self.keys_max = keys_max
        self._last_ms: dict[tuple, int] = {}
        self.suppressed = 0

    def should_log(self, key: tuple, now_ms: int) -> bool:
        last_ms = self._last_ms.get(key)
        if last_ms is not None and now_ms - last_ms < self.interval_ms:
            self.suppressed += 1
            return False
        self._last_ms.pop(key, None)
        self._last_ms[key] = now_ms  # re-inserted: dict order is age order
        while len(self._last_ms) > self.keys_max:
            del self._last_ms[next(iter(self._last_ms))]
        return True

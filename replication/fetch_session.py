"""Incremental fetch sessions (KIP-227) as pure rules: Kafka's FetchSessionCache.

A consumer or follower that fetches many partitions asks the broker to remember
them in a session; later (incremental) requests carry only the partitions whose
fetch parameters changed plus those to forget, and responses carry only the
partitions with news. Nothing here does IO or reads a clock: times are
``now_ms`` arguments and session ids come from an injected random source.

Request metadata ``(session_id, session_epoch)`` (Kafka's FetchMetadata):

* ``(0, -1)``: full fetch, no session (also what Fetch v4-6 imply).
* ``(0, 0)``: full fetch asking for a session. One is created when the answer
  is built, if the cache has room or can evict (see ``_try_evict``); the
  answer then carries its id, else 0.
* ``(id, 0)`` / ``(id, -1)``: close session ``id`` (whether or not it exists),
  then as ``(0, 0)`` / ``(0, -1)``.
* ``(id, epoch)`` with any other epoch: incremental. An unknown id is
  FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's next one is
  INVALID_FETCH_SESSION_EPOCH, and a request whose topic naming (ids from v13,
  names before) differs from the session's is FETCH_SESSION_TOPIC_ID_ERROR; all
  three are top-level errors with session id 0 and no partitions, and leave the
  session as it was. Epochs run 1, 2, ... 2**31-1, 1, ...

An incremental request's partitions update the session's in place (keeping
their position) or join at the end; ``forgotten_topics_data`` then removes
partitions (so one both added and forgotten is gone). A session left empty is
closed and the request is answered as a sessionless one. The partitions read
are all of the session's, in its order; a partition that returns records moves
to the end, so that under ``max_bytes`` the others get their turn next time.

An incremental answer includes a partition only when it has records, an error,
a diverging epoch, a preferred read replica or a current leader, or when its
high watermark, last stable offset or log start offset differ from what the
session last sent. An error also forgets the cached high watermark, so the
partition is sent again once the error clears.

Kafka differs from this module on purpose in three places: it does not cache
the last stable offset (there it only moves with the high watermark; checking
it too can only send more); it does not look at ``current_leader`` (it only
sets one next to an error, which is sent anyway); and it shards the cache
eight ways with eviction per shard (one shard here: ``max_sessions`` is the
whole capacity).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
MAX_SESSION_ID = 2**31 - 1
# Kafka's max.incremental.fetch.session.cache.slots default (sessions, not partitions).
DEFAULT_MAX_SESSIONS = 1000
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS (a constant there, not a config key).
DEFAULT_EVICTION_MS = 120_000

# (topic_id, partition) for sessions made with Fetch v13+, (topic name, partition) before.
Key = tuple[Any, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH  # nothing follows the final epoch
    if epoch == MAX_EPOCH:
        return 1  # 0 would mean "new session", so the wrap skips it
    return epoch + 1


def _has_records(records) -> bool:
    return records is not None and len(records) > 0


class CachedPartition:
    """A partition of a session: the fetch parameters the fetcher last sent (the
    request's FetchPartition as given) and what the session last told it."""

    __slots__ = ("request", "high_watermark", "last_stable_offset", "log_start_offset")

    def __init__(self, request) -> None:
        self.request = request
        # -1 is never a real offset, so a partition new to the session is always sent.
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1

    def absorb(self, data) -> bool:
        """Whether ``data`` (a response PartitionData) must be sent; records what
        the fetcher learns from it (Kafka's maybeUpdateResponseData)."""
        must_respond = _has_records(data.records)
        if self.high_watermark != data.high_watermark:
            self.high_watermark = data.high_watermark
            must_respond = True
        if self.last_stable_offset != data.last_stable_offset:
            self.last_stable_offset = data.last_stable_offset
            must_respond = True
        if self.log_start_offset != data.log_start_offset:
            self.log_start_offset = data.log_start_offset
            must_respond = True
        if data.error_code != ErrorCode.NONE:
            # The fetcher ignores offsets that come with an error: forget ours so
            # the partition goes out again once the error is gone.
            self.high_watermark = -1
            must_respond = True
        # Each of these asks the fetcher to act (truncate, move to another
        # replica, refresh its leader), so they are sent every time, not once.
        if getattr(data.diverging_epoch, "epoch", -1) >= 0:
            must_respond = True
        if data.preferred_read_replica != -1:
            must_respond = True
        leader = data.current_leader
        if leader is not None and (leader.leader_id != -1 or leader.leader_epoch != -1):
            must_respond = True
        return must_respond


class FetchSession:
    """One session: its partitions in order, its epoch and its eviction state."""

    __slots__ = (
        "id", "privileged", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
        "partitions", "cached_size", "evictable_by_privileged", "evictable_by_all",
    )

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool,
                 partitions: dict[Key, CachedPartition], now_ms: int) -> None:
        self.id = session_id
        self.privileged = privileged  # created by a follower replica
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        # The epoch the next incremental request must carry.
        self.epoch = next_epoch(INITIAL_EPOCH)
        # dicts keep insertion order: the session's order is Kafka's linked order.
        self.partitions = partitions
        # Size and evictability as of the last touch: Kafka ranks eviction
        # candidates by these, not by the live values.
        self.cached_size = 0
        self.evictable_by_privileged = False
        self.evictable_by_all = False

    def evictable_key(self) -> tuple[bool, int, int]:
        # Unprivileged before privileged, then fewer partitions, then id.
        return (self.privileged, self.cached_size, self.id)

    def update(self, requested: Iterable[tuple[Key, Any]], forgotten: Iterable[Key]) -> None:
        for key, request in requested:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(request)
            else:
                cached.request = request  # in place: the partition keeps its turn
        for key in forgotten:
            self.partitions.pop(key, None)


class ContextKind(enum.Enum):
    SESSION_ERROR = "session_error"
    SESSIONLESS = "sessionless"
    FULL = "full"
    INCREMENTAL = "incremental"


@dataclass
class FetchReply:
    """The session part of a Fetch response: top-level error, session id, and the
    partitions to send (a subsequence of those given to ``respond``)."""

    error: ErrorCode
    session_id: int
    partitions: list[tuple[Key, Any]] = field(default_factory=list)


class FetchContext:
    """What one Fetch request reads and how its answer is filtered.

    ``partitions_to_read()`` once, read them (possibly several times while long
    polling), then ``respond()`` exactly once with the final answer.
    """

    def __init__(self, cache: FetchSessionCache, kind: ContextKind, *, error: ErrorCode = ErrorCode.NONE,
                 requested: dict[Key, Any] | None = None, session: FetchSession | None = None,
                 request_epoch: int = FINAL_EPOCH, privileged: bool = False, uses_topic_ids: bool = False) -> None:
        self._cache = cache
        self.kind = kind
        self.error = error
        self._requested = requested or {}
        self._session = session
        self._request_epoch = request_epoch
        self._privileged = privileged
        self._uses_topic_ids = uses_topic_ids
        self._responded = False

    @property
    def session_id(self) -> int:
        """The session an incremental request uses (0 for the other kinds; a full
        fetch's new session is only known from ``respond``)."""
        return self._session.id if self._session is not None else INVALID_SESSION_ID

    def partitions_to_read(self) -> list[tuple[Key, Any]]:
        """(key, FetchPartition) pairs in the order to read them."""
        if self.kind is ContextKind.INCREMENTAL:
            return [(key, cached.request) for key, cached in self._session.partitions.items()]
        return list(self._requested.items())

    def respond(self, results: Iterable[tuple[Key, Any]], *, now_ms: int) -> FetchReply:
        """The answer for ``results``, (key, PartitionData) pairs as read; updates
        the session (a full fetch creates its session here, as Kafka does)."""
        if self._responded:
            raise RuntimeError("a fetch context answers once")
        self._responded = True
        if self.kind is ContextKind.SESSION_ERROR:
            return FetchReply(self.error, INVALID_SESSION_ID)
        if self.kind is ContextKind.SESSIONLESS:
            return FetchReply(ErrorCode.NONE, INVALID_SESSION_ID, list(results))
        if self.kind is ContextKind.FULL:
            return self._respond_full(list(results), now_ms)
        return self._respond_incremental(results)

    def _respond_full(self, results: list[tuple[Key, Any]], now_ms: int) -> FetchReply:
        def make_partitions() -> dict[Key, CachedPartition]:
            partitions: dict[Key, CachedPartition] = {}
            for key, data in results:
                request = self._requested.get(key)
                if request is None:
                    continue  # not asked for: nothing to fetch it with next time
                cached = CachedPartition(request)
                # Same rule as incremental answers, so an errored partition is
                # sent again once the error clears (Kafka's errors carry HW -1).
                cached.absorb(data)
                partitions[key] = cached
            return partitions

        session_id = self._cache._maybe_create_session(
            now_ms, self._privileged, len(results), self._uses_topic_ids, make_partitions
        )
        return FetchReply(ErrorCode.NONE, session_id, results)

    def _respond_incremental(self, results: Iterable[tuple[Key, Any]]) -> FetchReply:
        session = self._session
        if session.epoch != next_epoch(self._request_epoch):
            # Another request of this session was accepted while this one was
            # being read (a retry on another connection): its view is stale.
            return FetchReply(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id)
        kept = []
        for key, data in results:
            cached = session.partitions.get(key)
            if cached is None or not cached.absorb(data):
                continue
            kept.append((key, data))
            if _has_records(data.records):
                # Rotate: partitions that got data go last, so the rest are read
                # first next time and one busy partition cannot starve them.
                del session.partitions[key]
                session.partitions[key] = cached
        return FetchReply(ErrorCode.NONE, session.id, kept)


class FetchSessionCache:
    """All fetch sessions of a broker, bounded in number (not partitions)."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 random_ids: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._random = random_ids if random_ids is not None else random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self._total_partitions = 0
        self.evictions = 0

    # ----------------------------------------------------------------- views

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: int) -> bool:
        return session_id in self._sessions

    def session(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        """Partitions over all sessions as of their last use (Kafka's
        NumIncrementalFetchPartitionsCached)."""
        return self._total_partitions

    # ----------------------------------------------------------------- requests

    def new_context(self, session_id: int, session_epoch: int, requested: Iterable[tuple[Key, Any]],
                    forgotten: Iterable[Key], *, privileged: bool, now_ms: int, uses_topic_ids: bool) -> FetchContext:
        """The context of one Fetch request (Kafka's FetchManager.newContext).

        ``requested``: (key, FetchPartition) in request order; ``forgotten``:
        keys of ``forgotten_topics_data``; ``privileged``: the fetcher is a
        follower replica; ``uses_topic_ids``: the request is v13+.
        """
        if session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            # Later duplicates override earlier ones but keep the first place.
            by_key = dict(requested)
            kind = ContextKind.SESSIONLESS if session_epoch == FINAL_EPOCH else ContextKind.FULL
            return FetchContext(self, kind, requested=by_key, privileged=privileged, uses_topic_ids=uses_topic_ids)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(self, ContextKind.SESSION_ERROR, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != session_epoch:
            return FetchContext(self, ContextKind.SESSION_ERROR, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(self, ContextKind.SESSION_ERROR, error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        requested = list(requested)
        session.update(requested, forgotten)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext(self, ContextKind.SESSIONLESS, requested=dict(requested))
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(self, ContextKind.INCREMENTAL, session=session, request_epoch=session_epoch)

    def remove(self, session_id: int) -> bool:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        self._total_partitions -= session.cached_size
        return True

    # ----------------------------------------------------------------- internals

    def _maybe_create_session(self, now_ms: int, privileged: bool, size: int, uses_topic_ids: bool,
                              make_partitions: Callable[[], dict[Key, CachedPartition]]) -> int:
        if len(self._sessions) >= self.max_sessions and not self._try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, uses_topic_ids, make_partitions(), now_ms)
        self._sessions[session.id] = session
        self._touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Make room for a new session of ``size`` partitions (Kafka's tryEvict).

        The least recently used session goes if it is stale (unused for more
        than ``eviction_ms``). Otherwise the least valuable evictable session
        goes if the new one is worth more: a follower's session outranks a
        consumer's, then more partitions outrank fewer (a tie keeps the old
        one). A consumer's session is evictable by followers' sessions at once;
        any session is evictable by any other once it has been used more than
        ``eviction_ms`` after its creation (evictability is settled when a
        session is used, not as time passes).
        """
        if not self._sessions:
            return False
        # Linear scans: they only run when the cache is full, over at most
        # max_sessions sessions.
        oldest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [
            s for s in self._sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        # The newcomer's key has id 0, below every real id: an equal rank loses.
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        size = len(session.partitions)
        self._total_partitions += size - session.cached_size
        session.cached_size = size
        settled = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or settled
        session.evictable_by_all = settled

    def _new_session_id(self) -> int:
        while True:
            session_id = self._random.randint(1, MAX_SESSION_ID)
            if session_id != INVALID_SESSION_ID and session_id not in self._sessions:
                return session_id


# --------------------------------------------------------------------------- the fetcher's side


@dataclass
class SessionRequest:
    """What one Fetch of a session-using fetcher carries (Kafka's FetchRequestData)."""

    session_id: int
    session_epoch: int
    # (key, fetch parameters) to send: all wanted partitions in a full request,
    # only new or changed ones in an incremental one.
    to_send: list[tuple[Key, Any]]
    forgotten: list[Key]
    full: bool


class FetchSessionBuilder:
    """A fetcher's view of its session with one broker (Kafka's FetchSessionHandler).

    ``build`` makes each request from the partitions wanted now and their
    parameters (any value that compares equal when nothing changed);
    ``handle_response`` / ``handle_error`` take the outcome. The first request,
    and any after a session error, is full and asks for a session (epoch 0);
    while the broker keeps one, later requests send only what changed and
    forget what is no longer wanted, so a follower of many quiet partitions
    sends and receives almost nothing per round.
    """

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        # What the broker's session holds, as this fetcher last sent it.
        self._in_session: dict[Key, Any] = {}
        self._pending: tuple[bool, dict[Key, Any]] | None = None

    def build(self, wanted: dict[Key, Any]) -> SessionRequest:
        wanted = dict(wanted)
        if self.session_id == INVALID_SESSION_ID or self.next_epoch == INITIAL_EPOCH:
            self._pending = (True, wanted)
            # Naming the old id with epoch 0 closes it on the broker and opens a new one.
            return SessionRequest(self.session_id, INITIAL_EPOCH, list(wanted.items()), [], True)
        to_send = [(key, params) for key, params in wanted.items() if self._in_session.get(key, _ABSENT) != params]
        forgotten = [key for key in self._in_session if key not in wanted]
        self._pending = (False, wanted)
        return SessionRequest(self.session_id, self.next_epoch, to_send, forgotten, False)

    def handle_response(self, error: ErrorCode, session_id: int) -> bool:
        """Take the answer to the last ``build``; False when the session is lost
        (the next request is full again)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        full, wanted = pending
        if error != ErrorCode.NONE:
            self.handle_error()
            return False
        if full:
            if session_id == INVALID_SESSION_ID:
                # The broker kept no session (no room): every request stays full.
                self.session_id = INVALID_SESSION_ID
                self.next_epoch = INITIAL_EPOCH
                self._in_session = {}
                return True
            self.session_id = session_id
            self.next_epoch = next_epoch(INITIAL_EPOCH)
        elif session_id != self.session_id:
            self.handle_error()
            return False
        else:
            self.next_epoch = next_epoch(self.next_epoch)
        self._in_session = wanted
        return True

    def handle_error(self) -> None:
        """The request failed or its answer was lost: the broker's session may be
        one epoch ahead or gone, so start over with a full request that closes it."""
        self._pending = None
        self.next_epoch = INITIAL_EPOCH
        self._in_session = {}


_ABSENT = object()

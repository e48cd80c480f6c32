"""What the pure coordinators ask of their shells: one effect vocabulary.

The group coordinator and the transaction coordinator are state machines
without IO. An operation that must persist something returns a list of
effects, in the order they must be carried out; the shell carries them out
and reports each outcome back to the coordinator (``store_done(...)``), which
may return further effects. Answers to clients go out through the ``reply``
callback each request passes, called exactly once, maybe at once, maybe from
a later outcome. The controller's command plans have the same shape with one
kind of effect: ``(result, records)``, the records being what the quorum must
append before the result holds.

:class:`Store` is the effect both coordinators share. When its outcome is
reported is part of each coordinator's contract with its shell: the group
shell reports the append's outcome at once, before it runs anything else (the
answer then waits for the in-sync replicas); the transaction shell reports
once the in-sync replicas have the records, maybe much later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.errors import ErrorCode

# A key and a value (None: a tombstone) of the coordinator's internal topic.
Record = tuple[bytes, bytes | None]


@dataclass(frozen=True)
class Store:
    """Append ``records`` to ``partition`` of the coordinator's internal topic as
    its leader, as one batch, then report the outcome with the ``token`` (None:
    no one waits for it)."""

    partition: int
    # The leader epoch the partition must still be loaded at (-1: whichever it is loaded at).
    coordinator_epoch: int
    records: tuple[Record, ...]
    token: int | None = None
    # Carried out this much later (a retried write); stores keep their order otherwise.
    delay_ms: int = 0
    # >= 0: one transactional batch of this producer (a TxnOffsetCommit), checked
    # against its epoch as the coordinator's own write.
    producer_id: int = -1
    producer_epoch: int = -1


def carry_out_stores_at_once(
    effects: Iterable[Store],
    write: Callable[[Store], ErrorCode],
    store_done: Callable[[int, ErrorCode], list[Store]],
) -> None:
    """Carry out ``effects`` in order, reporting each store's outcome as soon as
    ``write`` returns it; what an outcome leads to is carried out before the next
    effect, as if the coordinator had written in the middle of its operation."""
    for effect in effects:
        error = write(effect)
        if effect.token is not None:
            carry_out_stores_at_once(store_done(effect.token, error), write, store_done)

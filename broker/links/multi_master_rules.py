"""What a multi-master copy does with each batch, and what producers may write (pure).

A topic listed in ``multi.master.topics`` of a link on this cluster is
multi-master here: an ordinary writable topic whose batches written in other
clusters are copied in by the link (broker/links/multi_master.py), with new
offsets but the batch's own producer id, epoch and sequence numbers. The
producer id names the cluster the batch was first written in
(controller/producer_origins.py), so:

- a batch without a producer id cannot be placed (it has no origin, and no
  sequence to tell a repeat): producers of multi-master topics must be
  idempotent, and Produce refuses such batches (``produce_refusal``);
- a batch whose origin is this cluster's own is skipped: it came back around
  a cycle, and this cluster wrote it first;
- any other batch goes through the idempotence rule of
  :func:`link_batch_decision`, per producer: at or below the producer's last
  sequence here it is already here (it came by another path, or the copy
  restarted from an older position), the next sequence is appended, anything
  else stops the partition's copy with an error.

Why a gap cannot happen when every cluster works as designed: each cluster
appends a producer's batches in its sequence order with none missing (the
origin's leader refuses an out-of-order sequence from the producer; a link
appends only the next sequence). So every cluster's log holds each
producer's batches as a prefix of the origin's, in order, and a link that
reads one such log from its start in offset order meets, per producer, only
batches it already has or the next one. A gap means a log lost records (a
source deleted by retention what was not copied yet, an unclean election)
or a producer id was handed out twice: copying on would break per-origin
order, so the copy stops and says so.

Transactions are refused on multi-master topics: an abort marker written in
one cluster would have to reach the others as a batch of its own, in the
right place among other origins' batches, which the copy does not do.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import NamedTuple

from controller.link_configs import LinkConfigError, parse_multi_master_topics
from controller.producer_origins import origin_of
from storage.producer_state import last_sequence_of, next_sequence


def link_multi_master_topics(link) -> list[str]:
    """The topics ``link`` (a metadata image's ClusterLink) copies as multi-master; [] when unset or malformed."""
    try:
        return parse_multi_master_topics(link.configs.get("multi.master.topics"))
    except LinkConfigError:
        return []  # refused when the link was created: not in the image


def multi_master_links(image, topic: str) -> list:
    """The links of this cluster that list ``topic`` in multi.master.topics."""
    return [link for link in image.cluster_links.values() if topic in link_multi_master_topics(link)]


def is_multi_master(image, topic: str) -> bool:
    return any(topic in link_multi_master_topics(link) for link in image.cluster_links.values())


def produce_refusal(topic: str, producer_id: int, transactional: bool) -> str | None:
    """Why Produce refuses a batch to the multi-master topic ``topic``, or None."""
    if transactional:
        return f"topic {topic} is multi-master (cluster links): transactions are not supported on multi-master topics"
    if producer_id < 0:
        return (
            f"topic {topic} is multi-master (cluster links): its batches must carry a producer id; "
            "enable idempotence (enable.idempotence=true) in the producer"
        )
    return None


class Decision(Enum):
    """What becomes of a source batch; the values name the outcome in metrics."""

    APPEND = "copied"
    SKIP_NO_PRODUCER = "no_producer_id"
    SKIP_CONTROL = "control"
    SKIP_OWN_ORIGIN = "own_origin"
    ALREADY_HERE = "already_here"
    GAP = "gap"


class ProducerHere(NamedTuple):
    """What this partition's log knows of a producer: its epoch and last sequence."""

    epoch: int
    last_sequence: int


class BatchVerdict(NamedTuple):
    decision: Decision
    reason: str = ""


def link_batch_decision(
    own_origin: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    last_offset_delta: int,
    is_control: bool,
    is_transactional: bool,
    here: ProducerHere | None,
) -> BatchVerdict:
    """What a link copying a multi-master partition into the cluster of
    ``own_origin`` does with one source batch, given what the destination
    partition knows of its producer (``here``, None when nothing)."""
    if is_control:
        return BatchVerdict(Decision.SKIP_CONTROL)
    if producer_id < 0:
        return BatchVerdict(Decision.SKIP_NO_PRODUCER)
    if origin_of(producer_id) == own_origin:
        return BatchVerdict(Decision.SKIP_OWN_ORIGIN)
    if is_transactional:
        return BatchVerdict(Decision.GAP, f"producer {producer_id} wrote a transactional batch, which multi-master topics do not take")
    last_sequence = last_sequence_of(base_sequence, last_offset_delta)
    if here is None:
        # Nothing of this producer here yet: its first batch (or the first one
        # left after retention or producer expiry, which cannot be told apart).
        return BatchVerdict(Decision.APPEND)
    if producer_epoch < here.epoch:
        # An older epoch's batch: the newer epoch's batches came after it in every log.
        return BatchVerdict(Decision.ALREADY_HERE)
    if producer_epoch > here.epoch:
        if base_sequence == 0:
            return BatchVerdict(Decision.APPEND)
        return BatchVerdict(
            Decision.GAP, f"producer {producer_id} starts epoch {producer_epoch} at sequence {base_sequence}, not 0"
        )
    if base_sequence == next_sequence(here.last_sequence):
        return BatchVerdict(Decision.APPEND)
    if last_sequence <= here.last_sequence and base_sequence <= here.last_sequence:
        return BatchVerdict(Decision.ALREADY_HERE)
    return BatchVerdict(
        Decision.GAP,
        f"producer {producer_id} epoch {producer_epoch}: sequences {base_sequence}..{last_sequence} after "
        f"{here.last_sequence} here (expected {next_sequence(here.last_sequence)})",
    )


def producers_here(producers: Iterable) -> dict[int, ProducerHere]:
    """A log's producer state entries (``storage.producer_state.ProducerEntry``) as ProducerHere by id."""
    return {p.producer_id: ProducerHere(p.epoch, p.last_sequence) for p in producers}


# The consumer groups holding links' source positions: never synced between
# clusters (their offsets are another cluster's, and each link keeps its own).
LINK_GROUP_PREFIX = "_pybroker-link-"


def link_group_id(link_name: str) -> str:
    """The consumer group whose committed offsets are the link's source positions."""
    return f"{LINK_GROUP_PREFIX}{link_name}"

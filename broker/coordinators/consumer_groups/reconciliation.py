"""A member's next assignment on its way to its target (pure).

Kafka's CurrentAssignmentBuilder, in short. A member first gives up what its
target no longer has (UNREVOKED_PARTITIONS, its epoch unchanged: it is not
told the new epoch until it has revoked), then takes what its target adds
that no one else holds; it is then at the assignment epoch, STABLE, or
UNRELEASED_PARTITIONS while partitions of its target are still held by
members that have not revoked them. A member reports what it owns in its
heartbeats; a member in UNREVOKED_PARTITIONS moves on only once it reports
owning none of the partitions it must revoke, and a member that reports it
owns none of the partitions to revoke (one that just joined, a static member
back under a new id) is not asked to revoke them at all. A member in the
UNKNOWN state (a state written by a newer coordinator) is fenced unless it
says it owns nothing.
"""

from __future__ import annotations

from dataclasses import replace

from broker.coordinators.consumer_groups.model import (
    NO_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberFenced,
    MemberState,
    Partitions,
)


def reconcile(
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    target: Partitions,
    assignment_epoch: int,
    owned: Partitions | None,
) -> ConsumerGroupMember:
    """``member`` moved as far toward ``target`` as it may now; ``owned`` is
    what its heartbeat says it owns (None: not said, unchanged)."""
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(group, member, target, assignment_epoch, owned)
    if member.state == MemberState.UNKNOWN:
        if owned is None or owned:
            raise MemberFenced("The member is in an unknown state: it must give up its partitions and rejoin.")
        return _next_assignment(group, replace(member, member_epoch=assignment_epoch), target, assignment_epoch, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS or member.member_epoch != assignment_epoch:
        return _next_assignment(group, member, target, assignment_epoch, owned)
    return member


def _owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    """Whether the member may still own some of ``partitions``: it did not say
    what it owns, or it says it owns some."""
    return owned is None or bool(owned & partitions)


def _next_assignment(
    group: ConsumerGroup, member: ConsumerGroupMember, target: Partitions, assignment_epoch: int, owned: Partitions | None
) -> ConsumerGroupMember:
    kept = member.assigned & target
    to_revoke = member.assigned - target
    if _owns_any(owned, to_revoke) and to_revoke:
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=kept,
            pending_revocation=to_revoke,
        )
    to_assign = target - member.assigned
    free = frozenset(tp for tp in to_assign if group.owner_other_than(tp, member.member_id) is None)
    # The previous epoch is the one the member may still retry with: it moves
    # only when the epoch does.
    previous = member.previous_member_epoch if member.member_epoch == assignment_epoch else member.member_epoch
    return replace(
        member,
        member_epoch=assignment_epoch,
        previous_member_epoch=previous,
        state=MemberState.UNRELEASED_PARTITIONS if to_assign - free else MemberState.STABLE,
        assigned=kept | free,
        pending_revocation=NO_PARTITIONS,
    )

"""What a classic-protocol group member does around a rebalance, eager or cooperative.

How this works and why: these are the member's decisions as pure functions of what it
owns and what the group answered, so they are tested without a broker;
``group.py`` carries them out (commits, callbacks, JoinGroup, SyncGroup).

- **Which protocol.** A member is cooperative (KIP-429) only when every assignor it
  lists is cooperative; listing any eager one makes it eager, because an eager
  assignor may be the one the group picks. ``cooperative-sticky`` also works in an
  eager member (as Java's does): that is the first step of KIP-429's rolling upgrade
  (``cooperative-sticky,range`` everywhere, then ``cooperative-sticky`` alone). The
  group picks one protocol all members offer (the broker's vote); the member runs
  the assignor of that name when it leads, and a name it never offered is an error.
- **Before JoinGroup** (``plan_join``). Eager: give everything up (commit, on_revoke)
  and claim nothing. Cooperative: keep everything still subscribed and claim it in
  the subscription's owned partitions with the generation it was owned in; give up
  only partitions of topics no longer subscribed. A member whose partitions were
  lost (fenced, session expired, stale generation) gives them all up without
  committing (on_lost) and joins as if new (no claims, generation -1).
- **After SyncGroup** (``plan_sync``). Eager: the assignment is the whole new set.
  Cooperative: revoke only what the new assignment lacks, assign only what is new,
  and rejoin at once if anything was revoked, so the next rebalance can hand it to
  its new owner (the cooperative assignor withholds a moving partition until then).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.client._core.errors import KafkaError
from odradek.client.consumer.assignors import COOPERATIVE, EAGER, NO_GENERATION, Assignor

TP = tuple[str, int]


def rebalance_protocol(strategies: Sequence[Assignor]) -> str:
    """COOPERATIVE when every listed assignor is cooperative, else EAGER."""
    if strategies and all(a.rebalance_protocol == COOPERATIVE for a in strategies):
        return COOPERATIVE
    return EAGER


def chosen_assignor(strategies: Sequence[Assignor], protocol_name: str | None) -> Assignor:
    """The assignor the group voted for, which must be one this member offered."""
    for assignor in strategies:
        if assignor.name == protocol_name:
            return assignor
    offered = ", ".join(a.name for a in strategies)
    raise KafkaError(
        ErrorCode.inconsistent_group_protocol,
        f"the group chose assignor {protocol_name!r}; this member offered {offered}",
    )


@dataclass(frozen=True, slots=True)
class JoinPlan:
    revoke: tuple[TP, ...]  # give up now: commit (auto-commit), on_revoke
    lose: tuple[TP, ...]  # lost: on_lost (or on_revoke), no commit
    claim: tuple[TP, ...]  # owned partitions the subscription carries
    generation: int  # the generation the subscription carries
    notify_empty: bool  # call on_revoke / on_lost even with no partitions (eager)


def plan_join(
    protocol: str,
    owned: Sequence[TP],
    generation: int,
    lost: bool,
    topics: Collection[str],
) -> JoinPlan:
    """What to give up before JoinGroup, and what to claim in it."""
    if lost:
        return JoinPlan((), tuple(owned), (), NO_GENERATION, False)
    if protocol == EAGER:
        return JoinPlan(tuple(owned), (), (), generation, generation >= 0)
    keep = tuple(tp for tp in owned if tp[0] in topics)
    gone = tuple(tp for tp in owned if tp[0] not in topics)
    return JoinPlan(gone, (), keep, generation, False)


@dataclass(frozen=True, slots=True)
class SyncPlan:
    revoke: tuple[TP, ...]  # commit (auto-commit), on_revoke, stop fetching
    assign: tuple[TP, ...]  # on_assign, start fetching (eager: the whole assignment)
    rejoin: bool  # partitions were revoked: rejoin so they can move


def plan_sync(protocol: str, owned: Sequence[TP], assigned: Sequence[TP]) -> SyncPlan:
    """What the new assignment changes for a member that kept ``owned`` through the join."""
    new = tuple(dict.fromkeys(assigned))
    if protocol == EAGER:
        return SyncPlan(tuple(owned), new, False)  # owned is empty: given up before joining
    have = set(owned)
    revoke = tuple(tp for tp in owned if tp not in set(new))
    return SyncPlan(revoke, tuple(tp for tp in new if tp not in have), bool(revoke))

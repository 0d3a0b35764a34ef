"""The member's rebalance decisions (consumer/rebalance.py), without a broker.

First each decision on its own: which protocol a member runs, which assignor it runs
for the group, what it gives up before JoinGroup and what the new assignment changes.
Then whole groups simulated over many rebalances — members join and leave, every
member applies plan_join / plan_sync around the leader's cooperative-sticky
assignment — checking KIP-429's promises: a partition never has two owners, a member
revokes only partitions that go to someone else, partitions that do not move are
never revoked, and the group is settled after at most two rebalances per change.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.client._core.errors import KafkaError
from odradek.client.consumer.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    EAGER,
    Subscription,
    TopicPartition,
)
from odradek.client.consumer.rebalance import (
    JoinPlan,
    SyncPlan,
    chosen_assignor,
    plan_join,
    plan_sync,
    rebalance_protocol,
)

RANGE, ROUND_ROBIN = ASSIGNORS["range"], ASSIGNORS["roundrobin"]
STICKY, COOP = ASSIGNORS["sticky"], ASSIGNORS["cooperative-sticky"]
TP = tuple[str, int]
A0, A1, A2, B0 = ("a", 0), ("a", 1), ("a", 2), ("b", 0)


def test_a_member_is_cooperative_only_if_every_assignor_is() -> None:
    assert rebalance_protocol([COOP]) == COOPERATIVE
    assert rebalance_protocol([COOP, RANGE]) == EAGER  # KIP-429's upgrade step
    assert rebalance_protocol([RANGE, COOP]) == EAGER
    assert rebalance_protocol([STICKY]) == EAGER
    assert rebalance_protocol([RANGE, ROUND_ROBIN]) == EAGER
    assert rebalance_protocol([]) == EAGER


def test_the_group_chosen_assignor_runs() -> None:
    assert chosen_assignor([RANGE, COOP], "cooperative-sticky") is COOP
    assert chosen_assignor([RANGE, COOP], "range") is RANGE
    with pytest.raises(KafkaError) as caught:
        chosen_assignor([RANGE, COOP], "roundrobin")
    assert caught.value.code() == ErrorCode.inconsistent_group_protocol
    assert "roundrobin" in str(caught.value) and "range, cooperative-sticky" in str(caught.value)
    with pytest.raises(KafkaError):
        chosen_assignor([RANGE], None)


def test_eager_gives_everything_up_before_joining() -> None:
    assert plan_join(EAGER, [A0, B0], 4, False, ["a", "b"]) == JoinPlan(
        revoke=(A0, B0), lose=(), claim=(), generation=4, notify_empty=True
    )
    # Not in a generation yet: nothing to revoke and nobody to tell.
    assert plan_join(EAGER, [], -1, False, ["a"]).notify_empty is False
    assert plan_join(EAGER, [], 2, False, ["a"]).notify_empty is True


def test_cooperative_keeps_and_claims_what_is_still_subscribed() -> None:
    assert plan_join(COOPERATIVE, [A0, A1], 7, False, ["a"]) == JoinPlan(
        revoke=(), lose=(), claim=(A0, A1), generation=7, notify_empty=False
    )
    # Unsubscribed from b: b's partitions are given up before joining, a's kept.
    assert plan_join(COOPERATIVE, [A0, B0], 7, False, ["a"]) == JoinPlan(
        revoke=(B0,), lose=(), claim=(A0,), generation=7, notify_empty=False
    )
    assert plan_join(COOPERATIVE, [A0], 7, False, []).revoke == (A0,)


@pytest.mark.parametrize("protocol", [EAGER, COOPERATIVE])
def test_lost_partitions_are_given_up_without_claims(protocol: str) -> None:
    plan = plan_join(protocol, [A0, B0], 5, True, ["a", "b"])
    assert plan == JoinPlan(revoke=(), lose=(A0, B0), claim=(), generation=-1, notify_empty=False)


def test_eager_sync_assigns_the_whole_assignment() -> None:
    assert plan_sync(EAGER, [], [A0, A1, A0]) == SyncPlan(revoke=(), assign=(A0, A1), rejoin=False)


def test_cooperative_sync_changes_only_what_moved() -> None:
    assert plan_sync(COOPERATIVE, [A0, A1, A2], [A0, B0]) == SyncPlan(
        revoke=(A1, A2), assign=(B0,), rejoin=True
    )
    assert plan_sync(COOPERATIVE, [A0, A1], [A1, A0]) == SyncPlan((), (), False)
    assert plan_sync(COOPERATIVE, [], [A0]) == SyncPlan((), (A0,), False)
    assert plan_sync(COOPERATIVE, [A0], []) == SyncPlan((A0,), (), True)


# -- whole groups --------------------------------------------------------------------------
class SimMember:
    def __init__(self, name: str, topics: tuple[str, ...]) -> None:
        self.name = name
        self.topics = topics
        self.owned: list[TP] = []
        self.generation = -1
        self.revoked: list[TP] = []  # everything it ever revoked while in the group


class SimGroup:
    """Members that all join every rebalance; the leader runs cooperative-sticky."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.members: dict[str, SimMember] = {}
        self.generation = 0
        self.history: list[dict[str, set[TP]]] = []

    def rebalance(self) -> bool:
        """One generation; True if some member asks for another (it revoked something)."""
        subscriptions = {}
        for member in self.members.values():
            plan = plan_join(COOPERATIVE, member.owned, member.generation, False, member.topics)
            assert plan.revoke == () and plan.lose == ()  # subscriptions never change here
            member.owned = list(plan.claim)
            subscriptions[member.name] = Subscription(
                member.topics,
                COOP.subscription_user_data(member.topics, (), plan.generation),
                tuple(TopicPartition(*tp) for tp in plan.claim),
                plan.generation,
            )
        self.generation += 1
        result = COOP.assign(subscriptions, self.counts)
        again = False
        # Members apply their assignments one by one, in any order: check ownership
        # is exclusive at every step, not only at the end.
        for name in sorted(self.members, reverse=self.generation % 2 == 0):
            member = self.members[name]
            member.generation = self.generation
            assigned = [(tp.topic, tp.partition) for tp in result[name].partitions]
            change = plan_sync(COOPERATIVE, member.owned, assigned)
            member.revoked += change.revoke
            member.owned = [tp for tp in member.owned if tp not in change.revoke]
            for tp in change.assign:
                holders = [m.name for m in self.members.values() if tp in m.owned]
                assert not holders, f"{tp} assigned to {name} while {holders} own it"
            member.owned += change.assign
            again = again or change.rejoin
        self.history.append({m.name: set(m.owned) for m in self.members.values()})
        return again

    def settle(self) -> int:
        rounds = 1
        while self.rebalance():
            rounds += 1
            assert rounds <= 2, "a change took more than two rebalances"
        return rounds

    def check_settled(self) -> None:
        owned = [tp for m in self.members.values() for tp in m.owned]
        assert len(owned) == len(set(owned))
        wanted = {
            (t, p)
            for m in self.members.values()
            for t in m.topics
            if t in self.counts
            for p in range(self.counts[t])
        }
        assert set(owned) == wanted


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, int], list[tuple[str, tuple[str, ...]]]]:
    counts = {t: draw(st.integers(1, 6)) for t in ("a", "b", "c")[: draw(st.integers(1, 3))]}
    topic_sets = st.lists(st.sampled_from(sorted(counts)), min_size=1, unique=True).map(
        lambda ts: tuple(sorted(ts))
    )
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(["join", "leave"]), topic_sets),
            min_size=1,
            max_size=8,
        )
    )
    return counts, steps


@settings(max_examples=120, deadline=None)
@given(scenarios())
@example(  # the last join once left loads 4, 3, 4, 3, 2, evened out only by revoking b3 later
    (
        {"a": 4, "b": 6, "c": 6},
        [
            ("join", ("a", "b", "c")),
            ("join", ("a", "b")),
            ("join", ("a", "c")),
            ("join", ("b",)),
            ("join", ("b",)),
        ],
    )
)
@example(  # moving the fewest: once m01 revoked a2 in the last join and got it back next
    (
        {"a": 5, "b": 6},
        [("join", ("a",)), ("join", ("a", "b")), ("join", ("a", "b")), ("join", ("a",))],
    )
)
def test_cooperative_groups_never_double_own_and_revoke_only_what_moves(
    scenario: tuple[dict[str, int], list[tuple[str, tuple[str, ...]]]],
) -> None:
    counts, steps = scenario
    group = SimGroup(counts)
    serial = 0
    for kind, topics in steps:
        if kind == "leave" and group.members:
            leaving = sorted(group.members)[serial % len(group.members)]
            del group.members[leaving]  # it revoked all and left (LeaveGroup)
        else:
            serial += 1
            group.members[f"m{serial:02d}"] = SimMember(f"m{serial:02d}", topics)
        if not group.members:
            continue
        before = {m.name: set(m.owned) for m in group.members.values()}
        revoked_before = {m.name: len(m.revoked) for m in group.members.values()}
        group.settle()
        group.check_settled()
        for member in group.members.values():
            gave_up = set(member.revoked[revoked_before[member.name] :])
            # Revoked only what then went elsewhere; kept the rest throughout.
            assert not gave_up & set(member.owned), (member.name, gave_up)
            kept = before[member.name] & set(member.owned)
            assert all(kept <= h[member.name] for h in group.history[-2:] if member.name in h)


def test_a_third_member_joining_moves_only_its_share() -> None:
    """Two members own 3 partitions each; a third joins: each gives up exactly one,
    which the newcomer gets in the second rebalance."""
    group = SimGroup({"a": 6})
    group.members = {n: SimMember(n, ("a",)) for n in ("m1", "m2")}
    assert group.settle() == 1
    first = {n: set(m.owned) for n, m in group.members.items()}
    assert sorted(len(s) for s in first.values()) == [3, 3]
    group.members["m3"] = SimMember("m3", ("a",))
    assert group.settle() == 2
    group.check_settled()
    for name in ("m1", "m2"):
        member = group.members[name]
        assert len(member.revoked) == 1 and set(member.owned) < first[name]
    assert set(group.members["m3"].owned) == {
        tp for name in ("m1", "m2") for tp in group.members[name].revoked
    }

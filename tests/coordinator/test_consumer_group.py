"""The KIP-848 consumer group state machine and its assignors, on a fake clock."""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.group.assignors import assignor_name, range_assign, uniform_assign
from odradek.coordinator.group.consumer import ConsumerGroup
from odradek.coordinator.group.consumer_model import (
    ConsumerGroupSettings,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
    Partitions,
    flatten,
)
from odradek.server.config import BrokerConfig, ConfigError

SESSION_MS = 45_000
REBALANCE_MS = 30_000


@dataclass(frozen=True)
class FakeTopic:
    topic_id: uuid.UUID
    partitions: Mapping[int, object]


@dataclass
class FakeMetadata:
    topics: dict[str, FakeTopic] = field(default_factory=dict)

    def with_topic(self, name: str, count: int) -> FakeMetadata:
        """A new image (the group notices metadata changes by identity)."""
        topics = dict(self.topics)
        old = topics.get(name)
        topic_id = old.topic_id if old else uuid.uuid5(uuid.NAMESPACE_DNS, name)
        topics[name] = FakeTopic(topic_id, dict.fromkeys(range(count)))
        return FakeMetadata(topics)

    def tid(self, name: str) -> uuid.UUID:
        return self.topics[name].topic_id


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Env:
    def __init__(self, **overrides: object) -> None:
        self.clock = Clock()
        self.metadata = FakeMetadata()
        self.ids = (f"server-{i}" for i in itertools.count())
        self.group = ConsumerGroup(
            "g",
            ConsumerGroupSettings(**overrides),  # type: ignore[arg-type]
            clock=self.clock,
            new_member_id=lambda: next(self.ids),
        )

    def hb(self, request: HeartbeatRequest, *, v1: bool = True) -> HeartbeatResult:
        return self.group.heartbeat(request, self.metadata, require_member_id=v1)

    def tps(self, topic: str, *partitions: int) -> Partitions:
        return frozenset((self.metadata.tid(topic), p) for p in partitions)


class Member:
    """A well-behaved KIP-848 client: revokes what it is told to, reports what it owns."""

    def __init__(
        self,
        env: Env,
        member_id: str,
        topics: tuple[str, ...] = ("t",),
        *,
        assignor: str | None = None,
        instance_id: str | None = None,
        regex: str | None = None,
    ) -> None:
        self.env = env
        self.member_id = member_id
        self.topics = topics
        self.assignor = assignor
        self.instance_id = instance_id
        self.regex = regex
        self.epoch = 0
        self.owned: Partitions = frozenset()
        self.last: HeartbeatResult | None = None
        self.full = False  # after a lost response, clients resend every field

    def join(self) -> HeartbeatResult:
        self.epoch, self.owned = 0, frozenset()
        return self.heartbeat()

    def heartbeat(self) -> HeartbeatResult:
        joining = self.epoch == 0 or self.full
        self.full = False
        result = self.env.hb(
            HeartbeatRequest(
                member_id=self.member_id,
                member_epoch=self.epoch,
                instance_id=self.instance_id,
                rebalance_timeout_ms=REBALANCE_MS if joining else -1,
                subscribed_topic_names=None if self.regex else self.topics if joining else None,
                subscribed_topic_regex=self.regex if joining else None,
                server_assignor=self.assignor if joining else None,
                owned=self.owned,
                client_id="client",
                client_host="/127.0.0.1",
            )
        )
        self.last = result
        if result.error == "NONE":
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = flatten(result.assignment)
        return result

    def leave(self, epoch: int = -1) -> HeartbeatResult:
        result = self.env.hb(HeartbeatRequest(self.member_id, epoch, instance_id=self.instance_id))
        self.owned = frozenset()
        return result


def converge(members: list[Member], rounds: int = 10) -> None:
    """Heartbeat round-robin until the group is stable, checking single ownership."""
    for _ in range(rounds):
        for member in members:
            member.heartbeat()
            assert_exclusive(members)
        if members[0].env.group.state is ConsumerGroupState.STABLE:
            return
    raise AssertionError(f"not stable: {members[0].env.group.describe()}")


def assert_exclusive(members: list[Member]) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member in members:
        for tp in member.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {member.member_id}"
            seen[tp] = member.member_id


# -- joining and epochs ---------------------------------------------------------------------
def test_first_member_gets_everything_at_epoch_one() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 4)
    a = Member(env, "a")
    result = a.join()
    assert result.error == "NONE" and result.member_epoch == 1
    assert a.owned == env.tps("t", 0, 1, 2, 3)
    assert result.heartbeat_interval_ms == 5000
    assert env.group.state is ConsumerGroupState.STABLE
    assert (env.group.group_epoch, env.group.assignment_epoch) == (1, 1)
    again = a.heartbeat()  # nothing changed: no assignment in the response
    assert again.error == "NONE" and again.assignment is None and again.member_epoch == 1


def test_v0_server_names_the_member_and_v1_requires_a_client_id() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 1)
    join = HeartbeatRequest(
        "", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=("t",), owned=frozenset()
    )
    assert env.hb(join, v1=True).error == "INVALID_REQUEST"
    result = env.hb(join, v1=False)
    assert result.error == "NONE" and result.member_id == "server-0"


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (HeartbeatRequest("m", 0, subscribed_topic_names=("t",), owned=frozenset()), "Rebalance"),
        (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",)), "Topic"),
        (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, owned=frozenset()), "Subscribed"),
        (HeartbeatRequest("m", -2), "InstanceId"),
        (HeartbeatRequest("m", -3), "MemberEpoch"),
        (HeartbeatRequest("", 3), "MemberId"),
    ],
)
def test_malformed_heartbeats_are_invalid_requests(
    request_: HeartbeatRequest, message: str
) -> None:
    result = Env().hb(request_, v1=False)
    assert result.error == "INVALID_REQUEST" and message in (result.message or "")


def test_incremental_revocation_across_three_members() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 6)
    a, b, c = Member(env, "a"), Member(env, "b"), Member(env, "c")
    a.join()
    assert len(a.owned) == 6 and a.epoch == 1
    b.join()  # epoch 2: target a=3, b=3; a still holds all six
    assert env.group.group_epoch == 2 and b.epoch == 2 and b.owned == frozenset()
    assert env.group.state is ConsumerGroupState.RECONCILING
    result = a.heartbeat()  # a must revoke three partitions first, at its old epoch
    assert result.member_epoch == 1 and len(a.owned) == 3
    kept = a.owned
    assert env.group.describe().members[0].member_epoch == 1
    a.heartbeat()  # acknowledges: the revoked partitions are released
    assert a.epoch == 2 and a.owned == kept
    b.heartbeat()
    assert b.owned == env.tps("t", 0, 1, 2, 3, 4, 5) - kept
    assert env.group.state is ConsumerGroupState.STABLE
    c.join()
    converge([a, b, c])
    assert [len(m.owned) for m in (a, b, c)] == [2, 2, 2]
    assert a.owned < kept  # sticky: a kept two of its own
    assert all(m.epoch == 3 for m in (a, b, c))


def test_new_partitions_wait_until_the_previous_owner_released_them() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 2)
    a, b = Member(env, "a"), Member(env, "b")
    a.join()
    b.join()
    b.heartbeat()
    assert b.owned == frozenset()  # a has not revoked yet
    state = env.group.describe().members[1]
    assert state.target_assignment and not state.assignment
    a.heartbeat()
    a.heartbeat()
    b.heartbeat()
    assert len(a.owned) == len(b.owned) == 1


def test_member_that_leaves_gives_its_partitions_to_the_others_only() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 12)
    members = [Member(env, name) for name in "abc"]
    for member in members:
        member.join()
    converge(members)
    a, b, c = members
    before = {m.member_id: m.owned for m in (a, b)}
    assert c.leave().error == "NONE"
    converge([a, b])
    for member in (a, b):
        assert before[member.member_id] < member.owned  # kept all, gained two
        assert len(member.owned) == 6
    assert c.heartbeat().error == "UNKNOWN_MEMBER_ID"


# -- assignors ------------------------------------------------------------------------------
def test_range_assignor_splits_each_topic_over_sorted_subscribers() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("x", 5).with_topic("y", 2)
    b = Member(env, "b", ("x", "y"), assignor="range")
    a = Member(env, "a", ("x",), assignor="range")
    c = Member(env, "c", ("x", "y"), assignor="range")
    for member in (b, a, c):
        member.join()
    converge([a, b, c])
    assert env.group.assignor_name == "range"
    assert a.owned == env.tps("x", 0, 1)
    assert b.owned == env.tps("x", 2, 3) | env.tps("y", 0)
    assert c.owned == env.tps("x", 4) | env.tps("y", 1)


def test_uniform_is_the_default_and_unknown_assignors_are_refused() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 3)
    result = Member(env, "a", assignor="sticky").join()
    assert result.error == "UNSUPPORTED_ASSIGNOR"
    Member(env, "b").join()
    assert env.group.assignor_name == "uniform"
    assert assignor_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    assert assignor_name("uniform") == "uniform" and assignor_name("sticky") is None


def test_uniform_assignor_is_sticky_and_balanced() -> None:
    t = uuid.uuid4()
    subs = {m: frozenset({t}) for m in "abc"}
    first = uniform_assign(subs, {t: 12}, {})
    assert sorted(len(a[t]) for a in first.values()) == [4, 4, 4]
    subs["d"] = frozenset({t})
    second = uniform_assign(subs, {t: 12}, first)
    assert sorted(len(a.get(t, ())) for a in second.values()) == [3, 3, 3, 3]
    for member in "abc":
        assert second[member][t] <= first[member][t]  # only moved what balance requires
    del subs["a"]
    third = uniform_assign(subs, {t: 12}, second)
    for member in "bcd":
        assert second[member][t] <= third[member][t]


def test_assignor_config_takes_names_and_kafka_class_names() -> None:
    config = BrokerConfig(
        {
            "group.consumer.assignors": (
                "org.apache.kafka.coordinator.group.assignor.RangeAssignor, uniform"
            )
        }
    )
    assert config["group.consumer.assignors"] == ("range", "uniform")
    assert BrokerConfig()["group.consumer.assignors"] == ("uniform", "range")
    assert BrokerConfig()["group.consumer.session.timeout.ms"] == 45_000
    assert BrokerConfig()["group.consumer.heartbeat.interval.ms"] == 5_000
    with pytest.raises(ConfigError, match=r"group\.consumer\.assignors"):
        BrokerConfig({"group.consumer.assignors": "sticky"})


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcdef"), st.sets(st.integers(0, 3), min_size=0), min_size=1),
    st.lists(st.integers(0, 7), min_size=4, max_size=4),
    st.randoms(use_true_random=False),
)
def test_assignors_assign_every_subscribed_partition_exactly_once(
    chosen: dict[str, set[int]], counts: list[int], rng: random.Random
) -> None:
    topics = [uuid.UUID(int=i + 1) for i in range(4)]
    subs = {m: frozenset(topics[i] for i in ts) for m, ts in chosen.items()}
    partition_counts = {t: n for t, n in zip(topics, counts, strict=True)}
    previous = {
        m: {t: frozenset(rng.sample(range(9), rng.randint(0, 3))) for t in topics} for m in subs
    }
    homogeneous = len(set(subs.values())) == 1
    for assign in (uniform_assign, range_assign):
        result = assign(subs, partition_counts, previous)
        seen = set()
        for member, assignment in result.items():
            for topic_id, partitions in assignment.items():
                assert topic_id in subs[member]
                for p in partitions:
                    assert (topic_id, p) not in seen and p < partition_counts[topic_id]
                    seen.add((topic_id, p))
        wanted = {
            (t, p)
            for t in topics
            if any(t in s for s in subs.values())
            for p in range(partition_counts[t])
        }
        assert seen == wanted
        if assign is uniform_assign:
            load = {m: sum(len(ps) for ps in result.get(m, {}).values()) for m in subs}
            if homogeneous:
                assert max(load.values()) - min(load.values()) <= 1
            for member, assignment in result.items():  # no partition could move to even out
                for topic_id, partitions in assignment.items():
                    takers = [m for m in subs if topic_id in subs[m]]
                    assert not partitions or min(load[m] for m in takers) >= load[member] - 1


# -- timeouts, fencing, leaving -------------------------------------------------------------
def test_session_timeout_removes_a_silent_member() -> None:
    env = Env(session_timeout_ms=SESSION_MS)
    env.metadata = env.metadata.with_topic("t", 4)
    a, b = Member(env, "a"), Member(env, "b")
    a.join()
    b.join()
    converge([a, b])
    env.clock.now += SESSION_MS - 1
    a.heartbeat()
    assert env.group.next_deadline_ms() == env.clock.now + 1  # b's session
    env.clock.now += 1
    env.group.tick()
    assert list(env.group.members) == ["a"]
    assert b.heartbeat().error == "UNKNOWN_MEMBER_ID"
    converge([a])
    assert len(a.owned) == 4
    assert b.join().error == "NONE"  # and it may come back


def test_member_that_does_not_revoke_in_time_is_removed() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 4)
    a, b = Member(env, "a"), Member(env, "b")
    a.join()
    b.join()
    result = env.hb(HeartbeatRequest("a", 1))  # told to revoke; never acknowledges
    assert result.member_epoch == 1
    env.clock.now += REBALANCE_MS
    b.heartbeat()  # keeps b's session alive
    env.group.tick()
    assert list(env.group.members) == ["b"]
    converge([b])
    assert len(b.owned) == 4


def test_fenced_member_epochs() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 2)
    a = Member(env, "a")
    a.join()
    assert env.hb(HeartbeatRequest("a", 5)).error == "FENCED_MEMBER_EPOCH"
    b = Member(env, "b")
    b.join()
    a.heartbeat()
    a.heartbeat()  # a now at epoch 2 with one partition
    assert a.epoch == 2
    # The response carrying epoch 2 was lost: the previous epoch with a subset is fine.
    retry = env.hb(HeartbeatRequest("a", 1, owned=a.owned))
    assert retry.error == "NONE" and retry.member_epoch == 2
    stale = env.hb(HeartbeatRequest("a", 1, owned=env.tps("t", 0, 1)))
    assert stale.error == "FENCED_MEMBER_EPOCH"
    assert env.hb(HeartbeatRequest("a", 1)).error == "FENCED_MEMBER_EPOCH"
    assert env.hb(HeartbeatRequest("nobody", 1)).error == "UNKNOWN_MEMBER_ID"
    rejoined = a.join()  # a fenced member rejoins with epoch 0 and keeps its place
    assert rejoined.error == "NONE" and rejoined.assignment is not None


def test_static_member_leaves_and_comes_back_under_a_new_id() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 4)
    a = Member(env, "a1", instance_id="A")
    b = Member(env, "b")
    a.join()
    b.join()
    converge([a, b])
    kept, epoch = a.owned, env.group.group_epoch
    duplicate = Member(env, "a2", instance_id="A").join()
    assert duplicate.error == "UNRELEASED_INSTANCE_ID"
    assert a.leave(-2).error == "NONE"
    assert env.group.group_epoch == epoch  # its partitions wait for it
    assert env.hb(HeartbeatRequest("a1", a.epoch)).error == "FENCED_MEMBER_EPOCH"
    again = Member(env, "a2", instance_id="A")
    result = again.join()
    assert result.error == "NONE" and again.owned == kept and env.group.group_epoch == epoch
    assert "a1" not in env.group.members and "a2" in env.group.members
    # A static member that stays away for its session is removed.
    again.leave(-2)
    env.clock.now += SESSION_MS
    b.heartbeat()
    env.group.tick()
    assert list(env.group.members) == ["b"]


def test_max_size_and_assignor_choice() -> None:
    env = Env(max_size=2)
    env.metadata = env.metadata.with_topic("t", 2)
    Member(env, "a", assignor="range").join()
    Member(env, "b").join()
    assert Member(env, "c").join().error == "GROUP_MAX_SIZE_REACHED"
    assert env.group.assignor_name == "range"  # the only one asked for


# -- metadata, subscriptions, offsets -------------------------------------------------------
def test_topic_created_or_grown_after_subscribing() -> None:
    env = Env()
    a = Member(env, "a", ("late",))
    a.join()
    assert a.owned == frozenset() and env.group.state is ConsumerGroupState.STABLE
    env.metadata = env.metadata.with_topic("late", 2)
    a.heartbeat()
    assert a.owned == env.tps("late", 0, 1)
    env.metadata = env.metadata.with_topic("late", 3)
    a.heartbeat()
    assert a.owned == env.tps("late", 0, 1, 2) and a.epoch == env.group.group_epoch


def test_regex_subscription_and_changing_subscriptions() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("orders-eu", 1).with_topic("orders-us", 1)
    env.metadata = env.metadata.with_topic("audit", 1)
    a = Member(env, "a", regex="orders-.*")
    a.join()
    assert a.owned == env.tps("orders-eu", 0) | env.tps("orders-us", 0)
    bad = Member(env, "b", regex="(").join()
    assert bad.error == "INVALID_REGULAR_EXPRESSION"
    change = env.hb(HeartbeatRequest("a", a.epoch, subscribed_topic_regex="audit", owned=a.owned))
    assert change.error == "NONE" and change.assignment is not None
    assert flatten(change.assignment) == frozenset()  # revoke first
    a.epoch, a.owned = change.member_epoch, frozenset()
    a.heartbeat()
    assert a.owned == env.tps("audit", 0)


def test_offset_commit_and_fetch_check_the_member_epoch() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 1)
    group = env.group
    assert group.validate_offset_commit(-1, "", None) == "NONE"  # empty: anyone may commit
    a = Member(env, "a")
    a.join()
    assert group.validate_offset_commit(1, "a", None) == "NONE"
    assert group.validate_offset_commit(0, "a", None) == "STALE_MEMBER_EPOCH"
    assert group.validate_offset_commit(-1, "", None) == "UNKNOWN_MEMBER_ID"
    assert group.validate_offset_commit(1, "zz", None) == "UNKNOWN_MEMBER_ID"
    assert group.validate_offset_fetch(None, -1) == "NONE"
    assert group.validate_offset_fetch("a", 1) == "NONE"
    assert group.validate_offset_fetch("a", 2) == "STALE_MEMBER_EPOCH"


def test_describe_and_states() -> None:
    env = Env()
    env.metadata = env.metadata.with_topic("t", 2)
    assert env.group.state is ConsumerGroupState.EMPTY
    a = Member(env, "a", instance_id="i")
    a.join()
    d = env.group.describe()
    assert (d.state, d.group_epoch, d.assignment_epoch) == ("Stable", 1, 1)
    assert d.assignor_name == "uniform"
    (m,) = d.members
    assert m.member_id == "a" and m.instance_id == "i" and m.subscribed_topic_names == ("t",)
    assert m.assignment == m.target_assignment == {env.metadata.tid("t"): (0, 1)}
    a.leave()
    assert env.group.state is ConsumerGroupState.EMPTY and env.group.is_empty


# -- randomized: many members joining, leaving, crashing, never double ownership ------------
@pytest.mark.parametrize("seed", range(6))
def test_random_membership_changes_never_double_assign(seed: int) -> None:
    rng = random.Random(seed)
    env = Env(session_timeout_ms=SESSION_MS, assignors=("uniform", "range"))
    env.metadata = env.metadata.with_topic("t", 7).with_topic("u", 5)
    assignor = rng.choice(["uniform", "range", None])
    members: list[Member] = []
    names = (f"m{i}" for i in itertools.count())
    for _ in range(300):
        action = rng.random()
        if action < 0.1 and len(members) < 6:
            member = Member(env, next(names), rng.choice([("t",), ("t", "u"), ("u",)]))
            member.assignor = assignor
            member.join()
            members.append(member)
        elif action < 0.14 and members:
            members.pop(rng.randrange(len(members))).leave()
        elif action < 0.16 and members:
            crashed = members.pop(rng.randrange(len(members)))
            crashed.owned = frozenset()  # it stops consuming; its session will end
        elif action < 0.2 and members:
            lost = rng.choice(members)  # the response is lost: the client learns nothing
            state = lost.epoch, lost.owned
            lost.heartbeat()
            lost.epoch, lost.owned = state
            lost.full = True
        elif action < 0.24:
            env.clock.now += rng.randint(1, 20_000)
            for member in members:
                member.heartbeat()  # the living keep their sessions
            env.group.tick()
        elif members:
            member = rng.choice(members)
            if member.heartbeat().error in ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"):
                member.owned = frozenset()
                member.join()
        assert_exclusive(members)
    env.clock.now += SESSION_MS
    for member in members:
        member.heartbeat()
    env.group.tick()
    if members:
        for _ in range(20):
            for member in members:
                if member.heartbeat().error != "NONE":
                    member.join()
                assert_exclusive(members)
        assert env.group.state is ConsumerGroupState.STABLE
        owned = set().union(*(m.owned for m in members))
        subscribed = {t for m in members for t in m.topics}
        assert owned == set().union(
            *(env.tps(t, *range(len(env.metadata.topics[t].partitions))) for t in subscribed)
        )

"""Client-side partition assignors of the classic consumer group protocol.

How this works and why: the group leader — a client, not the broker — runs the
assignor every member agreed on over all members' subscriptions and sends each member
its assignment. librdkafka, Java and this client share groups and any of them may lead,
so the assignors carry Kafka's names and compute what Kafka's do (bytes: see
``consumer_protocol``, whose names are re-exported here):

``range``
    per topic, the partitions split into contiguous ranges over the members subscribed
    to it in member order; the first ``partitions % members`` get one extra (Java's
    ``RangeAssignor`` without racks; librdkafka's ``range``).
``roundrobin``
    all subscribed partitions sorted by topic then partition, dealt to the members in
    member order, skipping members not subscribed to the partition's topic.
``sticky``
    balanced first, then sticky (KIP-54), eager. What a member owned travels in its
    user data (``StickyAssignorUserData`` v1), as Java's ``StickyAssignor`` writes it.
``cooperative-sticky``
    the same target from the subscription's ``owned_partitions`` and ``generation_id``
    (KIP-429); a partition moving to another member is left out of this generation's
    assignment, so its owner revokes it first and the next rebalance hands it over.
    Its user data is the int32 generation, as Java's.

The sticky target follows Java's ``AbstractStickyAssignor``: previously owned
partitions count only when claimed by members of the newest generation present (a
partition two of them claim counts for neither), and only while the topic exists and
the member is still subscribed. With one subscription for all, every member keeps its
owned partitions up to its quota (``partitions // members``, one more for the first
``partitions % members`` members that own that many), then the rest are dealt round
robin to the members below the minimum quota, then one each to members at it, in the
order they reached it. With different subscriptions, owned partitions are kept, the
rest go one by one to the least loaded subscribed member (partitions with the fewest
possible owners first), then a partition moves to a subscribed member with two fewer
while there is one — partitions nobody kept move first. Ties may break differently
from Java's or librdkafka's; that is harmless, as every member takes what the leader
sends. Cooperative: a partition is withheld while any newest-generation member other
than its new owner claims it (double claims included, where Java lets one through).
Member order (range, roundrobin, ties elsewhere) is Java's ``MemberInfo`` order: static
members (with a ``group.instance.id``) first by instance id, then the others by member
id; strings compare by UTF-16 code units like ``String.compareTo``. Racks (KIP-881) are
carried but not used.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple, Protocol

from odradek.client.consumer_protocol import (
    HIGHEST_VERSION,
    NO_GENERATION,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
    protocol_version,
)

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "EAGER",
    "HIGHEST_VERSION",
    "NO_GENERATION",
    "Assignment",
    "Assignor",
    "ConsumerProtocolError",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_sticky_user_data",
    "encode_subscription",
    "get_assignor",
    "member_order",
    "protocol_version",
    "sticky_target",
]

EAGER: Final = "eager"
COOPERATIVE: Final = "cooperative"
_I32 = struct.Struct(">i")


# -- ordering ----------------------------------------------------------------------------
def _java(text: str) -> bytes:
    """Sort key giving Java's ``String.compareTo`` order (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


def _tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    return _java(tp.topic), tp.partition


def member_order(members: Mapping[str, Subscription]) -> list[str]:
    """Java's ``MemberInfo`` order: static members by instance id first, then by member id."""

    def key(member_id: str) -> tuple[int, bytes]:
        instance = members[member_id].group_instance_id
        return (0, _java(instance)) if instance is not None else (1, _java(member_id))

    return sorted(members, key=key)


def _result(
    order: Sequence[str], owned: Mapping[str, Iterable[TopicPartition]]
) -> dict[str, Assignment]:
    return {m: Assignment(tuple(sorted(owned[m], key=_tp_key))) for m in order}


# -- assignors ---------------------------------------------------------------------------
class Assignor(Protocol):
    name: str
    rebalance_protocol: str  # EAGER or COOPERATIVE

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """User data for this member's subscription (its last assignment, generation)."""
        ...

    def assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> dict[str, Assignment]: ...


class RangeAssignor:
    name = "range"
    rebalance_protocol = EAGER

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> dict[str, Assignment]:
        order = member_order(members)
        owned: dict[str, list[TopicPartition]] = {m: [] for m in order}
        subscribers: dict[str, list[str]] = {}
        for member_id in order:
            for topic in dict.fromkeys(members[member_id].topics):
                subscribers.setdefault(topic, []).append(member_id)
        for topic, consumers in subscribers.items():
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            quota, extra = divmod(count, len(consumers))
            start = 0
            for index, member_id in enumerate(consumers):
                size = quota + (1 if index < extra else 0)
                owned[member_id].extend(
                    TopicPartition(topic, p) for p in range(start, start + size)
                )
                start += size
        return _result(order, owned)


class RoundRobinAssignor:
    name = "roundrobin"
    rebalance_protocol = EAGER

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> dict[str, Assignment]:
        order = member_order(members)
        owned: dict[str, list[TopicPartition]] = {m: [] for m in order}
        subscribed = {m: frozenset(members[m].topics) for m in order}
        topics = sorted(
            {t for s in subscribed.values() for t in s if t in partitions_per_topic}, key=_java
        )
        turn = 0
        for topic in topics:
            for partition in range(partitions_per_topic[topic]):
                while topic not in subscribed[order[turn % len(order)]]:
                    turn += 1
                owned[order[turn % len(order)]].append(TopicPartition(topic, partition))
                turn += 1
        return _result(order, owned)


class _Ownership(NamedTuple):
    claims: dict[str, list[TopicPartition]]  # unique claims of the newest generation
    claimants: dict[TopicPartition, set[str]]  # every newest-generation claim


def _ownership(owned: Mapping[str, tuple[Sequence[TopicPartition], int]]) -> _Ownership:
    newest = max((generation for _, generation in owned.values()), default=NO_GENERATION)
    claimants: dict[TopicPartition, set[str]] = {}
    for member_id, (partitions, generation) in owned.items():
        if generation == newest:
            for tp in partitions:
                claimants.setdefault(TopicPartition(tp[0], tp[1]), set()).add(member_id)
    claims: dict[str, list[TopicPartition]] = {m: [] for m in owned}
    for tp, members in claimants.items():
        if len(members) == 1:
            claims[next(iter(members))].append(tp)
    return _Ownership(claims, claimants)


def sticky_target(
    members: Mapping[str, Subscription],
    partitions_per_topic: Mapping[str, int],
    claims: Mapping[str, Sequence[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    """The balanced, then sticky, assignment both sticky assignors aim for."""
    order = member_order(members)
    subscribed = {
        m: frozenset(t for t in members[m].topics if t in partitions_per_topic) for m in order
    }
    topics = sorted({t for s in subscribed.values() for t in s}, key=_java)
    partitions = [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]
    kept: dict[str, list[TopicPartition]] = {}
    for member_id in order:
        kept[member_id] = sorted(
            (
                tp
                for tp in claims.get(member_id, ())
                if tp.topic in subscribed[member_id]
                and 0 <= tp.partition < partitions_per_topic[tp.topic]
            ),
            key=_tp_key,
        )
    if len(set(subscribed.values())) <= 1:
        return _constrained(order, partitions, kept)
    return _general(order, subscribed, partitions, kept)


def _constrained(
    order: list[str], partitions: list[TopicPartition], kept: dict[str, list[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    """All members subscribe to the same topics: quotas, owned partitions kept up to them."""
    if not order:
        return {}
    min_quota, extra = divmod(len(partitions), len(order))
    over = 0  # members holding min_quota + 1
    owned: dict[str, list[TopicPartition]] = {}
    for member_id in order:
        mine = kept[member_id]
        if len(mine) <= min_quota:
            owned[member_id] = list(mine)
        elif over < extra:
            owned[member_id] = mine[: min_quota + 1]
            over += 1
        else:
            owned[member_id] = mine[:min_quota]
    taken = {tp for tps in owned.values() for tp in tps}
    under = [m for m in order if len(owned[m]) < min_quota]
    at_min = deque(m for m in order if len(owned[m]) == min_quota)
    turn = 0
    for tp in (tp for tp in partitions if tp not in taken):
        if under:  # round robin over the members below the minimum quota
            turn %= len(under)
            member_id = under[turn]
            owned[member_id].append(tp)
            if len(owned[member_id]) == min_quota:
                at_min.append(under.pop(turn))
            else:
                turn += 1
        else:  # then one extra each, in the order members reached the minimum
            owned[at_min.popleft()].append(tp)
    return owned


def _general(
    order: list[str],
    subscribed: Mapping[str, frozenset[str]],
    partitions: list[TopicPartition],
    kept: dict[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    """Different subscriptions: keep, place the rest least-loaded first, then even out."""
    rank = {m: i for i, m in enumerate(order)}
    eligible = {
        topic: [m for m in order if topic in subscribed[m]]
        for topic in {tp.topic for tp in partitions}
    }
    owned = {m: set(kept[m]) for m in order}
    previous = {tp: m for m, tps in kept.items() for tp in tps}
    free = [tp for tp in partitions if tp not in previous]
    # Partitions with the fewest possible owners first: they constrain the most.
    free.sort(key=lambda tp: (len(eligible[tp.topic]), *_tp_key(tp)))
    # Among the least loaded, the member that could take the fewest partitions: a member
    # with a wider subscription can still even out later with partitions of its other
    # topics, and a wrong choice here would have to be undone by moving (in cooperative
    # rebalancing: revoking) a partition somebody kept.
    reach = {m: sum(1 for tp in partitions if tp.topic in subscribed[m]) for m in order}
    for tp in free:
        taker = min(eligible[tp.topic], key=lambda m: (len(owned[m]), reach[m], rank[m]))
        owned[taker].add(tp)
    # While a partition can go to a subscribed member with two fewer, move it: each move
    # lowers the sum of squared loads, so this ends, with every member within one of
    # anyone it could take a partition from. Moves take partitions nobody kept first.
    while True:
        best = {
            topic: min(members, key=lambda m: (len(owned[m]), rank[m]))
            for topic, members in eligible.items()
        }
        move = None
        for giver in sorted(order, key=lambda m: (-len(owned[m]), rank[m])):
            load = len(owned[giver])
            if load < 2:
                break
            for tp in sorted(
                owned[giver], key=lambda tp: (previous.get(tp) == giver, *_tp_key(tp))
            ):
                if len(owned[best[tp.topic]]) <= load - 2:
                    move = (giver, best[tp.topic], tp)
                    break
            if move:
                break
        if move is None:
            return {m: list(owned[m]) for m in order}
        giver, taker, tp = move
        owned[giver].remove(tp)
        owned[taker].add(tp)


class StickyAssignor:
    """Java's ``StickyAssignor`` (eager): ownership from ``StickyAssignorUserData``."""

    name = "sticky"
    rebalance_protocol = EAGER

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return encode_sticky_user_data(owned, generation)

    def member_data(self, subscription: Subscription) -> tuple[Sequence[TopicPartition], int]:
        decoded = decode_sticky_user_data(subscription.user_data or b"")
        if decoded is not None:
            return decoded
        return subscription.owned_partitions, subscription.generation

    def assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> dict[str, Assignment]:
        ownership = _ownership({m: self.member_data(s) for m, s in members.items()})
        target = sticky_target(members, partitions_per_topic, ownership.claims)
        return _result(member_order(members), target)


class CooperativeStickyAssignor(StickyAssignor):
    """Java's ``CooperativeStickyAssignor``: moving partitions wait one rebalance."""

    name = "cooperative-sticky"
    rebalance_protocol = COOPERATIVE

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return _I32.pack(generation)

    def member_data(self, subscription: Subscription) -> tuple[Sequence[TopicPartition], int]:
        generation = subscription.generation
        if generation < 0 and subscription.user_data and len(subscription.user_data) >= 4:
            generation = int(_I32.unpack_from(subscription.user_data, 0)[0])
        return subscription.owned_partitions, generation

    def assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> dict[str, Assignment]:
        ownership = _ownership({m: self.member_data(s) for m, s in members.items()})
        target = sticky_target(members, partitions_per_topic, ownership.claims)
        # A partition someone else still owns is revoked first (that member's assignment
        # lacks it) and assigned in the next generation.
        withheld = {
            m: [tp for tp in tps if ownership.claimants.get(tp, {m}) <= {m}]
            for m, tps in target.items()
        }
        return _result(member_order(members), withheld)


ASSIGNORS: Final[Mapping[str, Assignor]] = {
    a.name: a
    for a in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor())
}
_JAVA_CLASSES: Final = {
    "RangeAssignor": "range",
    "RoundRobinAssignor": "roundrobin",
    "StickyAssignor": "sticky",
    "CooperativeStickyAssignor": "cooperative-sticky",
}


def get_assignor(name: str) -> Assignor:
    """An assignor by protocol name or Java class name (``...consumer.RangeAssignor``)."""
    text = name.strip()
    short = text if text in ASSIGNORS else _JAVA_CLASSES.get(text.rsplit(".", 1)[-1])
    if short is None:
        raise KeyError(f"unknown partition assignor {name!r}; known: {sorted(ASSIGNORS)}")
    return ASSIGNORS[short]

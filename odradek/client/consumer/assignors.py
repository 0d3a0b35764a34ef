"""Client-side partition assignors of the classic consumer group protocol.

How this works and why: the group leader — a client, not the broker — runs the
assignor every member agreed on over all members' subscriptions and sends each member
its assignment. librdkafka, Java and this client share groups and any of them may lead,
so the assignors carry Kafka's names and compute what Kafka's do (bytes: see
``protocol``, whose names are re-exported here):

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
possible owners first), then, while a chain of members can pass partitions along (each
taking one of a topic it subscribes to) from a member to one with two fewer, the chain
moving the fewest kept partitions moves. That ends as even as any assignment can be,
where Java's ``AbstractStickyAssignor`` stops once no single partition can move to a
member with two fewer: that can leave an uneven state a later generation evens out, and
cooperatively that means revoking again (KAFKA-8767) — here the generation after one
that withheld partitions only hands them over. Ties may break differently from Java's
or librdkafka's; that is harmless, as every member takes what the leader sends.
Cooperative: a partition is withheld while any newest-generation member other than its
new owner claims it (double claims included, where Java lets one through).
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

from odradek.client.consumer.protocol import (
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
    # topics, and a wrong choice here would have to be undone by the chains below.
    reach = {m: sum(1 for tp in partitions if tp.topic in subscribed[m]) for m in order}
    for tp in free:
        taker = min(eligible[tp.topic], key=lambda m: (len(owned[m]), reach[m], rank[m]))
        owned[taker].add(tp)
    # Then even out along chains: while some member could hand a partition to a member
    # subscribed to its topic, that one hand one on, and so on, ending at a member with
    # two fewer than the first, move the chain moving the fewest kept partitions. Each
    # chain lowers the sum of squared loads, so this ends; and with no such chain left
    # the loads are the most even any assignment reaches (Harvey, Ladner, Lovász and
    # Tamir's semi-matchings: no cost-reducing path means optimal). Single moves are
    # not enough: a state no single move improves can still be uneven, and with
    # cooperative rebalancing the next generation, free to place the partitions this one
    # withheld, would then even it out by revoking partitions again. An optimal state
    # is reached by moving withheld partitions alone, so that generation revokes nothing.
    while (chain := _cheapest_chain(order, rank, subscribed, owned, previous)) is not None:
        for giver, taker, tp in chain:
            owned[giver].remove(tp)
            owned[taker].add(tp)
    # Then, as even, move the fewest kept partitions: chains found one at a time may
    # move more than needed, and the next cooperative generation could then hand a
    # partition back to the member that just revoked it.
    while (cycle := _cheaper_cycle(order, subscribed, owned, previous)) is not None:
        for giver, taker, tp in cycle:
            owned[giver].remove(tp)
            owned[taker].add(tp)
    return {m: list(owned[m]) for m in order}


def _handoffs(
    order: list[str],
    subscribed: Mapping[str, frozenset[str]],
    owned: Mapping[str, set[TopicPartition]],
    previous: Mapping[TopicPartition, str],
    credit_return: bool,
) -> dict[str, dict[str, tuple[int, TopicPartition]]]:
    """For each member, the partition it would hand each other member, with what that
    costs in kept partitions moved: 1 if the giver kept it, else 0, and with
    ``credit_return`` -1 for a partition the taker kept (it goes back)."""
    result: dict[str, dict[str, tuple[int, TopicPartition]]] = {}
    for giver in order:
        of_topic: dict[str, tuple[int, tuple[bytes, int], TopicPartition]] = {}
        back: dict[str, tuple[tuple[bytes, int], TopicPartition]] = {}
        for tp in owned[giver]:
            key = _tp_key(tp)
            was = previous.get(tp)
            candidate = (int(was == giver), key, tp)
            known = of_topic.get(tp.topic)
            if known is None or candidate[:2] < known[:2]:
                of_topic[tp.topic] = candidate
            if credit_return and was is not None and was != giver:
                mine = back.get(was)
                if mine is None or key < mine[0]:
                    back[was] = (key, tp)
        cheapest: dict[str, tuple[int, TopicPartition]] = {}
        for taker in order:
            if taker == giver:
                continue
            if taker in back:
                cheapest[taker] = (-1, back[taker][1])
                continue
            options = [of_topic[t] for t in subscribed[taker] if t in of_topic]
            if options:
                cost, _, tp = min(options, key=lambda option: option[:2])
                cheapest[taker] = (cost, tp)
        result[giver] = cheapest
    return result


_Hop = tuple[str, TopicPartition]  # the member a partition comes from, and the partition


def _cheapest_chain(
    order: list[str],
    rank: Mapping[str, int],
    subscribed: Mapping[str, frozenset[str]],
    owned: Mapping[str, set[TopicPartition]],
    previous: Mapping[TopicPartition, str],
) -> list[tuple[str, str, TopicPartition]] | None:
    """Moves (giver, taker, partition) from a member to one with two fewer, or None.

    The chain moving the fewest partitions their giver kept; then from the most loaded
    member to the least loaded, ties in member order.
    """
    # What each member would hand each other member: a partition it did not keep if it
    # has one of a topic the other subscribes to (cost 0), else a kept one (cost 1).
    handoff = _handoffs(order, subscribed, owned, previous, credit_return=False)
    best: tuple[tuple[int, int, int, int, int], str, str, dict[str, _Hop]] | None = None
    lowest = min(len(owned[m]) for m in order)
    for source in sorted(order, key=lambda m: (-len(owned[m]), rank[m])):
        load = len(owned[source])
        if load < lowest + 2 or (best is not None and best[0][0] == 0):
            break  # sources come most loaded first: the first free chain found is the best
        cost_to, via = _fewest_kept_moves(source, handoff)
        for target, cost in cost_to.items():
            if len(owned[target]) <= load - 2:
                key = (cost, -load, rank[source], len(owned[target]), rank[target])
                if best is None or key < best[0]:
                    best = (key, source, target, via)
    if best is None:
        return None
    _, source, member, via = best
    chain = []
    while member != source:
        giver, tp = via[member]
        chain.append((giver, member, tp))
        member = giver
    return chain[::-1]


def _fewest_kept_moves(
    source: str, handoff: Mapping[str, Mapping[str, tuple[int, TopicPartition]]]
) -> tuple[dict[str, int], dict[str, _Hop]]:
    """0-1 breadth-first search from ``source``: the fewest kept partitions moved to reach
    each member, and the hop reaching it."""
    cost_to = {source: 0}
    via: dict[str, _Hop] = {}
    queue = deque([source])
    while queue:
        giver = queue.popleft()
        for taker, (cost, tp) in handoff[giver].items():
            total = cost_to[giver] + cost
            if taker not in cost_to or total < cost_to[taker]:
                cost_to[taker] = total
                via[taker] = (giver, tp)
                if cost:
                    queue.append(taker)
                else:
                    queue.appendleft(taker)
    return cost_to, via


def _cheaper_cycle(
    order: list[str],
    subscribed: Mapping[str, frozenset[str]],
    owned: Mapping[str, set[TopicPartition]],
    previous: Mapping[TopicPartition, str],
) -> list[tuple[str, str, TopicPartition]] | None:
    """Moves (giver, taker, partition) lowering the sum of squared loads or, keeping it,
    the number of partitions away from the member that kept them; None if there are none.

    The assignment is a flow (partition to member to the group) whose cost is the sum of
    squared loads and then the partitions moved; it is the cheapest one exactly when its
    residual graph has no negative cycle. On members: an edge u -> w moves a partition
    from u to w (+1 moved if u kept it, -1 if w did); the group -> u takes one from u,
    w -> the group gives w one more (the change in squares). Bellman-Ford finds one.
    """
    group = None  # the node standing for the whole group
    edges: list[tuple[str | None, str | None, tuple[int, int], TopicPartition | None]] = []
    for giver, cheapest in _handoffs(order, subscribed, owned, previous, True).items():
        edges.extend((giver, taker, (0, moved), tp) for taker, (moved, tp) in cheapest.items())
        load = len(owned[giver])
        edges.append((giver, group, (2 * load + 1, 0), None))
        if load:
            edges.append((group, giver, (1 - 2 * load, 0), None))
    nodes: list[str | None] = [*order, group]
    cost = dict.fromkeys(nodes, (0, 0))
    via: dict[str | None, tuple[str | None, TopicPartition | None]] = {}
    changed: str | None = None
    relaxed = False
    for _ in nodes:
        relaxed = False
        for u, w, (squares, moved), part in edges:
            total = (cost[u][0] + squares, cost[u][1] + moved)
            if total < cost[w]:
                cost[w] = total
                via[w] = (u, part)
                changed, relaxed = w, True
        if not relaxed:
            return None
    for _ in nodes:  # back into the cycle
        changed = via[changed][0]
    cycle = []
    node = changed
    while True:
        before, part = via[node]
        if part is not None:  # between members: neither end is the group
            assert before is not None and node is not None
            cycle.append((before, node, part))
        node = before
        if node == changed:
            return cycle[::-1]


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

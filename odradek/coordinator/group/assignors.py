"""Server-side partition assignors of the consumer group protocol (KIP-848).

How this works and why: with ``group.protocol=consumer`` the group coordinator, not a
member, computes the *target assignment* whenever the group epoch moves. An assignor
is a pure function from the members' subscriptions (resolved to topic ids), the
partition counts and the previous target assignment to the new target assignment;
members then reconcile towards it one step at a time (consumer.py).

- ``uniform`` (the default): balanced — every member's partition count differs by at
  most one from any other member that could take the same partition — and sticky:
  partitions stay with their previous owner unless balance requires a move, and then
  as few move as possible.
- ``range``: per topic, the partitions are split into contiguous ranges over the
  members subscribed to it, sorted by member id; the first ``partitions % members``
  members get one extra. Deterministic, not sticky (as the classic range assignor).

Kafka's broker accepts assignor class names in ``group.consumer.assignors``; so does
``assignor_name``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Final

TopicPartition = tuple[uuid.UUID, int]
Assignment = dict[uuid.UUID, frozenset[int]]
Previous = Mapping[str, Mapping[uuid.UUID, Collection[int]]]  # member id -> previous target
# (members' subscribed topic ids, partition count by topic id, previous target) -> target
Assignor = Callable[
    [Mapping[str, frozenset[uuid.UUID]], Mapping[uuid.UUID, int], Previous],
    dict[str, Assignment],
]

UNIFORM: Final = "uniform"
RANGE: Final = "range"
_CLASS_NAMES: Final = {"UniformAssignor": UNIFORM, "RangeAssignor": RANGE}


def assignor_name(configured: str) -> str | None:
    """The short name for a configured assignor (a name or a Kafka class name)."""
    text = configured.strip()
    if text in ASSIGNORS:
        return text
    return _CLASS_NAMES.get(text.rsplit(".", 1)[-1])


def _pack(owned: Mapping[str, list[TopicPartition]]) -> dict[str, Assignment]:
    result: dict[str, Assignment] = {}
    for member_id, partitions in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, partition in partitions:
            by_topic.setdefault(topic_id, set()).add(partition)
        result[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def range_assign(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    previous: Previous,
) -> dict[str, Assignment]:
    owned: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    for topic_id in sorted(partition_counts):
        members = sorted(m for m, topics in subscriptions.items() if topic_id in topics)
        if not members:
            continue
        count = partition_counts[topic_id]
        quota, extra = divmod(count, len(members))
        start = 0
        for index, member_id in enumerate(members):
            size = quota + (1 if index < extra else 0)
            owned[member_id].extend((topic_id, p) for p in range(start, start + size))
            start += size
    return _pack(owned)


def uniform_assign(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    previous: Previous,
) -> dict[str, Assignment]:
    """Sticky and balanced, also for members with different subscriptions.

    1. Every member keeps the partitions of its previous target that still exist and
       that it is still subscribed to (each partition once).
    2. Partitions nobody kept go, one by one, to the least loaded subscribed member
       (topics with the fewest subscribers first, so constrained partitions go first).
    3. While some partition can move from a member to a subscribed member with at
       least two fewer partitions, it moves (most loaded giver, least loaded taker).
       Each move lowers the sum of squared loads, so this ends; when all members share
       one subscription it ends with loads within one of each other, after the fewest
       possible moves.
    """
    members = sorted(subscriptions)
    eligible: dict[uuid.UUID, list[str]] = {}
    for topic_id in partition_counts:
        subscribers = [m for m in members if topic_id in subscriptions[m]]
        if subscribers:
            eligible[topic_id] = subscribers
    owner: dict[TopicPartition, str] = {}
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for member_id in members:
        for topic_id, partitions in sorted(previous.get(member_id, {}).items()):
            if member_id not in eligible.get(topic_id, ()):
                continue
            for partition in sorted(partitions):
                tp = (topic_id, partition)
                if partition < partition_counts[topic_id] and tp not in owner:
                    owner[tp] = member_id
                    owned[member_id].add(tp)
    for topic_id in sorted(eligible, key=lambda t: (len(eligible[t]), str(t))):
        subscribers = eligible[topic_id]
        for partition in range(partition_counts[topic_id]):
            tp = (topic_id, partition)
            if tp not in owner:
                taker = min(subscribers, key=lambda m: (len(owned[m]), m))
                owner[tp] = taker
                owned[taker].add(tp)
    _balance(members, eligible, owned)
    return _pack({m: sorted(ps) for m, ps in owned.items()})


def _balance(
    members: list[str],
    eligible: Mapping[uuid.UUID, list[str]],
    owned: dict[str, set[TopicPartition]],
) -> None:
    if len({tuple(s) for s in eligible.values()}) <= 1:
        _balance_homogeneous(eligible, owned)
        return
    # One move at a time, always from the most loaded member that can give: moving in
    # bulk between one pair overshoots and sets off chains of further moves.
    by_topic: dict[str, dict[uuid.UUID, list[TopicPartition]]] = {m: {} for m in members}
    for member_id in members:
        for tp in sorted(owned[member_id]):
            by_topic[member_id].setdefault(tp[0], []).append(tp)
    while True:
        move = None
        for giver in sorted(members, key=lambda m: (-len(owned[m]), m)):
            for topic_id in sorted(by_topic[giver], key=str):
                if not by_topic[giver][topic_id]:
                    continue
                taker = min(eligible[topic_id], key=lambda m: (len(owned[m]), m))
                if len(owned[taker]) <= len(owned[giver]) - 2:
                    move = giver, topic_id, taker
                    break
            if move is not None:
                break
        if move is None:
            return
        giver, topic_id, taker = move
        tp = by_topic[giver][topic_id].pop()  # the highest partition goes
        owned[giver].remove(tp)
        owned[taker].add(tp)
        by_topic[taker].setdefault(topic_id, []).append(tp)


def _balance_homogeneous(
    eligible: Mapping[uuid.UUID, list[str]], owned: dict[str, set[TopicPartition]]
) -> None:
    """One subscription for all: quotas, the extra partitions to the most loaded."""
    subscribers = next(iter(eligible.values()), [])
    if not subscribers:
        return
    total = sum(len(owned[m]) for m in subscribers)
    base, extra = divmod(total, len(subscribers))
    ranked = sorted(subscribers, key=lambda m: (-len(owned[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    pool: list[TopicPartition] = []
    for member_id in ranked:
        excess = len(owned[member_id]) - quota[member_id]
        if excess > 0:
            # Give away the highest partitions: deterministic; any would do.
            given = sorted(owned[member_id])[-excess:]
            owned[member_id].difference_update(given)
            pool.extend(given)
    pool.sort(reverse=True)
    for member_id in ranked:
        while len(owned[member_id]) < quota[member_id]:
            owned[member_id].add(pool.pop())


ASSIGNORS: Final[Mapping[str, Assignor]] = {UNIFORM: uniform_assign, RANGE: range_assign}

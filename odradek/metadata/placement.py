"""Replica placement: check a manual assignment, or choose replicas for new partitions.

How this works and why: CreateTopics and CreatePartitions both either take the
client's replica lists or let the controller choose; both go through here, so the
rules are the same for both and written once. Pure functions: brokers in, replica
tuples out, randomness injected (a seeded ``random.Random`` gives the same placement).

Only unfenced brokers take new replicas: a fenced broker is registered but not
heartbeating (or shutting down), and a replica placed there would start out of sync.

Automatic placement is Kafka's (AdminUtils' round-robin, which KRaft keeps for the
same spread): lay the usable brokers out in a ring, put partition p's leader at
``(p + start) % n`` from a random start, so leaders go round-robin and no broker leads
more than one partition more than another. Followers follow the leader at a distance
``1 + (shift + j) % (n - 1)``; the shift is random and grows by one each time the
partitions wrap around the ring, so the replicas of consecutive partitions do not all
land on the same neighbours (a failed broker's load spreads over many, not one).
When every usable broker has a rack, the ring alternates racks (the first broker of
each rack, then the second of each, ...) and a follower skips brokers whose rack
already holds a replica of the partition until every rack holds one.

``partition_record`` turns a chosen replica tuple into the new partition's record (ISR
= its unfenced replicas, led by the first of them).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping, Sequence

from odradek.metadata.elections import NO_LEADER, Eligible
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import BrokerImage, MetadataRecord

Assignment = tuple[int, ...]


def usable_brokers(brokers: Mapping[int, BrokerImage]) -> list[BrokerImage]:
    """The brokers that may take new replicas (unfenced), by id."""
    return [b for _, b in sorted(brokers.items()) if not b.fenced]


def check_assignment(
    partition: int,
    replicas: Sequence[int],
    brokers: Mapping[int, BrokerImage],
    expected_factor: int | None = None,
) -> Assignment:
    """One manual replica list, as given; INVALID_REPLICA_ASSIGNMENT if it is unusable."""
    if not replicas:
        raise _invalid(f"partition {partition}: the manual assignment has an empty replica list")
    seen: set[int] = set()
    for broker_id in replicas:
        if broker_id in seen:
            raise _invalid(
                f"partition {partition}: the manual assignment includes broker {broker_id} "
                "more than once"
            )
        seen.add(broker_id)
        broker = brokers.get(broker_id)
        if broker is None:
            raise _invalid(
                f"partition {partition}: the manual assignment includes broker {broker_id}, "
                "but no such broker is registered"
            )
        if broker.fenced:
            raise _invalid(
                f"partition {partition}: the manual assignment includes broker {broker_id}, "
                "but that broker is fenced"
            )
    if expected_factor is not None and len(replicas) != expected_factor:
        raise _invalid(
            f"partition {partition}: the manual assignment has {len(replicas)} replica(s), "
            f"but the other partitions have {expected_factor}"
        )
    return tuple(replicas)


def check_assignments(
    assignments: Iterable[Sequence[int]],
    brokers: Mapping[int, BrokerImage],
    *,
    first_partition: int = 0,
    expected_factor: int | None = None,
) -> list[Assignment]:
    """Manual replica lists of partitions ``first_partition``, ``+1``, ...; all of one
    size (``expected_factor``, or the first list's)."""
    result: list[Assignment] = []
    for partition, replicas in enumerate(assignments, first_partition):
        factor = expected_factor if expected_factor is not None or not result else len(result[0])
        result.append(check_assignment(partition, replicas, brokers, factor))
    return result


def place(
    brokers: Mapping[int, BrokerImage],
    partitions: int,
    factor: int,
    rng: random.Random,
    *,
    first_partition: int = 0,
) -> list[Assignment]:
    """Replicas for partitions ``first_partition .. first_partition + partitions - 1``.

    INVALID_REPLICATION_FACTOR if fewer than ``factor`` brokers are unfenced.
    """
    assert partitions >= 0 and factor > 0
    usable = usable_brokers(brokers)
    if factor > len(usable):
        fenced = len(brokers) - len(usable)
        raise ControllerError(
            "INVALID_REPLICATION_FACTOR",
            f"Unable to replicate the partition {factor} time(s): the target replication "
            f"factor of {factor} cannot be reached because only {len(usable)} broker(s) are "
            "registered and unfenced" + (f" ({fenced} fenced)" if fenced else ""),
        )
    racks = {b.rack for b in usable}
    if None in racks:
        ring = [b.broker_id for b in usable]
        rack_of: dict[int, str | None] = {}
    else:
        ring = _rack_alternated(usable)
        rack_of = {b.broker_id: b.rack for b in usable}
    count = len(ring)
    start = rng.randrange(count)
    shift = rng.randrange(count)
    result: list[Assignment] = []
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ring[first]]
        if rack_of:
            _add_rack_aware(replicas, ring, first, shift, factor, rack_of, len(racks))
        else:
            for j in range(factor - 1):
                replicas.append(ring[(first + 1 + (shift + j) % (count - 1)) % count])
        result.append(tuple(replicas))
    return result


def _rack_alternated(brokers: Sequence[BrokerImage]) -> list[int]:
    """Broker ids ordered rack by rack in turn: a0 b0 c0 a1 b1 c1 ... (racks by name)."""
    by_rack: dict[str, list[int]] = {}
    for broker in brokers:
        assert broker.rack is not None
        by_rack.setdefault(broker.rack, []).append(broker.broker_id)
    columns = [sorted(ids) for _, ids in sorted(by_rack.items())]
    depth = max(len(c) for c in columns)
    return [column[i] for i in range(depth) for column in columns if i < len(column)]


def _add_rack_aware(
    replicas: list[int],
    ring: Sequence[int],
    first: int,
    shift: int,
    factor: int,
    rack_of: Mapping[int, str | None],
    rack_count: int,
) -> None:
    """Followers after ``replicas[0]``: walk the ring as the rack-unaware placement does,
    skipping brokers already chosen and, until every rack has a replica, brokers whose
    rack has one. An eligible broker is always within n - 1 steps (one of the unchosen
    brokers is in an unused rack, or every rack is used)."""
    count = len(ring)
    used_racks = {rack_of[replicas[0]]}
    step = 0
    while len(replicas) < factor:
        assert step < factor * count, "placement walked the ring without finding a broker"
        broker_id = ring[(first + 1 + (shift + step) % (count - 1)) % count]
        step += 1
        rack = rack_of[broker_id]
        if broker_id in replicas or (rack in used_racks and len(used_racks) < rack_count):
            continue
        replicas.append(broker_id)
        used_racks.add(rack)


def _invalid(message: str) -> ControllerError:
    return ControllerError("INVALID_REPLICA_ASSIGNMENT", message)


def partition_record(
    topic_id: uuid.UUID, partition: int, replicas: Sequence[int], eligible: Eligible
) -> MetadataRecord:
    """A new partition: ISR = its unfenced replicas, led by the first of them."""
    isr = [r for r in replicas if eligible(r)]
    return MetadataRecord(
        "Partition",
        {
            "topic_id": str(topic_id),
            "partition": partition,
            "replicas": list(replicas),
            "isr": isr,
            "leader": isr[0] if isr else NO_LEADER,
            "leader_epoch": 0,
            "partition_epoch": 0,
        },
    )


__all__ = [
    "Assignment",
    "check_assignment",
    "check_assignments",
    "partition_record",
    "place",
    "usable_brokers",
]

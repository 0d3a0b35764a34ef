"""placement.py: manual assignments checked once; automatic placement spread as Kafka's.

Properties over random clusters (some brokers fenced, with or without racks): every
partition gets ``factor`` distinct unfenced brokers, leaders differ by at most one
partition between brokers, consecutive partitions' followers do not all pile on the
same neighbour, every partition spans min(factor, racks) racks, and a seed gives the
same placement.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from odradek.metadata.controller import Controller
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import BrokerImage, MetadataImage, MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.placement import check_assignment, check_assignments, place, usable_brokers
from odradek.metadata.topic_changes import NewTopic


def cluster(count: int, fenced: frozenset[int] = frozenset(), racks: int = 0) -> dict:
    return {
        b: BrokerImage(b, (), rack=f"r{b % racks}" if racks else None, fenced=b in fenced)
        for b in range(count)
    }


clusters = st.builds(
    lambda count, fenced, racks: cluster(count, frozenset(f for f in fenced if f < count), racks),
    st.integers(1, 9),
    st.frozensets(st.integers(0, 8), max_size=4),
    st.sampled_from([0, 0, 2, 3]),
)


@settings(max_examples=300, deadline=None)
@given(
    brokers=clusters,
    partitions=st.integers(0, 40),
    factor=st.integers(1, 5),
    first=st.integers(0, 20),
    seed=st.integers(0, 2**32),
)
def test_automatic_placement(
    brokers: dict, partitions: int, factor: int, first: int, seed: int
) -> None:
    usable = {b.broker_id for b in usable_brokers(brokers)}
    assume(factor <= len(usable))
    placed = place(brokers, partitions, factor, random.Random(seed), first_partition=first)
    assert len(placed) == partitions
    for replicas in placed:
        assert len(replicas) == factor and len(set(replicas)) == factor
        assert set(replicas) <= usable  # no fenced broker
    leaders = Counter(replicas[0] for replicas in placed)
    counts = [leaders.get(b, 0) for b in usable]
    assert max(counts) - min(counts) <= 1
    racks = {brokers[b].rack for b in usable}
    if None not in racks:
        for replicas in placed:
            assert len({brokers[b].rack for b in replicas}) == min(factor, len(racks))
    again = place(brokers, partitions, factor, random.Random(seed), first_partition=first)
    assert again == placed


def test_followers_of_consecutive_partitions_do_not_pile_up() -> None:
    brokers = cluster(5)
    placed = place(brokers, 20, 2, random.Random(1))
    pairs = Counter((replicas[0], replicas[1]) for replicas in placed)
    assert max(pairs.values()) < 4  # the shift moves on after each round of leaders
    seconds = Counter(replicas[1] for replicas in placed)
    assert len(seconds) == 5


def test_too_few_unfenced_brokers_is_an_invalid_replication_factor() -> None:
    with pytest.raises(ControllerError) as raised:
        place(cluster(3, fenced=frozenset({1, 2})), 1, 2, random.Random(0))
    assert raised.value.code == "INVALID_REPLICATION_FACTOR"
    assert "only 1 broker(s)" in str(raised.value) and "2 fenced" in str(raised.value)


@pytest.mark.parametrize(
    ("replicas", "words"),
    [
        ([], "empty replica list"),
        ([0, 0], "broker 0 more than once"),
        ([0, 7], "broker 7, but no such broker is registered"),
        ([1], "broker 1, but that broker is fenced"),
    ],
)
def test_manual_assignment_errors(replicas: list[int], words: str) -> None:
    with pytest.raises(ControllerError) as raised:
        check_assignment(3, replicas, cluster(3, fenced=frozenset({1})))
    assert raised.value.code == "INVALID_REPLICA_ASSIGNMENT"
    assert str(raised.value).startswith("partition 3: ") and words in str(raised.value)


def test_manual_assignments_must_agree_on_the_replica_count() -> None:
    brokers = cluster(3)
    assert check_assignments([[0, 1], [2, 0]], brokers) == [(0, 1), (2, 0)]
    with pytest.raises(ControllerError, match=r"partition 5: .* 1 replica"):
        check_assignments([[0, 1], [2]], brokers, first_partition=4)
    with pytest.raises(ControllerError, match="other partitions have 1"):
        check_assignments([[0, 1]], brokers, expected_factor=1)


# -- through the controller, with an in-memory writer --------------------------------
class MemoryWriter:
    """A MetadataWriter without a disk: committed on append (as a Raft writer is at the HW)."""

    def __init__(self, loader: MetadataLoader) -> None:
        self.loader = loader
        self.end = -1

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        self.end += len(records)
        self.loader.handle_commit(self.end, records)
        return self.end

    def replay(self) -> MetadataImage:
        return self.loader.image

    active_epoch = 1


def controller_with(brokers: dict[int, bool]) -> Controller:
    """A controller whose image has these brokers (id → fenced)."""
    loader = MetadataLoader()
    records = [
        MetadataRecord(
            "RegisterBroker",
            {"broker_id": b, "endpoints": [["PLAINTEXT", "h", 9092 + b]], "fenced": fenced},
        )
        for b, fenced in brokers.items()
    ]
    loader.handle_commit(len(records) - 1, records)
    defaults = {"num.partitions": 6, "default.replication.factor": 2}
    writer = MemoryWriter(loader)
    writer.end = loader.image.offset
    return Controller(writer, loader, 0, lambda: defaults, rng=random.Random(5))


def test_the_controller_places_on_unfenced_brokers_only() -> None:
    controller = controller_with({0: False, 1: True, 2: False, 3: False})

    async def changes() -> list:
        created = await controller.create_topics([NewTopic("t")], False)
        await controller.create_partitions("t", 9, None, False)
        manual = await controller.create_topics([NewTopic("m", assignments={0: [1, 0]})], False)
        return [*created, *manual]

    created, manual = asyncio.run(changes())
    assert isinstance(created, MetadataImage)
    replicas = [p.replicas for p in controller.image.topics["t"].partitions.values()]
    assert len(replicas) == 9 and all(len(r) == 2 and 1 not in r for r in replicas)
    assert isinstance(manual, ControllerError) and manual.code == "INVALID_REPLICA_ASSIGNMENT"
    assert "fenced" in str(manual)

"""Leader elections and ISR changes on the controller, sans-IO: a fake clock and an
in-memory writer (module docs of metadata/elections.py and metadata/alter_partition.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import pytest

from odradek.cli.metadata_decoder import describe
from odradek.metadata.broker_heartbeats import BrokerHeartbeat, BrokerRegistration
from odradek.metadata.controller import Controller
from odradek.metadata.delta import between
from odradek.metadata.elections import PREFERRED, UNCLEAN, ElectionResult
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import (
    ImageReplay,
    MetadataImage,
    MetadataRecord,
    PartitionImage,
    TopicImage,
)
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.topic_changes import NewTopic
from odradek.replica.interfaces import IsrOutcome, IsrProposal

T = TypeVar("T")
TIMEOUT = 9000
EP = (("PLAINTEXT", "localhost", 9092),)


class MemoryWriter:
    def __init__(self, loader: MetadataLoader) -> None:
        self.loader = loader
        self.end = -1
        self.active_epoch = 1
        self.batches: list[list[MetadataRecord]] = []

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        if self.active_epoch < 0:
            raise ControllerError("NOT_CONTROLLER", "not active")
        self.end += len(records)
        self.batches.append(list(records))
        self.loader.handle_commit(self.end, records)
        return self.end

    def replay(self) -> MetadataImage:
        return self.loader.image


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Cluster:
    """A controller (node 1, not a broker) and brokers 1..n registered and unfenced."""

    def __init__(self, unclean: bool = False) -> None:
        self.loader = MetadataLoader()
        self.writer = MemoryWriter(self.loader)
        self.clock = Clock()
        defaults = {"num.partitions": 1, "default.replication.factor": 3}
        self.controller = Controller(
            self.writer,
            self.loader,
            100,
            lambda: defaults,
            session_timeout_ms=TIMEOUT,
            now_ms=self.clock,
            unclean_default=lambda: unclean,
        )
        self.epochs: dict[int, int] = {}

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    async def start(self, brokers: Sequence[int] = (1, 2, 3)) -> None:
        for b in brokers:
            await self.register(b)

    async def register(self, broker_id: int, incarnation: str = "a") -> None:
        reg = BrokerRegistration(broker_id, f"{incarnation}-{broker_id}", EP)
        epoch = self.epochs[broker_id] = await self.controller.register_broker(reg)
        await self.heartbeat(broker_id)
        assert not self.image.brokers[broker_id].fenced and epoch >= 0

    async def heartbeat(self, broker_id: int, **kw: Any) -> Any:
        epoch = self.epochs[broker_id]
        return await self.controller.broker_heartbeat(
            BrokerHeartbeat(broker_id, epoch, kw.pop("offset", self.image.offset), **kw)
        )

    async def topic(
        self, name: str, assignments: dict[int, tuple[int, ...]], **configs: str
    ) -> TopicImage:
        (result,) = await self.controller.create_topics(
            [NewTopic(name, assignments=assignments, configs=configs or None)], False
        )
        assert not isinstance(result, ControllerError), result
        return self.image.topics[name]

    def state(self, name: str, index: int = 0) -> PartitionImage:
        return self.image.topics[name].partitions[index]

    async def expire(self, *alive: int) -> list[int]:
        """Let every session but ``alive``'s expire; the brokers fenced."""
        fenced: list[int] = []
        for _ in range(TIMEOUT // 500 + 2):
            self.clock.now += 500
            for b in alive:
                await self.heartbeat(b)
            fenced += await self.controller.fence_stale_brokers()
        return fenced


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def proposal(
    topic: TopicImage, state: PartitionImage, isr: Sequence[int], **kw: Any
) -> IsrProposal:
    return IsrProposal(
        topic.topic_id,
        state.partition,
        kw.get("leader_epoch", state.leader_epoch),
        kw.get("partition_epoch", state.partition_epoch),
        tuple(isr),
        kw.get("broker_epochs", {}),
    )


# -- the record --------------------------------------------------------------------------
def test_partition_change_bumps_epochs_round_trips_and_shows_in_the_delta() -> None:
    topic_id = uuid.uuid4()
    base = MetadataImage().apply(
        [
            MetadataRecord("Topic", {"name": "t", "topic_id": str(topic_id)}),
            MetadataRecord(
                "Partition",
                {
                    "topic_id": str(topic_id),
                    "partition": 0,
                    "replicas": [1, 2, 3],
                    "isr": [1, 2, 3],
                    "leader": 1,
                    "leader_epoch": 4,
                    "partition_epoch": 7,
                },
            ),
        ],
        1,
    )
    isr_only = base.apply(
        [
            MetadataRecord(
                "PartitionChange", {"topic_id": str(topic_id), "partition": 0, "isr": [1, 3]}
            )
        ],
        2,
    )
    assert isr_only.topics["t"].partitions[0] == PartitionImage(0, (1, 2, 3), (1, 3), 1, 4, 8)
    led = isr_only.apply(
        [
            MetadataRecord(
                "PartitionChange", {"topic_id": str(topic_id), "partition": 0, "leader": 3}
            ),
            MetadataRecord(
                "PartitionChange", {"topic_id": str(topic_id), "partition": 0, "leader": -1}
            ),
            # a change of a partition the image does not hold changes nothing
            MetadataRecord("PartitionChange", {"topic_id": str(topic_id), "partition": 5}),
            MetadataRecord(
                "PartitionChange", {"topic_id": str(uuid.uuid4()), "partition": 0, "leader": 2}
            ),
        ],
        6,
    )
    assert led.topics["t"].partitions[0] == PartitionImage(0, (1, 2, 3), (1, 3), -1, 6, 10)
    assert base.topics["t"].partitions[0].leader == 1  # images are immutable
    # snapshots stay exact
    replay = ImageReplay()
    replay.apply(led.to_records(), 6)
    assert replay.image() == led
    delta = between(base, led)
    change = delta.partitions[(topic_id, 0)]
    assert change.old == base.topics["t"].partitions[0] and change.new.leader == -1
    # dump-log --cluster-metadata-decoder
    record = MetadataRecord("PartitionChange", {"topic_id": str(topic_id), "partition": 0})
    assert json.loads(describe(*record.encode())) == {
        "type": "PartitionChange",
        "data": {"partition": 0, "topic_id": str(topic_id)},
    }


def test_new_topic_isr_is_its_replicas_led_by_the_first() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (2, 1, 3), 1: (3, 2, 1)})
        assert cluster.state("t", 0) == PartitionImage(0, (2, 1, 3), (2, 1, 3), 2, 0, 0)
        assert cluster.state("t", 1).leader == 3

    run(body())


# -- fencing -----------------------------------------------------------------------------
def test_fence_moves_leadership_within_the_isr_and_drops_the_broker_from_isrs() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)})
        before = cluster.state("t", 0)
        assert await cluster.expire(2, 3) == [1]
        # one commit: the fence and the partition changes together
        batch = cluster.writer.batches[-1]
        assert [r.kind for r in batch] == ["FenceBroker"] + ["PartitionChange"] * 3
        p0 = cluster.state("t", 0)
        assert (p0.leader, p0.isr) == (2, (2, 3))
        assert p0.leader_epoch == before.leader_epoch + 1
        assert p0.partition_epoch == before.partition_epoch + 1
        p1 = cluster.state("t", 1)  # led by 2: only the ISR changes
        assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (2, (2, 3), 0, 1)
        assert cluster.state("t", 2).isr == (3, 2)

    run(body())


def test_last_isr_member_fenced_goes_offline_and_comes_back_when_unfenced() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (1, 2)})
        assert await cluster.expire(1, 3) == [2]
        assert cluster.state("t").isr == (1,)
        assert await cluster.expire(3) == [1]
        state = cluster.state("t")
        # the last member stays in the ISR: only it holds every committed record
        assert (state.leader, state.isr, state.leader_epoch) == (-1, (1,), 1)
        # broker 2 comes back: not in the ISR, no unclean election, still offline
        await cluster.heartbeat(2)
        assert not cluster.image.brokers[2].fenced and cluster.state("t").leader == -1
        # broker 1 comes back: it leads again, in the same commit as its unfence
        await cluster.heartbeat(1)
        assert [r.kind for r in cluster.writer.batches[-1]] == ["UnfenceBroker", "PartitionChange"]
        state = cluster.state("t")
        assert (state.leader, state.isr, state.leader_epoch) == (1, (1,), 2)

    run(body())


def test_unclean_election_takes_a_live_out_of_sync_replica_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (1, 2)}, **{"unclean.leader.election.enable": "true"})
        await cluster.topic("u", {0: (1, 2)})
        assert await cluster.expire(1, 3) == [2]
        await cluster.heartbeat(2)  # back, but out of the ISRs
        with caplog.at_level(logging.WARNING, "odradek.metadata.elections"):
            assert await cluster.expire(2, 3) == [1]
        assert (cluster.state("t").leader, cluster.state("t").isr) == (2, (2,))
        assert (cluster.state("u").leader, cluster.state("u").isr) == (-1, (1,))
        assert any("unclean leader election for t-0" in r.message for r in caplog.records)
        assert any("u-0 is offline" in r.message for r in caplog.records)

    run(body())


def test_unclean_broker_default_and_an_unfence_bringing_an_offline_partition_back() -> None:
    cluster = Cluster(unclean=True)

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (1, 2)}, **{"unclean.leader.election.enable": "false"})
        await cluster.topic("u", {0: (1, 2)})
        assert await cluster.expire(1, 3) == [2]
        assert await cluster.expire(3) == [1]
        assert cluster.state("t").leader == -1 and cluster.state("u").leader == -1
        await cluster.heartbeat(2)  # unclean by default: 2 takes "u", not "t"
        assert (cluster.state("u").leader, cluster.state("u").isr) == (2, (2,))
        assert (cluster.state("t").leader, cluster.state("t").isr) == (-1, (1,))

    run(body())


def test_controlled_shutdown_moves_leadership_before_letting_the_broker_go() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (1, 2, 3), 1: (2, 1, 3)})
        offset = cluster.image.offset
        reply = await cluster.heartbeat(1, offset=offset, want_shut_down=True)
        # moved in the same commit as the fence, but broker 1 has not seen it yet
        assert reply.is_fenced and not reply.should_shut_down
        assert cluster.image.brokers[1].fenced
        assert (cluster.state("t", 0).leader, cluster.state("t", 0).isr) == (2, (2, 3))
        assert cluster.state("t", 1).isr == (2, 3)
        reply = await cluster.heartbeat(1, offset=offset, want_shut_down=True)
        assert not reply.should_shut_down
        reply = await cluster.heartbeat(1, offset=cluster.image.offset, want_shut_down=True)
        assert reply.should_shut_down

    run(body())


def test_a_new_incarnation_takes_the_old_ones_leaderships_away() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (1, 2, 3)})
        cluster.clock.now += TIMEOUT + 1  # the old session is over: a restart may register
        for b in (2, 3):
            await cluster.heartbeat(b)
        await cluster.controller.register_broker(BrokerRegistration(1, "b-1", EP))
        state = cluster.state("t")
        assert cluster.image.brokers[1].fenced
        assert (state.leader, state.isr, state.leader_epoch) == (2, (2, 3), 1)

    run(body())


# -- AlterPartition ----------------------------------------------------------------------
def test_alter_partition_shrinks_and_expands_with_the_partition_epoch() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        topic = await cluster.topic("t", {0: (1, 2, 3)})
        state = cluster.state("t")
        epoch = cluster.epochs[1]
        alter = cluster.controller.alter_partition
        (out,) = await alter(1, epoch, [proposal(topic, state, [1, 3])])
        assert out == IsrOutcome("NONE", 1, 0, 1, (1, 3))
        assert cluster.state("t").isr == (1, 3) and cluster.state("t").partition_epoch == 1
        # the same change again (its answer was lost): the current state, nothing written
        count = len(cluster.writer.batches)
        (again,) = await cluster.controller.alter_partition(
            1, epoch, [proposal(topic, state, [3, 1])]
        )
        assert again == out and len(cluster.writer.batches) == count
        # a proposal built on the old state
        (stale,) = await cluster.controller.alter_partition(1, epoch, [proposal(topic, state, [1])])
        assert stale.error == "INVALID_UPDATE_VERSION" and stale.partition_epoch == 1
        # expansion, naming the member's broker epoch (KIP-903)
        current = cluster.state("t")
        (grown,) = await cluster.controller.alter_partition(
            1,
            epoch,
            [proposal(topic, current, [1, 3, 2], broker_epochs={2: cluster.epochs[2]})],
        )
        assert grown == IsrOutcome("NONE", 1, 0, 2, (1, 3, 2))

    run(body())


def test_alter_partition_errors() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3, 4))
        topic = await cluster.topic("t", {0: (1, 2, 3)})
        await cluster.topic("u", {0: (2, 3, 1)})
        state = cluster.state("t")
        alter = cluster.controller.alter_partition
        epoch = cluster.epochs[1]
        with pytest.raises(ControllerError) as caught:
            await alter(1, epoch + 100, [proposal(topic, state, [1, 2])])
        assert caught.value.code == "STALE_BROKER_EPOCH"
        with pytest.raises(ControllerError) as caught:
            await alter(9, -1, [proposal(topic, state, [1, 2])])
        assert caught.value.code == "STALE_BROKER_EPOCH"
        cluster.writer.active_epoch = -1
        with pytest.raises(ControllerError) as caught:
            await alter(1, epoch, [proposal(topic, state, [1, 2])])
        assert caught.value.code == "NOT_CONTROLLER"
        cluster.writer.active_epoch = 1
        # shrink to [1, 2] so that 3 is a candidate for re-joining
        await alter(1, epoch, [proposal(topic, state, [1, 2])])
        state = cluster.state("t")
        unknown = IsrProposal(uuid.uuid4(), 0, 0, 0, (1,), {})
        outcomes = await alter(
            1,
            epoch,
            [
                unknown,
                IsrProposal(topic.topic_id, 7, 0, 0, (1,), {}),
                proposal(topic, state, [1], leader_epoch=state.leader_epoch - 1),
                proposal(cluster.image.topics["u"], cluster.state("u"), [2]),
            ],
        )
        assert [o.error for o in outcomes] == [
            "UNKNOWN_TOPIC_ID",
            "UNKNOWN_TOPIC_OR_PARTITION",
            "FENCED_LEADER_EPOCH",
            "NOT_LEADER_OR_FOLLOWER",
        ]
        assert outcomes[2].leader_epoch == state.leader_epoch and outcomes[3].leader_id == 2
        bad = [[2, 3], [1, 1], [1, 4], []]  # no leader, repeated, not a replica, empty
        for isr in bad:
            (out,) = await alter(1, epoch, [proposal(topic, state, isr)])
            assert out.error == "INVALID_REQUEST", isr
        # KIP-903: a member known under an older broker epoch is not eligible
        (out,) = await alter(
            1, epoch, [proposal(topic, state, [1, 2, 3], broker_epochs={3: cluster.epochs[3] - 1})]
        )
        assert out.error == "INELIGIBLE_REPLICA" and out.isr == (1, 2)
        # a fenced member is not eligible either
        assert await cluster.expire(1, 2, 4) == [3]
        state = cluster.state("t")
        (out,) = await alter(1, epoch, [proposal(topic, state, [1, 2, 3])])
        assert out.error == "INELIGIBLE_REPLICA"
        # two proposals for one partition: the second is refused
        outcomes = await alter(1, epoch, [proposal(topic, state, [1]), proposal(topic, state, [1])])
        assert [o.error for o in outcomes] == ["NONE", "INVALID_REQUEST"]

    run(body())


# -- ElectLeaders and the rebalance --------------------------------------------------------
def test_elect_leaders_preferred_and_unclean() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {0: (1, 2, 3), 1: (2, 3, 1)})
        await cluster.topic("u", {0: (3, 1)})
        elect = cluster.controller.elect_leaders
        assert await elect(PREFERRED, [("t", 0), ("nope", 0), ("t", 9)]) == [
            ElectionResult("t", 0, "ELECTION_NOT_NEEDED"),
            ElectionResult("nope", 0, "UNKNOWN_TOPIC_OR_PARTITION"),
            ElectionResult("t", 9, "UNKNOWN_TOPIC_OR_PARTITION"),
        ]
        assert await cluster.expire(2, 3) == [1]
        assert cluster.state("t", 0).leader == 2
        assert await elect(PREFERRED, [("t", 0)]) == [
            ElectionResult("t", 0, "PREFERRED_LEADER_NOT_AVAILABLE")
        ]
        await cluster.heartbeat(1)  # back, unfenced, but not in the ISR yet
        assert await elect(PREFERRED, [("t", 0)]) == [
            ElectionResult("t", 0, "PREFERRED_LEADER_NOT_AVAILABLE")
        ]
        topic, state = cluster.image.topics["t"], cluster.state("t", 0)
        await cluster.controller.alter_partition(
            2, cluster.epochs[2], [proposal(topic, state, [2, 3, 1])]
        )
        # every partition: only those that were not led by their preferred replica
        assert await elect(PREFERRED, None) == [ElectionResult("t", 0, "NONE")]
        after = cluster.state("t", 0)
        assert (after.leader, after.leader_epoch) == (1, state.leader_epoch + 1)
        # UNCLEAN: a leaderless partition from any live replica
        assert await cluster.expire(1, 2) == [3]
        assert await elect(UNCLEAN, [("u", 0)]) == [ElectionResult("u", 0, "NONE")]
        assert (cluster.state("u").leader, cluster.state("u").isr) == (1, (1,))
        assert await elect(UNCLEAN, [("t", 1)]) == [ElectionResult("t", 1, "ELECTION_NOT_NEEDED")]
        with pytest.raises(ControllerError):
            await elect(7, None)

    run(body())


def test_rebalance_moves_leaders_back_to_in_sync_preferred_replicas() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start()
        await cluster.topic("t", {i: (1 + i % 3, 1 + (i + 1) % 3) for i in range(6)})
        assert await cluster.expire(2, 3) == [1]
        await cluster.heartbeat(1)
        assert [i for i in range(6) if cluster.state("t", i).leader == 1] == []
        # broker 1 back but in no ISR: nothing to move
        assert await cluster.controller.rebalance_leaders() == 0
        # rejoin broker 1 to partition 0's ISR only
        topic, state = cluster.image.topics["t"], cluster.state("t", 0)
        await cluster.controller.alter_partition(
            state.leader, cluster.epochs[state.leader], [proposal(topic, state, [*state.isr, 1])]
        )
        assert await cluster.controller.rebalance_leaders() == 1
        assert [i for i in range(6) if cluster.state("t", i).leader == 1] == [0]
        assert cluster.state("t", 0).leader_epoch == state.leader_epoch + 1
        assert await cluster.controller.rebalance_leaders() == 0
        cluster.writer.active_epoch = -1  # not the active controller: does nothing
        assert await cluster.controller.rebalance_leaders() == 0

    run(body())

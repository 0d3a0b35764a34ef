"""The group coordinator on the runtime, with a fake partition writer: commits survive a
move (the new leader loads them), a failed append changes no offset, unload answers a
parked JoinGroup NOT_COORDINATOR, and __consumer_offsets waits for enough live brokers
instead of shrinking its replication factor."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.coordinator.group.classic import JoinRequest
from odradek.coordinator.group.coordinator import (
    OFFSETS_TOPIC,
    CoordinatorError,
    CoordinatorSettings,
    GroupCoordinator,
)
from odradek.coordinator.group.offset_store import OffsetCommit
from odradek.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from odradek.server.broker_settings import internal_replication_factor
from odradek.server.config import BrokerConfig
from tests.coordinator.runtime_support import FakeWriter

TOPIC = TopicImage("t", uuid.uuid4(), {0: PartitionImage(0, (1,), (1,), 1, 0)})


def image(live: int = 1, fenced: int = 0, offsets: bool = False) -> MetadataImage:
    brokers = {i: BrokerImage(i, ()) for i in range(1, live + 1)}
    brokers |= {i: BrokerImage(i, (), fenced=True) for i in range(live + 1, live + fenced + 1)}
    topics = {"t": TOPIC}
    if offsets:
        topics[OFFSETS_TOPIC] = TopicImage(OFFSETS_TOPIC, uuid.uuid4())
    return MetadataImage(brokers=brokers, topics=topics)


class Topics:
    def __init__(self) -> None:
        self.created: list[tuple[str, int, int]] = []

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> str | None:
        self.created.append((name, partitions, replication_factor))
        return None


def coordinator(
    writer: FakeWriter, metadata: Any, topics: Any = None, rf: int = 3
) -> GroupCoordinator:
    settings = CoordinatorSettings(partitions=1, replication_factor=rf)
    return GroupCoordinator(metadata, writer, topics, settings, lambda: 5_000)


async def active(c: GroupCoordinator) -> None:
    for _ in range(100):
        try:
            c.fetch_offsets("g", None)
            return
        except CoordinatorError:
            await asyncio.sleep(0)
    raise AssertionError("never loaded")


def commit(offset: int) -> list[OffsetCommit]:
    return [OffsetCommit("t", 0, offset, 0, None)]


def test_commits_follow_the_partition_to_a_new_leader_and_failed_ones_change_nothing() -> None:
    async def test() -> None:
        writer = FakeWriter()  # one log both "nodes" lead in turn
        metadata = SimpleNamespace(image=image(), node_id=1)
        first = coordinator(writer, metadata)
        first.on_leadership(0, 0)
        await active(first)
        assert await first.commit_offsets("g", -1, "", None, commit(42)) == {("t", 0): "NONE"}
        writer.fail = "KAFKA_STORAGE_ERROR"
        failed = await first.commit_offsets("g", -1, "", None, commit(99))
        assert failed == {("t", 0): "COORDINATOR_NOT_AVAILABLE"}
        assert first.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 42  # type: ignore[union-attr]
        writer.fail = None
        first.on_leadership(0, None)
        with pytest.raises(CoordinatorError, match="NOT_COORDINATOR"):
            first.fetch_offsets("g", None)
        second = coordinator(writer, metadata)
        second.on_leadership(0, 1)
        await active(second)
        value = second.fetch_offsets("g", [("t", 0)])[("t", 0)]
        assert value is not None and value.offset == 42
        await first.stop()
        await second.stop()

    asyncio.run(asyncio.wait_for(test(), 10))


def test_unload_answers_a_parked_join_not_coordinator() -> None:
    async def test() -> None:
        writer = FakeWriter()
        c = coordinator(writer, SimpleNamespace(image=image(), node_id=1))
        c.on_leadership(0, 0)
        await active(c)
        join = JoinRequest(
            member_id="",
            group_instance_id=None,
            client_id="c",
            client_host="/h",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=(("range", b""),),
            require_known_member_id=False,
        )
        parked = asyncio.ensure_future(c.join("g", join))  # waits for the initial delay
        for _ in range(20):
            await asyncio.sleep(0)
        assert not parked.done()
        c.on_leadership(0, None)
        result = await parked
        assert result.error == "NOT_COORDINATOR"
        await c.stop()

    asyncio.run(asyncio.wait_for(test(), 10))


def test_offsets_topic_waits_for_enough_live_brokers() -> None:
    async def test() -> None:
        topics = Topics()
        metadata = SimpleNamespace(image=image(live=2, fenced=1), node_id=1)
        c = coordinator(FakeWriter(), metadata, topics, rf=3)
        assert await c.ensure_offsets_topic() is False  # 2 live (one fenced) < 3
        assert topics.created == []
        metadata.image = image(live=3)
        assert await c.ensure_offsets_topic() is True
        assert topics.created == [(OFFSETS_TOPIC, 1, 3)]  # never shrunk
        metadata.image = image(live=3, offsets=True)
        assert await c.ensure_offsets_topic() is True and len(topics.created) == 1

    asyncio.run(test())


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({}, 1),  # the zero-config single node
        ({"offsets.topic.replication.factor": "2"}, 2),
        (
            {
                "process.roles": "broker,controller",
                "controller.quorum.voters": "1@localhost:9093",
                "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
                "controller.listener.names": "CONTROLLER",
            },
            3,  # Kafka's default once a quorum is configured
        ),
    ],
)
def test_offsets_replication_factor(properties: dict[str, str], expected: int) -> None:
    config = BrokerConfig(properties)
    assert internal_replication_factor(config, "offsets.topic.replication.factor") == expected

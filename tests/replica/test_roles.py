"""Metadata deltas drive leader and follower roles, and the replica fetchers.

- a partition this node follows is handed to the fetchers with its leader and epoch
  (again only when the leader or epoch changes, not for an ISR change), and is a
  ``follower_log``; one this node comes to lead, or that leaves it, is removed;
- a single node's partitions lead with HW = LEO, as before replication.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from odradek.metadata.image import MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.replica.interfaces import FetchStart, TopicPartition
from odradek.replica.replica_manager import ReplicaManager
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.replica.partition_support import batch

NODE = 2
T = uuid.UUID(int=5)


def partition(
    leader: int, epoch: int, isr: list[int], partition_epoch: int, replicas: list[int] | None = None
) -> MetadataRecord:
    fields = {
        "topic_id": str(T),
        "partition": 0,
        "replicas": replicas or [1, 2, 3],
        "isr": isr,
        "leader": leader,
        "leader_epoch": epoch,
        "partition_epoch": partition_epoch,
    }
    return MetadataRecord("Partition", fields)


class Fetchers:
    def __init__(self) -> None:
        self.added: list[dict[TopicPartition, FetchStart]] = []
        self.removed: list[list[TopicPartition]] = []

    def add_partitions(self, partitions: Mapping[TopicPartition, FetchStart]) -> None:
        self.added.append(dict(partitions))

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        self.removed.append(list(partitions))

    async def close(self) -> None:
        pass


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[ReplicaManager, Fetchers, MetadataLoader]]:
    logs = LogManager([tmp_path / "logs"])
    logs.startup()
    fetchers = Fetchers()
    replicas = ReplicaManager(NODE, logs, fetching=fetchers)
    loader = MetadataLoader()
    loader.subscribe(lambda delta, image: replicas.apply_delta(delta, image, lambda _: LogConfig()))
    replicas.catch_up(loader.image, lambda _: LogConfig())
    yield replicas, fetchers, loader
    logs.shutdown()


def test_follower_roles_start_and_stop_fetching(
    node: tuple[ReplicaManager, Fetchers, MetadataLoader],
) -> None:
    replicas, fetchers, loader = node
    tp = ("t", 0)
    topic = MetadataRecord("Topic", {"name": "t", "topic_id": str(T)})
    loader.handle_commit(1, [topic, partition(1, 0, [1, 2, 3], 0)])
    assert fetchers.added == [{tp: FetchStart(T, 1, 0)}]
    follower = replicas.follower_log(tp)
    assert follower is not None and follower.leader_epoch == 0
    loader.handle_commit(2, [partition(1, 0, [1, 2], 1)])  # only the ISR changed
    assert len(fetchers.added) == 1
    loader.handle_commit(3, [partition(3, 1, [2, 3], 2)])  # a new leader
    assert fetchers.added[-1] == {tp: FetchStart(T, 3, 1)}
    loader.handle_commit(4, [partition(NODE, 2, [2, 3], 3)])  # this node leads
    assert fetchers.removed[-1] == [tp]
    assert replicas.follower_log(tp) is None
    leader = replicas.leader_partition(*tp)
    assert leader.leader_epoch == 2 and leader.log.epoch_cache.latest_epoch == 2
    loader.handle_commit(5, [MetadataRecord("RemoveTopic", {"topic_id": str(T)})])
    assert fetchers.removed[-1] == [tp] and tp not in replicas.partitions


def test_a_single_replica_leads_with_the_hw_at_the_log_end(
    node: tuple[ReplicaManager, Fetchers, MetadataLoader],
) -> None:
    replicas, fetchers, loader = node
    topic = MetadataRecord("Topic", {"name": "t", "topic_id": str(T)})
    single = partition(NODE, 0, [NODE], 0, replicas=[NODE])
    loader.handle_commit(1, [topic, single])
    assert fetchers.added == []
    replicas.append("t", 0, batch(b"a", b"b"), -1)
    assert replicas.leader_partition("t", 0).high_watermark == 2

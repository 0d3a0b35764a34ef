"""ReplicaManager acts on metadata deltas, and deletes nothing a lagging image does not know.

- a change to one topic leaves the partitions of every other topic as they were (the
  same Partition and Log objects, no config pushed to them);
- a deleted topic's logs are deleted (by topic id: a namesake created in the same delta
  gets a fresh log);
- before catch-up no delta creates or deletes anything; at catch-up a log the image
  does not know is set aside (renamed, its data kept), not deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.metadata.image import MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.replica.replica_manager import ReplicaManager
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import DELETE_DIR_SUFFIX, STRAY_DIR_SUFFIX, LogManager

NODE = 1
A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def topic(name: str, topic_id: uuid.UUID, partitions: int = 2) -> list[MetadataRecord]:
    records = [MetadataRecord("Topic", {"name": name, "topic_id": str(topic_id)})]
    for index in range(partitions):
        records.append(partition(topic_id, index))
    return records


def partition(topic_id: uuid.UUID, index: int, epoch: int = 0) -> MetadataRecord:
    fields = {
        "topic_id": str(topic_id),
        "partition": index,
        "replicas": [NODE],
        "isr": [NODE],
        "leader": NODE,
        "leader_epoch": epoch,
    }
    return MetadataRecord("Partition", fields)


def remove(topic_id: uuid.UUID) -> MetadataRecord:
    return MetadataRecord("RemoveTopic", {"topic_id": str(topic_id)})


class Node:
    """A LogManager on ``path``, a ReplicaManager, and a loader feeding it deltas."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.logs = LogManager([path])
        self.logs.startup()
        self.replicas = ReplicaManager(NODE, self.logs)
        self.loader = MetadataLoader()
        self.configured: list[str] = []
        self.loader.subscribe(
            lambda delta, image: self.replicas.apply_delta(delta, image, self.topic_config)
        )
        self.offset = -1

    def topic_config(self, name: str) -> LogConfig:
        self.configured.append(name)
        return LogConfig()

    def commit(self, *records: MetadataRecord) -> None:
        self.offset += len(records)
        self.loader.handle_commit(self.offset, list(records))

    def catch_up(self) -> None:
        self.replicas.catch_up(self.loader.image, self.topic_config)

    def close(self) -> None:
        self.logs.shutdown()  # closes the logs, releases the dir lock


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    node = Node(tmp_path / "logs")
    yield node
    node.close()


def test_a_change_to_one_topic_leaves_the_others_untouched(node: Node) -> None:
    node.catch_up()
    node.commit(*topic("a", A), *topic("b", B))
    assert set(node.replicas.partitions) == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    a0, a_log = node.replicas.partitions[("a", 0)], node.logs.logs[("a", 0)]
    node.configured.clear()
    node.commit(partition(B, 1, epoch=4))
    assert node.replicas.partitions[("b", 1)].leader_epoch == 4
    assert node.replicas.partitions[("a", 0)] is a0 and node.logs.logs[("a", 0)] is a_log
    assert not a_log.closed and node.configured == ["b"]


def test_a_deleted_topics_logs_are_deleted_and_no_others(node: Node) -> None:
    node.catch_up()
    node.commit(*topic("a", A), *topic("b", B))
    b_log = node.logs.logs[("b", 0)]
    node.commit(remove(A))
    assert set(node.replicas.partitions) == {("b", 0), ("b", 1)}
    assert set(node.logs.logs) == {("b", 0), ("b", 1)} and not b_log.closed
    deleted = sorted(p.name for p in node.path.iterdir() if p.name.endswith(DELETE_DIR_SUFFIX))
    assert [name.split(".")[0] for name in deleted] == ["a-0", "a-1"]


def test_a_namesake_created_with_the_deletion_gets_a_fresh_log(node: Node) -> None:
    node.catch_up()
    node.commit(*topic("a", A, partitions=1))
    old = node.replicas.partitions[("a", 0)]
    other = uuid.UUID(int=3)
    node.commit(remove(A), *topic("a", other, partitions=1))
    new = node.replicas.partitions[("a", 0)]
    assert new is not old and old.log.closed and new.topic_id == str(other)


def test_before_catch_up_nothing_is_deleted_and_unknown_logs_are_set_aside(
    tmp_path: Path,
) -> None:
    first = Node(tmp_path / "logs")
    first.catch_up()
    first.commit(*topic("ghost", A, partitions=1), *topic("b", B, partitions=1))
    ghost_dir = first.logs.logs[("ghost", 0)].directory
    first.close()

    node = Node(tmp_path / "logs")  # restart, with metadata that lags (or lost records)
    try:
        assert set(node.logs.logs) == {("ghost", 0), ("b", 0)}
        node.commit(*topic("b", B, partitions=1))
        node.commit(remove(uuid.UUID(int=9)))  # a deletion of some other topic
        assert not node.replicas.partitions  # deltas before catch-up decide nothing
        assert set(node.logs.logs) == {("ghost", 0), ("b", 0)} and ghost_dir.exists()
        node.catch_up()
        assert set(node.replicas.partitions) == {("b", 0)}
        assert ("ghost", 0) not in node.logs.logs and not ghost_dir.exists()
        (aside,) = [p for p in node.path.iterdir() if p.name.endswith(STRAY_DIR_SUFFIX)]
        assert aside.name.startswith("ghost-0.") and any(aside.glob("*.log"))
        assert not [p for p in node.path.iterdir() if p.name.endswith(DELETE_DIR_SUFFIX)]
    finally:
        node.close()

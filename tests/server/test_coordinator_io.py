"""The coordinators' PartitionWriter over a ReplicaManager: appends as leader, replays to
the high watermark from the log start, and turns the replica layer's partition errors
into PartitionWriteError with the same Kafka code."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.coordinator.group.loader import Damage
from odradek.coordinator.partition_writer import PartitionWriteError
from odradek.metadata.controller_channel import ControllerError, NewTopic
from odradek.records.codec import Record, encode_batch
from odradek.replica.replica_manager import Partition, ReplicaManager
from odradek.server.coordinator_io import ChannelTopicCreator, ReplicaPartitionWriter
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

TP = ("__consumer_offsets", 0)


def writer_over(tmp_path: Path, leader: int = 1) -> tuple[ReplicaPartitionWriter, Partition]:
    log, _ = open_log(tmp_path / "__consumer_offsets-0", LogConfig())
    partition = Partition(*TP, str(uuid.uuid4()), log, 1)
    if leader == 1:
        partition.become_leader(4, 0, (1,), (1,), now_ms=0)
    else:
        partition.become_follower(leader, 4, 0, (leader, 1), (leader, 1))
    replicas = ReplicaManager(1, None)  # type: ignore[arg-type]  # no metadata changes here
    replicas.partitions[TP] = partition
    return ReplicaPartitionWriter(replicas), partition


def batch(*keys: bytes) -> bytes:
    return encode_batch([Record(i, 1_000, key, b"v") for i, key in enumerate(keys)])


def test_append_then_read_back_to_the_high_watermark(tmp_path: Path) -> None:
    writer, partition = writer_over(tmp_path)
    assert asyncio.run(writer.append(TP, batch(b"a", b"b"))) == 1  # the last offset
    assert asyncio.run(writer.append(TP, batch(b"c"))) == 2
    assert partition.log.high_watermark == 3  # written = at the HW, one replica
    keys = [r.key for item in writer.read(TP, 0) if not isinstance(item, Damage) for r in item]
    assert keys == [b"a", b"b", b"c"]
    later = [r.offset for item in writer.read(TP, 2) if not isinstance(item, Damage) for r in item]
    assert later == [2]
    assert writer.leader_epoch(TP) == 4
    partition.log.close()


def test_a_partition_this_node_does_not_lead_is_a_write_error(tmp_path: Path) -> None:
    writer, partition = writer_over(tmp_path, leader=2)
    with pytest.raises(PartitionWriteError) as appended:
        asyncio.run(writer.append(TP, batch(b"a")))
    assert appended.value.code == "NOT_LEADER_OR_FOLLOWER"
    with pytest.raises(PartitionWriteError) as read:
        writer.read(TP, 0)  # raises at once, not when iterated
    assert read.value.code == "NOT_LEADER_OR_FOLLOWER"
    with pytest.raises(PartitionWriteError) as missing:
        writer.leader_epoch(("__consumer_offsets", 7))
    assert missing.value.code == "UNKNOWN_TOPIC_OR_PARTITION"
    partition.log.close()


def test_topic_creator_answers_the_channel_s_error_code() -> None:
    asked: list[NewTopic] = []

    class Channel:
        async def create_topics(self, topics: Any, validate_only: bool) -> list[Any]:
            asked.extend(topics)
            assert not validate_only
            return [ControllerError("TOPIC_ALREADY_EXISTS", "exists") if len(asked) > 1 else None]

    creator = ChannelTopicCreator(Channel())  # type: ignore[arg-type]  # only create_topics
    assert asyncio.run(creator.create_topic("t", 3, 1, {"cleanup.policy": "compact"})) is None
    assert asyncio.run(creator.create_topic("t", 3, 1, {})) == "TOPIC_ALREADY_EXISTS"
    assert asked[0] == NewTopic("t", 3, 1, configs={"cleanup.policy": "compact"})

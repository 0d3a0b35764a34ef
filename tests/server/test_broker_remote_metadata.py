"""Which remote log metadata manager a broker builds (server/broker_remote.py), and
how ``__remote_log_metadata`` is sized from Kafka's ``rlmm.config.``-prefixed keys."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

from odradek.coordinator.internal_topic import InternalTopic
from odradek.server.broker_remote import build_metadata_manager, metadata_topic
from odradek.server.config import BrokerConfig
from odradek.storage.remote.metadata_manager import FileRemoteLogMetadataManager
from odradek.storage.remote.topic_metadata_manager import TopicBasedRemoteLogMetadataManager

KAFKA_CLASS = (
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
)


class NoTransport:
    async def produce(self, partition: int, value: bytes) -> int:
        raise AssertionError

    async def assign(self, partitions: Collection[int]) -> None: ...

    async def poll(self, timeout_s: float) -> list[tuple[int, int, bytes]]:
        return []

    async def end_offset(self, partition: int) -> int:
        return 0

    async def close(self) -> None: ...


def config(tmp_path: Path, **props: str) -> BrokerConfig:
    return BrokerConfig({"log.dirs": str(tmp_path), **props})


def test_the_topic_based_manager_is_the_default_with_kafkas_sizes(tmp_path: Path) -> None:
    seen: list[InternalTopic] = []

    def transport(topic: InternalTopic) -> NoTransport:
        seen.append(topic)
        return NoTransport()

    for name in ("topic", KAFKA_CLASS, None):
        props = {} if name is None else {"remote.log.metadata.manager.class.name": name}
        built = build_metadata_manager(config(tmp_path, **props), transport)
        assert isinstance(built, TopicBasedRemoteLogMetadataManager)
        assert built.num_partitions == 50
    topic = seen[0]
    assert (topic.name, topic.partitions) == ("__remote_log_metadata", 50)
    assert topic.replication_factor == 1  # the zero-config single node
    assert topic.configs["retention.ms"] == "-1"


def test_rlmm_config_sizes_the_topic(tmp_path: Path) -> None:
    sized = config(
        tmp_path,
        **{
            "rlmm.config.remote.log.metadata.topic.num.partitions": "7",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "2",
            "rlmm.config.remote.log.metadata.topic.retention.ms": "86400000",
        },
    )
    topic = metadata_topic(sized)
    assert (topic.partitions, topic.replication_factor) == (7, 2)
    assert topic.configs["retention.ms"] == "86400000"


def test_the_file_store_on_request_and_unknown_names_refused(tmp_path: Path) -> None:
    chosen = config(tmp_path, **{"remote.log.metadata.manager.class.name": "file"})
    assert isinstance(
        build_metadata_manager(chosen, lambda t: NoTransport()), FileRemoteLogMetadataManager
    )
    bad = config(tmp_path, **{"remote.log.metadata.manager.class.name": "nope"})
    with pytest.raises(ValueError, match="nope"):
        build_metadata_manager(bad, lambda t: NoTransport())

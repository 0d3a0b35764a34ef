"""Tiered storage (KIP-405) end to end: a real ``odradek serve`` with the filesystem
backend copies a tiered topic's rolled segments, deletes them locally by
local.retention.bytes, and confluent-kafka still consumes everything from offset 0
(the old part read from remote storage), byte for byte; the brokers refuse tiering
where Kafka does."""

from __future__ import annotations

import os
import time
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.support.broker import running_broker

TOPIC = "tiered-orders"
COUNT = 3000


def _overrides(remote_dir: Path, enable: bool = True) -> list[str]:
    props = {
        "remote.log.storage.system.enable": str(enable).lower(),
        "remote.log.manager.task.interval.ms": "300",
        "rsm.config.dir": str(remote_dir),
        "rsm.config.fsync": "false",
        "log.retention.check.interval.ms": "300",
    }
    return [f"--override={k}={v}" for k, v in props.items()]


def _create(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(timeout=15)


def test_a_consumer_reads_from_offset_0_after_the_local_segments_are_gone(
    tmp_path: Path,
) -> None:
    remote_dir = tmp_path / "remote"
    with running_broker(tmp_path / "data", _overrides(remote_dir)) as broker:
        _create(
            broker.bootstrap,
            TOPIC,
            {
                "remote.storage.enable": "true",
                "segment.bytes": str(256 * 1024),
                "local.retention.bytes": "1",
                "file.delete.delay.ms": "0",
            },
        )
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "linger.ms": 5,
                "batch.size": 32768,  # many batches: segments of 256 KiB
                "acks": "all",
            }
        )
        sent = [(f"k{i}".encode(), os.urandom(1000)) for i in range(COUNT)]
        t0 = int(time.time() * 1000) - 600_000  # record i at t0 + i
        for i, (key, value) in enumerate(sent):
            producer.produce(TOPIC, value, key, partition=0, timestamp=t0 + i)
            producer.poll(0)
        assert producer.flush(30) == 0

        partition_dir = tmp_path / "data" / f"{TOPIC}-0"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            local = sorted(partition_dir.glob("*.log"))
            if local and local[0].name != f"{0:020d}.log" and len(local) <= 2:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"local segments never went: {sorted(os.listdir(partition_dir))}")
        remote_logs = list(remote_dir.rglob("*.log"))
        assert len(remote_logs) >= 8  # ~3 MB in 256 KiB segments
        # The metadata went through __remote_log_metadata (the default manager), not
        # the single-node file store.
        assert (tmp_path / "data" / "__remote_log_metadata-0").is_dir()
        assert not (tmp_path / "data" / "remote-log-metadata").exists()

        assert _consume(broker.bootstrap, COUNT) == sent
        assert _offsets_for_times(broker.bootstrap, [t0 - 1, t0 + 5, t0 + COUNT - 1]) == [
            0,
            5,  # in remote storage
            COUNT - 1,  # in the local log
        ]
        # After a restart the remote part is still there (metadata, log start offset).
        assert broker.stop() == 0
        broker.start()
        assert _consume(broker.bootstrap, COUNT) == sent
        # Deleting the topic deletes its remote data.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([TOPIC])[TOPIC].result(timeout=15)
        deadline = time.monotonic() + 30
        while list(remote_dir.rglob("*.log")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not list(remote_dir.rglob("*.log"))
        assert "remote log task failed" not in broker.log()


def _consume(bootstrap: str, count: int) -> list[tuple[bytes, bytes]]:
    """Every record from offset 0 (checking the offsets and the low watermark)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiered-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(TOPIC, 0), timeout=10
        )
        assert (low, high) == (0, count)  # ListOffsets EARLIEST: the remote start
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        got: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    assert [offset for offset, _, _ in got] == list(range(count))
    return [(k, v) for _, k, v in got]


def _offsets_for_times(bootstrap: str, timestamps: list[int]) -> list[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    try:
        return [
            consumer.offsets_for_times([confluent_kafka.TopicPartition(TOPIC, 0, ts)], 10)[0].offset
            for ts in timestamps
        ]
    finally:
        consumer.close()


def test_tiering_is_refused_on_compacted_topics_and_when_the_brokers_disable_it(
    tmp_path: Path,
) -> None:
    with running_broker(tmp_path / "on", _overrides(tmp_path / "r1")) as broker:
        with pytest.raises(confluent_kafka.KafkaException, match="compacted"):
            _create(
                broker.bootstrap,
                "tiered-compacted",
                {"remote.storage.enable": "true", "cleanup.policy": "compact"},
            )
        _create(broker.bootstrap, "tiered", {"remote.storage.enable": "true"})
        with pytest.raises(confluent_kafka.KafkaException, match="not supported"):
            _set(broker.bootstrap, "tiered", "remote.storage.enable", "false")
    with running_broker(tmp_path / "off", _overrides(tmp_path / "r2", enable=False)) as broker:
        with pytest.raises(confluent_kafka.KafkaException, match=r"remote\.log\.storage\.system"):
            _create(broker.bootstrap, "tiered-off", {"remote.storage.enable": "true"})
        _create(broker.bootstrap, "plain", {})
        with pytest.raises(confluent_kafka.KafkaException, match=r"remote\.log\.storage\.system"):
            _set(broker.bootstrap, "plain", "remote.storage.enable", "true")


def _set(bootstrap: str, topic: str, key: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)

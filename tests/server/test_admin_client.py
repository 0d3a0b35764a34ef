"""The admin APIs through a real client: confluent-kafka's AdminClient (librdkafka).

Topics (create, list, describe, add partitions, delete, re-create), configs
(describe topic and broker, incremental and legacy alter), records (delete, list
offsets), the cluster (describe), and a retention.bytes change that the broker's
retention check then applies to the live log. The broker runs with
``log.retention.check.interval.ms=200`` so that last check comes quickly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from tests.server.test_admin import describe_log_dirs
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

TIMEOUT_S = 20.0
T = TypeVar("T")


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("admin-client") / "data"
    process = BrokerProcess(data_dir, ["--override", "log.retention.check.interval.ms=200"])
    process.start()
    try:
        yield process
    finally:
        try:
            assert process.stop() == 0
        finally:
            process.kill()


@pytest.fixture(autouse=True)
def _clean_broker_log(admin_broker: BrokerProcess) -> Iterator[None]:
    start = admin_broker.log_path.stat().st_size
    yield
    with open(admin_broker.log_path, "rb") as log:
        log.seek(start)
        added = log.read().decode(errors="replace")
    bad = [line for line in added.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not bad, "\n".join(bad)


@pytest.fixture
def admin(admin_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": admin_broker.bootstrap})


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def done(futures: dict[Any, Any]) -> dict[Any, Any]:
    return {key: future.result(timeout=TIMEOUT_S) for key, future in futures.items()}


def create(admin: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    done(admin.create_topics([NewTopic(name, partitions, 1, config=config)]))


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    """One record per batch, so small segments roll."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for value in values:
        producer.produce(topic, value, partition=partition)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0


def wait_until(probe: Callable[[], T | None], what: str, timeout_s: float = TIMEOUT_S) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def offsets(admin: AdminClient, topic: str, spec: OffsetSpec, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)
    return int(done(admin.list_offsets({tp: spec}))[tp].offset)


def test_topics_lifecycle(admin: AdminClient) -> None:
    name = topic_name("lifecycle")
    create(admin, name, 2)
    assert len(admin.list_topics(timeout=TIMEOUT_S).topics[name].partitions) == 2
    (description,) = done(admin.describe_topics(TopicCollection([name]))).values()
    assert description.name == name and len(description.partitions) == 2
    assert [p.leader.id for p in description.partitions] == [1, 1]

    done(admin.create_partitions([NewPartitions(name, 5)], validate_only=True))
    assert len(admin.list_topics(name, timeout=TIMEOUT_S).topics[name].partitions) == 2
    done(admin.create_partitions([NewPartitions(name, 5)]))
    assert len(admin.list_topics(name, timeout=TIMEOUT_S).topics[name].partitions) == 5
    with pytest.raises(KafkaException, match=r"INVALID_PARTITIONS|partitions"):
        done(admin.create_partitions([NewPartitions(name, 3)]))

    done(admin.delete_topics([name], operation_timeout=TIMEOUT_S))
    wait_until(lambda: name not in admin.list_topics(timeout=TIMEOUT_S).topics, "deletion")
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        done(admin.delete_topics([name], operation_timeout=TIMEOUT_S))
    create(admin, name, 1)  # the name can be used again
    assert len(admin.list_topics(name, timeout=TIMEOUT_S).topics[name].partitions) == 1


def test_describe_and_alter_configs(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    name = topic_name("configs")
    create(admin, name, 1, **{"retention.ms": "3600000"})
    topic = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = done(admin.describe_configs([topic]))[topic]
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default

    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker_configs = done(admin.describe_configs([broker]))[broker]
    assert broker_configs["log.retention.check.interval.ms"].value == "200"
    assert broker_configs["log.retention.check.interval.ms"].source == (
        ConfigSource.STATIC_BROKER_CONFIG.value
    )
    assert broker_configs["log.retention.check.interval.ms"].is_read_only
    assert not broker_configs["num.partitions"].is_read_only

    incremental = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "50000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    done(admin.incremental_alter_configs([incremental]))
    configs = done(admin.describe_configs([topic]))[topic]
    assert configs["max.message.bytes"].value == "50000"
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].value == "3600000"

    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException, match=r"retention\.ms"):
        done(admin.incremental_alter_configs([bad]))

    # The legacy AlterConfigs replaces the whole set.
    legacy = ConfigResource(ConfigResource.Type.TOPIC, name, set_config={"segment.bytes": "65536"})
    with pytest.warns(DeprecationWarning):
        done(admin.alter_configs([legacy]))
    configs = done(admin.describe_configs([topic]))[topic]
    assert configs["segment.bytes"].value == "65536"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"

    dynamic = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    done(admin.incremental_alter_configs([dynamic]))
    entry = done(admin.describe_configs([broker]))[broker]["num.partitions"]
    assert (entry.value, entry.source) == ("3", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    static = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException, match="dynamically"):
        done(admin.incremental_alter_configs([static]))
    reset = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("num.partitions", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    done(admin.incremental_alter_configs([reset]))
    entry = done(admin.describe_configs([broker]))[broker]["num.partitions"]
    assert (entry.value, entry.source) == ("1", ConfigSource.DEFAULT_CONFIG.value)


def test_delete_records_and_list_offsets(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    name = topic_name("records")
    create(admin, name, 1)
    produce(admin_broker.bootstrap, name, [f"m{i}".encode() for i in range(10)])
    assert offsets(admin, name, OffsetSpec.earliest()) == 0
    assert offsets(admin, name, OffsetSpec.latest()) == 10
    tp = TopicPartition(name, 0, 4)
    (deleted,) = done(admin.delete_records([tp])).values()
    assert deleted.low_watermark == 4
    assert offsets(admin, name, OffsetSpec.earliest()) == 4
    assert offsets(admin, name, OffsetSpec.latest()) == 10
    with pytest.raises(KafkaException, match=r"OFFSET_OUT_OF_RANGE|out of range"):
        done(admin.delete_records([TopicPartition(name, 0, 50)]))


def test_describe_cluster(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert cluster.cluster_id == admin.list_topics(timeout=TIMEOUT_S).cluster_id
    assert cluster.controller.id == 1
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", admin_broker.port)]


def test_retention_bytes_change_deletes_old_segments(
    admin: AdminClient, admin_broker: BrokerProcess
) -> None:
    name = topic_name("retention")
    create(admin, name, 1, **{"segment.bytes": "1024"})
    produce(admin_broker.bootstrap, name, [b"v" * 200 for _ in range(40)])
    directory = Path(admin_broker.data_dir) / f"{name}-0"
    assert len(list(directory.glob("*.log"))) > 5
    assert offsets(admin, name, OffsetSpec.earliest()) == 0
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.bytes", "2048", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    done(admin.incremental_alter_configs([resource]))
    start = wait_until(
        lambda: offsets(admin, name, OffsetSpec.earliest()) or None, "retention to delete"
    )
    assert 0 < start < 40
    assert offsets(admin, name, OffsetSpec.latest()) == 40

    def size() -> int:
        with WireClient(admin_broker.bootstrap) as client:
            (result,) = describe_log_dirs(client, 4, {name: [0]}).results
        ((partition,),) = [t.partitions for t in result.topics]
        return int(partition.partition_size)

    # Only whole segments go, and the active one stays: at most 2048 bytes + one segment.
    assert size() <= 2048 + 1024

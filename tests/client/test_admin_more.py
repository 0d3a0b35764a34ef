"""AdminClient configs, groups, offsets, records and cluster methods against a real
``odradek serve``, cross-checked with confluent-kafka."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient as CKAdmin
from confluent_kafka.admin import ConfigResource as CKConfigResource

from odradek.client import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    NewTopic,
    OffsetSpec,
    ResourceType,
    TopicPartition,
)
from tests.support.broker import BrokerProcess

TIMEOUT = 15


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("admin_more") / "data").start()
    try:
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture(scope="module")
def admin(kafka: BrokerProcess) -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    try:
        yield client
    finally:
        client.close()


def new_topic(admin: AdminClient, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
    return name


def produce(kafka: BrokerProcess, topic: str, partition: int, count: int, ts: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=partition, timestamp=ts + i if ts else 0)
    assert producer.flush(TIMEOUT) == 0


def group_consumer(kafka: BrokerProcess, group: str) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def test_describe_cluster(kafka: BrokerProcess, admin: AdminClient) -> None:
    result = admin.describe_cluster().result(TIMEOUT)
    assert [n.port for n in result.nodes] == [kafka.port]
    assert result.controller is not None and result.controller.id == result.nodes[0].id
    ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    theirs = ck.describe_cluster().result(TIMEOUT)
    assert result.cluster_id == theirs.cluster_id


def test_incremental_alter_then_describe_matches_confluent(
    kafka: BrokerProcess, admin: AdminClient
) -> None:
    topic = new_topic(admin, 1)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    assert admin.incremental_alter_configs([resource])[resource].result(TIMEOUT) is None
    ours = admin.describe_configs([ConfigResource("topic", topic)])
    entries = ours[ConfigResource(ResourceType.TOPIC, topic)].result(TIMEOUT)
    assert entries["retention.ms"].value == "123456"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert not entries["retention.ms"].is_default
    ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    theirs = next(iter(ck.describe_configs([CKConfigResource("topic", topic)]).values()))
    theirs_entries = theirs.result(TIMEOUT)
    assert {n: e.value for n, e in entries.items()} == {
        n: e.value for n, e in theirs_entries.items()
    }
    assert {n: int(e.source) for n, e in entries.items()} == {
        n: int(e.source) for n, e in theirs_entries.items()
    }
    # DELETE reverts to the default.
    undo = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([undo])[undo].result(TIMEOUT)
    entries = admin.describe_configs([undo])[undo].result(TIMEOUT)
    assert entries["retention.ms"].is_default
    # A bad value fails that resource's future.
    bad = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "nope", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException):
        admin.incremental_alter_configs([bad])[bad].result(TIMEOUT)


def test_describe_broker_configs(admin: AdminClient) -> None:
    node = admin.describe_cluster().result(TIMEOUT).nodes[0]
    resource = ConfigResource(ResourceType.BROKER, str(node.id))
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert "log.retention.hours" in entries or "num.partitions" in entries


def test_group_offsets_cross_checked_with_confluent(
    kafka: BrokerProcess, admin: AdminClient
) -> None:
    topic = new_topic(admin, 2)
    produce(kafka, topic, 0, 5)
    produce(kafka, topic, 1, 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = group_consumer(kafka, group)
    try:
        their_tps = [
            confluent_kafka.TopicPartition(topic, 0, 4),
            confluent_kafka.TopicPartition(topic, 1, 2),
        ]
        consumer.commit(offsets=their_tps, asynchronous=False)
        committed = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.committed(
                [confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], timeout=TIMEOUT
            )
        }
        assert committed == {(topic, 0): 4, (topic, 1): 2}

        request = ConsumerGroupTopicPartitions(group)
        listed = admin.list_consumer_group_offsets([request])[group].result(TIMEOUT)
        assert listed.group_id == group
        ours = {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions or ()}
        assert ours == committed
        only = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 1)])
        listed = admin.list_consumer_group_offsets([only])[group].result(TIMEOUT)
        assert [(tp.partition, tp.offset) for tp in listed.topic_partitions or ()] == [(1, 2)]

        alter = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 3)]
        )
        altered = admin.alter_consumer_group_offsets([alter])[group].result(TIMEOUT)
        assert altered.group_id == group
        after = {
            tp.partition: tp.offset
            for tp in consumer.committed(
                [confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], timeout=TIMEOUT
            )
        }
        assert after == {0: 1, 1: 3}

        listing = admin.list_consumer_groups().result(TIMEOUT)
        assert group in {g.group_id for g in listing.valid}
        described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert described.group_id == group
        assert described.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.STABLE)
        assert described.coordinator is not None and described.coordinator.port == kafka.port
    finally:
        consumer.close()

    assert admin.delete_consumer_groups([group])[group].result(TIMEOUT) is None
    listing = admin.list_consumer_groups().result(TIMEOUT)
    assert group not in {g.group_id for g in listing.valid}
    with pytest.raises(KafkaException):
        admin.delete_consumer_groups([group])[group].result(TIMEOUT)


def test_describe_active_group_members(kafka: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(admin, 2)
    produce(kafka, topic, 0, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = group_consumer(kafka, group)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert described.state == ConsumerGroupState.STABLE
        assert not described.is_simple_consumer_group
        assert len(described.members) == 1
        member = described.members[0]
        assert sorted(member.assignment.topic_partitions) == [
            TopicPartition(topic, 0),
            TopicPartition(topic, 1),
        ]
        # A live group cannot be deleted.
        with pytest.raises(KafkaException):
            admin.delete_consumer_groups([group])[group].result(TIMEOUT)
    finally:
        consumer.close()


def test_list_offsets_and_delete_records(kafka: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(admin, 1)
    base = 1_700_000_000_000
    produce(kafka, topic, 0, 6, ts=base)
    tp = TopicPartition(topic, 0)
    specs = {
        TopicPartition(topic, 0): OffsetSpec.latest(),
    }
    assert admin.list_offsets(specs)[tp].result(TIMEOUT).offset == 6
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset == 0
    found = admin.list_offsets({tp: OffsetSpec.for_timestamp(base + 3)})[tp].result(TIMEOUT)
    assert (found.offset, found.timestamp) == (3, base + 3)
    newest = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(TIMEOUT)
    assert (newest.offset, newest.timestamp) == (5, base + 5)

    deleted = admin.delete_records([TopicPartition(topic, 0, 4)])
    assert deleted[tp].result(TIMEOUT).low_watermark == 4
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset == 4
    consumer = group_consumer(kafka, "unused")
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=TIMEOUT
        )
        assert (low, high) == (4, 6)
    finally:
        consumer.close()
    assert admin.delete_records({tp: 5})[tp].result(TIMEOUT).low_watermark == 5
    with pytest.raises(KafkaException):
        admin.delete_records({tp: 99})[tp].result(TIMEOUT)
    missing = TopicPartition("no-such-topic", 0)
    with pytest.raises(KafkaException):
        admin.list_offsets({missing: OffsetSpec.latest()})[missing].result(TIMEOUT)

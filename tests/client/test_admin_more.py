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
from tests.support.broker import BrokerProcess, running_broker

TIMEOUT = 15


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("admin_more") / "data") as process:
        yield process


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


def their_configs(kafka: BrokerProcess, topic: str) -> dict[str, tuple[str | None, bool]]:
    ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    resource = CKConfigResource("topic", topic)
    entries = ck.describe_configs([resource])[resource].result(TIMEOUT)
    return {n: (e.value, e.is_default) for n, e in entries.items()}


@pytest.mark.filterwarnings("ignore:alter_configs:DeprecationWarning")
def test_legacy_alter_configs_replaces_the_whole_set(
    kafka: BrokerProcess, admin: AdminClient
) -> None:
    topic = new_topic(admin, 1)
    resource = ConfigResource(
        "topic", topic, set_config={"retention.ms": "7777", "cleanup.policy": "compact"}
    )
    with pytest.deprecated_call():
        futures = admin.alter_configs([resource])
    assert futures[resource].result(TIMEOUT) is None
    theirs = their_configs(kafka, topic)
    assert theirs["retention.ms"] == ("7777", False)
    assert theirs["cleanup.policy"] == ("compact", False)
    # Unlike the incremental API, keys not listed revert to their defaults.
    only = ConfigResource("topic", topic, set_config={"cleanup.policy": "compact"})
    admin.alter_configs([only])[only].result(TIMEOUT)
    theirs = their_configs(kafka, topic)
    assert theirs["retention.ms"][1] and theirs["cleanup.policy"] == ("compact", False)
    # validate_only changes nothing; a bad value fails that resource only.
    trial = ConfigResource("topic", topic, set_config={"retention.ms": "1"})
    admin.alter_configs([trial], validate_only=True)[trial].result(TIMEOUT)
    assert their_configs(kafka, topic)["retention.ms"][1]
    other = new_topic(admin, 1)
    bad = ConfigResource("topic", topic, set_config={"retention.ms": "soon"})
    good = ConfigResource("topic", other, set_config={"retention.ms": "4242"})
    futures = admin.alter_configs([bad, good])
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        futures[bad].result(TIMEOUT)
    assert futures[good].result(TIMEOUT) is None
    assert their_configs(kafka, other)["retention.ms"] == ("4242", False)
    # What confluent-kafka's alter_configs writes, ours reads.
    ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    theirs_resource = CKConfigResource("topic", other, set_config={"retention.ms": "5151"})
    ck.alter_configs([theirs_resource])[theirs_resource].result(TIMEOUT)
    entries = admin.describe_configs([good])[good].result(TIMEOUT)
    assert entries["retention.ms"].value == "5151"


def test_delete_consumer_group_offsets(kafka: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(admin, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = group_consumer(kafka, group)
    ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    parts = [confluent_kafka.TopicPartition(topic, p) for p in (0, 1)]

    def theirs() -> dict[int, int]:
        request = confluent_kafka.ConsumerGroupTopicPartitions(group, parts)
        listed = ck.list_consumer_group_offsets([request])[group].result(TIMEOUT)
        return {tp.partition: tp.offset for tp in listed.topic_partitions}

    try:
        consumer.commit(
            offsets=[
                confluent_kafka.TopicPartition(topic, 0, 3),
                confluent_kafka.TopicPartition(topic, 1, 5),
            ],
            asynchronous=False,
        )
    finally:
        consumer.close()
    assert theirs() == {0: 3, 1: 5}
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    done = admin.delete_consumer_group_offsets([request])[group].result(TIMEOUT)
    assert done.group_id == group and done.topic_partitions == [TopicPartition(topic, 0)]
    assert theirs() == {0: -1001, 1: 5}  # OFFSET_INVALID: nothing committed any more
    # Ours reports "nothing committed" the way confluent-kafka does.
    both = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    listed = admin.list_consumer_group_offsets([both])[group].result(TIMEOUT)
    assert [(tp.partition, tp.offset) for tp in listed.topic_partitions or ()] == [
        (0, -1001),
        (1, 5),
    ]
    unknown = f"none-{uuid.uuid4().hex[:8]}"
    missing = ConsumerGroupTopicPartitions(unknown, [TopicPartition(topic, 0)])
    with pytest.raises(KafkaException, match="GROUP_ID_NOT_FOUND"):
        admin.delete_consumer_group_offsets([missing])[unknown].result(TIMEOUT)
    with pytest.raises(ValueError, match="partitions"):
        admin.delete_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])


def test_delete_offsets_of_a_subscribed_topic_is_refused(
    kafka: BrokerProcess, admin: AdminClient
) -> None:
    topic = new_topic(admin, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = group_consumer(kafka, group)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 0)], asynchronous=False)
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
        with pytest.raises(KafkaException, match="GROUP_SUBSCRIBED_TO_TOPIC"):
            admin.delete_consumer_group_offsets([request])[group].result(TIMEOUT)
        # The same group described by both clients.
        ours = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})
        theirs = ck.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert ours.state == ConsumerGroupState.STABLE and theirs.state.name == "STABLE"
        assert ours.partition_assignor == theirs.partition_assignor
        assert [(m.member_id, m.client_id, m.host) for m in ours.members] == [
            (m.member_id, m.client_id, m.host) for m in theirs.members
        ]
        assert [(tp.topic, tp.partition) for tp in ours.members[0].assignment.topic_partitions] == [
            (tp.topic, tp.partition) for tp in theirs.members[0].assignment.topic_partitions
        ]
        # Listing with a state filter agrees with confluent-kafka's.
        stable = admin.list_consumer_groups(states=[ConsumerGroupState.STABLE]).result(TIMEOUT)
        assert group in {g.group_id for g in stable.valid}
        empty = admin.list_consumer_groups(states=[ConsumerGroupState.EMPTY]).result(TIMEOUT)
        assert group not in {g.group_id for g in empty.valid}
        their_stable = ck.list_consumer_groups(
            states={confluent_kafka.ConsumerGroupState.STABLE}
        ).result(TIMEOUT)
        assert {g.group_id for g in stable.valid} == {g.group_id for g in their_stable.valid}
    finally:
        consumer.close()

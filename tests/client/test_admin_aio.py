"""The asyncio ``AIOKafkaAdminClient`` against a real ``odradek serve``, its answers
compared with aiokafka's own ``AIOKafkaAdminClient`` asking the same broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiokafka.admin as theirs_admin
import confluent_kafka
import pytest
from aiokafka.admin.config_resource import ConfigResource as TheirConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as TheirType
from aiokafka.errors import InvalidPartitionsError
from aiokafka.structs import TopicPartition as TheirTP
from kio.schema.errors import ErrorCode

from odradek.aio.structs import TopicPartition
from odradek.client import AIOKafkaAdminClient, ConfigError, KafkaError
from odradek.client.admin.aio import (
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    RecordsToDelete,
)
from tests.support.broker import BrokerProcess, running_broker

TIMEOUT = 15
Both = Callable[[AIOKafkaAdminClient, theirs_admin.AIOKafkaAdminClient], Awaitable[None]]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("admin_aio") / "data") as process:
        yield process


def run_both(kafka: BrokerProcess, body: Both) -> None:
    async def main() -> None:
        ours = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        theirs = theirs_admin.AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await ours.start()
        await theirs.start()
        try:
            await asyncio.wait_for(body(ours, theirs), 60)
        finally:
            await ours.close()
            await theirs.close()

    asyncio.run(main())


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def renamed(obj: Any, old: str, new: str) -> Any:
    """``obj`` (nested dicts/lists) with the string ``old`` replaced by ``new``."""
    if isinstance(obj, dict):
        return {k: renamed(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [renamed(v, old, new) for v in obj]
    return obj.replace(old, new) if isinstance(obj, str) else obj


def keyed(found: dict[Any, Any]) -> dict[tuple[str, int], Any]:
    """Answers keyed by (topic, partition), whichever client's TopicPartition type."""
    return {(tp[0], tp[1]): value for tp, value in found.items()}


def test_topics_match_aiokafka(kafka: BrokerProcess) -> None:
    a, b = name("a"), name("b")

    async def body(ours: AIOKafkaAdminClient, theirs: theirs_admin.AIOKafkaAdminClient) -> None:
        mine = await ours.create_topics([NewTopic(a, 2, 1, topic_configs={"retention.ms": "9000"})])
        their = await theirs.create_topics([theirs_admin.NewTopic(b, 2, 1)])
        assert renamed(mine.to_object(), a, b) == their.to_object()
        for topic, code, message in mine.topic_errors:  # entries unpack like aiokafka's
            assert (topic, code, message) == (a, 0, None)
        again_mine = await ours.create_topics([NewTopic(b, 1, 1)])
        again_theirs = await theirs.create_topics([theirs_admin.NewTopic(b, 1, 1)])
        assert again_mine.to_object() == again_theirs.to_object()
        assert again_mine.topic_errors[0].error_code == ErrorCode.topic_already_exists

        assert {a, b} <= set(await ours.list_topics())
        assert set(await ours.list_topics()) == set(await theirs.list_topics())
        assert renamed(await ours.describe_topics([a]), a, b) == await theirs.describe_topics([b])
        assert await ours.describe_cluster() == await theirs.describe_cluster()

        grown = await ours.create_partitions({a: NewPartitions(3)})
        their_grown = await theirs.create_partitions({b: theirs_admin.NewPartitions(3)})
        assert renamed(grown.to_object(), a, b) == their_grown.to_object()
        assert [len(t["partitions"]) for t in await ours.describe_topics([a, b])] == [3, 3]
        with pytest.raises(KafkaError) as shrink:
            await ours.create_partitions({a: NewPartitions(1)})
        with pytest.raises(InvalidPartitionsError) as their_shrink:
            await theirs.create_partitions({b: theirs_admin.NewPartitions(1)})
        assert int(shrink.value.code()) == their_shrink.value.errno == 37

        gone = name("gone")
        deleted = await ours.delete_topics([a, gone])
        their_deleted = await theirs.delete_topics([b, gone])
        assert renamed(deleted.to_object(), a, b) == their_deleted.to_object()
        assert [tuple(e) for e in deleted.topic_error_codes] == [
            (a, 0),
            (gone, int(ErrorCode.unknown_topic_or_partition)),
        ]
        assert a not in await ours.list_topics()

    run_both(kafka, body)


def test_configs_match_aiokafka(kafka: BrokerProcess) -> None:
    a, b = name("ca"), name("cb")

    async def body(ours: AIOKafkaAdminClient, theirs: theirs_admin.AIOKafkaAdminClient) -> None:
        await ours.create_topics([NewTopic(a, 1, 1), NewTopic(b, 1, 1)])
        node = (await ours.describe_cluster())["brokers"][0]["node_id"]
        altered = await ours.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, a, {"retention.ms": "8000"})]
        )
        their_altered = await theirs.alter_configs(
            [TheirConfigResource(TheirType.TOPIC, b, {"retention.ms": "8000"})]
        )
        assert [renamed(r.to_object(), a, b) for r in altered] == [
            r.to_object() for r in their_altered
        ]
        mine = await ours.describe_configs(
            [
                ConfigResource("topic", a),
                ConfigResource(ConfigResourceType.BROKER, str(node), {"num.partitions": None}),
            ]
        )
        their = await theirs.describe_configs(
            [
                TheirConfigResource(TheirType.TOPIC, b),
                TheirConfigResource(TheirType.BROKER, str(node), {"num.partitions": None}),
            ]
        )
        assert [renamed(r.to_object(), a, b) for r in mine] == [r.to_object() for r in their]
        (broker_answer,) = mine[0].resources
        assert [e.config_names for e in broker_answer.config_entries] == ["num.partitions"]
        topic_entries = {
            e.config_names: e.config_value for e in mine[1].resources[0].config_entries
        }
        assert topic_entries["retention.ms"] == "8000"
        with_synonyms = await ours.describe_configs(
            [ConfigResource("topic", a, {"retention.ms": None})], include_synonyms=True
        )
        their_synonyms = await theirs.describe_configs(
            [TheirConfigResource("topic", b, {"retention.ms": None})], include_synonyms=True
        )
        assert [renamed(r.to_object(), a, b) for r in with_synonyms] == [
            r.to_object() for r in their_synonyms
        ]
        bad = await ours.alter_configs([ConfigResource("topic", a, {"retention.ms": "x"})])
        assert bad[0].resources[0].error_code == ErrorCode.invalid_config

    run_both(kafka, body)


def test_groups_and_records_match_aiokafka(kafka: BrokerProcess) -> None:
    topic, group = name("g"), name("group")
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap})

    async def body(ours: AIOKafkaAdminClient, theirs: theirs_admin.AIOKafkaAdminClient) -> None:
        await ours.create_topics([NewTopic(topic, 2, 1)])
        for p in (0, 1):
            for i in range(6):
                producer.produce(topic, b"%d" % i, partition=p)
        assert producer.flush(TIMEOUT) == 0
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        try:
            consumer.subscribe([topic])
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not consumer.assignment():
                assert loop.time() < deadline, "no assignment"
                await loop.run_in_executor(None, consumer.poll, 0.2)
            consumer.commit(
                offsets=[confluent_kafka.TopicPartition(topic, 0, 4)], asynchronous=False
            )
            assert await ours.find_coordinator(group) == await theirs.find_coordinator(group)
            assert (group, "consumer") in await ours.list_consumer_groups()
            assert set(await ours.list_consumer_groups()) == set(
                await theirs.list_consumer_groups()
            )
            described = await ours.describe_consumer_groups([group])
            their_described = await theirs.describe_consumer_groups([group])
            assert [r.to_object() for r in described] == [r.to_object() for r in their_described]
            (entry,) = described[0].groups
            assert (entry.group, entry.state, len(entry.members)) == (group, "Stable", 1)

            whole = await ours.list_consumer_group_offsets(group)
            assert whole == {TopicPartition(topic, 0): OffsetAndMetadata(4, "")}
            assert keyed(whole) == keyed(await theirs.list_consumer_group_offsets(group))
            both = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            some = await ours.list_consumer_group_offsets(group, partitions=both)
            their_some = await theirs.list_consumer_group_offsets(
                group, partitions=[TheirTP(topic, 0), TheirTP(topic, 1)]
            )
            assert keyed(some) == keyed(their_some)
            assert some[TopicPartition(topic, 1)].offset == -1
            # An active group can be neither deleted nor moved from outside.
            assert await ours.delete_consumer_groups([group]) == [
                (group, int(ErrorCode.non_empty_group))
            ]
            with pytest.raises(KafkaError) as active:
                await ours.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 1})
            assert active.value.code() in (
                ErrorCode.unknown_member_id,
                ErrorCode.illegal_generation,
                ErrorCode.rebalance_in_progress,
            )
        finally:
            consumer.close()

        altered = await ours.alter_consumer_group_offsets(
            group,
            {
                TopicPartition(topic, 0): OffsetAndMetadata(2, "by admin"),
                TopicPartition(topic, 1): 5,
            },
        )
        assert altered[TopicPartition(topic, 1)] == OffsetAndMetadata(5, "")
        after = await theirs.list_consumer_group_offsets(group)
        assert {(tp.partition, m.offset, m.metadata) for tp, m in after.items()} == {
            (0, 2, "by admin"),
            (1, 5, ""),
        }
        assert await ours.delete_consumer_group_offsets(group, [TopicPartition(topic, 0)]) == [
            TopicPartition(topic, 0)
        ]
        after = await theirs.list_consumer_group_offsets(group)
        assert {tp.partition for tp in after} == {1}

        low = await ours.delete_records({TopicPartition(topic, 0): RecordsToDelete(3)})
        their_low = await theirs.delete_records(
            {TheirTP(topic, 1): theirs_admin.RecordsToDelete(2)}
        )
        assert keyed(low) == {(topic, 0): 3}
        assert keyed(their_low) == {(topic, 1): 2}
        with pytest.raises(KafkaError) as beyond:
            await ours.delete_records({TopicPartition(topic, 0): RecordsToDelete(99)})
        assert beyond.value.code() == ErrorCode.offset_out_of_range

        assert await ours.delete_consumer_groups([group, "never-there"]) == [
            (group, 0),
            ("never-there", int(ErrorCode.group_id_not_found)),
        ]
        assert group not in {g for g, _ in await theirs.list_consumer_groups()}

    run_both(kafka, body)


def test_bad_use_is_a_clear_error(kafka: BrokerProcess) -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap, no_such_option=1)
    with pytest.raises(ConfigError, match=r"request\.timeout\.ms"):
        AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms="soon")
    with pytest.raises(ValueError, match="num_partitions"):
        NewTopic("t", 1, 1, replica_assignments={0: [1]})

    async def main() -> None:
        idle = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        with pytest.raises(RuntimeError, match="start"):
            await idle.list_topics()
        unreachable = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:1", request_timeout_ms=2000)
        with pytest.raises(Exception, match=r"127\.0\.0\.1:1"):
            await unreachable.start()
        async with AIOKafkaAdminClient(bootstrap_servers=[kafka.bootstrap]) as admin:
            assert isinstance(await admin.list_topics(), list)
        with pytest.raises(RuntimeError, match="closed"):
            await admin.list_topics()

    asyncio.run(main())

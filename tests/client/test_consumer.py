"""The odradek consumer against a real ``odradek serve``, with confluent-kafka as the
independent producer / group peer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient as CKAdmin
from confluent_kafka.admin import NewTopic as CKNewTopic

from odradek.client._core.aio_types import TopicPartition as AioTopicPartition
from odradek.client._core.config import ClientConfig
from odradek.client._core.types import (
    TIMESTAMP_CREATE_TIME,
    KafkaException,
    Message,
    TopicPartition,
)
from odradek.client.consumer.aio import AIOKafkaConsumer
from odradek.client.consumer.blocking import Consumer
from odradek.client.consumer.core import ConsumerCore, ConsumerRecord
from odradek.client.consumer.fetch_decode import decode_fetched
from odradek.records.codec import Header, Record, encode_batch
from tests.support.broker import BrokerProcess, running_broker

GROUP_ARGS = [
    "--override",
    "group.initial.rebalance.delay.ms=0",
    "--override",
    "group.min.session.timeout.ms=1000",
]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("consumer") / "data", GROUP_ARGS) as process:
        yield process


def new_topic(kafka: BrokerProcess, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_topics([CKNewTopic(name, partitions, 1)]).values():
        future.result(10)
    return name


def produce(kafka: BrokerProcess, topic: str, items: list[dict[str, object]]) -> None:
    producer = CKProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for item in items:
        producer.produce(topic, **item)  # type: ignore[arg-type]
    assert producer.flush(10) == 0


def config(kafka: BrokerProcess, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": kafka.bootstrap,
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100,
        **extra,
    }


def drain(consumer: Consumer, count: int, deadline_s: float = 20.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.consume(count - len(got), 0.5)
    return got


def test_records_are_byte_exact(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 2)
    items: list[dict[str, object]] = [
        {
            "key": None if i == 3 else bytes([i, 0, 255]),
            "value": None if i == 4 else b"v" * i + b"\x00\xff",
            "partition": i % 2,
            "headers": [("h1", b"\x00\x01"), ("h2", None)] if i % 3 == 0 else None,
            "timestamp": 1_600_000_000_000 + i,
        }
        for i in range(30)
    ]
    produce(kafka, topic, items)
    with Consumer(config(kafka)) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        messages = drain(consumer, 30)
    assert len(messages) == 30
    by_ts = {m.timestamp()[1]: m for m in messages}
    for i, item in enumerate(items):
        message = by_ts[1_600_000_000_000 + i]
        assert message.partition() == i % 2
        assert message.key() == item["key"]
        assert message.value() == item["value"]
        assert message.headers() == item["headers"]
        assert message.timestamp() == (TIMESTAMP_CREATE_TIME, 1_600_000_000_000 + i)
    for p in (0, 1):
        offsets = [m.offset() for m in messages if m.partition() == p]
        assert offsets == list(range(15))


def test_seek_positions_and_offsets_for_times(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka)
    produce(kafka, topic, [{"value": b"%d" % i, "timestamp": 1000 + 10 * i} for i in range(10)])
    tp = TopicPartition(topic, 0)
    with Consumer(config(kafka, **{"auto.offset.reset": "latest"})) as consumer:
        consumer.assign([tp])
        assert consumer.poll(0.5) is None  # latest: nothing new
        assert consumer.get_watermark_offsets(tp) == (0, 10)
        consumer.seek(TopicPartition(topic, 0, 7))
        assert [m.value() for m in drain(consumer, 3)] == [b"7", b"8", b"9"]
        assert consumer.position([tp])[0].offset == 10
        found = consumer.offsets_for_times([TopicPartition(topic, 0, 1035)])
        assert found[0].offset == 4
        consumer.seek(TopicPartition(topic, 0, found[0].offset))
        assert drain(consumer, 1)[0].value() == b"4"
        assert consumer.offsets_for_times([TopicPartition(topic, 0, 99_999)])[0].offset == -1
        consumer.pause([tp])
        consumer.seek(TopicPartition(topic, 0, 0))
        assert consumer.poll(0.3) is None
        consumer.resume([tp])
        assert drain(consumer, 1)[0].value() == b"0"


def test_commits_visible_to_confluent_and_resume_from_committed(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka)
    produce(kafka, topic, [{"value": b"%d" % i} for i in range(8)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    with Consumer(config(kafka, **{"group.id": group, "enable.auto.commit": False})) as consumer:
        consumer.assign([tp])
        messages = drain(consumer, 5)
        consumer.commit(message=messages[4], asynchronous=False)
        assert consumer.committed([tp])[0].offset == 5
    peer = CKConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        assert peer.committed([CKTopicPartition(topic, 0)], 10)[0].offset == 5
    finally:
        peer.close()
    with Consumer(config(kafka, **{"group.id": group})) as consumer:
        consumer.assign([tp])
        assert [m.value() for m in drain(consumer, 3)] == [b"5", b"6", b"7"]
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        assert consumer.committed([tp])[0].offset == 2


def test_no_committed_offset_and_reset_none_raises(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Consumer(config(kafka, **{"group.id": group, "auto.offset.reset": "none"})) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(KafkaException):
            for _ in range(20):
                consumer.poll(0.2)


def test_group_of_two_odradek_and_one_confluent_shares_partitions(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    common = {
        "group.id": group,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": "range",
        "enable.auto.commit": False,
    }
    assigned: dict[int, list[int]] = {}
    revoked: list[int] = []
    ours = [Consumer(config(kafka, **common)) for _ in range(2)]
    theirs = CKConsumer(
        {"bootstrap.servers": kafka.bootstrap, "auto.offset.reset": "earliest", **common}
    )
    members: list[Any] = [*ours, theirs]
    try:
        for i, ours_i in enumerate(ours):

            def on_assign(c: Consumer, ps: list[TopicPartition], i: int = i) -> None:
                assigned[i] = [tp.partition for tp in ps]

            def on_revoke(c: Consumer, ps: list[TopicPartition], i: int = i) -> None:
                revoked.append(i)

            ours_i.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        theirs.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the group is stable with all three
            for consumer in members:
                assert consumer.poll(0.05) is None
            sizes = [len(c.assignment()) for c in members]
            if sizes == [2, 2, 2]:
                break
        assert sorted(tp.partition for c in members for tp in c.assignment()) == list(range(6))
        produce(kafka, topic, [{"value": b"%d" % i, "partition": i % 6} for i in range(60)])
        seen: list[tuple[int, int]] = []
        by_member: dict[int, set[int]] = {}
        deadline = time.monotonic() + 30
        while len(seen) < 60 and time.monotonic() < deadline:
            for i, consumer in enumerate(members):
                message = consumer.poll(0.05)
                if message is not None and message.error() is None:
                    seen.append((message.partition(), message.offset()))
                    by_member.setdefault(i, set()).add(message.partition())
                    consumer.commit(message, asynchronous=False)
        assert sorted(seen) == sorted((i % 6, i // 6) for i in range(60))  # exactly once
        assert all(len(by_member[i]) == 2 for i in (0, 1, 2))
        for i in (0, 1):
            assert sorted(assigned[i]) == sorted(by_member[i])
        check = CKConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
        try:
            committed = check.committed([CKTopicPartition(topic, p) for p in range(6)], 10)
            assert [c.offset for c in committed] == [10] * 6
        finally:
            check.close()
    finally:
        for consumer in ours:
            consumer.close()
        theirs.close()
    assert 0 in revoked and 1 in revoked  # revoked on rebalances and on close


def test_auto_commit_on_close_and_rejoin(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 2)
    produce(kafka, topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(10)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    props = config(kafka, **{"group.id": group, "heartbeat.interval.ms": 200})
    with Consumer(props) as consumer:
        consumer.subscribe([topic])
        assert len(drain(consumer, 10)) == 10
    with Consumer(props) as consumer:
        consumer.subscribe([topic])
        assert consumer.poll(1.0) is None
        got = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert [tp.offset for tp in got] == [5, 5]


def test_aiokafka_shaped_consumer(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka)
    produce(kafka, topic, [{"key": b"k", "value": b"%d" % i} for i in range(5)])

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=200,
        )
        await consumer.start()
        try:
            consumer.subscribe([topic])
            first = await asyncio.wait_for(consumer.getone(), 20)
            assert (first.key, first.value, first.offset) == (b"k", b"0", 0)
            batch = await consumer.getmany(timeout_ms=2000)
            rest = [r.value for rs in batch.values() for r in rs]
            assert rest == [b"1", b"2", b"3", b"4"]
            tp = AioTopicPartition(topic, 0)  # the aio face's own (topic, partition) pair
            await consumer.commit()
            assert await consumer.committed(tp) == 5
            await consumer.seek_to_beginning(tp)
            assert await consumer.position(tp) == 0
            assert (await consumer.end_offsets([tp]))[tp] == 5
        finally:
            await consumer.stop()

    asyncio.run(main())


def test_core_assign_mode_commits_with_generation_minus_one(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka)
    produce(kafka, topic, [{"value": b"x"} for _ in range(3)])

    async def main() -> None:
        core = ConsumerCore(ClientConfig(config(kafka, **{"group.id": "assign-g"}), "consumer"))
        try:
            await core.assign([(topic, 0)])
            records: list[ConsumerRecord] = []
            while len(records) < 3:
                records += await core.getmany(10, 5.0)
            assert await core.commit() == {(topic, 0): 3}
            assert (await core.committed([(topic, 0)]))[(topic, 0)][0] == 3
        finally:
            await core.close()

    asyncio.run(main())


def test_decode_ignores_truncated_tail_and_control_batches() -> None:
    first = encode_batch([Record(10, 5, b"k", b"v", (Header("h", None),))], base_offset=10)
    marker = encode_batch(
        [Record(11, 6, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=11,
        is_control=True,
        is_transactional=True,
    )
    last = encode_batch([Record(13, 7, None, b"w")], base_offset=13)  # offset 12 compacted
    data = bytes(first) + bytes(marker) + bytes(last)
    records, next_offset = decode_fetched("t", 0, data[:-5], 10, None)
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (10, b"k", b"v", (("h", None),))
    ]
    assert next_offset == 12  # after the control batch, before the cut one
    records, next_offset = decode_fetched("t", 0, data, 11, None)
    assert [r.offset for r in records] == [13] and next_offset == 14
    assert decode_fetched("t", 0, data[:20], 10, None) == ([], 10)

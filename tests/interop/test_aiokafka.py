"""aiokafka against ``odradek serve``: producer, assign()-only consumer, offsets, admin.

aiokafka compresses with cramjam (gzip, snappy, lz4, zstd), which odradek itself
depends on, so every codec runs here. Each test runs its own event loop under an
overall timeout, so a broker that stops answering fails the test instead of hanging.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

aiokafka = pytest.importorskip("aiokafka")

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.codec import has_gzip, has_lz4, has_snappy, has_zstd  # noqa: E402
from aiokafka.errors import (  # noqa: E402
    InvalidConfigurationError,
    MessageSizeTooLargeError,
    TopicAlreadyExistsError,
)

from tests.interop.support import (  # noqa: E402
    BASE_TIMESTAMP,
    CLIENT_TIMEOUT_S,
    DELETE_TOPICS_KEY,
    assert_same_records,
    broker_supports,
    codec,
    sample_records,
    stored_batches,
)
from tests.support.broker import BrokerProcess  # noqa: E402

TIMEOUT_MS = int(CLIENT_TIMEOUT_S * 1000)
TEST_TIMEOUT_S = 45.0
AVAILABLE = {"gzip": has_gzip(), "snappy": has_snappy(), "lz4": has_lz4(), "zstd": has_zstd()}


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), TEST_TIMEOUT_S))


async def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=config or {})])
    finally:
        await admin.close()


async def consume(
    bootstrap: str, topic: str, partitions: int, count: int, **config: Any
) -> list[Any]:
    """Exactly ``count`` records from the beginning of every partition, via getmany."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_MS,
        **config,
    )
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        records: list[Any] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(records) < count:
            assert time.monotonic() < deadline, f"only {len(records)}/{count} records arrived"
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        extra = await consumer.getmany(timeout_ms=300)
        assert not any(extra.values()), "more records than produced"
        return records
    finally:
        await consumer.stop()


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_each_codec_idempotent(
    interop_broker: BrokerProcess, bootstrap: str, topic_name: str, compression: str | None
) -> None:
    if compression is not None and not AVAILABLE[compression]:
        pytest.skip(f"aiokafka cannot use {compression} here (cramjam lacks it)")
    records = sample_records(3, 8)

    async def test() -> None:
        await create_topic(bootstrap, topic_name, partitions=3)
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            compression_type=compression,
            linger_ms=20,
            request_timeout_ms=TIMEOUT_MS,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic_name,
                    key=r.key,
                    value=r.value,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=r.headers,
                )
                for r in records
            ]
            metadata = await asyncio.gather(*futures)
            # send_and_wait: one more record, acknowledged before it returns.
            last = await producer.send_and_wait(
                topic_name, value=b"last", partition=0, headers=[("k", b"v")]
            )
        finally:
            await producer.stop()
        assert sorted((m.partition, m.offset) for m in metadata) == [
            (p, o) for p in range(3) for o in range(8)
        ]
        assert (last.partition, last.offset) == (0, 8)
        received = await consume(bootstrap, topic_name, 3, len(records) + 1)
        tail = [r for r in received if r.partition == 0 and r.offset == 8]
        assert [(r.value, list(r.headers)) for r in tail] == [(b"last", [("k", b"v")])]
        assert_same_records([r for r in received if r not in tail], records)

    run(test)
    for partition in range(3):
        batches = stored_batches(interop_broker.data_dir, topic_name, partition)
        assert {b.compression for b in batches} == {codec(compression or "none")}
        assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches)


def test_offsets_end_beginning_and_for_times(bootstrap: str, topic_name: str) -> None:
    async def test() -> None:
        await create_topic(bootstrap, topic_name, partitions=2)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        await producer.start()
        try:
            batch = producer.create_batch()
            for i in range(5):
                batch.append(key=None, value=b"%d" % i, timestamp=BASE_TIMESTAMP + i * 100)
            await (await producer.send_batch(batch, topic_name, partition=0))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, request_timeout_ms=TIMEOUT_MS
        )
        await consumer.start()
        try:
            tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
            consumer.assign([tp0, tp1])
            assert await consumer.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 0}
            assert await consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
            found = await consumer.offsets_for_times(
                {tp0: BASE_TIMESTAMP + 150, tp1: BASE_TIMESTAMP}
            )
            assert (found[tp0].offset, found[tp0].timestamp) == (2, BASE_TIMESTAMP + 200)
            assert found[tp1] is None
            # Seek into the middle of the (single) batch: records before it are skipped.
            consumer.seek(tp0, 3)
            records = await consumer.getmany(tp0, timeout_ms=TIMEOUT_MS)
            assert [(r.offset, r.value) for r in records[tp0]] == [(3, b"3"), (4, b"4")]
            assert await consumer.position(tp0) == 5
        finally:
            await consumer.stop()

    run(test)


def test_large_value_and_max_message_bytes(bootstrap: str, topic_name: str) -> None:
    small_limit = topic_name + "-small"
    value = os.urandom(900 * 1024)

    async def test() -> None:
        await create_topic(bootstrap, topic_name)
        await create_topic(bootstrap, small_limit, config={"max.message.bytes": "2048"})
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, max_batch_size=2**20)
        await producer.start()
        try:
            sent = await producer.send_and_wait(topic_name, value=value, partition=0)
            assert sent.offset == 0
            with pytest.raises(MessageSizeTooLargeError):
                await producer.send_and_wait(small_limit, value=b"q" * 4096, partition=0)
        finally:
            await producer.stop()
        (record,) = await consume(bootstrap, topic_name, 1, 1)
        assert record.value == value

    run(test)


def test_log_append_time_topic(bootstrap: str, topic_name: str) -> None:
    async def test() -> None:
        await create_topic(
            bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"}
        )
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            before = int(time.time() * 1000)
            sent = await producer.send_and_wait(
                topic_name, value=b"x", partition=0, timestamp_ms=BASE_TIMESTAMP
            )
            after = int(time.time() * 1000)
        finally:
            await producer.stop()
        assert sent.timestamp_type == 1 and before <= sent.timestamp <= after
        (record,) = await consume(bootstrap, topic_name, 1, 1)
        assert (record.timestamp_type, record.timestamp) == (1, sent.timestamp)

    run(test)


def test_admin_create_list_describe_delete(bootstrap: str, topic_name: str) -> None:
    async def test() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)
        await admin.start()
        try:
            created = await admin.create_topics([NewTopic(topic_name, 2, 1)])
            assert [(t[0], t[1]) for t in created.topic_errors] == [(topic_name, 0)]
            assert topic_name in await admin.list_topics()
            (described,) = await admin.describe_topics([topic_name])
            assert described["error_code"] == 0
            assert sorted(p["partition"] for p in described["partitions"]) == [0, 1]
            # aiokafka returns per-topic errors instead of raising.
            again = await admin.create_topics(
                [
                    NewTopic(topic_name, 1, 1),
                    NewTopic(topic_name + "-bad", 1, 1, topic_configs={"retention.ms": "x"}),
                ],
                validate_only=True,
            )
            assert [t[1] for t in again.topic_errors] == [
                TopicAlreadyExistsError.errno,
                InvalidConfigurationError.errno,
            ]
            if not broker_supports(DELETE_TOPICS_KEY):
                pytest.skip("DeleteTopics (API 20) is not implemented yet: delete not checked")
            deleted = await admin.delete_topics([topic_name])
            assert [tuple(t)[:2] for t in deleted.topic_error_codes] == [(topic_name, 0)]
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while topic_name in await admin.list_topics():
                assert time.monotonic() < deadline, "deleted topic still listed"
                await asyncio.sleep(0.05)
        finally:
            await admin.close()

    run(test)

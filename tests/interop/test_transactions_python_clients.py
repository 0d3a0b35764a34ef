"""kafka-python and aiokafka transactions against one ``odradek serve``.

Each client's own transactional producer and read_committed consumer, as their
users write them: a committed transaction is read back by a read_committed consumer,
an aborted one is not (but a read_uncommitted consumer sees it), and offsets sent
with a transaction (``send_offsets_to_transaction``) are the group's committed offsets
once it commits.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest

kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

from tests.support.broker import BrokerProcess  # noqa: E402

CLIENT_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process = BrokerProcess(tmp_path_factory.mktemp("txn-py") / "data").start()
    try:
        yield process.bootstrap
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def _topic(bootstrap: str) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    return name


def _read(bootstrap: str, topic: str, isolation: str, idle_ms: int = 3000) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=idle_ms,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [message.value for message in consumer]
    finally:
        consumer.close()


def test_kafka_python_commit_and_abort(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept-1")
        producer.send(topic, b"kept-2")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped")
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    assert _read(bootstrap, topic, "read_committed") == [b"kept-1", b"kept-2"]
    assert _read(bootstrap, topic, "read_uncommitted") == [b"kept-1", b"kept-2", b"dropped"]


def test_kafka_python_offsets_in_a_transaction(bootstrap: str) -> None:
    source, sink = _topic(bootstrap), _topic(bootstrap)
    group = f"kp-group-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(sink, b"out")
        producer.send_offsets_to_transaction(
            {TopicPartition(source, 0): OffsetAndMetadata(7, "", -1)}, group
        )
        producer.commit_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        committed = None
        while committed is None and time.monotonic() < deadline:
            committed = consumer.committed(TopicPartition(source, 0))
        assert committed == 7
    finally:
        consumer.close()
    assert _read(bootstrap, sink, "read_committed") == [b"out"]


def test_aiokafka_transaction_context_manager(bootstrap: str) -> None:
    topic = _topic(bootstrap)

    async def run() -> tuple[list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"kept")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"dropped")
                    raise RuntimeError("abort this one")
        finally:
            await producer.stop()
        results = []
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                isolation_level=isolation,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                tp = aiokafka.TopicPartition(topic, 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                values: list[bytes] = []
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    batch = await consumer.getmany(tp, timeout_ms=500)
                    values += [m.value for m in batch.get(tp, [])]
                results.append(values)
            finally:
                await consumer.stop()
        return results[0], results[1]

    committed, everything = asyncio.run(run())
    assert committed == [b"kept"]
    assert everything == [b"kept", b"dropped"]

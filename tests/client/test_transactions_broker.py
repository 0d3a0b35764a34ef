"""odradek.client's transactions against a real ``odradek serve`` broker.

They check commit visible / abort invisible under
read_committed (read_uncommitted sees both, never a control record), an open
transaction holding read_committed consumers at the last stable offset, zombie
fencing, and a consume-transform-produce loop (confluent-kafka's
``eos-transactions.py`` example, ported) whose output holds each input record once
and whose committed offsets match.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.client import (
    AdminClient,
    AIOKafkaConsumer,
    AIOKafkaProducer,
    Consumer,
    KafkaException,
    NewTopic,
    Producer,
    TopicPartition,
)
from tests.support.broker import BrokerProcess, running_broker

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("txn") / "data") as process:
        yield process


def create(kafka: BrokerProcess, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    try:
        futures = admin.create_topics([NewTopic(name, partitions) for name, partitions in topics])
        for future in futures.values():
            future.result(TIMEOUT_S)
    finally:
        admin.close()


def transactional(kafka: BrokerProcess, txn_id: str, **extra: Any) -> Producer:
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": txn_id, **extra})
    producer.init_transactions(TIMEOUT_S)
    return producer


def read_all(
    kafka: BrokerProcess, topic: str, partitions: int, isolation: str, quiet_s: float = 2.0
) -> list[Any]:
    """Every record of ``topic`` a consumer with ``isolation`` gets, until quiet."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Any] = []
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            out.append(message)
            last = time.monotonic()
        return out
    finally:
        consumer.close()


def test_commit_is_visible_and_abort_is_not(kafka: BrokerProcess) -> None:
    create(kafka, ("txn-visible", 2))
    producer = transactional(kafka, "txn-visible-1")
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.produce("txn-visible", b"committed-%d" % i, partition=i % 2)
        producer.commit_transaction(TIMEOUT_S)
        producer.begin_transaction()
        for i in range(5):
            producer.produce("txn-visible", b"aborted-%d" % i, partition=i % 2)
        producer.flush(TIMEOUT_S)  # written to the log, then aborted
        producer.abort_transaction(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce("txn-visible", b"committed-last", partition=0)
        producer.commit_transaction(TIMEOUT_S)
    finally:
        producer.close(TIMEOUT_S)
    committed = read_all(kafka, "txn-visible", 2, "read_committed")
    values = sorted(m.value() for m in committed)
    assert values == sorted([b"committed-%d" % i for i in range(10)] + [b"committed-last"])
    everything = read_all(kafka, "txn-visible", 2, "read_uncommitted")
    assert len(everything) == 16  # data records only: the markers are never handed out
    assert all(m.value().startswith((b"committed", b"aborted")) for m in everything)


def test_an_open_transaction_holds_read_committed_consumers(kafka: BrokerProcess) -> None:
    create(kafka, ("txn-lso", 1))
    producer = transactional(kafka, "txn-lso-1")
    plain = Producer({"bootstrap.servers": kafka.bootstrap})
    try:
        producer.begin_transaction()
        producer.produce("txn-lso", b"in-txn", partition=0)
        producer.flush(TIMEOUT_S)
        plain.produce("txn-lso", b"after", partition=0)
        plain.flush(TIMEOUT_S)
        assert read_all(kafka, "txn-lso", 1, "read_committed", 1.0) == []
        assert len(read_all(kafka, "txn-lso", 1, "read_uncommitted", 1.0)) == 2
        producer.commit_transaction(TIMEOUT_S)
        values = [m.value() for m in read_all(kafka, "txn-lso", 1, "read_committed")]
        assert values == [b"in-txn", b"after"]
    finally:
        producer.close(TIMEOUT_S)
        plain.close(TIMEOUT_S)


def test_a_second_instance_fences_the_first(kafka: BrokerProcess) -> None:
    create(kafka, ("txn-zombie", 1))
    zombie = transactional(kafka, "txn-zombie-1")
    try:
        zombie.begin_transaction()
        zombie.produce("txn-zombie", b"zombie", partition=0)
        zombie.flush(TIMEOUT_S)
        successor = transactional(kafka, "txn-zombie-1")  # aborts the zombie's transaction
        try:
            successor.begin_transaction()
            successor.produce("txn-zombie", b"successor", partition=0)
            successor.commit_transaction(TIMEOUT_S)
        finally:
            successor.close(TIMEOUT_S)
        with pytest.raises(KafkaException) as raised:
            zombie.produce("txn-zombie", b"zombie-2", partition=0)
            zombie.commit_transaction(TIMEOUT_S)
        assert raised.value.args[0].fatal()
    finally:
        zombie.close(5)
    values = [m.value() for m in read_all(kafka, "txn-zombie", 1, "read_committed")]
    assert values == [b"successor"]


def test_consume_transform_produce_exactly_once(kafka: BrokerProcess) -> None:
    """confluent-kafka's eos-transactions example with odradek.client: read the input
    under a group, write each record upper-cased in a transaction together with the
    consumed offsets; abort every third transaction, and start over from the
    committed offsets (a fresh consumer and producer) after each abort."""
    create(kafka, ("eos-in", 3), ("eos-out", 3))
    source = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(300):
        source.produce("eos-in", b"record-%03d" % i, key=b"%d" % i)
    assert source.flush(TIMEOUT_S) == 0
    source.close()

    transactions = 0
    deadline = time.monotonic() + 120
    done = False
    while not done:
        assert time.monotonic() < deadline
        consumer = Consumer(
            {
                "bootstrap.servers": kafka.bootstrap,
                "group.id": "eos-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        producer = transactional(kafka, "eos-transformer")
        consumer.subscribe(["eos-in"])
        try:
            idle = 0
            while True:
                batch = consumer.consume(50, 1.0)
                if not batch:
                    idle += 1
                    if idle >= 5:
                        done = True
                        break
                    continue
                idle = 0
                producer.begin_transaction()
                for message in batch:
                    assert message.error() is None
                    producer.produce("eos-out", (message.value() or b"").upper(), key=message.key())
                positions = consumer.position(consumer.assignment())
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), TIMEOUT_S
                )
                transactions += 1
                if transactions % 3 == 0:
                    producer.abort_transaction(TIMEOUT_S)
                    break  # start over from the committed offsets
                producer.commit_transaction(TIMEOUT_S)
        finally:
            producer.close(TIMEOUT_S)
            consumer.close()

    out = read_all(kafka, "eos-out", 3, "read_committed")
    assert sorted(m.value() for m in out) == [b"RECORD-%03d" % i for i in range(300)]
    checker = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "eos-group"})
    try:
        committed = checker.committed([TopicPartition("eos-in", p) for p in range(3)], TIMEOUT_S)
        low_high = [
            checker.get_watermark_offsets(TopicPartition("eos-in", p), TIMEOUT_S)[1]
            for p in range(3)
        ]
        assert [tp.offset for tp in committed] == low_high
    finally:
        checker.close()


def test_aiokafka_face_transaction_and_read_committed(kafka: BrokerProcess) -> None:
    create(kafka, ("txn-aio", 1))

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id="aio-1")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send("txn-aio", b"kept", partition=0)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await (await producer.send("txn-aio", b"dropped", partition=0))
                    raise RuntimeError("abort it")
            async with producer.transaction():
                await producer.send("txn-aio", b"kept-too", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            await consumer.assign([TopicPartition("txn-aio", 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(values) < 2 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [r.value or b"" for r in records]
            await asyncio.sleep(0.5)
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values += [r.value or b"" for r in records]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == [b"kept", b"kept-too"]

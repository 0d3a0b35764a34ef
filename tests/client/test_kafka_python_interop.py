"""The odradek client and kafka-python (the pure-Python peer) both ways, on one broker.

odradek's Producer writes, kafka-python's KafkaConsumer reads; kafka-python's
KafkaProducer writes, odradek's Consumer reads — every codec, byte-exact keys, values,
headers and timestamps (null keys and values, empty values and header values
included). And a key lands on the same partition whichever of odradek, kafka-python
and confluent-kafka produced it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer as CKProducer  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka import TopicPartition as KPTopicPartition  # noqa: E402

from odradek.client import Consumer, Producer, TopicPartition  # noqa: E402
from odradek.testing import EmbeddedBroker  # noqa: E402

TIMEOUT_S = 30.0
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(odradek_broker: EmbeddedBroker) -> EmbeddedBroker:
    """The session's broker (odradek.testing's pytest plugin), in this process: these
    tests only add their own uniquely named topics and groups."""
    return odradek_broker


def new_topic(broker: EmbeddedBroker, partitions: int = 1) -> str:
    return broker.create_topic(f"kp-{uuid.uuid4().hex[:10]}", partitions)


def sample_records(count: int) -> list[dict[str, Any]]:
    """Keys, values and headers in every shape the format allows."""
    records: list[dict[str, Any]] = []
    for i in range(count):
        records.append(
            {
                # kafka-python refuses a record with neither key nor value
                "key": None if i % 7 == 3 and i % 11 != 5 else f"key-{i}".encode(),
                "value": None if i % 11 == 5 else (b"" if i % 13 == 4 else bytes([i % 256]) * i),
                "headers": [("h", f"v{i}".encode()), ("empty", b""), ("dup", b"1"), ("dup", b"2")]
                if i % 2
                else [],
                "timestamp": BASE_TS + i,
            }
        )
    return records


def poll_odradek(consumer: Consumer, count: int) -> list[Any]:
    messages: list[Any] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(messages) < count and time.monotonic() < deadline:
        for message in consumer.consume(500, 0.2):
            assert message.error() is None, message.error()
            messages.append(message)
    return messages


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_odradek_producer_to_kafka_python_consumer(
    broker: EmbeddedBroker, compression: str
) -> None:
    topic = new_topic(broker)
    records = sample_records(60)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": compression, "linger.ms": 5}
    )
    for record in records:
        producer.produce(topic, partition=0, **record)
    assert producer.close(TIMEOUT_S) == 0

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=2000,
    )
    try:
        consumer.assign([KPTopicPartition(topic, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(records) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(batch)
    finally:
        consumer.close()
    assert len(got) == len(records)
    for offset, (message, record) in enumerate(zip(got, records, strict=True)):
        assert message.offset == offset
        assert message.key == record["key"]
        assert message.value == record["value"]
        assert list(message.headers) == record["headers"]
        assert message.timestamp == record["timestamp"]
        assert message.timestamp_type == 0  # CreateTime


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_kafka_python_producer_to_odradek_consumer(
    broker: EmbeddedBroker, compression: str
) -> None:
    topic = new_topic(broker)
    records = sample_records(60)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=None if compression == "none" else compression,
        linger_ms=5,
    )
    try:
        for record in records:
            producer.send(
                topic,
                partition=0,
                key=record["key"],
                value=record["value"],
                headers=record["headers"],
                timestamp_ms=record["timestamp"],
            )
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = poll_odradek(consumer, len(records))
    finally:
        consumer.close()
    assert len(got) == len(records)
    for offset, (message, record) in enumerate(zip(got, records, strict=True)):
        assert (message.topic(), message.partition(), message.offset()) == (topic, 0, offset)
        assert message.key() == record["key"]
        assert message.value() == record["value"]
        assert (message.headers() or []) == record["headers"]
        assert message.timestamp() == (1, record["timestamp"])  # TIMESTAMP_CREATE_TIME


def test_a_key_lands_on_the_same_partition_whichever_client_produced_it(
    broker: EmbeddedBroker,
) -> None:
    """Java's/kafka-python's murmur2 partitioner and librdkafka's murmur2_random agree."""
    topics = {name: new_topic(broker, partitions=7) for name in ("od", "kp", "ck")}
    keys = [f"user-{i}".encode() for i in range(200)] + [b"", b"\x00\xff", "é".encode()]

    # the Producer's default is confluent-kafka's consistent_random: ask for the Java one
    odradek = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    for key in keys:
        odradek.produce(topics["od"], value=key, key=key)
    assert odradek.close(TIMEOUT_S) == 0

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        for key in keys:
            kp.send(topics["kp"], key=key, value=key)
        kp.flush(TIMEOUT_S)
    finally:
        kp.close()

    ck = CKProducer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        ck.produce(topics["ck"], key=key, value=key)
    assert ck.flush(TIMEOUT_S) == 0

    placement: dict[str, dict[bytes, int]] = {}
    for name, topic in topics.items():
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"g-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(7)])
            messages = poll_odradek(consumer, len(keys))
        finally:
            consumer.close()
        placement[name] = {m.key(): m.partition() for m in messages}
        assert len(placement[name]) == len(keys), name
    assert placement["od"] == placement["kp"] == placement["ck"]
    assert len(set(placement["od"].values())) == 7  # the keys really spread

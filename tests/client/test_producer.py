"""The odradek producer against a real ``odradek serve``, read back by confluent-kafka.

Every record written by ``odradek.client`` is consumed with librdkafka (assign, no
group commits) and compared byte for byte; batches on disk are checked with the
storage codec for idempotence (producer id, epoch, consecutive sequences).
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka import Producer as ConfluentProducer  # noqa: E402
from confluent_kafka import TopicPartition as ConfluentTP  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from odradek.client import AIOKafkaProducer, ConfigError, Producer  # noqa: E402
from odradek.client._core.types import TIMESTAMP_CREATE_TIME  # noqa: E402
from odradek.records.batch import COMPRESSION_BY_NAME, BatchHeader, iter_batches  # noqa: E402
from tests.support.broker import BrokerProcess, running_broker  # noqa: E402

TIMEOUT_S = 30.0
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_600_000_000_000


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("producer") / "data") as process:
        yield process


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"p-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        operation_timeout=TIMEOUT_S,
        request_timeout=TIMEOUT_S,
    )
    futures[name].result(TIMEOUT_S)
    return name


def consume(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    """``count`` messages from every partition's start, by librdkafka with assign()."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([ConfluentTP(topic, p, 0) for p in range(partitions)])
        messages: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(messages) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.2):
                assert message.error() is None, message.error()
                messages.append(message)
        # nothing more than expected
        messages.extend(m for m in consumer.consume(1000, 0.3) if m.error() is None)
        return messages
    finally:
        consumer.close()


def producer(bootstrap: str, **config: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, **config})


def samples(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]:
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]] = []
    for i in range(n):
        key = None if i % 5 == 0 else bytes([i % 256, 0, 255]) + b"k%d" % i
        value = b"" if i % 7 == 0 else bytes(range(i % 200)) + b"v%d" % i
        headers = [(f"h{i % 3}", b"\x00\x01" + bytes([i % 256]))] if i % 2 else []
        out.append((key, value, headers, BASE_TS + i))
    return out


def stored_batches(data_dir: Path, topic: str, partition: int) -> list[BatchHeader]:
    headers: list[BatchHeader] = []
    for segment in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        headers.extend(iter_batches(segment.read_bytes()))
    return headers


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_round_trip_byte_exact_every_codec(kafka: BrokerProcess, compression: str) -> None:
    topic = new_topic(kafka.bootstrap)
    records = samples(200)
    p = producer(kafka.bootstrap, **{"compression.type": compression, "linger.ms": 20})
    reports: list[Any] = []
    for key, value, headers, ts in records:
        p.produce(
            topic,
            value,
            key,
            timestamp=ts,
            headers=headers,
            on_delivery=lambda err, msg: reports.append((err, msg)),
        )
    assert p.flush(TIMEOUT_S) == 0
    p.close()
    assert len(reports) == 200 and all(err is None for err, _ in reports)
    assert [m.offset() for _, m in reports] == list(range(200))
    got = consume(kafka.bootstrap, topic, 1, 200)
    assert len(got) == 200
    for message, (key, value, headers, ts) in zip(got, records, strict=True):
        assert message.key() == key
        assert message.value() == value
        assert (message.headers() or []) == headers
        assert message.timestamp() == (TIMESTAMP_CREATE_TIME, ts)
    batches = stored_batches(kafka.data_dir, topic, 0)
    assert {b.compression for b in batches} == {COMPRESSION_BY_NAME[compression]}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(kafka: BrokerProcess, acks: str) -> None:
    topic = new_topic(kafka.bootstrap)
    p = producer(kafka.bootstrap, acks=acks)
    reports: list[Any] = []
    for i in range(50):
        p.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert p.flush(TIMEOUT_S) == 0
    p.close()
    assert [err for err, _ in reports] == [None] * 50
    offsets = [m.offset() for _, m in reports]
    assert offsets == ([-1] * 50 if acks == "0" else list(range(50)))
    got = consume(kafka.bootstrap, topic, 1, 50)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(50)]
    batches = stored_batches(kafka.data_dir, topic, 0)
    # idempotence is on by default, but only with acks=all
    assert all((b.producer_id >= 0) == (acks == "all") for b in batches)


def test_idempotent_batches_carry_producer_id_and_consecutive_sequences(
    kafka: BrokerProcess,
) -> None:
    topic = new_topic(kafka.bootstrap, 2)
    p = producer(kafka.bootstrap, **{"batch.size": 500, "linger.ms": 0})
    for i in range(1000):
        p.produce(topic, b"value-%04d" % i, partition=i % 2)
    assert p.flush(TIMEOUT_S) == 0
    p.close()
    ids = set()
    for partition in range(2):
        batches = stored_batches(kafka.data_dir, topic, partition)
        assert len(batches) > 5
        ids |= {(b.producer_id, b.producer_epoch) for b in batches}
        expected = 0
        for batch in batches:
            assert batch.base_sequence == expected
            expected = batch.last_sequence + 1
        assert expected == 500
    assert len(ids) == 1 and next(iter(ids))[0] >= 0


def test_keyed_records_land_where_librdkafka_murmur2_random_puts_them(
    kafka: BrokerProcess,
) -> None:
    ours, theirs = new_topic(kafka.bootstrap, 7), new_topic(kafka.bootstrap, 7)
    keys = [b"key-%d" % i for i in range(100)] + [b"", bytes(range(256))]
    p = producer(kafka.bootstrap, partitioner="murmur2_random")
    placed: dict[bytes | None, int | None] = {}
    for key in keys:
        p.produce(
            ours, b"x", key, on_delivery=lambda e, m: placed.__setitem__(m.key(), m.partition())
        )
    assert p.flush(TIMEOUT_S) == 0
    p.close()
    reference: dict[bytes | None, int | None] = {}
    c = ConfluentProducer({"bootstrap.servers": kafka.bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        c.produce(
            theirs,
            b"x",
            key,
            on_delivery=lambda e, m: reference.__setitem__(m.key(), m.partition()),
        )
    assert c.flush(TIMEOUT_S) == 0
    assert placed == reference
    assert len(set(placed.values())) > 3


def test_per_partition_order_with_five_in_flight(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 3)
    p = producer(
        kafka.bootstrap,
        **{"batch.size": 300, "linger.ms": 0, "max.in.flight.requests.per.connection": 5},
    )
    for i in range(3000):
        p.produce(topic, b"%d" % i, partition=i % 3)
    assert p.flush(TIMEOUT_S) == 0
    p.close()
    got = consume(kafka.bootstrap, topic, 3, 3000)
    assert len(got) == 3000
    for partition in range(3):
        values = [int(m.value()) for m in got if m.partition() == partition]
        assert values == list(range(partition, 3000, 3))


def test_flush_and_len(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 2)
    p = producer(kafka.bootstrap, **{"linger.ms": 60_000})
    served: list[Any] = []
    for i in range(30):
        p.produce(topic, b"v", key=b"%d" % i, on_delivery=lambda e, m: served.append(e))
    assert len(p) == 30
    assert p.poll(0) == 0  # lingering: nothing delivered yet
    assert p.flush(TIMEOUT_S) == 0
    assert len(p) == 0 and served == [None] * 30
    p.close()


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"linger\.msec"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "linger.msec": 5})
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": "maybe"})
    with pytest.raises(ConfigError, match="acks"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, "acks": 1})
    with pytest.raises(ConfigError, match="linger_msec"):
        AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", linger_msec=5)


def test_max_block_ms_backpressure_with_tiny_buffer(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap)
    p = producer(
        kafka.bootstrap,
        **{"buffer.memory": 2_000, "max.block.ms": 300, "linger.ms": 60_000, "batch.size": 100_000},
    )
    queued = 0
    started = time.monotonic()
    with pytest.raises(BufferError):
        for _ in range(1000):
            p.produce(topic, b"x" * 100)
            queued += 1
    assert time.monotonic() - started >= 0.3
    assert 5 < queued < 30
    assert p.flush(TIMEOUT_S) == 0
    p.produce(topic, b"after")  # space again
    assert p.flush(TIMEOUT_S) == 0
    p.close()
    assert len(consume(kafka.bootstrap, topic, 1, queued + 1)) == queued + 1


def test_aiokafka_shaped_face(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 2)

    async def run() -> list[Any]:
        async with AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap, linger_ms=5, compression_type="lz4"
        ) as aio:
            first = await aio.send_and_wait(
                topic, b"one", key=b"k", partition=1, timestamp_ms=BASE_TS, headers=[("a", b"b")]
            )
            assert (first.topic, first.partition, first.offset) == (topic, 1, 0)
            assert first.timestamp == BASE_TS
            futures = [await aio.send(topic, b"%d" % i, partition=0) for i in range(100)]
            await aio.flush()
            assert all(f.done() for f in futures)
            return [f.result().offset for f in futures]

    assert asyncio.run(run()) == list(range(100))
    got = consume(kafka.bootstrap, topic, 2, 101)
    one = next(m for m in got if m.partition() == 1)
    assert (one.key(), one.value(), one.headers()) == (b"k", b"one", [("a", b"b")])


def test_broker_restart_mid_stream_delivers_exactly_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = new_topic(broker.bootstrap, 2)
        p = producer(
            broker.bootstrap,
            **{"linger.ms": 2, "batch.size": 2_000, "retry.backoff.ms": 50},
        )
        errors: list[Any] = []
        total = 4000
        for i in range(total // 2):
            p.produce(topic, b"%d" % i, partition=i % 2, on_delivery=lambda e, m: errors.append(e))
        p.poll(0)
        assert broker.stop() == 0
        for i in range(total // 2, total):
            p.produce(topic, b"%d" % i, partition=i % 2, on_delivery=lambda e, m: errors.append(e))
        broker.process = None
        broker.start(listen=f"127.0.0.1:{broker.port}")
        assert p.flush(60) == 0
        p.close()
        assert len(errors) == total and not any(errors), {repr(e) for e in errors if e}
        got = consume(broker.bootstrap, topic, 2, total)
        assert len(got) == total
        for partition in range(2):
            values = [int(m.value()) for m in got if m.partition() == partition]
            assert values == list(range(partition, total, 2))
    finally:
        gc.collect()
        try:
            broker.stop()
        finally:
            broker.kill()

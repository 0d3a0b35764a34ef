"""librdkafka's ``partitioner`` values and aiokafka's default, key by key against the
real libraries on a real broker.

For every ``partitioner`` value, a confluent-kafka producer and an odradek ``Producer``
with the same setting produce the same keys (random bytes, plus empty and null keys
several times) to one topic of 7 partitions; the delivery reports say where each
record went. Keyed records must land in the same partition; empty and null keys too
wherever librdkafka's documentation says they are hashed (``consistent``: both;
``murmur2``/``fnv1a``: both; the ``*_random`` ones: empty keys except for
``consistent_random``). Keys librdkafka spreads at random only need a valid partition.
With no ``partitioner`` both sides use their default (``consistent_random``).

``AIOKafkaProducer`` against aiokafka's own producer, default partitioner, likewise;
the Spark sink's plan asks for murmur2_random.
"""

from __future__ import annotations

import asyncio
import gc
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer as RealAIOKafkaProducer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client import AIOKafkaProducer, Producer
from odradek.client.producer.partitioner import fnv1a, fnv1a_partition
from tests.support.broker import BrokerProcess

TIMEOUT_S = 20.0
PARTITIONS = 7
_rng = random.Random(15)
KEYED = [_rng.randbytes(_rng.randrange(1, 40)) for _ in range(150)] + [b"k%d" % i for i in range(7)]
KEYS: list[bytes | None] = [None, b"", *KEYED, None, b"", None, b""]
# which of the empty/null keys librdkafka hashes (deterministic placement)
HASHED_EMPTY = {
    None: {b""},  # default: consistent_random
    "consistent_random": set(),
    "consistent": {b"", None},
    "murmur2": {b"", None},
    "murmur2_random": {b""},
    "fnv1a": {b"", None},
    "fnv1a_random": {b""},
    "random": set(),
}
HASHED_EMPTY[None] = HASHED_EMPTY["consistent_random"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("partitioner-names") / "data").start()
    try:
        yield process
    finally:
        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


def new_topic(bootstrap: str) -> str:
    topic = f"pn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(TIMEOUT_S)
    return topic


def place(producer: Any, topic: str) -> list[int]:
    """Produce every key (value = its index); the partitions the reports name."""
    placed: dict[int, int] = {}
    errors: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            placed[int(message.value())] = message.partition()

    for index, key in enumerate(KEYS):
        producer.produce(topic, value=b"%d" % index, key=key, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert not errors
    return [placed[i] for i in range(len(KEYS))]


def test_fnv1a_known_vectors() -> None:
    # the published FNV-1a 32-bit test vectors (Fowler/Noll/Vo)
    assert fnv1a(b"") == 0x811C9DC5
    assert fnv1a(b"a") == 0xE40C292C
    assert fnv1a(b"foobar") == 0xBF9CF968
    assert all(0 <= fnv1a_partition(k, 7) < 7 for k in KEYED)


@pytest.mark.parametrize("name", list(HASHED_EMPTY))
def test_producer_partitioner_matches_librdkafka(broker: BrokerProcess, name: str | None) -> None:
    setting = {} if name is None else {"partitioner": name}
    theirs = ConfluentProducer({"bootstrap.servers": broker.bootstrap, **setting})
    reference = place(theirs, new_topic(broker.bootstrap))
    del theirs
    ours = Producer({"bootstrap.servers": broker.bootstrap, **setting})
    try:
        placed = place(ours, new_topic(broker.bootstrap))
    finally:
        ours.close()
    assert all(0 <= p < PARTITIONS for p in placed)
    hashed = HASHED_EMPTY[name]
    for index, key in enumerate(KEYS):
        deterministic = (key is None or key == b"") and key in hashed
        if name != "random" and (key not in (None, b"") or deterministic):
            assert placed[index] == reference[index], (name, key)
    if name != "random":
        assert len(set(placed)) == PARTITIONS  # the keys reach every partition


def test_default_is_consistent_random_not_murmur2(broker: BrokerProcess) -> None:
    """The issue's case: seven keys, the default partitioner, confluent-kafka's answer."""
    keys = [b"user-%d" % i for i in range(7)]
    topic = new_topic(broker.bootstrap)
    ours = Producer({"bootstrap.servers": broker.bootstrap})
    placed: dict[bytes, int] = {}
    for key in keys:
        ours.produce(
            topic, b"v", key, on_delivery=lambda e, m: placed.__setitem__(m.key(), m.partition())
        )
    assert ours.flush(TIMEOUT_S) == 0
    ours.close()
    theirs = ConfluentProducer({"bootstrap.servers": broker.bootstrap})
    reference: dict[bytes, int] = {}
    for key in keys:
        theirs.produce(
            topic, b"v", key, on_delivery=lambda e, m: reference.__setitem__(m.key(), m.partition())
        )
    assert theirs.flush(TIMEOUT_S) == 0
    assert placed == reference


async def _aio_place(producer: Any, topic: str) -> list[int]:
    await producer.start()
    try:
        placed = []
        for index, key in enumerate(KEYS):
            metadata = await producer.send_and_wait(topic, b"%d" % index, key=key)
            placed.append(metadata.partition)
        return placed
    finally:
        await producer.stop()


def test_aiokafka_producer_default_matches_aiokafka(broker: BrokerProcess) -> None:
    async def run() -> tuple[list[int], list[int]]:
        reference = await _aio_place(
            RealAIOKafkaProducer(bootstrap_servers=broker.bootstrap), new_topic(broker.bootstrap)
        )
        placed = await _aio_place(
            AIOKafkaProducer(bootstrap_servers=broker.bootstrap), new_topic(broker.bootstrap)
        )
        return reference, placed

    reference, placed = asyncio.run(run())
    for index, key in enumerate(KEYS):
        if key is not None:  # aiokafka: keyless records to a random partition each
            assert placed[index] == reference[index], key
    nulls = {placed[i] for i, key in enumerate(KEYS) if key is None}
    assert nulls <= set(range(PARTITIONS))


def test_spark_sink_plans_murmur2_random() -> None:
    pyspark = pytest.importorskip("pyspark")
    del pyspark
    from pyspark.sql.types import BinaryType, StructField, StructType

    from odradek.spark.write import plan_write

    schema = StructType([StructField("value", BinaryType())])
    options = {"kafka.bootstrap.servers": "localhost:9092", "topic": "t"}
    plan = plan_write(options, schema, False)
    assert plan.config["partitioner"] == "murmur2_random"
    chosen = plan_write({**options, "kafka.partitioner": "consistent"}, schema, False)
    assert chosen.config["partitioner"] == "consistent"


def test_spark_task_places_keys_with_murmur2(broker: BrokerProcess) -> None:
    """A Spark sink task (no Spark needed to drive it) puts keys where the Java client
    and librdkafka's murmur2_random do; an unreachable cluster fails the task at once."""
    pytest.importorskip("pyspark")
    from pyspark.sql.types import BinaryType, StructField, StructType

    from odradek.client import KafkaException
    from odradek.client.producer.partitioner import default_partition
    from odradek.spark.write import AtLeastOnceDelivery, TaskIdentity, plan_write

    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    topic = new_topic(broker.bootstrap)
    plan = plan_write({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic}, schema, False)
    task = AtLeastOnceDelivery(plan, TaskIdentity(partition_id=0, attempt=0))
    for key in KEYED:
        task.send(topic, b"v", key, -1, None)
    message = task.finish()
    expected: dict[int, int] = {}
    for key in KEYED:
        where = default_partition(key, PARTITIONS)
        expected[where] = expected.get(where, 0) + 1
    assert {tp[1]: w.records for tp, w in message.written.items()} == expected

    nowhere = plan_write({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": topic}, schema, False)
    with pytest.raises(KafkaException, match="_TRANSPORT"):
        AtLeastOnceDelivery(nowhere, TaskIdentity(partition_id=0, attempt=0))

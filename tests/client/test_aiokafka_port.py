"""Porting from aiokafka: one program written against aiokafka runs twice on the same
``odradek serve`` — once importing aiokafka, once ``odradek.aio`` (only the import
differs) — and everything it can observe must come out the same: records, keys and
values through the (de)serializers, the partitions of keyed records, TopicPartition
unpacking, NewTopic with create_topics, create_batch/send_batch, the admin
description, offsets, positions and the errors it catches."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.broker import BrokerProcess, running_broker

LIBRARIES = ("aiokafka", "odradek.aio")
RECORDS = 12
BATCH_RECORDS = 5
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("aiokafka_port") / "data") as process:
        yield process


def library(name: str) -> SimpleNamespace:
    """What a program gets from ``import aiokafka`` and its submodules."""
    return SimpleNamespace(
        top=importlib.import_module(name),
        admin=importlib.import_module(f"{name}.admin"),
        errors=importlib.import_module(f"{name}.errors"),
        structs=importlib.import_module(f"{name}.structs"),
        abc=importlib.import_module(f"{name}.abc"),
    )


def to_json(value: Any) -> bytes:
    return json.dumps(value).encode()


def from_json(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


async def caught(lib: SimpleNamespace, call: Any) -> str:
    """The aiokafka error class ``call`` raises, by the program's own except clauses."""
    errors = lib.errors
    try:
        result = call()
        if asyncio.iscoroutine(result):
            await result
    except errors.KafkaConnectionError:
        return "KafkaConnectionError"
    except errors.KafkaTimeoutError:
        return "KafkaTimeoutError"
    except errors.IllegalStateError:
        return "IllegalStateError"
    except errors.IllegalOperation:
        return "IllegalOperation"
    except errors.UnknownTopicOrPartitionError:
        return "UnknownTopicOrPartitionError"
    except errors.KafkaError as error:
        return f"KafkaError {type(error).__name__}"
    return "nothing"


async def program(lib: SimpleNamespace, bootstrap: str, topic: str) -> dict[str, Any]:
    """An aiokafka program; returns what it saw."""
    seen: dict[str, Any] = {}
    aiokafka, admin, structs = lib.top, lib.admin, lib.structs

    client = admin.AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        created = await client.create_topics(
            [admin.NewTopic(topic, 3, 1, topic_configs={"retention.ms": "3600000"})]
        )
        seen["create"] = [tuple(e) for e in created.topic_errors]
        again = await client.create_topics([admin.NewTopic(topic, 3, 1)])
        seen["create again"] = [tuple(e)[:2] for e in again.topic_errors]
        described = await client.describe_topics([topic])
        seen["describe"] = [
            (
                d["error_code"],
                d["topic"],
                d["is_internal"],
                sorted((p["partition"], p["error_code"], p["replicas"]) for p in d["partitions"]),
            )
            for d in described
        ]
        seen["new topic without sizes"] = await caught(lib, lambda: admin.NewTopic(topic, -1, 1))
    finally:
        await client.close()

    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, key_serializer=to_json, value_serializer=to_json
    )
    await producer.start()
    try:
        sent = []
        for n in range(RECORDS):
            # Record 0 has no key (the serializer sees None too: aiokafka's to_json
            # makes it b"null"); it goes to partition 2, the others by their key.
            key, partition = (None, 2) if n == 0 else (f"key-{n % 5}", None)
            sent.append(
                await producer.send_and_wait(
                    topic, {"n": n}, key=key, partition=partition, headers=[("h", b"%d" % n)]
                )
            )
        seen["sent"] = [
            (m.topic, m.partition, m.offset, m.timestamp_type, tuple(m.topic_partition))
            for m in sent
        ]
        seen["metadata fields"] = type(sent[0])._fields
        seen["partitions_for"] = sorted(await producer.partitions_for(topic))

        batch = producer.create_batch()
        appended = [
            batch.append(key=None, value={"b": n}, timestamp=None) for n in range(BATCH_RECORDS)
        ]
        seen["appended"] = [(a.offset, a.size) for a in appended]
        seen["batch size"] = (batch.size(), batch.record_count())
        delivered = await (await producer.send_batch(batch, topic, partition=1))
        seen["batch delivered"] = (
            delivered.topic,
            delivered.partition,
            delivered.offset,
            delivered.timestamp,
            delivered.timestamp_type,
        )

        small = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=300)
        full = small.create_batch()
        results = [full.append(key=b"k", value=b"v" * 40, timestamp=1000) for _ in range(10)]
        seen["full batch"] = (
            [r is not None for r in results],
            full.record_count(),
            full.size(),
            full.closed(),
        )
        await small.stop()
    finally:
        await producer.stop()

    tp = structs.TopicPartition(topic, 0)
    name, number = tp
    seen["unpack"] = (name == topic, number, len(tp), tp == (topic, 0))

    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        key_deserializer=from_json,
        value_deserializer=from_json,
    )
    await consumer.start()
    try:
        partitions = [structs.TopicPartition(topic, p) for p in range(3)]
        consumer.assign(partitions)  # not awaited, as in aiokafka
        seen["assignment"] = sorted(consumer.assignment())
        await consumer.seek_to_beginning(*partitions)
        records = []
        keys_seen = set()
        while len(records) < RECORDS + BATCH_RECORDS:
            got = await consumer.getmany(timeout_ms=1000)
            keys_seen |= {(type(k).__name__, tuple(k)) for k in got}
            for batch_records in got.values():
                records += batch_records
        seen["getmany keys"] = sorted(keys_seen)
        seen["records"] = sorted(
            (
                r.topic,
                r.partition,
                r.offset,
                json.dumps(r.key),
                json.dumps(r.value),
                r.serialized_key_size,
                r.serialized_value_size,
                tuple(r.headers),
                r.checksum,
                r.timestamp_type,
            )
            for r in records
        )
        seen["positions"] = [await consumer.position(p) for p in partitions]
        seen["highwater"] = [consumer.highwater(p) for p in partitions]
        seen["lso"] = [consumer.last_stable_offset(p) for p in partitions]
        seen["end"] = sorted(
            (tuple(k), v) for k, v in (await consumer.end_offsets(partitions)).items()
        )
        seen["beginning"] = sorted(
            (tuple(k), v) for k, v in (await consumer.beginning_offsets(partitions)).items()
        )
        seen["committed before"] = await consumer.committed(partitions[1])
        await consumer.commit({partitions[1]: structs.OffsetAndMetadata(3, "")})
        seen["committed"] = await consumer.committed(partitions[1])
        found = await consumer.offsets_for_times({partitions[1]: 0})
        seen["offsets for times"] = [(tuple(k), v.offset) for k, v in found.items()]
        consumer.pause(partitions[2])
        seen["paused"] = sorted(consumer.paused())
        consumer.resume(partitions[2])
        consumer.seek(partitions[1], 0)
        first = await consumer.getone(partitions[1])
        seen["getone"] = (first.partition, first.offset, first.value)
        seen["position unassigned"] = await caught(
            lib, lambda: consumer.position(structs.TopicPartition(topic + "-nope", 0))
        )
    finally:
        await consumer.stop()

    groupless = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await groupless.start()
    try:
        seen["committed without group"] = await caught(
            lib, lambda: groupless.committed(structs.TopicPartition(topic, 0))
        )
    finally:
        # aiokafka 0.14's stop() of a consumer without a group raises the
        # CancelledError of its own background task; it has stopped all the same.
        with contextlib.suppress(asyncio.CancelledError):
            await groupless.stop()
    seen["listener base"] = issubclass(lib.abc.ConsumerRebalanceListener, object)
    seen["error shapes"] = (
        lib.errors.TopicAlreadyExistsError.errno,
        lib.errors.for_code(3).__name__,
        issubclass(lib.errors.KafkaConnectionError, lib.errors.KafkaError),
        lib.errors.KafkaConnectionError.retriable,
    )
    return seen


def renamed(value: Any, old: str, new: str) -> Any:
    """``value`` (nested lists, tuples, dicts) with the string ``old`` replaced."""
    if isinstance(value, dict):
        return {k: renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, old, new) for v in value]
    if isinstance(value, tuple):  # named tuples compare as their items
        return tuple(renamed(v, old, new) for v in value)
    return value.replace(old, new) if isinstance(value, str) else value


def test_an_aiokafka_program_sees_the_same_through_odradek_aio(kafka: BrokerProcess) -> None:
    runs = {}
    for name in LIBRARIES:
        topic = f"port-{name.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
        lib = library(name)
        seen = asyncio.run(asyncio.wait_for(program(lib, kafka.bootstrap, topic), TIMEOUT_S))
        runs[name] = renamed(seen, topic, "TOPIC")
    theirs, ours = runs["aiokafka"], runs["odradek.aio"]
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert ours[key] == theirs[key], key
    # The runs really did something (not two empty answers alike).
    assert len(theirs["records"]) == RECORDS + BATCH_RECORDS
    assert theirs["create"] == [("TOPIC", 0, None)]
    assert theirs["committed"] == 3


def test_the_confluent_face_keeps_confluent_types() -> None:
    """``odradek.client`` (the confluent-kafka face) is not changed by ``odradek.aio``."""
    import odradek.aio
    import odradek.client

    confluent_tp = odradek.client.TopicPartition("t", 1, 5)
    assert (confluent_tp.topic, confluent_tp.partition, confluent_tp.offset) == ("t", 1, 5)
    assert odradek.client.TopicPartition is not odradek.aio.TopicPartition
    assert odradek.client.NewTopic is not odradek.aio.NewTopic
    assert len(odradek.aio.TopicPartition("t", 1)) == 2

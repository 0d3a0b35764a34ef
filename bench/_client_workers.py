"""The worker side of ``bench/client.py``: one client's run in a child process.

``client.py`` starts ``client.py --worker SPEC`` once per client, side and round;
``worker_main`` runs the producer, consumer, ``poll()`` loop or round-trip
measurement SPEC names against the broker it gives, and prints one JSON line
(``seconds``, ``count``). Every client is configured alike as far as it can be
(``client.py`` prints the settings): 1 KiB values, no keys, ``PARTITIONS``
partitions, acks=1, linger 5 ms, 64 KiB batches, no compression, no idempotence.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

STALL_S = 30.0
PARTITIONS = 4
VALUE_SIZE = 1024
LINGER_MS = 5
BATCH_SIZE = 65536
SOURCE_TOPIC = "bench-client-source"


def payloads(count: int) -> list[bytes]:
    block = os.urandom(VALUE_SIZE * 64)
    return [block[(i % 64) * VALUE_SIZE : (i % 64 + 1) * VALUE_SIZE] for i in range(count)]


def produce_odradek(spec: dict[str, Any], values: list[bytes]) -> float:
    from odradek.client import Producer

    producer = Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "acks": 1,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
            "compression.type": "none",
            "enable.idempotence": False,
        }
    )
    topic = spec["topic"]
    producer.list_topics(topic)
    started = time.perf_counter()
    for value in values:
        producer.produce(topic, value)
    CALLS["seconds"] = time.perf_counter() - started
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    producer.close()
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return elapsed


CALLS: dict[str, float] = {}  # the blocking producer's produce() loop alone, for the report


def produce_odradek_aio(spec: dict[str, Any], values: list[bytes]) -> float:
    from odradek.client import AIOKafkaProducer

    async def go() -> float:
        producer = AIOKafkaProducer(
            bootstrap_servers=spec["bootstrap"],
            acks=1,
            linger_ms=LINGER_MS,
            max_batch_size=BATCH_SIZE,
            compression_type=None,
            enable_idempotence=False,
        )
        await producer.start()
        topic = spec["topic"]
        await producer.partitions_for(topic)
        started = time.perf_counter()
        futures = [await producer.send(topic, value) for value in values]
        await producer.flush()
        elapsed = time.perf_counter() - started
        failed = sum(1 for f in futures if f.exception() is not None)
        await producer.stop()
        if failed:
            raise RuntimeError(f"{failed} records not delivered")
        return elapsed

    return _run_async(go())


def _run_async(coroutine: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:
        return asyncio.run(coroutine)


def produce_kafka_python(spec: dict[str, Any], values: list[bytes]) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=spec["bootstrap"],
        acks=1,
        linger_ms=LINGER_MS,
        batch_size=BATCH_SIZE,
        compression_type=None,
        enable_idempotence=False,
    )
    topic = spec["topic"]
    producer.partitions_for(topic)
    started = time.perf_counter()
    futures = [producer.send(topic, value) for value in values]
    producer.flush(120)
    elapsed = time.perf_counter() - started
    failed = sum(1 for f in futures if not f.succeeded())
    producer.close()
    if failed:
        raise RuntimeError(f"{failed} records not delivered")
    return elapsed


def produce_confluent(spec: dict[str, Any], values: list[bytes]) -> float:
    from confluent_kafka import Producer

    failed = 0

    def report(error: Any, _message: Any) -> None:
        nonlocal failed
        failed += error is not None

    producer = Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "acks": 1,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
            "compression.type": "none",
            "enable.idempotence": False,
            "on_delivery": report,
        }
    )
    topic = spec["topic"]
    producer.list_topics(topic, timeout=20)
    started = time.perf_counter()
    spread = spec.get("spread", False)
    for number, value in enumerate(values):
        while True:
            try:
                if spread:  # the consumers' source: the same share in every partition
                    producer.produce(topic, value, partition=(number // 64) % PARTITIONS)
                else:
                    producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"{left + failed} records not delivered")
    return elapsed


class Stall:
    """Fails a consumer that has had no new record for STALL_S (never hang the bench)."""

    def __init__(self) -> None:
        self.seen = -1
        self.since = time.monotonic()

    def check(self, seen: int, wanted: int) -> None:
        now = time.monotonic()
        if seen != self.seen:
            self.seen, self.since = seen, now
        elif now - self.since > STALL_S:
            raise RuntimeError(f"no new record for {STALL_S:g} s after {seen} of {wanted}")


def consume_odradek(spec: dict[str, Any]) -> float:
    from odradek.client import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "enable.auto.commit": False})
    consumer.get_watermark_offsets(TopicPartition(spec["topic"], 0), timeout=20)  # metadata
    return _consume_loop(consumer, TopicPartition, -2, spec)


def consume_odradek_aio(spec: dict[str, Any]) -> float:
    from odradek.client import AIOKafkaConsumer, TopicPartition

    async def go() -> float:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=spec["bootstrap"], group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        topic, wanted = spec["topic"], spec["count"]
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        await consumer.end_offsets(parts)
        started = time.perf_counter()
        await consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        seen = 0
        stalled = Stall()
        while seen < wanted:
            stalled.check(seen, wanted)
            batches = await consumer.getmany(timeout_ms=1000, max_records=500)
            seen += sum(len(records) for records in batches.values())
        elapsed = time.perf_counter() - started
        await consumer.stop()
        return elapsed

    return _run_async(go())


def consume_kafka_python(spec: dict[str, Any]) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=spec["bootstrap"],
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    topic, wanted = spec["topic"], spec["count"]
    consumer.partitions_for_topic(topic)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    started = time.perf_counter()
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    seen = 0
    stalled = Stall()
    while seen < wanted:
        stalled.check(seen, wanted)
        batches = consumer.poll(timeout_ms=1000, max_records=500)
        seen += sum(len(records) for records in batches.values())
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def consume_confluent(spec: dict[str, Any]) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "group.id": "bench-client",
            "enable.auto.commit": False,
        }
    )
    consumer.list_topics(spec["topic"], timeout=20)  # metadata
    return _consume_loop(consumer, TopicPartition, OFFSET_BEGINNING, spec)


def poll_odradek(spec: dict[str, Any]) -> float:
    from odradek.client import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "enable.auto.commit": False})
    consumer.get_watermark_offsets(TopicPartition(spec["topic"], 0), timeout=20)  # metadata
    return _poll_loop(consumer, TopicPartition, -2, spec)


def poll_confluent(spec: dict[str, Any]) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "group.id": "bench-client",
            "enable.auto.commit": False,
        }
    )
    consumer.list_topics(spec["topic"], timeout=20)
    return _poll_loop(consumer, TopicPartition, OFFSET_BEGINNING, spec)


def _consume_loop(
    consumer: Any, partition_type: Any, beginning: int, spec: dict[str, Any]
) -> float:
    """``consume(500)`` until the N-th record (confluent-shaped faces): time from ``assign``."""
    topic, wanted = spec["topic"], spec["count"]
    started = time.perf_counter()
    consumer.assign([partition_type(topic, p, beginning) for p in range(PARTITIONS)])
    seen = 0
    stalled = Stall()
    while seen < wanted:
        stalled.check(seen, wanted)
        for message in consumer.consume(500, 1.0):
            if message.error() is not None:
                raise RuntimeError(str(message.error()))
            seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def _poll_loop(consumer: Any, partition_type: Any, beginning: int, spec: dict[str, Any]) -> float:
    """``poll()`` one message at a time until the N-th: time from ``assign``."""
    topic, wanted = spec["topic"], spec["count"]
    started = time.perf_counter()
    consumer.assign([partition_type(topic, p, beginning) for p in range(PARTITIONS)])
    seen = 0
    stalled = Stall()
    while seen < wanted:
        stalled.check(seen, wanted)
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error() is not None:
            raise RuntimeError(str(message.error()))
        seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


POLLERS = {"odradek": poll_odradek, "confluent-kafka": poll_confluent}
PRODUCERS = {
    "odradek": produce_odradek,
    "odradek-aio": produce_odradek_aio,
    "kafka-python": produce_kafka_python,
    "confluent-kafka": produce_confluent,
}
CONSUMERS = {
    "odradek": consume_odradek,
    "odradek-aio": consume_odradek_aio,
    "kafka-python": consume_kafka_python,
    "confluent-kafka": consume_confluent,
}


def handoff_worker(spec: dict[str, Any]) -> dict[str, float]:
    """Per-call cost of a round trip to the blocking faces' loop thread, alone."""
    from odradek.client._core.loop_thread import LoopThread

    async def nothing() -> None:
        return None

    thread = LoopThread("bench-handoff")
    try:
        count = spec["count"]
        for _ in range(200):
            thread.run(nothing())
        started = time.perf_counter()
        for _ in range(count):
            thread.run(nothing())
        elapsed = time.perf_counter() - started
    finally:
        thread.stop()
    return {"seconds": elapsed, "count": count}


def worker_main(raw: str) -> int:
    spec = json.loads(raw)
    if spec["kind"] == "handoff":
        print(json.dumps(handoff_worker(spec)), flush=True)
        return 0
    if spec["kind"] == "produce":
        values = payloads(spec["count"])
        seconds = PRODUCERS[spec["client"]](spec, values)
    elif spec["kind"] == "poll":
        seconds = POLLERS[spec["client"]](spec)
    else:
        seconds = CONSUMERS[spec["client"]](spec)
    result = {"seconds": seconds, "count": spec["count"]}
    if "seconds" in CALLS:
        result["call_seconds"] = CALLS["seconds"]
    print(json.dumps(result), flush=True)
    return 0

"""The blocking Consumer's poll(): it takes a chunk of records per round trip to its
loop thread and returns them one at a time; commits, auto-commit and position() must
cover exactly what poll() returned, and pause, seek and rebalances must neither skip
nor repeat buffered records (consumer/blocking.py, module doc)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition

from odradek.client._core.types import TopicPartition
from odradek.client.consumer.blocking import POLL_CHUNK, Consumer
from tests.client.test_consumer import GROUP_ARGS, config, new_topic, produce
from tests.support.broker import BrokerProcess, running_broker

PER_PARTITION = 300


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("poll") / "data", GROUP_ARGS) as process:
        yield process


def filled_topic(kafka: BrokerProcess, partitions: int, per_partition: int = PER_PARTITION) -> str:
    topic = new_topic(kafka, partitions)
    items: list[dict[str, object]] = []
    for offset in range(per_partition):
        for p in range(partitions):
            items.append({"partition": p, "value": f"{p}:{offset}".encode()})
    produce(kafka, topic, items)
    return topic


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def poll_n(consumer: Consumer, count: int, deadline_s: float = 30.0) -> list[tuple[int, int]]:
    """poll() one message at a time until ``count`` came: (partition, offset) each."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"timed out waiting for {count} records"
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            p, offset = message.partition(), message.offset()
            assert message.value() == f"{p}:{offset}".encode()
            got.append((p, offset))
    return got


def assert_each_once_in_order(got: list[tuple[int, int]], partitions: int, upto: int) -> None:
    for p in range(partitions):
        assert [o for q, o in got if q == p] == list(range(upto)), f"partition {p}"


def committed(kafka: BrokerProcess, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets, read by confluent-kafka (-1001: none)."""
    ck = CKConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        found = ck.committed([CKTopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in found]
    finally:
        ck.close()


def pending(consumer: Consumer, topic: str, partitions: int) -> list[int]:
    """Partitions with records taken by poll() but not yet returned."""
    return sorted(
        p for (_t, p), *_rest in consumer._pending([(topic, q) for q in range(partitions)])
    )


def test_poll_returns_every_record_once_in_order(kafka: BrokerProcess) -> None:
    topic = filled_topic(kafka, 4)
    consumer = Consumer(config(kafka))
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        got = poll_n(consumer, 4 * PER_PARTITION)
        assert_each_once_in_order(got, 4, PER_PARTITION)
        assert consumer.poll(0.3) is None
        positions = consumer.position([TopicPartition(topic, p) for p in range(4)])
        assert [tp.offset for tp in positions] == [PER_PARTITION] * 4
    finally:
        consumer.close()


def test_commit_covers_only_what_poll_returned(kafka: BrokerProcess) -> None:
    topic = filled_topic(kafka, 1, 2 * POLL_CHUNK)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(config(kafka, **{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert poll_n(consumer, 7) == [(0, o) for o in range(7)]
        # More than 7 were taken from the core in one round trip...
        assert (consumer._core._parts[(topic, 0)].position or 0) > 7
        # ... but what the application has is 7 records: position, commit() say so.
        assert consumer.position([TopicPartition(topic, 0)])[0].offset == 7
        done = consumer.commit(asynchronous=False)
        assert done is not None and [(tp.partition, tp.offset) for tp in done] == [(0, 7)]
        assert committed(kafka, group, topic, 1) == [7]
        assert poll_n(consumer, 5) == [(0, o) for o in range(7, 12)]
        consumer.commit(asynchronous=False)
        assert committed(kafka, group, topic, 1) == [12]
        # consume(n) hands out what poll() buffered first, in order.
        got = consumer.consume(3, 5.0)
        assert [(m.partition(), m.offset()) for m in got] == [(0, 12), (0, 13), (0, 14)]
        consumer.commit(asynchronous=False)
        assert committed(kafka, group, topic, 1) == [15]
    finally:
        consumer.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from odradek.client.consumer.blocking import Consumer
    bootstrap, group, topic, count = sys.argv[1:5]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": True, "auto.commit.interval.ms": 50,
        "session.timeout.ms": 6000, "fetch.max.wait.ms": 100,
    })
    consumer.subscribe([topic])
    seen = 0
    while seen < int(count):
        message = consumer.poll(1.0)
        if message is None:
            continue
        assert message.error() is None, message.error()
        print(message.partition(), message.offset(), flush=True)
        seen += 1
    print("done", flush=True)
    while True:  # keep the consumer (and its auto-commit) running until killed
        time.sleep(1)
    """
)


def test_kill_9_after_polling_resumes_without_a_gap(kafka: BrokerProcess) -> None:
    """A process polls a random number of records with auto-commit and is killed with
    SIGKILL: the group's offsets are exactly what it got, so a new member neither
    skips nor repeats a record (a prefetched chunk is far ahead of that)."""
    topic = filled_topic(kafka, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    count = random.randint(20, 2 * PER_PARTITION - 20)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, kafka.bootstrap, group, topic, str(count)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    got: list[tuple[int, int]] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == "done":
                break
            partition, offset = line.split()
            got.append((int(partition), int(offset)))
        assert len(got) == count, f"child stopped early (count {count})"
        expected = []
        for p in range(2):
            offsets = [o for q, o in got if q == p]
            assert offsets == list(range(len(offsets))), f"partition {p}"
            expected.append(len(offsets))

        def as_expected() -> bool:
            # A partition none of whose records came may have its start committed.
            found = committed(kafka, group, topic, 2)
            pairs = zip(found, expected, strict=True)
            return all(o == n or (n == 0 and o == -1001) for o, n in pairs)

        # Auto-commit reaches what poll() returned (not what it prefetched) ...
        wait_for(as_expected, f"commits {expected}")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    # ... and after the kill a new member starts right there.
    assert as_expected(), f"count {count}: {committed(kafka, group, topic, 2)}"
    resumed = Consumer(
        config(
            kafka, **{"group.id": group, "enable.auto.commit": False, "session.timeout.ms": 6000}
        )
    )
    try:
        resumed.subscribe([topic])
        rest = poll_n(resumed, 2 * PER_PARTITION - count)
        assert_each_once_in_order(got + rest, 2, PER_PARTITION)
    finally:
        resumed.close()


def test_pause_drops_buffered_records_and_resume_refetches_them(kafka: BrokerProcess) -> None:
    topic = filled_topic(kafka, 2)
    consumer = Consumer(config(kafka))
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        got = poll_n(consumer, 1)
        waiting = pending(consumer, topic, 2)
        assert waiting, "poll() took no chunk"
        paused = waiting[-1]
        consumer.pause([TopicPartition(topic, paused)])
        before = len([1 for p, _o in got if p == paused])
        assert consumer.position([TopicPartition(topic, paused)])[0].offset == before
        other = 1 - paused
        got += poll_n(consumer, PER_PARTITION - len([1 for p, _o in got if p == other]))
        assert {p for p, _o in got[1:]} == {other}  # nothing of the paused one
        assert consumer.poll(0.3) is None
        consumer.resume([TopicPartition(topic, paused)])
        got += poll_n(consumer, PER_PARTITION - before)
        assert_each_once_in_order(got, 2, PER_PARTITION)
    finally:
        consumer.close()


def test_seek_while_records_are_buffered(kafka: BrokerProcess) -> None:
    topic = filled_topic(kafka, 1)
    consumer = Consumer(config(kafka))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert poll_n(consumer, 5) == [(0, o) for o in range(5)]
        assert pending(consumer, topic, 1) == [0]
        consumer.seek(TopicPartition(topic, 0, 200))
        assert poll_n(consumer, 3) == [(0, 200), (0, 201), (0, 202)]
        consumer.seek(TopicPartition(topic, 0, 2))
        assert poll_n(consumer, PER_PARTITION - 2) == [(0, o) for o in range(2, PER_PARTITION)]
        assert consumer.position([TopicPartition(topic, 0)])[0].offset == PER_PARTITION
    finally:
        consumer.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_rebalance_with_buffered_records_hands_nothing_out_twice(
    kafka: BrokerProcess, strategy: str
) -> None:
    """A member with a chunk of records buffered loses partitions to a second member:
    what it had not returned of them goes to the new owner only (auto-commit commits
    on revoke exactly what the first member's poll() returned)."""
    partitions = 4
    topic = filled_topic(kafka, partitions)
    group = f"g-{uuid.uuid4().hex[:8]}"
    settings = {
        "group.id": group,
        "partition.assignment.strategy": strategy,
        "session.timeout.ms": 6000,
        "auto.commit.interval.ms": 60000,  # commits on revoke only, and explicit ones
    }
    first, second = Consumer(config(kafka, **settings)), Consumer(config(kafka, **settings))
    got: dict[str, list[tuple[int, int]]] = {"first": [], "second": []}
    try:
        first.subscribe([topic])
        got["first"] += poll_n(first, 10)
        assert pending(first, topic, partitions), "poll() took no chunk"
        second.subscribe([topic])

        def second_assigned() -> bool:
            got["second"] += [
                (m.partition(), m.offset()) for m in second.consume(10, 0.1) if m.error() is None
            ]
            return bool(second.assignment())

        wait_for(second_assigned, "the second member's assignment")
        total = partitions * PER_PARTITION

        deadline = time.monotonic() + 30
        while len(set(got["first"]) | set(got["second"])) < total:
            assert time.monotonic() < deadline, "timed out waiting for every record"
            for name, consumer in (("first", first), ("second", second)):
                message = consumer.poll(0.05)
                if message is not None:
                    assert message.error() is None, message.error()
                    got[name].append((message.partition(), message.offset()))
        both = got["first"] + got["second"]
        assert len(both) == len(set(both)), "a record was handed out twice"
        assert sorted(both) == [(p, o) for p in range(partitions) for o in range(PER_PARTITION)]
        moved = {p for p, _o in got["second"]}
        assert moved and moved != set(range(partitions))
    finally:
        second.close()
        first.close()

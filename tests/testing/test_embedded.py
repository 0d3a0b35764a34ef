"""EmbeddedBroker (odradek/testing/embedded.py) with real clients, in both modes.

In-thread: confluent-kafka and kafka-python round trips, two brokers at once in this
process, and a stop that leaves nothing behind (threads, descriptors, pending tasks);
topics created on demand (idempotent, a different partition count refused); config
errors as one-line ValueErrors. ``process=True``: a round trip, the child stopped (and
killed) by pid.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.testing import EmbeddedBroker
from odradek.testing._process import ServeProcess

TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as started:
        yield started


def round_trip(bootstrap: str, topic: str, count: int = 5) -> list[bytes]:
    """Produce ``count`` values with confluent-kafka and read them back from offset 0."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, key=b"k%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    del producer
    gc.collect()  # librdkafka's handles close their sockets and threads now
    return values


def test_in_thread_round_trip_with_confluent_kafka(broker: EmbeddedBroker) -> None:
    assert broker.bootstrap.startswith("127.0.0.1:") and broker.port > 0
    assert broker.pid is None and broker.running
    topic = broker.create_topic("ck-round-trip", partitions=2)
    assert round_trip(broker.bootstrap, topic) == [b"value-%d" % i for i in range(5)]


def test_in_thread_round_trip_with_kafka_python(broker: EmbeddedBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = broker.create_topic("kp-round-trip")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(3):
        producer.send(topic, value=b"kp-%d" % i, partition=0).get(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(TIMEOUT_S * 1000),
        group_id=None,
    )
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 3:
            break
    consumer.close()
    assert values == [b"kp-0", b"kp-1", b"kp-2"]


def test_create_topic_is_idempotent_and_checks_partitions(broker: EmbeddedBroker) -> None:
    assert broker.create_topic("twice", partitions=3) == "twice"
    assert broker.create_topic("twice", partitions=3) == "twice"
    with pytest.raises(ValueError, match="exists with 3 partitions, not 1"):
        broker.create_topic("twice")
    with pytest.raises(ValueError, match="illegal topic name"):
        broker.create_topic("no spaces/allowed")
    with pytest.raises(ValueError, match="cannot create topic"):
        broker.create_topic("zero-partitions", partitions=0)


def test_config_overrides_apply_and_bad_ones_are_one_line() -> None:
    with pytest.raises(ValueError) as failure:
        EmbeddedBroker(config={"num.partitions": "many"}).start()
    assert "num.partitions" in str(failure.value) and "\n" not in str(failure.value)
    with EmbeddedBroker(config={"num.partitions": "3"}) as configured:
        # Auto-created on first produce (auto.create.topics.enable), with num.partitions.
        producer = Producer({"bootstrap.servers": configured.bootstrap})
        producer.produce("auto-created", b"x")
        assert producer.flush(TIMEOUT_S) == 0
        metadata = producer.list_topics("auto-created", timeout=TIMEOUT_S)
        assert len(metadata.topics["auto-created"].partitions) == 3
        del producer
        gc.collect()


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def described(fds: set[str]) -> dict[str, str]:
    """What each fd is (a file's path, ``socket:[inode]``, ``pipe:[...]``)."""
    targets = {}
    for fd in fds:
        try:
            targets[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            targets[fd] = "(closed since)"
    return targets


def test_two_brokers_in_one_process_and_stop_leaves_nothing(
    caplog: pytest.LogCaptureFixture, tmp_path: os.PathLike[str]
) -> None:
    gc.collect()
    threads_before = set(threading.enumerate())
    fds_before = open_fds()
    caplog.set_level(logging.ERROR, logger="asyncio")
    first = EmbeddedBroker().start()
    second = EmbeddedBroker(data_dir=os.path.join(tmp_path, "kept")).start()
    try:
        assert first.bootstrap != second.bootstrap
        for started in (first, second):
            topic = started.create_topic("side-by-side")
            assert round_trip(started.bootstrap, topic, 2) == [b"value-0", b"value-1"]
        temporary = first.data_dir
        assert temporary is not None and temporary.is_dir()
    finally:
        first.stop()
        second.stop()
    first.stop()  # a second stop does nothing
    gc.collect()
    assert not temporary.parent.exists()  # the temporary dir went with the broker
    assert (second.data_dir / "meta.properties").is_file()  # a given dir stays
    # librdkafka's threads end shortly after close; in a full run, clients that earlier
    # tests left open may open a socket for a moment (one was seen as fd 2334), so
    # both are given the same few seconds to settle.
    deadline = time.monotonic() + 5
    while (
        set(threading.enumerate()) - threads_before or open_fds() - fds_before
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(threading.enumerate()) - threads_before == set()
    assert described(open_fds() - fds_before) == {}
    assert not first.running and not second.running
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


def test_process_mode_round_trip_and_stop_by_pid() -> None:
    with EmbeddedBroker(process=True) as child:
        pid = child.pid
        assert pid is not None and child.running
        topic = child.create_topic("in-a-child")
        assert round_trip(child.bootstrap, topic, 3) == [b"value-%d" % i for i in range(3)]
    assert not child.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: the pid names no process of ours any more


def test_process_mode_kill_is_a_crash() -> None:
    child = EmbeddedBroker(process=True).start()
    try:
        child.kill()
        assert not child.running
    finally:
        child.stop()
    with pytest.raises(RuntimeError, match="process=True"):
        EmbeddedBroker().kill()


def test_an_abandoned_broker_stops_when_collected() -> None:
    abandoned = EmbeddedBroker().start()
    temporary = abandoned.data_dir
    runner = abandoned._runner
    assert temporary is not None and runner is not None and not isinstance(runner, ServeProcess)
    thread = runner.thread  # the runner (not the broker object) is what the thread holds
    assert thread is not None and thread.is_alive()
    del abandoned, runner
    gc.collect()
    assert not thread.is_alive()
    assert not temporary.parent.exists()

"""Leaving the group and commit errors in our consumer, checked side by side with
confluent-kafka on the same ``odradek serve`` where the blocking face copies it:

- ``max.poll.interval.ms``: must be >= ``session.timeout.ms``; a consumer that stops
  polling for longer leaves the group (LeaveGroup; a static member only stops
  heartbeating, so the broker times its session out), a commit then fails with
  ``_ASSIGNMENT_LOST``, the next poll returns a ``_MAX_POLL_EXCEEDED`` error message,
  the one after gives the partitions up through ``on_lost`` and rejoins as a new
  member. Polling (or waiting inside a long poll) keeps the membership, and the
  interval starts with the first poll. The aiokafka face leaves the same way and
  rejoins on the next ``getmany`` without raising, as aiokafka does.
- ``unsubscribe``: revokes everything (``on_revoke``, auto-commit first) and sends
  LeaveGroup; subscribing again joins as a new member.
- ``commit()`` with nothing new to commit raises ``_NO_OFFSET``.

Who left and how is read from the broker's log ("removing member M: left the group"
or "...: session timed out"), so no timing decides the outcome.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException as CKKafkaException
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient as CKAdmin
from confluent_kafka.admin import NewTopic as CKNewTopic

from odradek.client import (
    AIOKafkaConsumer,
    ConfigError,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from tests.support.broker import BrokerProcess, running_broker

GROUP_ARGS = [
    "--override",
    "group.initial.rebalance.delay.ms=0",
    "--override",
    "group.min.session.timeout.ms=1000",
]
# Short enough for quick tests; polls below come every <= 0.3 s, far inside it.
MAX_POLL_MS = 2000
FAST = {
    "session.timeout.ms": 1000,
    "heartbeat.interval.ms": 100,
    "max.poll.interval.ms": MAX_POLL_MS,
}
CLIENTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "odradek": Consumer,
    "confluent": CKConsumer,
}
PARTITION: dict[str, Callable[..., Any]] = {
    "odradek": TopicPartition,
    "confluent": CKTopicPartition,
}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("leave") / "data", GROUP_ARGS) as process:
        yield process


def new_topic(kafka: BrokerProcess, partitions: int = 2, per_partition: int = 5) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_topics([CKNewTopic(name, partitions, 1)]).values():
        future.result(10)
    producer = CKProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(name, value=b"%d" % i, partition=p)
    assert producer.flush(10) == 0
    return name


def conf(kafka: BrokerProcess, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": kafka.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }


def group_name() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def removal(kafka: BrokerProcess, group: str, member_id: str) -> str | None:
    """Why the broker removed ``member_id`` from ``group`` (None: not removed)."""
    pattern = re.compile(rf"group {re.escape(group)}: removing member {re.escape(member_id)}: (.*)")
    for line in kafka.log().splitlines():
        found = pattern.search(line)
        if found:
            return found.group(1).strip()
    return None


def code(error: Any) -> int:
    """An error's code, from our KafkaError (attribute) or confluent's (method)."""
    value = error.code
    return int(value() if callable(value) else value)


def records(consumer: Any, count: int) -> list[tuple[int, int]]:
    """Poll until ``count`` records came; (partition, offset) of each."""
    got: list[tuple[int, int]] = []

    def more() -> bool:
        for message in consumer.consume(10, 0.2):
            assert message.error() is None, message.error()
            got.append((message.partition(), message.offset()))
        return len(got) >= count

    wait_for(more, f"{count} records")
    return got


def consume_all(consumer: Any, count: int) -> list[Any]:
    """consume() until ``count`` messages (errors included) came."""
    got: list[Any] = []
    wait_for(lambda: got.extend(consumer.consume(count - len(got), 0.5)) or len(got) >= count, "")
    return got


class Events:
    """The rebalance callbacks' calls: (kind, {partitions})."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[int]]] = []

    def callbacks(self) -> dict[str, Any]:
        def record(kind: str) -> Any:
            def call(_consumer: Any, parts: list[Any]) -> None:
                self.calls.append((kind, {tp.partition for tp in parts}))

            return call

        return {
            "on_assign": record("assign"),
            "on_revoke": record("revoke"),
            "on_lost": record("lost"),
        }


# -- max.poll.interval.ms ---------------------------------------------------------------------
def test_max_poll_interval_must_cover_the_session_timeout(kafka: BrokerProcess) -> None:
    bad = {**conf(kafka, group_name()), "session.timeout.ms": 6000, "max.poll.interval.ms": 5000}
    with pytest.raises(ConfigError, match=r"max\.poll\.interval\.ms: 5000 must be >= session"):
        Consumer(bad)
    with pytest.raises(CKKafkaException, match=r"max\.poll\.interval\.ms"):  # as librdkafka
        CKConsumer(bad)
    with pytest.raises(ConfigError, match=r"max\.poll\.interval\.ms"):
        AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap, session_timeout_ms=6000, max_poll_interval_ms=5000
        )
    Consumer({**bad, "max.poll.interval.ms": 6000}).close()  # equal is fine


@pytest.mark.parametrize(
    ("client", "strategy", "static", "via"),
    [
        ("odradek", "range", False, "poll"),
        ("odradek", "cooperative-sticky", False, "consume"),
        ("odradek", "range", True, "poll"),
        ("confluent", "range", False, "poll"),
        ("confluent", "cooperative-sticky", False, "consume"),
        ("confluent", "cooperative-sticky", True, "poll"),
    ],
)
def test_poll_interval_exceeded_leaves_then_rejoins_on_poll(
    kafka: BrokerProcess, client: str, strategy: str, static: bool, via: str
) -> None:
    topic = new_topic(kafka)
    group = group_name()
    extra = {**FAST, "partition.assignment.strategy": strategy}
    if static:
        extra["group.instance.id"] = "instance-1"
    consumer = CLIENTS[client](conf(kafka, group, **extra))
    events = Events()
    try:
        consumer.subscribe([topic], **events.callbacks())
        assert sorted(records(consumer, 10)) == [(p, o) for p in (0, 1) for o in range(5)]
        first_id = consumer.memberid()
        assert events.calls == [("assign", {0, 1})]

        # Not polling: the member leaves (static: stops heartbeating, no LeaveGroup).
        reason = wait_for(lambda: removal(kafka, group, first_id), "the member's removal")
        assert reason == ("session timed out" if static else "left the group")
        assert events.calls == [("assign", {0, 1})]  # on_lost waits for a poll
        with pytest.raises((KafkaException, CKKafkaException)) as failure:
            consumer.commit(asynchronous=False)
        assert code(failure.value.args[0]) == KafkaError._ASSIGNMENT_LOST

        # The next poll reports the error, the one after hands the partitions over as
        # lost and the member rejoins under a new id, consuming from the start again.
        # consume() goes on after the error message: on_lost, rejoin, records.
        first = consumer.poll(1.0) if via == "poll" else consume_all(consumer, 11)
        error = first if via == "poll" else first[0]
        assert error is not None and error.error() is not None
        assert code(error.error()) == KafkaError._MAX_POLL_EXCEEDED == -147
        assert error.topic() is None
        assert f"({MAX_POLL_MS}ms) exceeded" in error.value().decode()
        if via == "poll":
            assert events.calls == [("assign", {0, 1})]
            again = records(consumer, 10)
        else:
            again = [(m.partition(), m.offset()) for m in first[1:]]
        assert sorted(again) == [(p, o) for p in (0, 1) for o in range(5)]
        assert events.calls == [("assign", {0, 1}), ("lost", {0, 1}), ("assign", {0, 1})]
        assert consumer.memberid() not in (first_id, None, "")
    finally:
        consumer.close()


def test_polling_keeps_the_membership(kafka: BrokerProcess) -> None:
    """Short polls, one long poll (longer than the interval: waiting inside poll is
    polling), and a gap before the first poll (the interval starts with it)."""
    topic = new_topic(kafka, 1, 3)
    group = group_name()
    with Consumer(conf(kafka, group, **FAST)) as consumer:
        consumer.subscribe([topic])
        gap_until = time.monotonic() + MAX_POLL_MS / 1000 * 1.5
        while time.monotonic() < gap_until:  # subscribed, not polling yet
            time.sleep(0.1)
        got = records(consumer, 3)
        member_id = consumer.memberid()
        until = time.monotonic() + MAX_POLL_MS / 1000 * 1.5
        while time.monotonic() < until:
            assert consumer.poll(0.2) is None
        assert consumer.consume(10, MAX_POLL_MS / 1000 * 1.5) == []
        assert consumer.consume(10, 0.2) == []  # no _MAX_POLL_EXCEEDED
        assert consumer.memberid() == member_id
        assert got == [(0, 0), (0, 1), (0, 2)]
        assert removal(kafka, group, member_id) is None


def test_aiokafka_face_leaves_and_rejoins_on_getmany(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka)
    group = group_name()
    calls: list[tuple[str, set[int]]] = []

    class Listener:
        def on_partitions_assigned(self, parts: set[TopicPartition]) -> None:
            calls.append(("assign", {tp.partition for tp in parts}))

        def on_partitions_revoked(self, parts: set[TopicPartition]) -> None:
            calls.append(("revoke", {tp.partition for tp in parts}))

        def on_partitions_lost(self, parts: set[TopicPartition]) -> None:
            calls.append(("lost", {tp.partition for tp in parts}))

    async def take(consumer: AIOKafkaConsumer, count: int) -> list[tuple[int, int]]:
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 20
        while len(got) < count:
            assert time.monotonic() < deadline, f"timed out waiting for {count} records"
            batches = await consumer.getmany(timeout_ms=200)
            got += [(r.partition, r.offset) for rs in batches.values() for r in rs]
        return sorted(got)

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=1000,
            heartbeat_interval_ms=100,
            max_poll_interval_ms=MAX_POLL_MS,
        )
        await consumer.start()
        try:
            consumer.subscribe([topic], listener=Listener())
            assert await take(consumer, 10) == [(p, o) for p in (0, 1) for o in range(5)]
            assert consumer._member is not None
            first_id = consumer._member.member_id
            deadline = time.monotonic() + 20
            while removal(kafka, group, first_id) is None or len(calls) < 2:
                assert time.monotonic() < deadline, "the member never left"
                await asyncio.sleep(0.05)  # the application is busy elsewhere
            assert removal(kafka, group, first_id) == "left the group"
            assert calls == [("assign", {0, 1}), ("lost", {0, 1})]
            assert await take(consumer, 10) == [(p, o) for p in (0, 1) for o in range(5)]
            assert calls[2:] == [("assign", {0, 1})]
            assert consumer._member.member_id != first_id
        finally:
            await consumer.stop()

    asyncio.run(main())


# -- unsubscribe --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("client", "static"), [("odradek", False), ("odradek", True), ("confluent", False)]
)
def test_unsubscribe_revokes_and_leaves(kafka: BrokerProcess, client: str, static: bool) -> None:
    topic = new_topic(kafka)
    group = group_name()
    extra: dict[str, Any] = {"enable.auto.commit": True, "auto.commit.interval.ms": 60_000}
    if static:
        extra["group.instance.id"] = "instance-1"
    consumer = CLIENTS[client](conf(kafka, group, **FAST, **extra))
    events = Events()
    try:
        consumer.subscribe([topic], **events.callbacks())
        records(consumer, 10)
        first_id = consumer.memberid()
        consumer.unsubscribe()
        wait_for(lambda: consumer.poll(0.1) is None and len(events.calls) == 2, "the revoke")
        assert events.calls == [("assign", {0, 1}), ("revoke", {0, 1})]
        assert consumer.assignment() == []
        # librdkafka leaves on unsubscribe, static members too.
        reason = wait_for(lambda: removal(kafka, group, first_id), "the member's removal")
        assert reason == "left the group"
        # auto-commit committed on revoke: subscribing again resumes after everything.
        consumer.subscribe([topic], **events.callbacks())
        wait_for(lambda: consumer.poll(0.1) is None and len(events.calls) == 3, "the rejoin")
        assert events.calls[2] == ("assign", {0, 1})
        assert consumer.memberid() != first_id
        assert consumer.consume(10, 0.5) == []
        found = consumer.committed([PARTITION[client](topic, p) for p in (0, 1)], 10)
        assert [tp.offset for tp in found] == [5, 5]
    finally:
        consumer.close()


@pytest.mark.parametrize("static", [False, True])
def test_aiokafka_face_unsubscribe(kafka: BrokerProcess, static: bool) -> None:
    """aiokafka sends LeaveGroup on unsubscribe only for a dynamic member."""
    topic = new_topic(kafka, 1, 1)
    group = group_name()

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap,
            group_id=group,
            group_instance_id="instance-1" if static else None,
            auto_offset_reset="earliest",
            session_timeout_ms=1000,
            heartbeat_interval_ms=100,
        )
        await consumer.start()
        try:
            consumer.subscribe([topic])
            record = await asyncio.wait_for(consumer.getone(), 20)
            assert (record.partition, record.offset) == (0, 0)
            assert consumer._member is not None
            first_id = consumer._member.member_id
            consumer.unsubscribe()
            deadline = time.monotonic() + 20
            while removal(kafka, group, first_id) is None:
                assert time.monotonic() < deadline, "the member never left"
                await asyncio.sleep(0.05)
            expected = "session timed out" if static else "left the group"
            assert removal(kafka, group, first_id) == expected
            assert consumer.assignment() == set()
        finally:
            await consumer.stop()

    asyncio.run(main())


# -- commit with nothing to commit ------------------------------------------------------------
@pytest.mark.parametrize("client", ["odradek", "confluent"])
def test_commit_with_nothing_new_raises_no_offset(kafka: BrokerProcess, client: str) -> None:
    topic = new_topic(kafka)
    consumer = CLIENTS[client](conf(kafka, group_name()))
    failure_types = (KafkaException, CKKafkaException)

    def commit_fails(**kwargs: Any) -> None:
        with pytest.raises(failure_types) as failure:
            consumer.commit(asynchronous=False, **kwargs)
        assert code(failure.value.args[0]) == KafkaError._NO_OFFSET == -168

    def committed_now(**kwargs: Any) -> set[tuple[int, int]]:
        done = consumer.commit(asynchronous=False, **kwargs)
        return {(tp.partition, tp.offset) for tp in done if tp.offset >= 0}

    try:
        commit_fails()  # nothing assigned
        consumer.assign([PARTITION[client](topic, p) for p in (0, 1)])
        commit_fails()  # assigned, nothing consumed yet
        assert consumer.commit(asynchronous=True) is None  # an async one raises nothing
        message = wait_for(lambda: consumer.poll(0.2), "a record")
        assert message.error() is None
        mine = (message.partition(), message.offset() + 1)
        assert committed_now() == {mine}
        commit_fails()  # nothing new since
        commit_fails(offsets=[])
        again = [PARTITION[client](topic, mine[0], mine[1])]
        assert committed_now(offsets=again) == {mine}  # explicit offsets are committed
        assert committed_now(message=message) == {mine}
    finally:
        consumer.close()


def test_poll_timeout_during_a_rebalance(kafka: BrokerProcess) -> None:
    """A member that stops polling while a rebalance waits for its revoke callback
    (eager: served by a poll) stops that rebalance and leaves when the interval runs
    out; the newcomer gets everything, and the member gives its partitions up as lost
    when it polls again. (Not compared with confluent-kafka: librdkafka checks the
    interval about once a second, so there the broker's rebalance timeout, the same
    length, usually removes the member first, and what follows depends on which.)"""
    topic = new_topic(kafka)
    group = group_name()
    props = conf(kafka, group, **FAST)
    slow = Consumer(props)
    newcomer = Consumer(props)
    events = Events()
    try:
        slow.subscribe([topic], **events.callbacks())
        records(slow, 10)
        slow_id = slow.memberid()
        newcomer.subscribe([topic])
        # Only the newcomer polls: the group waits for the slow member's revoke.
        wait_for(
            lambda: newcomer.poll(0.1) is None and len(newcomer.assignment()) == 2,
            "the newcomer owning everything",
        )
        # Left on the poll timeout, or removed by the broker when the rebalance timeout
        # (the same max.poll.interval.ms, timed from the rebalance's start) ran out.
        assert removal(kafka, group, slow_id) in ("left the group", "did not rejoin in time")
        assert events.calls == [("assign", {0, 1})]  # the revoke was never served
        error = slow.poll(1.0)
        assert error is not None and code(error.error()) == KafkaError._MAX_POLL_EXCEEDED

        def split() -> bool:
            slow.poll(0.05)
            newcomer.poll(0.05)
            return len(slow.assignment()) == 1 and len(newcomer.assignment()) == 1

        wait_for(split, "the partitions split between the two")
        assert events.calls[:2] == [("assign", {0, 1}), ("lost", {0, 1})]
        assert [kind for kind, parts in events.calls[2:]] == ["assign"]
        assert events.calls[2][1] == {tp.partition for tp in slow.assignment()}
    finally:
        slow.close()
        newcomer.close()

"""Cooperative rebalancing, incremental assignment and stored offsets in our consumer,
against a real ``odradek serve`` (both faces), shaped after confluent-kafka's and
aiokafka's behaviour.

- ``store_offsets`` with ``enable.auto.offset.store=false``: ``commit()`` and
  auto-commit commit what was stored, not the positions; misuse is refused as
  confluent-kafka refuses it;
- ``incremental_assign`` / ``incremental_unassign`` outside a group;
- cooperative callbacks get only the partitions that move; an ``on_assign`` that calls
  ``incremental_assign`` with offsets sets where consumption starts; ``assign()``
  inside a cooperative callback is refused, the callback's exception comes out of
  ``poll`` and the consumer still applies the assignment;
- the aiokafka face's listener sees the same increments, with the new partitions
  already assigned when ``on_partitions_assigned`` runs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient as CKAdmin
from confluent_kafka.admin import NewTopic as CKNewTopic

from odradek.client import AIOKafkaConsumer, Consumer, KafkaException, Message, TopicPartition
from tests.support.broker import BrokerProcess, running_broker

GROUP_ARGS = [
    "--override",
    "group.initial.rebalance.delay.ms=0",
    "--override",
    "group.min.session.timeout.ms=1000",
]
TP = tuple[str, int]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("coop") / "data", GROUP_ARGS) as process:
        yield process


def new_topic(kafka: BrokerProcess, partitions: int, per_partition: int) -> str:
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


def conf(kafka: BrokerProcess, group: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bootstrap.servers": kafka.bootstrap,
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
        **extra,
    }
    if group is not None:
        out["group.id"] = group
    return out


def group_name() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def keys(partitions: list[TopicPartition]) -> set[TP]:
    return {(tp.topic, tp.partition) for tp in partitions}


def committed(kafka: BrokerProcess, group: str, topic: str, partitions: int) -> list[int]:
    peer = CKConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        found = peer.committed([CKTopicPartition(topic, p) for p in range(partitions)], 10)
        return [tp.offset for tp in found]
    finally:
        peer.close()


# -- store_offsets ----------------------------------------------------------------------
def test_commit_without_offsets_commits_what_was_stored(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 2, 5)
    group = group_name()
    props = conf(kafka, group, **{"enable.auto.commit": False, "enable.auto.offset.store": False})
    with Consumer(props) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        messages: list[Message] = []
        wait_for(lambda: messages.extend(consumer.consume(10, 0.2)) or len(messages) == 10, "10")
        with pytest.raises(KafkaException, match="_NO_OFFSET"):  # nothing stored yet
            consumer.commit(asynchronous=False)
        third = next(m for m in messages if m.partition() == 0 and m.offset() == 2)
        consumer.store_offsets(third)
        assert consumer.commit(asynchronous=False) == [TopicPartition(topic, 0, 3)]
        consumer.store_offsets(offsets=[TopicPartition(topic, 1, 4), TopicPartition("other", 0, 1)])
        assert consumer.commit(asynchronous=False) == [TopicPartition(topic, 1, 4)]
        assert [tp.offset for tp in consumer.committed(consumer.assignment())] == [3, 4]

        with pytest.raises(ValueError, match="mutually exclusive"):
            consumer.store_offsets(third, offsets=[TopicPartition(topic, 0, 1)])
        with pytest.raises(ValueError, match="either message or offsets"):
            consumer.store_offsets()
        with pytest.raises(KafkaException, match="not assigned"):
            consumer.store_offsets(offsets=[TopicPartition(topic, 7, 1)])
        with pytest.raises(KafkaException, match="not an offset"):
            consumer.store_offsets(offsets=[TopicPartition(topic, 0, -1001)])
    assert committed(kafka, group, topic, 2) == [3, 4]
    with (
        Consumer(conf(kafka, group)) as consumer,
        pytest.raises(KafkaException, match=r"enable\.auto\.offset\.store"),
    ):
        consumer.store_offsets(third)


def test_auto_commit_commits_stored_offsets_not_positions(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 1, 10)
    group = group_name()
    props = conf(
        kafka,
        group,
        **{"enable.auto.offset.store": False, "auto.commit.interval.ms": 100},
    )
    with Consumer(props) as consumer:
        consumer.subscribe([topic])
        messages: list[Message] = []
        wait_for(lambda: messages.extend(consumer.consume(10, 0.2)) or len(messages) == 10, "10")
        consumer.store_offsets(messages[3])
        wait_for(
            lambda: (
                consumer.poll(0.05) is None
                and consumer.committed([TopicPartition(topic, 0)])[0].offset == 4
            ),
            "the auto-commit of the stored offset",
        )
    # The commit on close (auto-commit, revoke) also commits what was stored: 4, not 10.
    assert committed(kafka, group, topic, 1) == [4]


# -- incremental assignment outside a group ------------------------------------------------
def test_incremental_assign_and_unassign(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 2, 6)
    with Consumer(conf(kafka)) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.incremental_assign([TopicPartition(topic, 1, 4)])
        assert keys(consumer.assignment()) == {(topic, 0), (topic, 1)}
        got: list[tuple[int, int]] = []
        wait_for(
            lambda: (
                got.extend((m.partition(), m.offset()) for m in consumer.consume(10, 0.2))
                or len(got) == 8
            ),
            "8 records",
        )
        assert sorted(got) == [(0, o) for o in range(6)] + [(1, 4), (1, 5)]
        with pytest.raises(KafkaException, match="already part of the current assignment"):
            consumer.incremental_assign([TopicPartition(topic, 0)])
        consumer.incremental_unassign([TopicPartition(topic, 0)])
        assert keys(consumer.assignment()) == {(topic, 1)}
        with pytest.raises(KafkaException, match="not in the current assignment"):
            consumer.incremental_unassign([TopicPartition(topic, 0)])


# -- cooperative callbacks ---------------------------------------------------------------
def test_cooperative_callbacks_get_the_moves_and_may_assign_incrementally(
    kafka: BrokerProcess,
) -> None:
    topic = new_topic(kafka, 4, 5)
    group = group_name()
    props = conf(
        kafka,
        group,
        **{"partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False},
    )
    events: list[tuple[str, set[TP]]] = []
    seen: dict[str, list[tuple[int, int]]] = {"first": [], "second": []}

    def on_assign(consumer: Consumer, parts: list[TopicPartition]) -> None:
        events.append(("assign", keys(parts)))
        # Start at offset 2 of whatever is new (confluent-kafka's way to pick offsets).
        consumer.incremental_assign([TopicPartition(tp.topic, tp.partition, 2) for tp in parts])

    def on_revoke(consumer: Consumer, parts: list[TopicPartition]) -> None:
        events.append(("revoke", keys(parts)))

    first = Consumer(props)
    second = Consumer(props)  # no callbacks: the consumer applies each change itself
    try:
        first.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

        def poll(name: str, consumer: Consumer) -> None:
            seen[name] += [(m.partition(), m.offset()) for m in consumer.consume(20, 0.05)]

        wait_for(lambda: poll("first", first) or len(seen["first"]) == 12, "12 records")
        assert sorted(seen["first"]) == [(p, o) for p in range(4) for o in (2, 3, 4)]
        second.subscribe([topic])

        def settled() -> bool:
            poll("first", first)
            poll("second", second)
            mine, theirs = keys(first.assignment()), keys(second.assignment())
            return len(mine) == 2 and len(theirs) == 2 and not mine & theirs

        wait_for(settled, "the two members to settle")
        mine, theirs = keys(first.assignment()), keys(second.assignment())
        revokes = [parts for kind, parts in events if kind == "revoke"]
        assigns = [parts for kind, parts in events if kind == "assign"]
        assert revokes == [theirs]  # only what moved
        assert assigns[0] == mine | theirs and all(a == set() for a in assigns[1:])
        # Nothing was committed: the second member starts from the beginning.
        wait_for(lambda: poll("second", second) or len(seen["second"]) == 10, "10 more")
        assert sorted(seen["second"]) == sorted((p, o) for _, p in theirs for o in range(5))
    finally:
        second.close()
        first.close()
    assert events[-1] == ("revoke", mine)  # close revokes the rest


def test_assign_inside_a_cooperative_callback_is_refused(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 2, 3)
    props = conf(kafka, group_name(), **{"partition.assignment.strategy": "cooperative-sticky"})
    calls: list[set[TP]] = []

    def on_assign(consumer: Consumer, parts: list[TopicPartition]) -> None:
        calls.append(keys(parts))
        consumer.assign(parts)  # eager-style: not allowed in a cooperative rebalance

    got: list[Message] = []
    with Consumer(props) as consumer:
        consumer.subscribe([topic], on_assign=on_assign)
        with pytest.raises(KafkaException, match="incremental_assign"):
            wait_for(lambda: got.extend(consumer.consume(10, 0.1)), "the callback's error")
        assert calls == [{(topic, 0), (topic, 1)}]
        wait_for(lambda: got.extend(consumer.consume(10, 0.1)) or len(got) == 6, "6 records")
        assert keys(consumer.assignment()) == {(topic, 0), (topic, 1)}


def test_eager_on_assign_runs_before_the_assignment(kafka: BrokerProcess) -> None:
    """As in confluent-kafka: the assignment is empty while on_assign runs, and an
    ``assign`` with offsets there decides where consumption starts."""
    topic = new_topic(kafka, 1, 4)
    seen_during: list[set[TP]] = []

    def on_assign(consumer: Consumer, parts: list[TopicPartition]) -> None:
        seen_during.append(keys(consumer.assignment()))
        consumer.assign([TopicPartition(tp.topic, tp.partition, 3) for tp in parts])

    with Consumer(conf(kafka, group_name())) as consumer:
        consumer.subscribe([topic], on_assign=on_assign)
        message = wait_for(lambda: consumer.poll(0.1), "a record")
        assert (message.partition(), message.offset()) == (0, 3)
    assert seen_during == [set()]


def test_unknown_assignor_is_a_config_error(kafka: BrokerProcess) -> None:
    with pytest.raises(ValueError, match=r"partition\.assignment\.strategy: unknown .*'bogus'"):
        Consumer(conf(kafka, group_name(), **{"partition.assignment.strategy": "range,bogus"}))
    with pytest.raises(ValueError, match=r"partition\.assignment\.strategy: no partition"):
        Consumer(conf(kafka, group_name(), **{"partition.assignment.strategy": " , "}))


# -- the aiokafka face ---------------------------------------------------------------------
def test_aiokafka_listener_sees_cooperative_increments(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, 4, 3)
    group = group_name()

    class Listener:
        def __init__(self, consumer: AIOKafkaConsumer) -> None:
            self.consumer = consumer
            self.events: list[tuple[str, set[TP], set[TP]]] = []

        async def on_partitions_revoked(self, revoked: set[Any]) -> None:
            # Still assigned while the listener runs, so it could commit them.
            self.events.append(
                ("revoke", keys(list(revoked)), keys(list(self.consumer.assignment())))
            )

        def on_partitions_assigned(self, assigned: set[Any]) -> None:
            self.events.append(
                ("assign", keys(list(assigned)), keys(list(self.consumer.assignment())))
            )

    def make() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=200,
            session_timeout_ms=6000,
            partition_assignment_strategy=("cooperative-sticky",),
        )

    async def main() -> None:
        one, two = make(), make()
        await one.start()
        await two.start()
        try:
            listener = Listener(one)
            one.subscribe([topic], listener=listener)
            everything = {(topic, p) for p in range(4)}
            deadline = time.monotonic() + 20
            while keys(list(one.assignment())) != everything:
                assert time.monotonic() < deadline
                await one.getmany(timeout_ms=50)
            two.subscribe([topic])
            while len(one.assignment()) != 2 or len(two.assignment()) != 2:
                assert time.monotonic() < deadline
                await asyncio.gather(one.getmany(timeout_ms=50), two.getmany(timeout_ms=50))
            kept, moved = keys(list(one.assignment())), keys(list(two.assignment()))
            assert listener.events[0] == ("assign", everything, everything)
            assert listener.events[1] == ("revoke", moved, everything)
            assert all(e == ("assign", set(), kept) for e in listener.events[2:])
        finally:
            await two.stop()
            await one.stop()

    asyncio.run(main())

"""ExactlyOnceDelivery against a real broker, without Spark: the task-level protocol.

Each test plays Spark's part by hand (a ``TaskIdentity`` per attempt) on the shared
broker of tests/spark/conftest.py: a replayed batch writes nothing, an older attempt of
the same task is fenced and its records never become visible, and a task that fails
before committing leaves nothing for read_committed readers. Read-back uses
confluent-kafka (librdkafka's read_committed), an implementation independent of ours.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("pyspark")

from odradek.client import AdminClient, ConsumerGroupTopicPartitions, TopicPartition  # noqa: E402
from odradek.spark.write import OdradekCommitMessage, TaskIdentity, WriteError, WritePlan  # noqa: E402
from odradek.spark.write_exactly_once import (  # noqa: E402
    ExactlyOnceDelivery,
    read_marker,
    transactional_id,
)
from tests.support.broker import BrokerProcess  # noqa: E402


def plan_for(bootstrap: str, topic: str) -> WritePlan:
    return WritePlan(
        config={"bootstrap.servers": bootstrap, "linger.ms": "5"},
        topic=topic,
        value="value",
        key=None,
        topic_column=None,
        partition=None,
        headers=None,
        guarantee="exactly-once",
        marker_topic=topic,
    )


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of ``topic`` visible under ``isolation``, read until 2 s of quiet."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-readback-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        values: list[bytes] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 2.0:
            batch = consumer.consume(500, 0.3)
            for message in batch:
                assert message.error() is None, message.error()
                values.append(message.value())
            if batch:
                quiet_since = time.monotonic()
        return values
    finally:
        consumer.close()


def run_task(
    plan: WritePlan, task: TaskIdentity, values: list[bytes]
) -> tuple[ExactlyOnceDelivery, OdradekCommitMessage]:
    delivery = ExactlyOnceDelivery(plan, task)
    if delivery.wants_records:
        for value in values:
            delivery.send(plan.topic or "", value, None, -1, None)
        delivery.after_batch()
    return delivery, delivery.finish()


def test_replayed_batch_writes_nothing(
    broker: BrokerProcess, create_topic: Callable[..., str], topic_name: Callable[[str], str]
) -> None:
    topic = create_topic(topic_name("out"), partitions=2)
    plan = plan_for(broker.bootstrap, topic)
    query = str(uuid.uuid4())
    first = [b"b0-%d" % i for i in range(50)]
    _, message = run_task(plan, TaskIdentity(3, 0, query, 0), first)
    assert message.records == 50 and not message.replayed
    assert sum(w.records for w in message.written.values()) == 50

    # The same batch again (a replay after a crash before Spark's commit log): skipped.
    replay, message = run_task(plan, TaskIdentity(3, 0, query, 0), first)
    assert replay.replayed and not replay.wants_records
    assert message.records == 0 and message.replayed
    # Another partition of the same batch has its own marker and still writes.
    _, other = run_task(plan, TaskIdentity(4, 0, query, 0), [b"p4"])
    assert other.records == 1
    # The next batch writes; the marker names it.
    _, message = run_task(plan, TaskIdentity(3, 0, query, 1), [b"b1"])
    assert message.records == 1
    assert read_marker(plan.config, transactional_id(query, 3), topic) == 2
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        group = transactional_id(query, 3)
        found = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])],
            require_stable=True,
        )[group].result(30)
    assert [tp.offset for tp in found.topic_partitions or []] == [2]

    committed = read_values(broker.bootstrap, topic, 2, "read_committed")
    assert sorted(committed) == sorted([*first, b"p4", b"b1"])


def test_zombie_attempt_is_fenced(
    broker: BrokerProcess, create_topic: Callable[..., str], topic_name: Callable[[str], str]
) -> None:
    topic = create_topic(topic_name("out"), partitions=1)
    plan = plan_for(broker.bootstrap, topic)
    query = str(uuid.uuid4())
    zombie = ExactlyOnceDelivery(plan, TaskIdentity(0, 0, query, 7))
    for i in range(20):
        zombie.send(topic, b"zombie-%d" % i, None, -1, None)
    zombie.after_batch()
    assert zombie._producer is not None
    assert zombie._producer.flush(30) == 0  # in the log, inside an open transaction

    # Attempt 1 of the same task starts: InitProducerId fences attempt 0 and aborts it.
    _, message = run_task(plan, TaskIdentity(0, 1, query, 7), [b"retry-%d" % i for i in range(5)])
    assert message.records == 5
    with pytest.raises(WriteError, match="not committed"):
        zombie.finish()
    zombie.abandon()

    assert read_values(broker.bootstrap, topic, 1, "read_committed") == [
        b"retry-%d" % i for i in range(5)
    ]
    everything = read_values(broker.bootstrap, topic, 1, "read_uncommitted")
    assert len(everything) == 25  # the aborted records are in the log, invisible above


def test_failed_task_leaves_nothing_visible(
    broker: BrokerProcess, create_topic: Callable[..., str], topic_name: Callable[[str], str]
) -> None:
    topic = create_topic(topic_name("out"), partitions=1)
    plan = plan_for(broker.bootstrap, topic)
    query = str(uuid.uuid4())
    failing = ExactlyOnceDelivery(plan, TaskIdentity(0, 0, query, 0))
    for i in range(30):
        failing.send(topic, b"lost-%d" % i, None, -1, None)
    assert failing._producer is not None
    failing._producer.flush(30)
    failing.abandon()  # what write_batches does when the task raises
    assert read_values(broker.bootstrap, topic, 1, "read_committed") == []
    assert read_marker(plan.config, transactional_id(query, 0), topic) == -1

    # The retry writes the batch; then a task with no rows commits nothing at all.
    _, message = run_task(plan, TaskIdentity(0, 1, query, 0), [b"kept"])
    assert message.records == 1
    _, empty = run_task(plan, TaskIdentity(0, 0, query, 1), [])
    assert empty.records == 0 and not empty.replayed
    assert read_values(broker.bootstrap, topic, 1, "read_committed") == [b"kept"]
    assert read_marker(plan.config, transactional_id(query, 0), topic) == 1

    # A task outside a streaming query (no query or batch id) is refused.
    with pytest.raises(WriteError, match="streaming query"):
        ExactlyOnceDelivery(plan, TaskIdentity(0, 0))


def test_planning_of_exactly_once_streaming_writes() -> None:
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from odradek.spark.options import OptionError
    from odradek.spark.write import plan_write

    schema = StructType([StructField("value", BinaryType()), StructField("topic", StringType())])
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "deliveryGuarantee": "Exactly-Once"}
    plan = plan_write({**base, "topic": "out"}, schema, False, streaming=True)
    assert (plan.guarantee, plan.marker_topic) == ("exactly-once", "out")
    # Rows carry their topic: the markers need a named topic.
    with pytest.raises(OptionError, match="exactlyOnceMarkerTopic"):
        plan_write(base, schema, False, streaming=True)
    plan = plan_write({**base, "exactlyOnceMarkerTopic": "marks"}, schema, False, streaming=True)
    assert (plan.topic, plan.marker_topic) == (None, "marks")
    with pytest.raises(OptionError, match="streaming writes only"):
        plan_write({**base, "topic": "out"}, schema, False, streaming=False)
    with pytest.raises(OptionError, match=r"kafka\.transactional\.id"):
        plan_write({**base, "topic": "out", "kafka.transactional.id": "mine"}, schema, False)

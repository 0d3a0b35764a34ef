"""The partitioner and the assignors against librdkafka (confluent-kafka) on a real broker.

- A librdkafka producer with ``partitioner=murmur2_random`` picks, for random keys,
  exactly the partitions ``default_partition`` computes.
- Two librdkafka consumers form a group per assignment strategy; DescribeGroups returns
  the JoinGroup metadata and SyncGroup assignment they sent, which the consumer-protocol
  code decodes to the topics, rack and partitions the consumers report. For ``range``
  and ``roundrobin`` our assignors, given the decoded subscriptions, compute exactly the
  assignment librdkafka's leader did; for ``cooperative-sticky`` librdkafka's assignment
  is a fixed point of ours (our leader would move nothing).
"""

from __future__ import annotations

import gc
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_payload_module
from kio.static.constants import EntityType

from odradek.client.consumer.assignors import (
    ASSIGNORS,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    protocol_version,
)
from odradek.client.producer.partitioner import default_partition
from odradek.protocol.build import make
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

DESCRIBE_GROUPS = 15
TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("client-interop") / "data",
        ["--override", "group.initial.rebalance.delay.ms=0"],
    ).start()
    try:
        yield process
    finally:
        # librdkafka handles caught in reference cycles keep reconnecting until collected.
        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(bootstrap: str, counts: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in counts.items()])
    for future in futures.values():
        future.result(TIMEOUT_S)


@pytest.mark.parametrize("partitions", [7, 32])
def test_librdkafka_murmur2_random_picks_default_partition(
    group_broker: BrokerProcess, partitions: int
) -> None:
    topic = unique("murmur2")
    create_topics(group_broker.bootstrap, {topic: partitions})
    rng = random.Random(partitions)
    keys = [b"", *(rng.randbytes(rng.randrange(1, 40)) for _ in range(199))]
    picked: dict[int, int] = {}
    errors: list[Any] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        value, partition = message.value(), message.partition()
        if error is not None or value is None or partition is None:
            errors.append(error or message)
        else:
            picked[int(value)] = partition

    producer = Producer(
        {
            "bootstrap.servers": group_broker.bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        }
    )
    for index, key in enumerate(keys):
        producer.produce(topic, value=str(index).encode(), key=key, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0
    assert not errors
    assert [picked[i] for i in range(len(keys))] == [
        default_partition(key, partitions) for key in keys
    ]
    assert len(set(picked.values())) == partitions  # the keys reach every partition


def describe(bootstrap: str, group: str) -> Any:
    module = load_payload_module(DESCRIBE_GROUPS, 5, EntityType.request)
    request = make(
        module.DescribeGroupsRequest, groups=(group,), include_authorized_operations=False
    )
    with WireClient(bootstrap) as client:
        (described,) = client.request(request).groups
    return described


def assignment_of(consumer: Consumer) -> set[TopicPartition]:
    return {TopicPartition(p.topic, p.partition) for p in consumer.assignment()}


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_librdkafka_group_metadata_decodes_and_matches_our_assignors(
    group_broker: BrokerProcess, strategy: str
) -> None:
    topics = {unique("ta"): 3, unique("tb"): 2}
    create_topics(group_broker.bootstrap, topics)
    group = unique("group")
    consumers = []
    racks = {}
    for index in range(2):
        rack = "rack-a" if index == 0 else ""
        consumer = Consumer(
            {
                "bootstrap.servers": group_broker.bootstrap,
                "group.id": group,
                "partition.assignment.strategy": strategy,
                "enable.auto.commit": False,
                "heartbeat.interval.ms": 100,
                "session.timeout.ms": 6000,
                "client.rack": rack,
            }
        )
        consumer.subscribe(sorted(topics))
        consumers.append(consumer)
        racks[consumer] = rack
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            for consumer in consumers:
                consumer.poll(0.05)
            described = describe(group_broker.bootstrap, group)
            owned = {c.memberid(): assignment_of(c) for c in consumers}
            assigned = {
                m.member_id: set(decode_assignment(m.member_assignment).partitions)
                for m in described.members
            }
            everything = set().union(*owned.values())
            if described.group_state == "Stable" and assigned == owned and len(everything) == 5:
                break
            assert time.monotonic() < deadline, f"group never settled: {described}"
        assert described.protocol_type == "consumer"
        assert described.protocol_data == strategy
        members: dict[str, Subscription] = {}
        for member in described.members:
            assert protocol_version(member.member_metadata) == 3
            subscription = decode_subscription(member.member_metadata)
            consumer = next(c for c in consumers if c.memberid() == member.member_id)
            assert sorted(subscription.topics) == sorted(topics)
            assert (subscription.rack or "") == racks[consumer]
            members[member.member_id] = subscription
        assignor = ASSIGNORS[strategy]
        if strategy == "cooperative-sticky":
            # The next rebalance: each member owns what it was assigned, all in the
            # current generation (any one number will do).
            members = {
                m: Subscription(s.topics, owned_partitions=tuple(sorted(assigned[m])), generation=9)
                for m, s in members.items()
            }
        ours = assignor.assign(members, topics)
        assert {m: set(a.partitions) for m, a in ours.items()} == assigned
    finally:
        for consumer in consumers:
            consumer.close()
        consumers.clear()
        gc.collect()

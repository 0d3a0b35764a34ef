"""Fetch from the closest replica (KIP-392) on three combined ``odradek serve`` processes.

Brokers 1, 2, 3 sit in racks r1, r2, r3 (``broker.rack``) with ``replica.selector.class``
= Kafka's RackAwareReplicaSelector; topic ``near`` has RF=3 and leaders 1, 2, 3. On
the wire, a Fetch v11 to the leader of partition 0 with ``rack_id`` r2 gets
``preferred_read_replica`` 2 and no records; r1 (the leader's rack) and no rack get the
records. With real clients: a confluent-kafka consumer without ``client.rack`` reads
every record from the leaders (librdkafka's statistics name the broker each partition
is fetched from, and no broker logs serving a consumer as a follower); one with
``client.rack`` = r2 reads every record too, partitions 0 and 2 from broker 2 — their
follower — which the statistics show and broker 2's log says ("serving consumer
fetches as a follower"), while brokers 1 and 3 never serve consumers as followers.
Every process is stopped by the test, by pid.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.protocol.build import make
from odradek.replica.replica_selector import RACK_AWARE_SELECTOR
from tests.support.kraft import Quorum
from tests.support.wire import WireClient

T = TypeVar("T")
TOPIC = "near"
RECORDS = 300
SPREAD = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}  # leaders 1, 2, 3
SERVED_AS_FOLLOWER = "serving consumer fetches as a follower"


pytestmark = pytest.mark.quorum(
    properties={
        "replica.selector.class": RACK_AWARE_SELECTOR,
        "auto.leader.rebalance.enable": "false",
        "broker.heartbeat.interval.ms": "300",
    },
    node_properties={n: {"broker.rack": f"r{n}"} for n in (1, 2, 3)},
)


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = probe()
        if seen:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def fetch_v11(client: WireClient, partition: int, rack: str) -> Any:
    module = load_payload_module(1, 11, EntityType.request)
    wanted = make(
        module.FetchPartition,
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=0,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    request = make(
        module.FetchRequest,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(make(module.FetchTopic, topic=TOPIC, partitions=(wanted,)),),
        forgotten_topics_data=(),
        rack_id=rack,
    )
    (topic,) = client.request(request).responses
    (result,) = topic.partitions
    return result


def consume_all(
    quorum: Quorum,
    rack: str | None,
    expected: set[bytes],
    sources: Callable[[dict[int, set[int]]], bool],
) -> tuple[set[bytes], dict[int, set[int]]]:
    """Read every record of ``near`` with a confluent-kafka consumer (``client.rack`` =
    ``rack``); returns the values and, per partition, the brokers librdkafka's
    statistics showed it fetching from (sampled until ``sources`` accepts them, or
    the deadline: the caller's asserts then say what was missing)."""
    fetched_from: dict[int, set[int]] = {p: set() for p in SPREAD}

    def on_stats(text: str) -> None:
        partitions = json.loads(text).get("topics", {}).get(TOPIC, {}).get("partitions", {})
        for key, state in partitions.items():
            if int(key) >= 0 and state.get("broker", -1) >= 0:
                fetched_from[int(key)].add(state["broker"])

    config: dict[str, Any] = {
        "bootstrap.servers": quorum.bootstrap,
        "group.id": f"near-{rack}",
        "enable.auto.commit": False,
        "statistics.interval.ms": 200,
        "stats_cb": on_stats,
    }
    if rack is not None:
        config["client.rack"] = rack
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in SPREAD])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            value = message.value() if message is not None and not message.error() else None
            if value is not None:
                seen.add(value)
            if seen >= expected and sources(fetched_from):
                break
        return seen, fetched_from
    finally:
        consumer.close()


def served_as_follower(quorum: Quorum, node: int) -> list[str]:
    return [line for line in quorum.nodes[node].log().splitlines() if SERVED_AS_FOLLOWER in line]


def test_a_consumer_reads_from_the_follower_in_its_rack(quorum: Quorum) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    created = admin.create_topics(
        [NewTopic(TOPIC, 3, replica_assignment=[SPREAD[i] for i in range(3)])]
    )
    created[TOPIC].result(timeout=30)

    def spread_and_in_sync() -> bool:
        partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        return all(
            p.leader == SPREAD[i][0] and sorted(p.isrs) == [1, 2, 3] for i, p in partitions.items()
        )

    wait_for("leaders spread, ISRs full", spread_and_in_sync, 60)
    producer = Producer({"bootstrap.servers": quorum.bootstrap, "acks": "all"})
    expected = {b"value-%d" % i for i in range(RECORDS)}
    for i in range(RECORDS):
        producer.produce(TOPIC, value=b"value-%d" % i, partition=i % 3)
    assert producer.flush(60) == 0

    # the wire: the leader of partition 0 (broker 1, rack r1) points rack r2 at broker 2
    with WireClient(quorum.broker_address(1)) as client:
        redirected = fetch_v11(client, 0, "r2")
        assert redirected.error_code == ErrorCode.none
        assert redirected.preferred_read_replica == 2 and not redirected.records
        assert redirected.high_watermark == RECORDS // 3
        for rack in ("r1", ""):
            here = fetch_v11(client, 0, rack)
            assert here.preferred_read_replica == -1 and here.records, rack

    # no client.rack: every partition from its leader, no follower serves a consumer
    leaders = {p: {replicas[0]} for p, replicas in SPREAD.items()}
    values, fetched_from = consume_all(quorum, None, expected, lambda f: all(f.values()))
    assert values == expected
    assert fetched_from == leaders, fetched_from
    assert not any(served_as_follower(quorum, n) for n in (1, 2, 3))

    # client.rack=r2: partitions 0 and 2 (leaders 1 and 3) are read from broker 2
    values, fetched_from = consume_all(
        quorum, "r2", expected, lambda f: 2 in f[0] and 2 in f[2] and bool(f[1])
    )
    assert values == expected
    assert 2 in fetched_from[0] and 2 in fetched_from[2], fetched_from
    assert fetched_from[1] == {2}  # broker 2 leads it: its own rack
    lines = served_as_follower(quorum, 2)
    assert any(f"{TOPIC}-0: {SERVED_AS_FOLLOWER} of 1" in line for line in lines), lines
    assert any(f"{TOPIC}-2: {SERVED_AS_FOLLOWER} of 3" in line for line in lines), lines
    assert not served_as_follower(quorum, 1) and not served_as_follower(quorum, 3)

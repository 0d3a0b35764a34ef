"""/metrics on each node of a three-node KRaft cluster after replicated traffic.

How this works and why: each node counts what it does itself, as a Kafka broker's MBeans
do, so the cluster's figures are sums over the nodes' scrapes. An RF=3 topic whose
partitions are led one per node gets RECORDS records (acks=all); then every node's
MessagesIn for the topic adds up to RECORDS (only leaders count an append), every leader
sent its appended batch bytes to both followers, which appended them
(ReplicationBytesOut >= ReplicationBytesIn >= twice the topic's BytesIn), each replica's
log holds the same bytes on every node, exactly one node is the active controller,
nothing is under-replicated, and the group's coordinator — whichever node it is —
reports lag = end - committed (it hosts every partition, as leader or follower, so it
knows every end offset).
Every process is stopped by pid (tests/support/kraft.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.console.test_metrics import Samples, scrape
from tests.support.kraft import Quorum

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC = "replicated"
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # each node leads one partition
RECORDS = 150
GROUP = "cluster-metrics-group"
COMMITTED = {0: 10, 1: 20, 2: 30}
OFFSETS_PARTITIONS = 2
PROPERTIES = {
    "metrics.listener": "http://127.0.0.1:0",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "auto.leader.rebalance.enable": "false",
    "min.insync.replicas": "2",
}
SETTLE_S = 15.0

pytestmark = pytest.mark.slow  # a three-node quorum: ~30 s to start on a loaded 2-core box

T = TypeVar("T")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Quorum]:
    with Quorum(tmp_path / "quorum", properties=PROPERTIES) as started:
        yield started


def eventually(what: str, probe: Callable[[], T | None]) -> T:
    """``probe``'s first truthy answer within SETTLE_S (followers catch up, ISR grows)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        seen = probe()
        if seen:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {SETTLE_S} s")
        time.sleep(0.2)


def scrape_all(cluster: Quorum) -> dict[int, Samples]:
    urls = {n: node.metrics_url for n, node in cluster.nodes.items()}
    assert all(urls.values()), urls
    return {n: scrape(url) for n, url in urls.items() if url is not None}


def test_cluster_metrics_add_up(cluster: Quorum) -> None:
    common = {"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10_000}
    admin = AdminClient(common)
    topic = NewTopic(TOPIC, len(ASSIGNMENT), replica_assignment=ASSIGNMENT)
    admin.create_topics([topic])[TOPIC].result(timeout=20)
    producer = Producer({**common, "acks": "all", "linger.ms": 10})
    delivered = dict.fromkeys(range(len(ASSIGNMENT)), 0)

    def on_delivery(error: object, message: object) -> None:
        assert error is None, error
        delivered[message.partition()] += 1  # type: ignore[attr-defined]

    for i in range(RECORDS):
        value = (f"value-{i}-" * 5).encode()
        producer.produce(TOPIC, value, partition=i % len(ASSIGNMENT), on_delivery=on_delivery)
    assert producer.flush(20) == 0 and sum(delivered.values()) == RECORDS
    consumer = Consumer({**common, "group.id": GROUP, "enable.auto.commit": False})
    try:
        commits = [TopicPartition(TOPIC, p, offset) for p, offset in COMMITTED.items()]
        consumer.commit(offsets=commits, asynchronous=False)
    finally:
        consumer.close()

    def settled() -> dict[int, Samples] | None:
        scraped = scrape_all(cluster)
        under = sum(
            s["kafka_server_replicamanager_underreplicatedpartitions"][()] for s in scraped.values()
        )
        lags = [s.get("kafka_consumergroup_lag", {}) for s in scraped.values()]
        reported = [lag for lag in lags if lag]
        return scraped if under == 0 and len(reported) == 1 else None

    scraped = eventually("every ISR full and the group's lag reported", settled)
    topic_key = (("topic", TOPIC),)
    messages = [
        s["kafka_server_brokertopicmetrics_messagesin_total"].get(topic_key, 0)
        for s in scraped.values()
    ]
    assert sum(messages) == RECORDS
    assert all(m > 0 for m in messages)  # one partition led per node
    bytes_in = sum(
        s["kafka_server_brokertopicmetrics_bytesin_total"].get(topic_key, 0)
        for s in scraped.values()
    )
    replicated = sum(
        s["kafka_server_brokertopicmetrics_replicationbytesout_total"][()] for s in scraped.values()
    )
    copied = sum(
        s["kafka_server_brokertopicmetrics_replicationbytesin_total"][()] for s in scraped.values()
    )
    # Followers append the whole batches they are sent: a fetch cut mid-batch is sent
    # again, so what arrived can only exceed what was appended.
    assert replicated >= copied >= 2 * bytes_in > 0
    for index, replicas in enumerate(ASSIGNMENT):
        leader = scraped[replicas[0]]
        labels = (("request", "FetchFollower"),)
        assert leader["kafka_network_requestmetrics_totaltimems_count"][labels] > 0
        key = (("partition", str(index)), ("topic", TOPIC))
        sizes = {s["kafka_log_log_size"][key] for s in scraped.values()}
        ends = {s["kafka_log_log_logendoffset"][key] for s in scraped.values()}
        assert len(sizes) == 1 and ends == {delivered[index]}, (sizes, ends)

    hosted = len(ASSIGNMENT) + OFFSETS_PARTITIONS  # RF 3 on 3 nodes: every node, every one
    active = [
        s["kafka_controller_kafkacontroller_activecontrollercount"][()] for s in scraped.values()
    ]
    assert sorted(active) == [0, 0, 1]
    for samples in scraped.values():
        assert samples["kafka_server_replicamanager_partitioncount"][()] == hosted
        assert samples["kafka_controller_kafkacontroller_globalpartitioncount"][()] == hosted
        assert samples["kafka_controller_kafkacontroller_activebrokercount"][()] == 3
    leaders = sum(s["kafka_server_replicamanager_leadercount"][()] for s in scraped.values())
    assert leaders == hosted

    (lag,) = [
        s["kafka_consumergroup_lag"] for s in scraped.values() if s.get("kafka_consumergroup_lag")
    ]
    group = ("consumergroup", GROUP)
    assert lag == {
        (group, ("partition", str(p)), ("topic", TOPIC)): delivered[p] - offset
        for p, offset in COMMITTED.items()
    }

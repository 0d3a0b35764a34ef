"""The group coordinator in a three-node KRaft cluster of ``odradek serve`` processes.

``__consumer_offsets`` has ``offsets.topic.replication.factor`` = 3 (Kafka's default
once a quorum is configured): with two of the three nodes up, FindCoordinator answers
COORDINATOR_NOT_AVAILABLE and the topic is not created with fewer replicas; once the
third node is up it is created with three replicas per partition. A confluent-kafka
consumer group then commits, the coordinator's node is stopped (SIGTERM) and started
again, and the group's committed offsets are loaded back on it: a new consumer of the
group resumes where the commit said. (Moving the coordinator to *another* node needs
the partition's data on that node — replication and controller elections — and is
the replication issue's test.) Every process is stopped by pid.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.groups.wire import find_coordinator
from tests.support.kraft import Quorum
from tests.support.wire import WireClient, cluster_metadata

QUIET = {"log_level": 0}
FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "2000",
}
WAIT_S = 60.0
GROUP = "moving-group"
T = TypeVar("T")


def eventually(what: str, check: Callable[[], T | None], timeout_s: float = WAIT_S) -> T:
    """``check()``'s first truthy value; exceptions count as not yet (clients reconnect)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as error:
            last = error
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


def coordinator_of(address: str, group: str) -> tuple[ErrorCode, int]:
    with WireClient(address, timeout_s=10) as client:
        ((_, node_id, _, _, error),) = find_coordinator(client, 3, [group])
    return error, node_id


def next_offset(consumer: Consumer) -> int | None:
    message = consumer.poll(1.0)
    return None if message is None or message.error() is not None else message.offset()


def broker_count(address: str) -> int:
    with WireClient(address, timeout_s=10) as client:
        return len(cluster_metadata(client).brokers)


def offsets_topic_replicas(address: str) -> list[int] | None:
    with WireClient(address, timeout_s=10) as client:
        metadata = cluster_metadata(client, all_topics=True)
    for topic in metadata.topics:
        if topic.name == "__consumer_offsets":
            return sorted(len(p.replica_nodes) for p in topic.partitions)
    return None


def test_offsets_topic_waits_for_three_brokers_and_commits_survive_a_coordinator_restart(
    tmp_path: Path,
) -> None:
    quorum = Quorum(tmp_path, properties=FAST)
    try:
        for node_id in (1, 2):
            quorum.launch_node(node_id)
        for node_id in (1, 2):
            quorum.nodes[node_id].wait_ready()  # two of three voters: a majority
        first = quorum.broker_address(1)
        eventually("both brokers registered", lambda: broker_count(first) == 2)
        for _ in range(5):  # never created with fewer replicas, however often asked
            error, _ = coordinator_of(first, GROUP)
            assert error is ErrorCode.coordinator_not_available
            time.sleep(0.2)
        assert offsets_topic_replicas(first) is None

        quorum.start_node(3)
        eventually(
            "a coordinator once three brokers are up",
            lambda: coordinator_of(first, GROUP)[0] is ErrorCode.none,
        )
        replicas = offsets_topic_replicas(first)
        assert replicas is not None and set(replicas) == {3}

        admin = AdminClient({"bootstrap.servers": quorum.bootstrap, **QUIET})
        admin.create_topics([NewTopic("data", 1, 1)], operation_timeout=30)["data"].result(40)
        producer = Producer({"bootstrap.servers": quorum.bootstrap, "acks": "all", **QUIET})
        for n in range(10):
            producer.produce("data", str(n).encode(), partition=0)
        assert producer.flush(30) == 0

        config = {
            "bootstrap.servers": quorum.bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **QUIET,
        }
        consumer = Consumer(config)
        try:
            consumer.subscribe(["data"])
            seen: list[int | None] = []
            deadline = time.monotonic() + WAIT_S
            while len(seen) < 7 and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    seen.append(message.offset())
            assert seen[:7] == list(range(7))
            consumer.commit(offsets=[TopicPartition("data", 0, 7)], asynchronous=False)
        finally:
            consumer.close()

        error, coordinator = coordinator_of(first, GROUP)
        assert error is ErrorCode.none
        quorum.stop(coordinator)  # SIGTERM
        quorum.start_node(coordinator)

        consumer = Consumer(config)
        try:
            committed = eventually(
                "the committed offset from the reloaded coordinator",
                lambda: consumer.committed([TopicPartition("data", 0)], timeout=5),
            )
            assert committed[0].offset == 7
            consumer.subscribe(["data"])
            offset = eventually(
                "a record after the committed offset", lambda: next_offset(consumer)
            )
            assert offset == 7
        finally:
            consumer.close()
        log = quorum.nodes[coordinator].log()
        assert "loaded __consumer_offsets-" in log, log[-3000:]
    finally:
        quorum.close()

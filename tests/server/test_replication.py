"""Partition replication end to end: three ``odradek serve`` processes, real fetchers.

A topic with replication factor 3 and a manual assignment (leader 1, followers 2 and 3)
is created with confluent-kafka's admin client; a confluent-kafka producer with
acks=all writes 1,000 records, each answered only once the followers' fetches have
moved the high watermark past it. The followers' replica fetchers (Fetch v17 between
odradek nodes: topic ids, ``replica_state``; records appended as the leader stamped
them) then make every replica's segment files byte-identical to the leader's.

kill -9 of the leader: the followers' fetchers lose their connection and back off;
once the controller fences the dead broker (``broker.session.timeout.ms``) one of them
leads in a new epoch and the other fetches from it. 200 more acks=all records go to
the new leader, a consumer reads all 1,200 in order (none lost, none doubled), the two
survivors' files are identical, and the old leader, restarted, follows the new one
until all three are identical again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kraft import Quorum, read_partition

TOPIC = "replicated"
RECORDS = 1000
MORE = 200
PROPERTIES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "300",
    "auto.leader.rebalance.enable": "false",
}
LEADER, FOLLOWERS = 1, (2, 3)

pytestmark = [pytest.mark.slow, pytest.mark.quorum(properties=PROPERTIES)]


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.1)


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(TOPIC, 1, -1, replica_assignment=[[LEADER, *FOLLOWERS]])], operation_timeout=10
    )
    futures[TOPIC].result(timeout=30)


def value(i: int) -> bytes:
    return f"value-{i:04d}".encode() * 8


def produce_all(bootstrap: str, indexes: range) -> list[int]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
        }
    )
    offsets: list[int] = []
    errors: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            offsets.append(message.offset())  # type: ignore[attr-defined]

    for i in indexes:
        producer.produce(
            TOPIC,
            value=value(i),
            key=b"k%d" % i,
            partition=0,
            on_delivery=delivered,
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return offsets


def partition_leader(bootstrap: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(TOPIC, timeout=10)
    return int(metadata.topics[TOPIC].partitions[0].leader)


def consume_all(bootstrap: str, expected: int) -> list[bytes]:
    return read_partition(bootstrap, TOPIC, expected, "replication-check")


def test_followers_become_byte_identical_and_outlive_the_leader(quorum: Quorum) -> None:
    create_topic(quorum.bootstrap)
    offsets = produce_all(quorum.broker_address(LEADER), range(RECORDS))
    assert sorted(offsets) == list(range(RECORDS))

    def files_equal(nodes: tuple[int, ...]) -> Callable[[], bool]:
        def check() -> bool:
            first = quorum.segment_files(nodes[0], f"{TOPIC}-0")
            return bool(first) and all(
                quorum.segment_files(n, f"{TOPIC}-0") == first for n in nodes[1:]
            )

        return check

    wait_until(files_equal((LEADER, *FOLLOWERS)), 60, "every replica's segment files equal")
    leader_files = quorum.segment_files(LEADER, f"{TOPIC}-0")
    assert sum(len(data) for data in leader_files.values()) > RECORDS * 80

    # kill -9 of the leader: the followers' fetchers fail and back off; once the
    # controller fences it (broker.session.timeout.ms) a follower leads in a new
    # epoch and the other fetches from it.
    quorum.kill(LEADER)
    survivors = ",".join(quorum.broker_address(n) for n in FOLLOWERS)
    for node in FOLLOWERS:
        assert quorum.segment_files(node, f"{TOPIC}-0") == leader_files
    wait_until(lambda: partition_leader(survivors) in FOLLOWERS, 30, "a new leader")
    more = produce_all(survivors, range(RECORDS, RECORDS + MORE))
    assert sorted(more) == list(range(RECORDS, RECORDS + MORE))
    wait_until(files_equal(FOLLOWERS), 60, "the survivors' segment files equal")
    values = consume_all(survivors, RECORDS + MORE)
    assert values == [value(i) for i in range(RECORDS + MORE)]  # nothing lost or doubled

    # The old leader returns as a follower of the new one and catches up.
    quorum.start_node(LEADER)
    wait_until(files_equal((LEADER, *FOLLOWERS)), 60, "the returned node's files equal")
    for node in (LEADER, *FOLLOWERS):
        assert "Traceback" not in quorum.nodes[node].log(), quorum.nodes[node].log()

"""Partition replication end to end: three ``odradek serve`` processes, real fetchers.

A topic with replication factor 3 and a manual assignment (leader 1, followers 2 and 3)
is created with confluent-kafka's admin client; a confluent-kafka producer with
acks=all writes 1,000 records, each answered only once the followers' fetches have
moved the high watermark past it. The followers' replica fetchers (Fetch v12 with
``replica_id``, records appended as the leader stamped them) then make every
replica's segment files byte-identical to the leader's.

kill -9 of the leader: the followers' fetchers lose their connection and back off,
the followers keep serving, and their logs stay identical to what the leader had
written. Moving the leadership to them is the controller's elections (another branch);
this test checks only what replication itself promises.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kraft import Quorum

TOPIC = "replicated"
RECORDS = 1000
LEADER, FOLLOWERS = 1, (2, 3)

pytestmark = pytest.mark.slow


def segment_files(quorum: Quorum, node_id: int) -> dict[str, bytes]:
    """Every ``.log`` segment of the partition on ``node_id``, by name."""
    directory = quorum.data_dir(node_id) / f"{TOPIC}-0"
    if not directory.is_dir():
        return {}
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}


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


def produce_all(bootstrap: str) -> list[int]:
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

    for i in range(RECORDS):
        producer.produce(
            TOPIC,
            value=f"value-{i:04d}".encode() * 8,
            key=b"k%d" % i,
            partition=0,
            on_delivery=delivered,
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return offsets


def test_followers_become_byte_identical_and_outlive_the_leader(tmp_path: Path) -> None:
    with Quorum(tmp_path) as quorum:
        create_topic(quorum.bootstrap)
        offsets = produce_all(quorum.broker_address(LEADER))
        assert sorted(offsets) == list(range(RECORDS))

        leader_files: dict[str, bytes] = {}

        def identical() -> bool:
            nonlocal leader_files
            leader_files = segment_files(quorum, LEADER)
            return bool(leader_files) and all(
                segment_files(quorum, node) == leader_files for node in FOLLOWERS
            )

        wait_until(identical, 60, "followers' segment files equal to the leader's")
        assert sum(len(data) for data in leader_files.values()) > RECORDS * 80

        quorum.kill(LEADER)
        time.sleep(3)  # the followers' fetches fail, they back off and retry
        for node in FOLLOWERS:
            assert quorum.nodes[node].alive(), quorum.nodes[node].log()
            assert segment_files(quorum, node) == leader_files
        log = quorum.nodes[FOLLOWERS[0]].log()
        assert "Traceback" not in log, log

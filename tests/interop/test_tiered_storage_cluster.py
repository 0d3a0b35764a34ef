"""Tiered storage (KIP-405) with replicas: three real ``odradek serve`` processes share
one filesystem backend directory; the remote segment metadata goes through
``__remote_log_metadata`` (the topic-based manager, RF 3).

- confluent-kafka writes ~3 MB to a tiered RF=3 topic; the leader copies its rolled
  segments and every replica (followers too, from the shared metadata) deletes its
  local copies by local.retention.bytes.
- kill -9 of the leader: the new leader continues copying where the old one stopped
  (what was produced after the failover reaches remote storage) and a consumer from
  offset 0 reads every record byte for byte from it.

Every process is stopped by pid (tests/support/kraft.py).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest

from tests.interop.cluster_support import (
    EXAMPLES,
    PROPERTIES,
    QUIET,
    admin,
    create_topic,
    eventually,
    leader_of,
    logs_tail,
    wait_in_sync,
    wait_new_leader,
)
from tests.support.kraft import NODE_IDS, Quorum

pytestmark = pytest.mark.slow

TOPIC = "tiered-replicated"
COUNT = 3000


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Quorum]:
    properties = {
        **PROPERTIES,
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "300",
        "rsm.config.dir": str(tmp_path / "remote"),
        "rsm.config.fsync": "false",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
        "log.retention.check.interval.ms": "300",
    }
    running = Quorum(
        tmp_path / "cluster",
        properties=properties,
        templates={n: EXAMPLES / f"node{n}.properties" for n in NODE_IDS},
    ).start()
    try:
        yield running
    finally:
        running.close()


def new_producer(bootstrap: str) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 32768,
            "acks": "all",
            "enable.idempotence": True,
            **QUIET,
        }
    )


def produce(
    bootstrap: str,
    records: list[tuple[bytes, bytes]],
    producer: confluent_kafka.Producer | None = None,
) -> None:
    producer = producer or new_producer(bootstrap)
    for key, value in records:
        producer.produce(TOPIC, value, key, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def consume(bootstrap: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                if message.error() is None:
                    got.append((message.key(), message.value()))
    finally:
        consumer.close()
    return got


def local_only_tail(quorum: Quorum, node_id: int) -> bool:
    """The node's replica lost its oldest local segments (copied, then deleted)."""
    logs = sorted((quorum.data_dir(node_id) / f"{TOPIC}-0").glob("*.log"))
    return bool(logs) and logs[0].name != f"{0:020d}.log" and len(logs) <= 3


def remote_segments(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "remote").rglob("*.log"))


def test_a_new_leader_serves_and_continues_the_remote_log(quorum: Quorum, tmp_path: Path) -> None:
    client = admin(quorum)
    create_topic(
        client,
        TOPIC,
        config={
            "remote.storage.enable": "true",
            "segment.bytes": str(256 * 1024),
            "local.retention.bytes": "1",
            "file.delete.delay.ms": "0",
        },
    )
    wait_in_sync(client, TOPIC)
    sent = [(f"k{i}".encode(), os.urandom(1000)) for i in range(COUNT)]
    produce(quorum.bootstrap, sent)
    try:
        for node_id in NODE_IDS:  # the leader and, from the shared metadata, followers
            eventually(
                f"node {node_id}'s local segments copied and deleted",
                lambda n=node_id: local_only_tail(quorum, n),  # type: ignore[misc]
                90,
            )
    except AssertionError:
        raise AssertionError(logs_tail(quorum)) from None
    assert (quorum.data_dir(1) / "__remote_log_metadata-0").is_dir()
    copied = remote_segments(tmp_path)
    assert len(copied) >= 8  # ~3 MB in 256 KiB segments

    victim = leader_of(client, TOPIC)
    quorum.kill(victim)
    successor = wait_new_leader(client, TOPIC, victim)
    assert consume(quorum.bootstrap, COUNT) == sent

    more = [(f"m{i}".encode(), os.urandom(1000)) for i in range(COUNT)]
    produce(quorum.bootstrap, more)
    eventually(
        f"the new leader {successor} copying past the old leader's segments",
        lambda: len(remote_segments(tmp_path)) >= len(copied) + 8,
        90,
    )
    eventually(
        f"node {successor}'s new local segments deleted",
        lambda: local_only_tail(quorum, successor),
        90,
    )
    assert consume(quorum.bootstrap, 2 * COUNT) == sent + more
    # No segment copied twice (a start offset twice) by the old and the new leader.
    starts = [name.split("-")[0] for name in remote_segments(tmp_path)]
    assert len(set(starts)) == len(starts), starts
    for node_id in NODE_IDS:
        if node_id != victim:
            assert "remote log task failed" not in quorum.nodes[node_id].log()


def test_a_replica_without_data_starts_from_the_leaders_local_log(
    quorum: Quorum, tmp_path: Path
) -> None:
    """A follower whose partition directory is gone (a new replica) builds its state
    from remote storage (OFFSET_MOVED_TO_TIERED_STORAGE, ListOffsets EARLIEST_LOCAL) and
    fetches from the leader's local log start, never from offset 0. Then it becomes
    leader (the first replica of the assignment in the ISR once node 1 is killed):
    it serves offset 0 from remote storage, and the idempotent producer that wrote
    everything goes on with its sequence numbers — each record once."""
    client = admin(quorum)
    create_topic(
        client,
        TOPIC,
        assignment=[[1, 2, 3]],
        config={
            "remote.storage.enable": "true",
            "segment.bytes": str(256 * 1024),
            "local.retention.bytes": "1",
            "file.delete.delay.ms": "0",
        },
    )
    wait_in_sync(client, TOPIC)
    leader, follower = 1, 2
    assert leader_of(client, TOPIC) == leader
    sent = [(f"k{i}".encode(), os.urandom(1000)) for i in range(COUNT)]
    producer = new_producer(quorum.bootstrap)
    produce(quorum.bootstrap, sent, producer)
    eventually(f"leader {leader}'s local segments deleted", lambda: local_only_tail(quorum, leader))
    assert quorum.stop(follower) == 0
    shutil.rmtree(quorum.data_dir(follower) / f"{TOPIC}-0")
    quorum.start_node(follower)
    wait_in_sync(client, TOPIC)
    logs = sorted((quorum.data_dir(follower) / f"{TOPIC}-0").glob("*.log"))
    first = int(logs[0].name.removesuffix(".log"))
    assert first > 0, [p.name for p in logs]  # it never fetched offset 0
    assert "built from remote segment" in quorum.nodes[follower].log()
    quorum.kill(leader)
    assert wait_new_leader(client, TOPIC, leader) == follower
    assert consume(quorum.bootstrap, COUNT) == sent
    more = [(f"m{i}".encode(), os.urandom(1000)) for i in range(500)]
    produce(quorum.bootstrap, more, producer)
    assert consume(quorum.bootstrap, COUNT + 500) == sent + more

"""Real clients through replica failures on three ``odradek serve`` processes.

One cluster per module, from the example Kafka-style property files with short
``broker.session.timeout.ms`` and ``replica.lag.time.max.ms`` (tests/interop/
cluster_support.py); every test leaves all three nodes running for the next.

- A topic with replication factor 3 is fully in sync and its leaders are spread over
  the three nodes (the placement's preferred leaders).
- confluent-kafka idempotent acks=all production through three leader kills (kill -9,
  restart, back in the ISR, next kill): everything the delivery reports acknowledged is
  read back once, at the offset its report named, and nothing else is there.
- RF=2, ``min.insync.replicas=2``, the follower paused (SIGSTOP) and an acks=1 record
  it lacks: after ``replica.lag.time.max.ms`` the leader itself shrinks the ISR
  (AlterPartition, its log line asserted; the session timeout that would fence the
  paused broker is longer), acks=all gets NOT_ENOUGH_REPLICAS while acks=1 succeeds;
  resumed, the follower catches up, rejoins the ISR and acks=all succeeds again. The
  ISR is read from the leader's own Metadata on the wire: librdkafka keeps using its
  connection to a paused broker, so a client's metadata request could hang on it.
- A confluent-kafka consumer group survives kill -9 of its coordinator's node: a new
  coordinator (``__consumer_offsets`` has RF=3) answers with the committed offsets, the
  group resumes there and no committed offset goes back.

Preferred leader election after a restart is tests/server/test_kraft_elections.py's.
Every process is stopped by pid.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.interop.cluster_support import (
    LAG_TIME_MAX_MS,
    QUIET,
    SESSION_TIMEOUT_MS,
    WAIT_S,
    admin,
    cluster,
    coordinator_of,
    create_topic,
    eventually,
    in_sync,
    kill_leader_and_return,
    leader_of,
    revive,
    wait_in_sync,
)
from tests.support.kraft import Quorum
from tests.support.wire import WireClient, cluster_metadata

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    running = cluster(tmp_path_factory.mktemp("replication-clients")).start()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(autouse=True)
def whole_cluster(quorum: Quorum) -> Iterator[None]:
    revive(quorum)
    yield
    revive(quorum)


def read_all(bootstrap: str, topic: str, partition: int, end: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the partition below ``end``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    read: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + WAIT_S
        while (not read or read[-1][0] < end - 1) and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1.0):
                offset, value = message.offset(), message.value()
                if message.error() is None and offset is not None and value is not None:
                    read.append((offset, value))
    finally:
        consumer.close()
    return read


def test_rf3_topic_in_sync_and_leaders_spread(quorum: Quorum) -> None:
    client = admin(quorum)
    create_topic(client, "spread", count=6, replication_factor=3)
    state = wait_in_sync(client, "spread")
    assert len(state) == 6
    assert all(len(set(p.replicas)) == 3 for p in state.values())
    leaders = [p.leader for p in state.values()]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3], leaders  # two each
    assert all(p.leader == p.replicas[0] for p in state.values())  # the preferred one


def test_idempotent_acks_all_through_three_leader_kills(quorum: Quorum) -> None:
    client = admin(quorum)
    topic = "three-kills"
    create_topic(client, topic, replication_factor=3)
    wait_in_sync(client, topic)
    producer = Producer(
        {
            "bootstrap.servers": quorum.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            **QUIET,
        }
    )
    acked: dict[bytes, int] = {}
    failed: list[str] = []
    stop = threading.Event()

    def delivered(error: KafkaError | None, message: object) -> None:
        if error is not None:
            failed.append(str(error))
        else:
            acked[message.value()] = message.offset()  # type: ignore[attr-defined]

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic, value=b"record-%06d" % i, partition=0, on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.002)

    writer = threading.Thread(target=produce, name="producer")
    writer.start()
    kills = []
    try:
        for _ in range(3):
            eventually("records flowing", lambda: len(acked) > 0)
            before = len(acked)
            kills.append(kill_leader_and_return(client, quorum, topic))
            eventually("records acknowledged after the kill", lambda: len(acked) > before)  # noqa: B023
    finally:
        stop.set()
        writer.join()
        remaining = producer.flush(120)
    assert remaining == 0
    assert failed == []
    assert len(kills) == 3 and all(victim != successor for victim, successor in kills)
    read = read_all(quorum.bootstrap, topic, 0, max(acked.values()) + 1)
    values = [v for _, v in read]
    assert len(values) == len(set(values)), "duplicates"
    assert dict((v, o) for o, v in read) == acked  # every ack read, at its offset; no more
    assert [o for o, _ in read] == list(range(len(read)))
    print(f"{len(acked)} records through kills (victim, successor) {kills}")


def isr_seen_by(quorum: Quorum, node_id: int, topic: str) -> list[int]:
    """The partition's ISR in ``node_id``'s own Metadata answer (asked on the wire of
    that node alone: a client's Metadata may go to a paused node and hang)."""
    with WireClient(quorum.broker_address(node_id), timeout_s=10) as client:
        answer = cluster_metadata(client, all_topics=True)
    (found,) = [t for t in answer.topics if t.name == topic]
    return sorted(found.partitions[0].isr_nodes)


def test_rf2_paused_follower_not_enough_replicas_then_recovery(quorum: Quorum) -> None:
    client = admin(quorum)
    topic = "rf2-min-isr"
    leader, follower = 1, 2
    create_topic(
        client, topic, assignment=[[leader, follower]], config={"min.insync.replicas": "2"}
    )
    wait_in_sync(client, topic, size=2)

    def producer(acks: str) -> Producer:
        # Bootstrapped from the leader alone and its metadata fetched before the pause:
        # librdkafka keeps its connection to a paused broker and would wait on it.
        return Producer(
            {
                "bootstrap.servers": quorum.broker_address(leader),
                "acks": acks,
                "retries": 0,
                "message.timeout.ms": 10_000,
                **QUIET,
            }
        )

    def send(p: Producer, value: bytes) -> KafkaError | None:
        outcome: list[KafkaError | None] = []
        p.produce(topic, value=value, partition=0, on_delivery=lambda e, m: outcome.append(e))
        p.flush(30)
        assert outcome, "no delivery report"
        return outcome[0]

    all_acks, one_ack = producer("all"), producer("1")
    assert send(all_acks, b"before") is None
    assert send(one_ack, b"before-1") is None
    wait_in_sync(client, topic, size=2)  # the follower has both

    leader_log = quorum.nodes[leader].log_path
    log_mark = leader_log.stat().st_size
    os.kill(quorum.nodes[follower].pid, signal.SIGSTOP)
    began = time.monotonic()
    try:
        # A follower whose log end equals the leader's counts as caught up (Kafka's
        # rule): the leader needs a record the follower lacks to see it lag.
        assert send(one_ack, b"unreplicated") is None
        eventually(
            "the ISR shrunk to the leader",
            lambda: isr_seen_by(quorum, leader, topic) == [leader],
            LAG_TIME_MAX_MS / 1000 + 30,
        )
        shrunk = time.monotonic() - began
        with open(leader_log, "rb") as log:
            log.seek(log_mark)
            added = log.read().decode(errors="replace")
        # the leader's own AlterPartition, before the session timeout could fence it
        assert f"{topic}-0: shrinking the ISR [1, 2]: [2] not caught up" in added, added
        error = send(all_acks, b"refused")
        assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error
        assert send(one_ack, b"one-ack") is None
    finally:
        os.kill(quorum.nodes[follower].pid, signal.SIGCONT)
    # Back in the ISR as the leader itself sees it: the other brokers may apply the
    # controller's record before the leader has the AlterPartition answer (as in Kafka).
    eventually(
        "the follower back in the ISR on the leader",
        lambda: isr_seen_by(quorum, leader, topic) == [leader, follower],
    )
    assert send(all_acks, b"after") is None
    read = read_all(quorum.bootstrap, topic, 0, 5)
    assert [v for _, v in read] == [b"before", b"before-1", b"unreplicated", b"one-ack", b"after"]
    print(f"ISR shrank {shrunk:.1f} s after SIGSTOP")


def test_group_survives_kill_of_its_coordinator(quorum: Quorum) -> None:
    client = admin(quorum)
    topic, group = "group-data", "surviving-group"
    create_topic(client, topic, replication_factor=3)
    wait_in_sync(client, topic)
    producer = Producer({"bootstrap.servers": quorum.bootstrap, "acks": "all", **QUIET})
    for n in range(100):
        producer.produce(topic, value=b"%d" % n, partition=0)
    assert producer.flush(30) == 0

    config = {
        "bootstrap.servers": quorum.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **QUIET,
    }
    consumer = Consumer(config)
    commits: list[int] = []
    stored: list[int] = []

    def consume_and_commit(upto: int) -> None:
        while not commits or commits[-1] < upto:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None or message.offset() is None:
                continue
            offset = int(message.offset() or 0) + 1
            if offset % 10 == 0:
                consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
                commits.append(offset)
                # what the coordinator (old or new) now holds for the group
                stored.append(
                    eventually(
                        "the commit read back",
                        lambda: consumer.committed([TopicPartition(topic, 0)], timeout=5)[0].offset,
                    )
                )

    try:
        consumer.subscribe([topic])
        consume_and_commit(40)
        coordinator = coordinator_of(quorum, group)
        wait_in_sync(client, "__consumer_offsets")
        quorum.kill(coordinator)
        successor = eventually(
            "another coordinator",
            lambda: (c := coordinator_of(quorum, group)) != coordinator and c,
            SESSION_TIMEOUT_MS / 1000 + 30,
        )
        committed = eventually(
            "the committed offset from the new coordinator",
            lambda: consumer.committed([TopicPartition(topic, 0)], timeout=5),
        )
        assert committed[0].offset == 40
        # the same member goes on consuming and committing through the new coordinator
        deadline = time.monotonic() + WAIT_S
        while commits[-1] < 70:
            assert time.monotonic() < deadline, f"commits stalled at {commits}"
            try:
                consume_and_commit(70)
            except Exception:  # a commit during the move: retried, as an application would
                time.sleep(0.5)
    finally:
        consumer.close()
    # no committed offset went back: each read back as committed, across the move
    assert stored == commits, (stored, commits)
    assert commits[:4] == [10, 20, 30, 40] and commits == sorted(commits), commits

    resumed = Consumer(config)
    try:
        committed = resumed.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 70
        resumed.subscribe([topic])
        first = eventually(
            "a record after the committed offset",
            lambda: (m := resumed.poll(1.0)) is not None and m.error() is None and m.offset(),
        )
        assert first == 70
    finally:
        resumed.close()
    assert coordinator_of(quorum, group) == successor
    quorum.start_node(coordinator)
    eventually("the coordinator's node back in sync", lambda: in_sync(client, topic))
    assert leader_of(client, topic) in (1, 2, 3)

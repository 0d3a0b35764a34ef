"""A partition reassignment end to end: three ``odradek serve`` processes (KIP-455).

A topic's partition lives on brokers [1, 2] (leader 1) and holds records; a
confluent-kafka idempotent producer with acks=all keeps writing throughout.
``odradek reassign-partitions --execute`` moves it to [2, 3]: the controller makes the
replica set [2, 3, 1] (adding 3, removing 1), broker 3 creates the replica and its
fetcher copies the log from the leader, the leader's AlterPartition brings 3 into the
ISR, and that completes the move: replicas [2, 3], broker 1 out of the ISR and, as the
removed leader, replaced by 2 in a new leader epoch. ``--verify`` then reports the
reassignment completed; broker 3's segment files are byte-identical to broker 2's,
broker 1 has deleted its replica, and a consumer reads every acknowledged record
once, in order.

A second run shows the in-between state on real processes: with broker 3 killed, the
move to [2, 3] cannot finish, so ``--verify`` reports it still in progress (from
ListPartitionReassignments, asked by the tool and by kafka-python's admin client)
and Metadata shows the set [2, 3, 1]; ``--cancel``
reverts it to brokers 1 and 2, and broker 3, restarted, hosts nothing of it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors

from tests.support.kraft import Quorum, odradek, read_partition

TOPIC = "moving"
FIRST = 500
IN_FLIGHT = 200
PROPERTIES = {
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "300",
    "auto.leader.rebalance.enable": "false",
}

pytestmark = [pytest.mark.slow, pytest.mark.quorum(properties=PROPERTIES)]


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.2)


def value(i: int) -> bytes:
    return f"value-{i:05d}".encode() * 8


class Writer(threading.Thread):
    """acks=all idempotent production until stopped; the values acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 90000,
            }
        )
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.sent = 0
        self.halt = threading.Event()

    def _delivered(self, error: object, message: object) -> None:
        if error is not None:
            self.errors.append(str(error))
        else:
            self.acked.append(message.value())  # type: ignore[attr-defined]

    def run(self) -> None:
        while not self.halt.is_set():
            self.producer.produce(
                TOPIC, value=value(self.sent), partition=0, on_delivery=self._delivered
            )
            self.sent += 1
            self.producer.poll(0.005)
            while (
                self.sent - len(self.acked) - len(self.errors) > IN_FLIGHT
                and not self.halt.is_set()
            ):
                self.producer.poll(0.05)  # a bounded backlog, however slow the cluster is
        self.producer.flush(90)


def create(admin: AdminClient, assignment: list[int]) -> None:
    futures = admin.create_topics(
        [NewTopic(TOPIC, 1, -1, replica_assignment=[assignment])], operation_timeout=10
    )
    futures[TOPIC].result(timeout=30)


def write_plan(path: Path, replicas: list[int]) -> Path:
    path.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": replicas}]}
        )
    )
    return path


def reassign(quorum: Quorum, action: str, plan: Path) -> str:
    done = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        quorum.bootstrap,
        action,
        "--reassignment-json-file",
        str(plan),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_a_partition_moves_from_1_2_to_2_3_with_no_record_lost(
    tmp_path: Path, quorum: Quorum
) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    create(admin, [1, 2])

    writer = Writer(quorum.bootstrap)
    writer.start()
    wait_until(lambda: len(writer.acked) >= FIRST, 60, f"{FIRST} records acknowledged")

    plan = write_plan(tmp_path / "plan.json", [2, 3])
    out = reassign(quorum, "--execute", plan)
    assert json.loads(out.splitlines()[2])["partitions"][0]["replicas"] == [1, 2]
    assert out.splitlines()[-1] == f"Successfully started partition reassignment for {TOPIC}-0"

    def completed() -> bool:
        return f"Reassignment of partition {TOPIC}-0 is completed." in reassign(
            quorum, "--verify", plan
        )

    wait_until(completed, 90, "the reassignment completed")
    # the producer goes on against the new leader before it stops
    after = len(writer.acked)
    wait_until(lambda: len(writer.acked) >= after + 200, 60, "records after the move")
    writer.halt.set()
    writer.join(120)
    assert not writer.is_alive() and writer.errors == []

    metadata = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
    assert sorted(metadata.replicas) == [2, 3] and sorted(metadata.isrs) == [2, 3]
    assert metadata.leader == 2

    def copied() -> bool:
        files = quorum.segment_files(2, f"{TOPIC}-0")
        return bool(files) and quorum.segment_files(3, f"{TOPIC}-0") == files

    wait_until(copied, 60, "broker 3's segment files equal broker 2's")
    wait_until(
        lambda: not (quorum.data_dir(1) / f"{TOPIC}-0").exists(), 30, "broker 1's replica gone"
    )

    values = read_partition(quorum.bootstrap, TOPIC, len(writer.acked), "reassignment-check")
    # every acknowledged record once, in the order produced (nothing lost or doubled)
    assert values == writer.acked
    assert values == [value(i) for i in range(len(values))]
    for node in (1, 2, 3):
        assert "Traceback" not in quorum.nodes[node].log(), quorum.nodes[node].log()


def test_a_move_to_a_dead_broker_stays_in_progress_until_cancelled(
    tmp_path: Path, quorum: Quorum
) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    create(admin, [1, 2])
    quorum.kill(3)
    # fenced once its session expires: out of Metadata, so no client is sent to it
    # (its registration stays, so it may still be a reassignment's target)
    wait_until(lambda: 3 not in admin.list_topics(timeout=10).brokers, 60, "broker 3 fenced")
    live = ",".join(quorum.broker_address(n) for n in (1, 2))
    plan = write_plan(tmp_path / "plan.json", [2, 3])
    out = reassign(quorum, "--execute", plan)
    assert out.splitlines()[-1] == f"Successfully started partition reassignment for {TOPIC}-0"
    verified = reassign(quorum, "--verify", plan)
    assert f"Reassignment of partition {TOPIC}-0 is still in progress." in verified
    assert "throttles" not in verified  # said only once everything is done
    state = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
    assert list(state.replicas) == [2, 3, 1] and 3 not in state.isrs and state.leader == 1
    # kafka-python's admin client sees the same, and gets Kafka's error for a bad target
    client = KafkaAdminClient(bootstrap_servers=live, request_timeout_ms=30000)
    try:
        tp = KafkaTopicPartition(TOPIC, 0)
        assert client.list_partition_reassignments() == {
            tp: {"replicas": [2, 3, 1], "adding_replicas": [3], "removing_replicas": [1]}
        }
        assert client.alter_partition_reassignments({tp: [2, 99]}) == {
            tp: kafka_errors.InvalidReplicationAssignmentError
        }
        assert client.list_partition_reassignments([KafkaTopicPartition("nope", 0)]) == {}
    finally:
        client.close()
    # another --execute is refused while this one runs, unless --additional
    refused = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        quorum.bootstrap,
        "--execute",
        "--reassignment-json-file",
        str(plan),
    )
    assert refused.returncode == 1 and "--additional" in refused.stderr

    out = reassign(quorum, "--cancel", plan)
    assert out.splitlines() == [
        f"Successfully cancelled partition reassignment for {TOPIC}-0",
        "Clearing broker-level throttles on brokers 1,2",  # the brokers Metadata lists
        f"Clearing topic-level throttles on topic {TOPIC}",
    ]
    assert reassign(quorum, "--verify", plan).splitlines() == [
        "Status of partition reassignment:",
        f"There is no active reassignment of partition {TOPIC}-0, but replica set is 2,1 "
        "rather than 2,3.",
    ]
    state = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
    assert sorted(state.replicas) == [1, 2] and state.leader == 1

    quorum.start_node(3)
    time.sleep(1)  # a metadata round: it would have created an assigned replica by now
    assert not (quorum.data_dir(3) / f"{TOPIC}-0").exists()
    for node in (1, 2, 3):
        assert "Traceback" not in quorum.nodes[node].log(), quorum.nodes[node].log()

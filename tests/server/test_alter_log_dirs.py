"""AlterReplicaLogDirs (KIP-113) against a real ``odradek serve`` with two log dirs.

kafka-python's ``KafkaAdminClient.alter_replica_log_dirs`` moves a partition to the
other dir while a confluent-kafka idempotent producer keeps writing and a consumer
reads: nothing acknowledged is lost or duplicated, DescribeLogDirs shows the future
replica (``is_future_key``) while the copy runs, and the files end up in the new dir.
A broker killed (-9) in the middle of a copy resumes it after the restart and
finishes. The copy is throttled (replica.alter.log.dirs.io.max.bytes.per.second) so
that there is a middle to be in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from odradek.client._core.connection import request_module
from odradek.protocol.build import make
from odradek.server.handlers.replica_log_dirs import ALTER_REPLICA_LOG_DIRS_KEY
from tests.support.broker import BrokerProcess, two_dir_broker
from tests.support.wire import WireClient
from tests.support.wire import create_topic as create_topic_wire

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")

TOPIC = "moving"
VALUE_PAD = b"x" * 1000
DEADLINE_S = 90.0


@contextmanager
def running(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    broker.start()
    try:
        yield broker
    finally:
        try:
            broker.stop()
        except Exception:
            broker.kill()


def admin(broker: BrokerProcess) -> Any:
    return kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)


def where(client: Any) -> dict[str, tuple[int, bool]]:
    """log dir -> (size, is future) of the partition, from DescribeLogDirs."""
    found = {}
    for broker in client.describe_log_dirs({TOPIC: [0]}):
        for result in broker["log_dirs"]:
            for topic in result["topics"]:
                for p in topic["partitions"]:
                    found[result["log_dir"] + ("#future" if p["is_future_key"] else "")] = (
                        p["partition_size"],
                        p["is_future_key"],
                    )
    return found


def produce(bootstrap: str, first: int, count: int) -> list[int]:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    acked: list[int] = []

    def done(error: Any, message: Any) -> None:
        if error is None:
            acked.append(int(message.key()))

    for n in range(first, first + count):
        producer.produce(TOPIC, key=str(n).encode(), value=VALUE_PAD, on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0
    return acked


def consume_all(bootstrap: str, expected: int) -> list[int]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    seen: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(int(message.key()))
    finally:
        consumer.close()
    return seen


def create_topic(bootstrap: str) -> None:
    client = confluent_admin.AdminClient({"bootstrap.servers": bootstrap})
    futures = client.create_topics(
        [confluent_admin.NewTopic(TOPIC, 1, 1, config={"segment.bytes": "1048576"})]
    )
    futures[TOPIC].result(30)


def wait_until(what: str, check: Any, timeout_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def dir_of(root: Path) -> Path:
    (found,) = [d for d in (root / "d1", root / "d2") if (d / f"{TOPIC}-0").is_dir()]
    return found


def test_move_under_load_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    broker = two_dir_broker(
        tmp_path,
        "replica.alter.log.dirs.io.max.bytes.per.second=2000000",
        "replication.quota.window.num=2",
    )
    with running(broker):
        create_topic(broker.bootstrap)
        acked = produce(broker.bootstrap, 0, 4_000)  # ~4 MB in 1 MB segments
        source = dir_of(tmp_path)
        target = tmp_path / ("d2" if source.name == "d1" else "d1")
        client = admin(broker)
        moved_to: list[str] = []
        stop = threading.Event()
        more: list[int] = []
        consumed: list[int] = []

        def keep_producing() -> None:
            first = 4_000
            while not stop.is_set():
                more.extend(produce(broker.bootstrap, first, 200))
                first += 200

        def keep_consuming() -> None:
            consumer = confluent_kafka.Consumer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "group.id": "reader",
                    "auto.offset.reset": "earliest",
                }
            )
            consumer.subscribe([TOPIC])
            # until the producer is done and everything it wrote has been read
            while not produced.is_set() or len(consumed) < len(acked) + len(more):
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    consumed.append(int(message.key()))
                if produced.is_set() and time.monotonic() > drain_deadline[0]:
                    break
            consumer.close()

        drain_deadline = [float("inf")]
        produced = threading.Event()  # set once the producer thread has returned
        producing = threading.Thread(target=keep_producing)
        consuming = threading.Thread(target=keep_consuming)
        producing.start()
        consuming.start()
        try:
            tpr = kafka.TopicPartitionReplica(TOPIC, 0, 1)
            errors = client.alter_replica_log_dirs({tpr: str(target)})
            assert errors == {tpr: kafka.errors.NoError}
            seen_future = wait_until(
                "the future replica in DescribeLogDirs",
                lambda: [k for k, (_, future) in where(client).items() if future],
            )
            assert seen_future == [f"{target}#future"]
            wait_until(
                "the move",
                lambda: list(where(client)) == [str(target)] and dir_of(tmp_path) == target,
            )
            moved_to.append(str(target))
            time.sleep(1)  # writes after the swap too
        finally:
            stop.set()
            producing.join(60)
            drain_deadline[0] = time.monotonic() + 30
            produced.set()
            consuming.join(60)
        client.close()
        assert more, "the producer wrote nothing during the move"
        everything = acked + more
        assert sorted(consumed) == sorted(set(consumed)), "duplicates"
        assert set(everything) <= set(consumed), f"lost {len(set(everything) - set(consumed))}"
        assert consume_all(broker.bootstrap, len(everything)) == sorted(everything)
        assert list((target / f"{TOPIC}-0").glob("*.log"))
        assert not (source / f"{TOPIC}-0").exists()


def test_a_broker_killed_in_the_middle_of_a_copy_finishes_it_after_restart(
    tmp_path: Path,
) -> None:
    broker = two_dir_broker(
        tmp_path,
        "replica.alter.log.dirs.io.max.bytes.per.second=400000",
        "replication.quota.window.num=2",
    )
    with running(broker):
        create_topic(broker.bootstrap)
        acked = produce(broker.bootstrap, 0, 4_000)
        source = dir_of(tmp_path)
        target = tmp_path / ("d2" if source.name == "d1" else "d1")
        client = admin(broker)
        tpr = kafka.TopicPartitionReplica(TOPIC, 0, 1)
        assert client.alter_replica_log_dirs({tpr: str(target)}) == {tpr: kafka.errors.NoError}
        # part-way: the future replica holds some, not all
        wait_until(
            "a partial copy",
            lambda: 500_000 < where(client).get(f"{target}#future", (0, True))[0] < 3_000_000,
        )
        client.close()
        broker.kill()
        assert [p.name for p in target.iterdir() if p.name.endswith("-future")]
        broker.start()
        client = admin(broker)
        wait_until(
            "the resumed move",
            lambda: list(where(client)) == [str(target)] and dir_of(tmp_path) == target,
        )
        client.close()
        assert consume_all(broker.bootstrap, len(acked)) == sorted(acked)
        assert not [p for p in target.iterdir() if p.name.endswith("-future")]
        assert not (source / f"{TOPIC}-0").exists()


@pytest.mark.parametrize("version", [1, 2])
def test_answers_per_partition_at_every_version(tmp_path: Path, version: int) -> None:
    """LOG_DIR_NOT_FOUND for a path that is not a log dir (or not absolute), NONE for
    the dir the replica is in, REPLICA_NOT_AVAILABLE for one not hosted here."""
    module = request_module(ALTER_REPLICA_LOG_DIRS_KEY, version)
    broker = two_dir_broker(tmp_path)
    with running(broker), WireClient(broker.bootstrap) as client:
        create_topic_wire(client, "here")
        here = dir_of_topic(tmp_path, "here-0")

        def ask(path: str, topic: str) -> int:
            request = make(
                module.AlterReplicaLogDirsRequest,
                dirs=(
                    make(
                        module.AlterReplicaLogDir,
                        path=path,
                        topics=(make(module.AlterReplicaLogDirTopic, name=topic, partitions=(0,)),),
                    ),
                ),
            )
            ((result,),) = [t.partitions for t in client.request(request).results]
            assert result.partition_index == 0
            return int(result.error_code)

        assert ask(str(tmp_path / "elsewhere"), "here") == 57  # LOG_DIR_NOT_FOUND
        assert ask("d1", "here") == 57
        assert ask(str(here), "here") == 0
        assert ask(str(here) + "/", "here") == 0
        assert ask(str(here), "absent") == 9  # REPLICA_NOT_AVAILABLE


def dir_of_topic(root: Path, name: str) -> Path:
    (found,) = [d for d in (root / "d1", root / "d2") if (d / name).is_dir()]
    return found

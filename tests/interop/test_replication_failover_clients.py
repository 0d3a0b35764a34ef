"""kafka-python, aiokafka and kcat through a leader failover on three ``odradek serve``s.

Each client, on its own topic (RF=3, one partition) of one three-node cluster from the
example property files (tests/interop/cluster_support.py): a consumer of the client's
own kind starts reading, the producer streams acks=all records, the partition's
leader is killed with SIGKILL in the middle of the stream, and both go on through the
failover (the client's own metadata refresh and retries, nothing done for it). Every
record the producer had acknowledged must then reach the consumer that was reading
across the kill. kafka-python's producer is not idempotent here, so a retried batch
may be written twice: only acknowledged-and-read is checked for it; aiokafka and kcat
run idempotent producers and must read each record exactly once. The killed node is
restarted and back in the ISR before the next client's turn. Every process is stopped
by pid.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from tests.interop.cluster_support import (
    WAIT_S,
    admin,
    cluster,
    create_topic,
    leader_of,
    revive,
    wait_in_sync,
    wait_new_leader,
)
from tests.support.kraft import Quorum

pytestmark = pytest.mark.slow
RECORDS = 300
KILL_AT = 120
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    running = cluster(tmp_path_factory.mktemp("failover-clients")).start()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def topic(quorum: Quorum, request: pytest.FixtureRequest) -> Iterator[str]:
    revive(quorum)
    name = request.node.name.removeprefix("test_").replace("_", "-")
    client = admin(quorum)
    create_topic(client, name, replication_factor=3)
    wait_in_sync(client, name)
    yield name
    revive(quorum)
    wait_in_sync(client, name)


def kill_leader(quorum: Quorum, topic: str) -> int:
    client = admin(quorum)
    victim = leader_of(client, topic)
    quorum.kill(victim)
    return victim


def value(i: int) -> bytes:
    return b"record-%05d" % i


def test_kafka_python_through_failover(quorum: Quorum, topic: str) -> None:
    servers = quorum.bootstrap.split(",")
    consumer = KafkaConsumer(
        bootstrap_servers=servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=10_000,
        metadata_max_age_ms=1000,
    )
    partition = KafkaTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    producer = KafkaProducer(
        bootstrap_servers=servers,
        acks="all",
        retries=100,
        retry_backoff_ms=300,
        request_timeout_ms=10_000,
        metadata_max_age_ms=1000,
        linger_ms=5,
    )
    acked: set[bytes] = set()
    failed: list[str] = []
    read: list[bytes] = []

    def consume(until: set[bytes], timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not until <= set(read) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                read.extend(r.value for r in records)

    try:
        victim = -1
        for i in range(RECORDS):
            record = value(i)
            future = producer.send(topic, value=record, partition=0)
            future.add_callback(lambda _meta, v=record: acked.add(v))
            future.add_errback(lambda error: failed.append(repr(error)))
            if i == KILL_AT:
                producer.flush(30)
                consume(set(acked))
                victim = kill_leader(quorum, topic)
            time.sleep(0.005)
        producer.flush(120)
        wait_new_leader(admin(quorum), topic, victim)
        consume(acked)
    finally:
        producer.close(timeout=10)
        consumer.close()
    assert len(acked) > KILL_AT, f"too few acknowledged after the kill: {failed[:5]}"
    missing = acked - set(read)
    assert not missing, f"{len(missing)} acknowledged records not read: {sorted(missing)[:5]}"
    print(f"kafka-python: {len(acked)} acked, {len(failed)} failed, {len(read)} read")


def test_aiokafka_through_failover(quorum: Quorum, topic: str) -> None:
    async def run() -> tuple[set[bytes], list[bytes], list[str]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=quorum.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=1000,
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=quorum.bootstrap,
            acks="all",
            enable_idempotence=True,
            request_timeout_ms=60_000,
            metadata_max_age_ms=1000,
            linger_ms=5,
        )
        acked: set[bytes] = set()
        failed: list[str] = []
        read: list[bytes] = []

        async def consume(until: set[bytes]) -> None:
            deadline = time.monotonic() + WAIT_S
            while not until <= set(read) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    read.extend(r.value for r in records if r.value is not None)

        async def delivered(i: int, delivery: asyncio.Future[object]) -> None:
            try:
                await delivery
                acked.add(value(i))
            except Exception as error:
                failed.append(repr(error))

        await consumer.start()
        await producer.start()
        try:
            partition = AioTopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            sends = []
            for i in range(RECORDS):
                # enqueued in order here (the producer's batches keep it); delivery awaited apart
                delivery = await producer.send(topic, value=value(i), partition=0)
                sends.append(asyncio.create_task(delivered(i, delivery)))
                if i == KILL_AT:
                    await asyncio.gather(*sends)
                    await consume(set(acked))
                    await asyncio.to_thread(kill_leader, quorum, topic)
                await asyncio.sleep(0.005)
            await asyncio.gather(*sends)
            await consume(acked)
        finally:
            await producer.stop()
            await consumer.stop()
        return acked, read, failed

    acked, read, failed = asyncio.run(run())
    assert failed == []
    assert len(acked) == RECORDS
    assert sorted(read) == sorted(acked), "lost or duplicated"
    assert read == [value(i) for i in range(RECORDS)]  # one partition: in order


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_through_failover(quorum: Quorum, topic: str, tmp_path: Path) -> None:
    assert KCAT is not None
    common = [KCAT, "-b", quorum.bootstrap, "-t", topic, "-X", "metadata.max.age.ms=1000"]
    consumer = subprocess.Popen(
        [*common, "-C", "-u", "-p", "0", "-o", "beginning", "-q", "-f", "%o:%s\\n"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    lines: list[str] = []

    def collect() -> None:
        assert consumer.stdout is not None
        for line in consumer.stdout:
            lines.append(line.decode().rstrip("\n"))

    reader = threading.Thread(target=collect, name="kcat-consumer")
    reader.start()
    stderr_file = tmp_path / "kcat-producer.err"
    producer = subprocess.Popen(
        [
            *common,
            "-P",
            "-p",
            "0",
            "-X",
            "acks=all",
            "-X",
            "enable.idempotence=true",
            "-X",
            "message.timeout.ms=90000",
        ],
        stdin=subprocess.PIPE,
        stderr=stderr_file.open("wb"),
    )
    try:
        assert producer.stdin is not None
        for i in range(RECORDS):
            producer.stdin.write(value(i) + b"\n")
            producer.stdin.flush()
            if i == KILL_AT:
                # kcat reads its stdin in blocks: not all lines written are sent yet,
                # so wait for part of them to be read, then kill with the rest to come
                deadline = time.monotonic() + WAIT_S
                while len(lines) < KILL_AT // 2 and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert len(lines) >= KILL_AT // 2, "kcat's records not read before the kill"
                kill_leader(quorum, topic)
            time.sleep(0.005)
        producer.stdin.close()
        returncode = producer.wait(timeout=120)
        errors = stderr_file.read_text(errors="replace")
        assert returncode == 0, errors
        assert "delivery failed" not in errors.lower(), errors  # (connection errors are expected)
        deadline = time.monotonic() + WAIT_S
        while len(lines) < RECORDS and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        consumer.terminate()
        consumer.wait(10)
        reader.join(10)
    offsets = [int(line.split(":", 1)[0]) for line in lines]
    values = [line.split(":", 1)[1].encode() for line in lines]
    assert values == [value(i) for i in range(RECORDS)]  # each once, in order
    assert offsets == list(range(RECORDS))

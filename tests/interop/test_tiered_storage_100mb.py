"""Tiered storage at the size the issue names, on both backends: 100 MB through a real
``odradek serve`` whose remote storage — a directory, or a local S3 server (moto) —
goes away for a while in the middle (the directory moved away; the server paused, so
its requests hang and time out): produce never fails, nothing is lost, the local
disk ends up holding only the tail, and confluent-kafka reads every record from
offset 0 byte for byte, before and after a broker restart."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.broker import running_broker  # noqa: E402
from tests.support.s3server import S3Server  # noqa: E402

TOPIC = "tiered-s3"
COUNT = 100_000  # 1000-byte values: 100 MB
SEGMENT_BYTES = 8 * 1024 * 1024
LOCAL_RETENTION_BYTES = 16 * 1024 * 1024
# Longer than the backend's request timeout and retry (tests/support/s3server.py): the
# copy task fails, backs off and tries again.
OUTAGE_S = 15.0


def value_of(index: int) -> bytes:
    return (hashlib.sha256(b"%d" % index).digest() * 32)[:1000]


def local_bytes(partition_dir: Path) -> int:
    return sum(path.stat().st_size for path in partition_dir.glob("*.log"))


class Outage:
    """Remote storage made unavailable and back: the S3 server paused (SIGSTOP: its
    requests hang until they time out), or the filesystem backend's directory moved
    away with a file in its place (its copies fail at once)."""

    def __init__(self, backend: str, server: S3Server | None, directory: Path) -> None:
        self.backend, self.server, self.directory = backend, server, directory

    def begin(self) -> None:
        if self.server is not None:
            assert self.server.process is not None
            os.kill(self.server.process.pid, signal.SIGSTOP)
        else:  # a file where the directory was: nothing can be created under it
            self.directory.rename(self.directory.with_name("remote-away"))
            self.directory.write_bytes(b"")

    def end(self) -> None:
        if self.server is not None:
            assert self.server.process is not None
            os.kill(self.server.process.pid, signal.SIGCONT)
        else:
            self.directory.unlink()
            self.directory.with_name("remote-away").rename(self.directory)


@pytest.fixture(params=["filesystem", "s3"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, Outage, dict[str, str]]]:
    if request.param == "s3":
        server = S3Server(tmp_path / "moto_server.log").start()
        try:
            props = {"remote.log.storage.manager.class.name": "s3", **server.rsm_config()}
            yield "s3", Outage("s3", server, tmp_path), props
        finally:
            server.stop()
    else:
        directory = tmp_path / "remote"
        directory.mkdir()
        props = {"rsm.config.dir": str(directory), "rsm.config.fsync": "false"}
        yield "filesystem", Outage("filesystem", None, directory), props


def test_100_mb_with_an_outage_then_read_back_from_offset_0(
    tmp_path: Path, backend: tuple[str, Outage, dict[str, str]]
) -> None:
    _, outage, backend_props = backend
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "300",
        "log.retention.check.interval.ms": "300",
        **backend_props,
    }
    args = [f"--override={key}={value}" for key, value in props.items()]
    with running_broker(tmp_path / "data", args) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
            "file.delete.delay.ms": "0",
        }
        admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)])[TOPIC].result(30)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"}
        )
        down = False
        for index in range(COUNT):
            producer.produce(TOPIC, value_of(index), b"%d" % index, partition=0)
            producer.poll(0)
            if index == COUNT // 3:
                producer.flush(60)
                outage.begin()  # remote storage down
                down = True
                down_since = time.monotonic()
            if down and time.monotonic() - down_since > OUTAGE_S:
                outage.end()
                down = False
        if down:
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_since)))
            outage.end()
        assert producer.flush(60) == 0, "produce must not fail while remote storage is down"

        partition_dir = tmp_path / "data" / f"{TOPIC}-0"
        deadline = time.monotonic() + 180
        while local_bytes(partition_dir) > LOCAL_RETENTION_BYTES + 2 * SEGMENT_BYTES:
            assert time.monotonic() < deadline, (
                f"local log still {local_bytes(partition_dir)} bytes; broker log:\n"
                + broker.log()[-3000:]
            )
            time.sleep(0.5)
        assert not (partition_dir / f"{0:020d}.log").exists()
        assert "remote log task failed" in broker.log(), "the outage was never noticed"
        check_every_record(broker.bootstrap)
        assert broker.stop() == 0
        broker.start()
        check_every_record(broker.bootstrap)


def check_every_record(bootstrap: str) -> None:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiered-s3-reader",
            "enable.auto.commit": False,
            "fetch.max.bytes": 8 * 1024 * 1024,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, 0), 30)
        assert (low, high) == (0, COUNT)
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        expected = 0
        deadline = time.monotonic() + 180
        while expected < COUNT:
            assert time.monotonic() < deadline, f"read only {expected} of {COUNT} records"
            for message in consumer.consume(1000, 1.0):
                assert message.error() is None, message.error()
                assert message.offset() == expected
                assert message.key() == b"%d" % expected
                assert message.value() == value_of(expected), f"record {expected} differs"
                expected += 1
    finally:
        consumer.close()

"""The client tools (``odradek topics|produce|consume|groups|configs|perf``) end to end.

Each test runs ``python -m odradek ...`` as a subprocess against one real broker per
module and checks the data with confluent-kafka (nobody here wrote it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.broker import BrokerProcess


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("tools") / "data").start()
    try:
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def odradek(
    broker: BrokerProcess | None, *args: str, stdin: bytes = b"", check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "odradek", *args]
    if broker is not None:
        command += ["-b", broker.bootstrap]
    done = subprocess.run(command, input=stdin, capture_output=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr
    return done


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(kafka: BrokerProcess, topic: str, partitions: int = 1) -> None:
    odradek(kafka, "topics", "create", topic, "--partitions", str(partitions))


def group_consumer(kafka: BrokerProcess, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def test_topics_create_list_describe_delete(kafka: BrokerProcess) -> None:
    topic = name("tt")
    out = odradek(kafka, "topics", "create", topic, "-p", "3", "-c", "retention.ms=12345")
    assert f"Created topic {topic}" in out.stdout.decode()
    assert topic in odradek(kafka, "topics", "list").stdout.decode().split()
    listed = json.loads(odradek(kafka, "topics", "list", "--output", "json").stdout)
    assert {"topic": topic, "partitions": 3, "internal": False} in listed

    described = json.loads(
        odradek(kafka, "topics", "describe", topic, "--configs", "-o", "json").stdout
    )
    assert [p["partition"] for p in described[0]["partitions"]] == [0, 1, 2]
    assert described[0]["partitions"][0]["latest"] == 0
    assert described[0]["configs"]["retention.ms"] == "12345"
    table = odradek(kafka, "topics", "describe", topic).stdout.decode()
    assert "PartitionCount: 3" in table and "LEADER" in table

    odradek(kafka, "topics", "alter", topic, "--partitions", "5")
    described = json.loads(odradek(kafka, "topics", "describe", topic, "-o", "json").stdout)
    assert len(described[0]["partitions"]) == 5

    again = odradek(kafka, "topics", "create", topic, check=False)
    assert again.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in again.stderr.decode()
    assert len(again.stderr.decode().strip().splitlines()) == 1
    odradek(kafka, "topics", "create", topic, "--if-not-exists")

    odradek(kafka, "topics", "delete", topic)
    assert topic not in odradek(kafka, "topics", "list").stdout.decode().split()


def test_produce_lines_with_keys_and_headers(kafka: BrokerProcess) -> None:
    topic = name("tp")
    create(kafka, topic)
    lines = [b"k1|hello", b"k2|w\xc3\xb6rld | with | bars", b"|empty key", b"k4|"]
    odradek(
        kafka,
        "produce",
        topic,
        "--key-separator",
        "|",
        "--headers",
        "h1=a,h2=b",
        "--compression",
        "gzip",
        "--acks",
        "1",
        stdin=b"\n".join(lines) + b"\n",
    )
    consumer = group_consumer(kafka, name("reader"))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < len(lines) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message)
    finally:
        consumer.close()
    assert [(m.key(), m.value()) for m in got] == [tuple(line.split(b"|", 1)) for line in lines]
    assert got[0].headers() == [("h1", b"a"), ("h2", b"b")]


def test_produce_line_without_separator_fails_in_one_line(kafka: BrokerProcess) -> None:
    topic = name("tp")
    create(kafka, topic)
    done = odradek(kafka, "produce", topic, "-K", ":", stdin=b"nokey\n", check=False)
    assert done.returncode == 1
    assert done.stderr.decode().strip().count("\n") == 0
    assert "key separator" in done.stderr.decode()


def test_consume_what_confluent_produced(kafka: BrokerProcess) -> None:
    topic = name("tc")
    create(kafka, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(6):
        producer.produce(
            topic,
            value=f"value-{i}".encode(),
            key=f"key-{i}".encode(),
            partition=i % 2,
            headers=[("n", str(i).encode())],
        )
    assert producer.flush(20) == 0

    out = odradek(
        kafka, "consume", topic, "--from-beginning", "--max-messages", "6", "--print-key"
    ).stdout
    lines = sorted(out.decode().splitlines())
    assert lines == [f"key-{i}\tvalue-{i}" for i in range(6)]

    out = odradek(
        kafka,
        "consume",
        topic,
        "--partition",
        "1",
        "--offset",
        "1",
        "--max-messages",
        "2",
        "--format",
        "json",
    ).stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["partition"], r["offset"], r["value"]) for r in records] == [
        (1, 1, "value-3"),
        (1, 2, "value-5"),
    ]
    assert records[0]["headers"] == {"n": "3"}

    out = odradek(
        kafka,
        "consume",
        topic,
        "--partition",
        "0",
        "--from-beginning",
        "-n",
        "1",
        "--print-headers",
        "--print-timestamp",
    ).stdout.decode()
    assert out.startswith("CreateTime:") and "\tn:0\tvalue-0" in out


def _commit_through_group(kafka: BrokerProcess, topic: str, group: str, count: int) -> None:
    """A confluent group consumer reads ``count`` records and commits them, then leaves."""
    consumer = group_consumer(kafka, group)
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
                consumer.commit(message=message, asynchronous=False)
        assert seen == count
    finally:
        consumer.close()


def test_groups_describe_shows_lag_and_reset_offsets(kafka: BrokerProcess) -> None:
    topic, group = name("tg"), name("group")
    create(kafka, topic)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), partition=0)
    assert producer.flush(20) == 0
    _commit_through_group(kafka, topic, group, 4)

    listed = json.loads(odradek(kafka, "groups", "list", "-o", "json").stdout)
    assert group in [g["group"] for g in listed]
    described = json.loads(odradek(kafka, "groups", "describe", group, "-o", "json").stdout)
    (row,) = described[0]["partitions"]
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (4, 10, 6)
    table = odradek(kafka, "groups", "describe", group).stdout.decode()
    assert "LAG" in table and " 6 " in table

    dry = json.loads(
        odradek(
            kafka,
            "groups",
            "reset-offsets",
            group,
            "--topic",
            topic,
            "--shift-by",
            "-3",
            "-o",
            "json",
        ).stdout
    )
    assert dry[0]["new_offset"] == 1
    checker = group_consumer(kafka, group)
    try:
        assert checker.committed([TopicPartition(topic, 0)], 10)[0].offset == 4
        odradek(
            kafka,
            "groups",
            "reset-offsets",
            group,
            "--topic",
            f"{topic}:0",
            "--to-offset",
            "7",
            "--execute",
        )
        assert checker.committed([TopicPartition(topic, 0)], 10)[0].offset == 7
        odradek(
            kafka, "groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute"
        )
        assert checker.committed([TopicPartition(topic, 0)], 10)[0].offset == 0
        odradek(
            kafka,
            "groups",
            "reset-offsets",
            group,
            "--topic",
            topic,
            "--to-datetime",
            "2000-01-01T00:00:00",
            "--execute",
        )
        assert checker.committed([TopicPartition(topic, 0)], 10)[0].offset == 0
    finally:
        checker.close()

    odradek(kafka, "groups", "delete", group)
    gone = odradek(kafka, "groups", "describe", group, check=False)
    assert gone.returncode == 1


def test_configs_alter_and_describe(kafka: BrokerProcess) -> None:
    topic = name("tcfg")
    create(kafka, topic)
    odradek(
        kafka,
        "configs",
        "alter",
        topic,
        "--set",
        "cleanup.policy=compact",
        "--set",
        "retention.ms=5000",
    )
    rows = json.loads(odradek(kafka, "configs", "describe", topic, "-o", "json").stdout)
    values = {r["name"]: r["value"] for r in rows}
    assert values == {"cleanup.policy": "compact", "retention.ms": "5000"}
    odradek(kafka, "configs", "alter", topic, "--delete", "retention.ms")
    rows = json.loads(odradek(kafka, "configs", "describe", topic, "--all", "-o", "json").stdout)
    retention = next(r for r in rows if r["name"] == "retention.ms")
    assert retention["default"] and retention["value"] == "604800000"
    table = odradek(kafka, "configs", "describe", topic).stdout.decode()
    assert "cleanup.policy" in table and "compact" in table

    bad = odradek(kafka, "configs", "alter", topic, "--set", "no.such.config=1", check=False)
    assert bad.returncode == 1 and len(bad.stderr.decode().strip().splitlines()) == 1


def test_perf_produce_and_consume(kafka: BrokerProcess) -> None:
    topic = name("tperf")
    create(kafka, topic)
    out = odradek(
        kafka, "perf", "produce", topic, "--num-records", "500", "--record-size", "64"
    ).stdout.decode()
    assert "500 records sent" in out and "records/sec" in out and "99th" in out
    summary = json.loads(
        odradek(kafka, "perf", "consume", topic, "--messages", "500", "-o", "json").stdout
    )
    assert summary["records"] == 500 and summary["mb_per_sec"] > 0


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "create"],
        ["topics", "create", "x", "--partitions", "zero"],
        ["consume", "t", "--offset", "3"],
        ["groups", "reset-offsets", "g", "--topic", "t"],
        ["produce", "t", "--acks", "2"],
    ],
)
def test_bad_arguments_exit_2_without_traceback(args: list[str]) -> None:
    done = odradek(None, *args, check=False)
    assert done.returncode == 2
    assert b"Usage:" in done.stderr or b"Error" in done.stderr


def test_unreachable_bootstrap_is_one_line_exit_1() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "topics", "list", "-b", "127.0.0.1:1"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1:1" in lines[0]


def test_help_lists_every_command() -> None:
    out = odradek(None, "--help").stdout.decode()
    for command in (
        "serve",
        "dump-log",
        "topics",
        "produce",
        "consume",
        "groups",
        "configs",
        "perf",
    ):
        assert command in out

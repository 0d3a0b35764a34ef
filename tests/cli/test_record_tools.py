"""``odradek get-offsets`` and ``odradek delete-records`` (Kafka's kafka-get-offsets.sh
and kafka-delete-records.sh) against one real broker, their output in the Kafka tools'
format, the data written and checked with confluent-kafka (nobody here wrote it)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli.get_offsets import parse_time, parse_topic_partitions, select_partitions
from tests.support.broker import BrokerProcess, running_broker

BASE_TS_MS = 1_700_000_000_000  # record i of a partition has timestamp BASE + 1000 * i


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("records") / "data") as process:
        yield process


def odradek(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "odradek", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr
    return done


def topic_with_records(kafka: BrokerProcess, counts: list[int]) -> str:
    """A topic whose partition p holds counts[p] records, with known timestamps."""
    topic = f"o-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(topic, len(counts), 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    for partition, count in enumerate(counts):
        for i in range(count):
            producer.produce(
                topic, b"v%d" % i, partition=partition, timestamp=BASE_TS_MS + 1000 * i
            )
    assert producer.flush(30) == 0
    return topic


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_time_words_and_partition_patterns_follow_kafka() -> None:
    assert [parse_time(t) for t in ("-1", "latest", "earliest", "-3", "max-timestamp")] == [
        -1,
        -1,
        -2,
        -3,
        -3,
    ]
    assert parse_time("1700000000000") == 1_700_000_000_000
    with pytest.raises(click.BadParameter):
        parse_time("yesterday")
    with pytest.raises(click.BadParameter):
        parse_time("-9")
    metadata = {"a": [0, 1, 2, 3, 4], "b": [0, 1], "__consumer_offsets": [0]}
    chosen = select_partitions(metadata, parse_topic_partitions("a:1-3,b,a:4"), False)
    assert chosen == [("a", 1), ("a", 2), ("a", 4), ("b", 0), ("b", 1)]  # upper exclusive
    assert select_partitions(metadata, parse_topic_partitions("a:3-"), False) == [
        ("a", 3),
        ("a", 4),
    ]
    assert select_partitions(metadata, parse_topic_partitions(":-1"), True) == [
        ("a", 0),
        ("b", 0),
    ]
    with pytest.raises(click.BadParameter):
        parse_topic_partitions("a:x")


def test_get_offsets_prints_topic_partition_offset_lines(kafka: BrokerProcess) -> None:
    topic = topic_with_records(kafka, [5, 0, 3])
    assert lines(odradek(kafka, "get-offsets", "--topic", topic)) == [
        f"{topic}:0:5",
        f"{topic}:1:0",
        f"{topic}:2:3",
    ]
    for time in ("-2", "earliest"):
        assert lines(odradek(kafka, "get-offsets", "--topic", topic, "--time", time)) == [
            f"{topic}:0:0",
            f"{topic}:1:0",
            f"{topic}:2:0",
        ]
    # max-timestamp: the record with the largest timestamp; an empty partition prints nothing
    assert lines(odradek(kafka, "get-offsets", "--topic", topic, "--time", "-3")) == [
        f"{topic}:0:4",
        f"{topic}:2:2",
    ]
    # a timestamp: the first offset at or after it (none after the last record)
    at = str(BASE_TS_MS + 2500)
    assert lines(odradek(kafka, "get-offsets", "--topic", topic, "--time", at)) == [f"{topic}:0:3"]
    chosen = odradek(kafka, "get-offsets", "--topic", topic, "--partitions", "0,2")
    assert lines(chosen) == [f"{topic}:0:5", f"{topic}:2:3"]
    patterned = odradek(kafka, "get-offsets", "--topic-partitions", f"{topic}:1-")
    assert lines(patterned) == [f"{topic}:1:0", f"{topic}:2:3"]
    # --topic is a regular expression matching the whole name
    regex = odradek(kafka, "get-offsets", "--topic", f"{topic[:-2]}.*", "--partitions", "1")
    assert lines(regex) == [f"{topic}:1:0"]
    everything = lines(odradek(kafka, "get-offsets"))
    assert f"{topic}:2:3" in everything


def test_get_offsets_bad_input(kafka: BrokerProcess) -> None:
    missing = odradek(kafka, "get-offsets", "--topic", "no-such-topic")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        "Error: Could not match any topic-partitions with the specified filters"
    ]
    for bad in (["--time", "soon"], ["--topic", "("], ["--partitions", "x"]):
        done = odradek(kafka, "get-offsets", *bad)
        assert done.returncode == 2 and bad[0] in done.stderr


def test_delete_records_moves_the_low_watermark(kafka: BrokerProcess, tmp_path: Path) -> None:
    topic = topic_with_records(kafka, [10, 4, 2])
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 3},
                    {"topic": topic, "partition": 1, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    assert lines(odradek(kafka, "delete-records", "--offset-json-file", str(plan))) == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 3",
        f"partition: {topic}-1\tlow_watermark: 4",
    ]
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused"})
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), 30) for p in range(3)]
    finally:
        consumer.close()
    assert marks == [(3, 10), (4, 4), (0, 2)]
    earliest = odradek(kafka, "get-offsets", "--topic", topic, "--time", "earliest")
    assert lines(earliest) == [f"{topic}:0:3", f"{topic}:1:4", f"{topic}:2:0"]


def test_delete_records_reports_each_partition_error(kafka: BrokerProcess, tmp_path: Path) -> None:
    topic = topic_with_records(kafka, [2])
    plan = tmp_path / "plan.json"
    entries = [
        {"topic": topic, "partition": 0, "offset": 1},
        {"topic": topic, "partition": 5, "offset": 1},
        {"topic": "no-such-topic", "partition": 0, "offset": 1},
    ]
    plan.write_text(json.dumps({"partitions": entries, "version": 1}))
    done = odradek(kafka, "delete-records", "--offset-json-file", str(plan))
    assert done.returncode == 1
    out = done.stdout.splitlines()
    assert out[2] == f"partition: {topic}-0\tlow_watermark: 1"
    assert out[3].startswith(f"partition: {topic}-5\terror: UNKNOWN_TOPIC_OR_PARTITION")
    assert out[4].startswith("partition: no-such-topic-0\terror: UNKNOWN_TOPIC_OR_PARTITION")
    assert done.stderr.strip() == "Error: 2 of 3 partitions failed"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{", "is not JSON"),
        ('{"partitions": {}}', "expected"),
        ('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}', "partition must"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}', "offset must"),
        ('{"partitions": [], "version": 1}', "no partitions"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2}', "version"),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
            ' {"topic": "t", "partition": 0, "offset": 2}]}',
            "duplicate topic partitions: t-0",
        ),
    ],
)
def test_delete_records_refuses_a_bad_file_in_one_line(
    kafka: BrokerProcess, tmp_path: Path, content: str | None, message: str
) -> None:
    plan = tmp_path / "plan.json"
    if content is not None:
        plan.write_text(content)
    done = odradek(kafka, "delete-records", "--offset-json-file", str(plan))
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr, done.stderr

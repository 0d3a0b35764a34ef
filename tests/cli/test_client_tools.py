"""The client tools (``odradek topics|produce|consume|groups|configs|perf``) end to end.

Each test runs ``python -m odradek ...`` as a subprocess against one real broker per
module and checks the data with confluent-kafka (nobody here wrote it).
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support.broker import BrokerProcess, running_broker


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("tools") / "data") as process:
        yield process


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


def test_produce_to_unreachable_bootstrap_is_one_line_exit_1_at_once() -> None:
    """The Producer starts without a broker (as confluent-kafka's); the tool checks the
    cluster first rather than holding the records until message.timeout.ms."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "produce", "t", "-b", "127.0.0.1:1"],
        input=b"x\n",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1:1" in lines[0], lines
    assert time.monotonic() - started < 20


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


def one_line_failure(done: subprocess.CompletedProcess[bytes], *expected: str) -> str:
    """``done`` failed with status 1 and a single stderr line holding ``expected``."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def their_configs(kafka: BrokerProcess, topic: str) -> dict[str, tuple[str | None, bool]]:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {n: (e.value, e.is_default) for n, e in entries.items()}


def test_topics_describe_alter_and_errors_checked_with_confluent(kafka: BrokerProcess) -> None:
    topic = name("td")
    create(kafka, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(3):
        producer.produce(topic, value=b"x%d" % i, partition=1)
    assert producer.flush(20) == 0
    (entry,) = json.loads(odradek(kafka, "topics", "describe", topic, "-o", "json").stdout)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    theirs = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    their_id = theirs.topic_id
    raw = (their_id.get_most_significant_bits() % 2**64).to_bytes(8, "big") + (
        their_id.get_least_significant_bits() % 2**64
    ).to_bytes(8, "big")
    assert entry["topic_id"] == base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert entry["internal"] is False
    assert [
        (p["partition"], p["leader"], p["earliest"], p["latest"]) for p in entry["partitions"]
    ] == [
        (0, theirs.partitions[0].leader.id, 0, 0),
        (1, theirs.partitions[1].leader.id, 0, 3),
    ]

    odradek(
        kafka, "topics", "alter", topic, "-c", "retention.ms=3333", "-c", "cleanup.policy=compact"
    )
    assert their_configs(kafka, topic)["retention.ms"] == ("3333", False)
    odradek(kafka, "topics", "alter", topic, "--delete-config", "retention.ms")
    configs = their_configs(kafka, topic)
    assert configs["retention.ms"][1] and configs["cleanup.policy"] == ("compact", False)

    shrink = odradek(kafka, "topics", "alter", topic, "--partitions", "1", check=False)
    one_line_failure(shrink, "INVALID_PARTITIONS", topic)
    missing = name("missing")
    one_line_failure(
        odradek(kafka, "topics", "describe", topic, missing, check=False), "unknown topic", missing
    )
    one_line_failure(odradek(kafka, "topics", "delete", missing, check=False), "UNKNOWN_TOPIC")
    odradek(kafka, "topics", "delete", missing, "--if-exists")
    one_line_failure(odradek(kafka, "consume", missing, "-n", "1", check=False), missing)
    one_line_failure(
        odradek(kafka, "configs", "describe", missing, check=False), "UNKNOWN_TOPIC_OR_PARTITION"
    )
    # Asking about a missing topic never creates it.
    assert missing not in admin.list_topics(timeout=10).topics


def test_topics_list_marks_internal_topics(kafka: BrokerProcess) -> None:
    topic, group = name("ti"), name("gi")
    create(kafka, topic)
    consumer = group_consumer(kafka, group)
    try:  # a commit makes the broker create __consumer_offsets
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    listed = json.loads(odradek(kafka, "topics", "list", "--internal", "-o", "json").stdout)
    internal = {row["topic"] for row in listed if row["internal"]}
    assert "__consumer_offsets" in internal and topic not in internal
    plain = odradek(kafka, "topics", "list").stdout.decode().split()
    assert topic in plain and "__consumer_offsets" not in plain


def test_groups_describe_active_group_shows_members_and_assignments(
    kafka: BrokerProcess,
) -> None:
    topic, group = name("ta"), name("active")
    create(kafka, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(20) == 0
    consumer = group_consumer(kafka, group, **{"client.id": "cli-test-client"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        member_id = consumer.memberid()

        (entry,) = json.loads(odradek(kafka, "groups", "describe", group, "-o", "json").stdout)
        assert entry["state"] == "Stable" and entry["assignor"] == "range"
        (member,) = entry["members"]
        assert member["member_id"] == member_id and member["client_id"] == "cli-test-client"
        assert member["partitions"] == [f"{topic}-0", f"{topic}-1"]
        rows = {row["partition"]: row for row in entry["partitions"]}
        assert (rows[0]["current_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (2, 5, 3)
        assert (rows[1]["current_offset"], rows[1]["lag"]) == (None, None)
        assert {row["consumer_id"] for row in rows.values()} == {member_id}
        table = odradek(kafka, "groups", "describe", group, "--members").stdout.decode()
        assert "cli-test-client" in table and f"{topic}-1" in table
        listed = json.loads(odradek(kafka, "groups", "list", "-o", "json").stdout)
        assert {"group": group, "state": "Stable", "type": "Classic", "simple": False} in listed

        refused = odradek(
            kafka,
            "groups",
            "reset-offsets",
            group,
            "--all-topics",
            "--to-earliest",
            "--execute",
            check=False,
        )
        one_line_failure(refused, "Stable", "stop its consumers")
        one_line_failure(odradek(kafka, "groups", "delete", group, check=False), "active members")
    finally:
        consumer.close()
    missing = name("nogroup")
    one_line_failure(odradek(kafka, "groups", "describe", missing, check=False), "does not exist")
    one_line_failure(odradek(kafka, "groups", "delete", missing, check=False), "does not exist")


def test_reset_offsets_every_mode_checked_with_confluent(kafka: BrokerProcess) -> None:
    first, second, group = name("tr"), name("tr"), name("reset")
    create(kafka, first)
    create(kafka, second)
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(10):
        producer.produce(first, value=b"%d" % i, partition=0, timestamp=base + i * 1000)
        producer.produce(second, value=b"%d" % i, partition=0, timestamp=base + i * 1000)
    assert producer.flush(20) == 0
    checker = group_consumer(kafka, group)
    parts = [TopicPartition(first, 0), TopicPartition(second, 0)]

    def committed() -> list[int]:
        return [tp.offset for tp in checker.committed(parts, 10)]

    def reset(*args: str) -> subprocess.CompletedProcess[bytes]:
        return odradek(kafka, "groups", "reset-offsets", group, *args)

    try:
        checker.commit(
            offsets=[TopicPartition(first, 0, 4), TopicPartition(second, 0, 6)], asynchronous=False
        )
        dry = reset("--all-topics", "--to-latest")
        assert "Dry run" in dry.stderr.decode() and "NEW-OFFSET" in dry.stdout.decode()
        assert committed() == [4, 6]
        reset("--all-topics", "--to-latest", "--execute")
        assert committed() == [10, 10]
        stamp = datetime.datetime.fromtimestamp((base + 3500) / 1000, datetime.UTC).isoformat()
        rows = json.loads(
            reset("--topic", first, "--to-datetime", stamp, "--execute", "-o", "json").stdout
        )
        assert [(r["topic"], r["current_offset"], r["new_offset"]) for r in rows] == [
            (first, 10, 4)
        ]
        assert committed() == [4, 10]
        reset("--topic", first, "--topic", f"{second}:0", "--shift-by", "-3", "--execute")
        assert committed() == [1, 7]
        reset("--topic", first, "--shift-by", "-50", "--execute")  # clamped to the earliest
        reset("--topic", second, "--to-offset", "999", "--execute")  # clamped to the latest
        assert committed() == [0, 10]
        future = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
        reset("--topic", first, "--to-datetime", future.isoformat(), "--execute")
        assert committed() == [10, 10]  # nothing that late: the end
    finally:
        checker.close()
    missing = name("missing")
    one_line_failure(
        odradek(
            kafka,
            "groups",
            "reset-offsets",
            group,
            "--topic",
            missing,
            "--to-earliest",
            check=False,
        ),
        "unknown topic",
    )
    one_line_failure(
        odradek(
            kafka,
            "groups",
            "reset-offsets",
            group,
            "--topic",
            f"{first}:7",
            "--to-earliest",
            check=False,
        ),
        f"unknown partition {first}-7",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["groups", "reset-offsets", "g", "--topic", "t:x", "--to-earliest"], "TOPIC:PARTITION"),
        (["groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon"], "ISO-8601"),
        (["groups", "reset-offsets", "g", "--topic", "t", "--to-offset", "-1"], "--to-offset"),
        (
            ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
            "exactly one",
        ),
        (
            ["groups", "reset-offsets", "g", "--all-topics", "-t", "t", "--shift-by", "1"],
            "--all-topics",
        ),
        (["configs", "describe", "-t", "broker", "abc"], "broker id"),
        (["configs", "alter", "t", "--set", "novalue"], "KEY=VALUE"),
        (["configs", "alter", "t"], "nothing to alter"),
        (["topics", "alter", "t"], "nothing to alter"),
        (["topics", "create", "t", "--config", "retention.ms"], "KEY=VALUE"),
        (["groups", "describe"], "Missing argument"),
    ],
)
def test_bad_arguments_name_the_problem(args: list[str], message: str) -> None:
    done = odradek(None, *args, check=False)
    assert done.returncode == 2
    assert message in done.stderr.decode()

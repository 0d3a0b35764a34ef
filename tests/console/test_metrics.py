"""/metrics of a real ``odradek serve`` after real traffic from confluent-kafka.

How this works and why: a broker started with ``metrics.listener=http://127.0.0.1:0``
names its endpoint on the ready line; the test creates a topic, produces records of
known sizes to known partitions, reads them all back once, commits a group's offsets
on two of the three partitions, then scrapes and parses the text with
prometheus_client's own parser. What Kafka counts is what is checked: MessagesIn is
the records appended; BytesIn the record-batch bytes appended, which are exactly the
bytes of the partitions' logs (one segment each, nothing deleted), and which lie
between the keys and values sent plus a batch header per partition and the same plus
a batch header and the largest record framing per record; BytesOut the batch bytes
sent to consumers, the same bytes once more when every record is read once; the
consumer lag the partition's end minus the committed offset. A bad value or a port
already taken stop the start with one line.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import BrokerProcess, running_broker

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOPIC = "orders"
PARTITIONS = 3
OFFSETS_PARTITIONS = 4  # offsets.topic.num.partitions: a small __consumer_offsets
RECORDS = 300
GROUP = "metrics-group"
COMMITTED = {0: 25, 1: 60}  # partition 2: nothing committed
BATCH_HEADER_BYTES = 61
# A v2 record's framing around its key and value: length, attributes, timestamp and
# offset deltas, key and value lengths, header count — varints, at most this for the
# small records here (their timestamp deltas stay within a few seconds).
MAX_RECORD_FRAMING_BYTES = 20
TIMEOUT_S = 20.0

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = [
        "metrics.listener=http://127.0.0.1:0",
        f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}",
    ]
    args = [f"--override={o}" for o in overrides]
    with running_broker(tmp_path_factory.mktemp("metrics") / "data", args) as process:
        yield process


def scrape(url: str) -> Samples:
    """sample name -> sorted label items -> value, parsed by prometheus_client."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _topic(name: str) -> tuple[tuple[str, str], ...]:
    return (("topic", name),)


def _partition(index: int) -> tuple[tuple[str, str], ...]:
    return (("partition", str(index)), ("topic", TOPIC))


def _lag_key(index: int) -> tuple[tuple[str, str], ...]:
    return (("consumergroup", GROUP), ("partition", str(index)), ("topic", TOPIC))


def produce_and_consume(bootstrap: str) -> tuple[dict[int, int], int]:
    """Records to partition i % 3, all read back once, offsets committed for two
    partitions; (records per partition, bytes of keys and values)."""
    common = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000}
    admin = AdminClient(common)
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])
    futures[TOPIC].result(timeout=TIMEOUT_S)
    producer = Producer({**common, "linger.ms": 20, "compression.type": "none"})
    delivered: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
    payload = 0

    def on_delivery(error: object, message: object) -> None:
        assert error is None, error
        delivered[message.partition()] += 1  # type: ignore[attr-defined]

    for i in range(RECORDS):
        key, value = f"key-{i}".encode(), (f"value-{i}-" * (1 + i % 7)).encode()
        payload += len(key) + len(value)
        producer.produce(TOPIC, value, key, partition=i % PARTITIONS, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0
    assert sum(delivered.values()) == RECORDS
    consumer = Consumer({**common, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        read = 0
        deadline = time.monotonic() + TIMEOUT_S
        while read < RECORDS:
            assert time.monotonic() < deadline, f"only {read}/{RECORDS} records arrived"
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                read += 1
        commits = [TopicPartition(TOPIC, p, offset) for p, offset in COMMITTED.items()]
        consumer.commit(offsets=commits, asynchronous=False)
    finally:
        consumer.close()
    return delivered, payload


def test_metrics_after_real_traffic(broker: BrokerProcess) -> None:
    assert broker.metrics_url is not None and broker.metrics_url.endswith("/metrics")
    assert broker.urls == {"PLAINTEXT": broker.bootstrap}  # the METRICS pair kept apart
    delivered, payload = produce_and_consume(broker.bootstrap)
    samples = scrape(broker.metrics_url)
    topic = _topic(TOPIC)

    assert samples["kafka_server_brokertopicmetrics_messagesin_total"][topic] == RECORDS
    bytes_in = samples["kafka_server_brokertopicmetrics_bytesin_total"][topic]
    log_bytes = sum(samples["kafka_log_log_size"][_partition(p)] for p in range(PARTITIONS))
    assert bytes_in == log_bytes  # every appended batch byte, and nothing else, is logged
    assert payload + PARTITIONS * BATCH_HEADER_BYTES <= bytes_in
    assert bytes_in <= payload + RECORDS * (BATCH_HEADER_BYTES + MAX_RECORD_FRAMING_BYTES)
    # Every record was read once: the same batch bytes went out.
    assert samples["kafka_server_brokertopicmetrics_bytesout_total"][topic] == bytes_in
    # The all-topics sample also counts the group's commit in __consumer_offsets.
    assert samples["kafka_server_brokertopicmetrics_messagesin_total"][()] > RECORDS

    for request in ("Produce", "FetchConsumer", "OffsetCommit", "Metadata"):
        labels = (("request", request),)
        count = samples["kafka_network_requestmetrics_totaltimems_count"][labels]
        buckets = sorted(
            (float(dict(key)["le"]), value)
            for key, value in samples["kafka_network_requestmetrics_totaltimems_bucket"].items()
            if dict(key)["request"] == request
        )
        assert count >= 1 and buckets[-1] == (float("inf"), count), request
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
        assert samples["kafka_network_requestmetrics_totaltimems_sum"][labels] > 0

    hosted = PARTITIONS + OFFSETS_PARTITIONS
    gauges = {
        "kafka_server_replicamanager_partitioncount": hosted,
        "kafka_server_replicamanager_leadercount": hosted,
        "kafka_server_replicamanager_underreplicatedpartitions": 0,
        "kafka_server_replicamanager_offlinereplicacount": 0,
        "kafka_controller_kafkacontroller_activecontrollercount": 1,
        "kafka_controller_kafkacontroller_offlinepartitionscount": 0,
        "kafka_controller_kafkacontroller_globaltopiccount": 2,
        "kafka_controller_kafkacontroller_globalpartitioncount": hosted,
        "kafka_controller_kafkacontroller_activebrokercount": 1,
    }
    assert {name: samples[name][()] for name in gauges} == gauges

    for index in range(PARTITIONS):
        assert samples["kafka_log_log_size"][_partition(index)] > 0
        assert samples["kafka_log_log_logendoffset"][_partition(index)] == delivered[index]
    lags = samples["kafka_consumergroup_lag"]
    assert lags == {_lag_key(p): delivered[p] - offset for p, offset in COMMITTED.items()}
    current = samples["kafka_consumergroup_current_offset"]
    assert current == {_lag_key(p): offset for p, offset in COMMITTED.items()}


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    """``odradek serve`` expected to exit by itself, this checkout's code."""
    return subprocess.run(
        [sys.executable, "-m", "odradek", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_bad_metrics_listener_is_one_line(tmp_path: Path) -> None:
    result = serve("--data-dir", str(tmp_path / "d"), "--override", "metrics.listener=foo")
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [
        "odradek serve: invalid value for metrics.listener: 'foo' is not http://HOST:PORT "
        "(e.g. http://127.0.0.1:9644)"
    ]
    assert "odradek ready" not in result.stdout


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve(
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
            "--override",
            f"metrics.listener=http://127.0.0.1:{port}",
        )
    assert result.returncode == 1, result
    errors = [line for line in result.stderr.splitlines() if "odradek serve:" in line]
    assert errors == [
        f"odradek serve: cannot start: metrics.listener http://127.0.0.1:{port}: "
        "Address already in use"
    ]
    assert "Traceback" not in result.stderr and "odradek ready" not in result.stdout
    assert not (tmp_path / "d").exists()  # refused before the log dirs were touched

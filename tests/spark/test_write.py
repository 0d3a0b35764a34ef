"""The odradek sink: batch and streaming writes read back by confluent-kafka, byte for byte.

Spark runs local[2] in the shared session (tests/spark/conftest.py); every test makes its
own topics on the shared broker. Planning errors are checked for naming the column or
option at fault; a record the broker refuses fails the task with a clear message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from tests.support.broker import BrokerProcess  # noqa: E402

CONSUME_TIMEOUT_S = 30.0
HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def read_back(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[int, list[Record]]:
    """Every record of ``topic`` per partition, in offset order, via confluent-kafka."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-write-readback",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        found: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        got = 0
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while got < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                found[message.partition()].append(
                    (message.key(), message.value(), list(message.headers() or []))
                )
                got += 1
        # Nothing beyond what was expected arrives either (no duplicates).
        for message in consumer.consume(500, 1.0):
            found[message.partition()].append((message.key(), message.value(), []))
            got += 1
        assert got == expected, f"{topic}: read {got} records, expected {expected}"
        return found
    finally:
        consumer.close()


def test_batch_write_byte_exact(
    spark: Any,
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
) -> None:
    """Binary key/value/headers land unchanged, in the chosen partition; option beats column."""
    topic = create_topic(topic_name("out"), partitions=3)
    decoy = topic_name("decoy")  # the topic column names it; the option must win
    rows = []
    expected: dict[int, list[Record]] = {0: [], 1: [], 2: []}
    for i in range(60):
        key = None if i % 7 == 0 else bytes([i, 0, 255 - i])
        value = b"" if i % 11 == 0 else bytes(range(i % 256)) + b"\x00\xff" * i
        headers = [("n", str(i).encode()), ("nul", None), ("bin", b"\x00\x01")][: i % 4]
        partition = i % 3
        rows.append((key, value, decoy, partition, headers))
        expected[partition].append((key, value, headers))
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("headers", HEADERS),
        ]
    )
    # Four Spark partitions, so several tasks write to each topic-partition.
    frame = spark.createDataFrame(rows, schema).repartition(4)
    (
        frame.write.format("odradek")
        .mode("append")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("kafka.linger.ms", "20")
        .save()
    )
    found = read_back(broker.bootstrap, topic, 3, len(rows))
    for partition in range(3):
        # Tasks interleave, so compare as multisets; each task's own order is kept.
        assert sorted(found[partition], key=repr) == sorted(expected[partition], key=repr)
    assert decoy not in spark_topics(broker)


def spark_topics(broker: BrokerProcess) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return set(admin.list_topics(timeout=10).topics)


def test_batch_write_topic_column_and_strings(
    spark: Any,
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
) -> None:
    """A string topic column routes rows; string key/value are written as UTF-8; order kept."""
    first = create_topic(topic_name("a"), partitions=1)
    second = create_topic(topic_name("b"), partitions=1)
    rows = [(f"k{i}", f"välue-{i}", first if i % 2 else second) for i in range(40)]
    frame = spark.createDataFrame(rows, "key string, value string, topic string").coalesce(1)
    frame.write.format("odradek").mode("append").option(
        "kafka.bootstrap.servers", broker.bootstrap
    ).save()
    for topic, parity in ((first, 1), (second, 0)):
        found = read_back(broker.bootstrap, topic, 1, 20)
        assert found[0] == [
            (f"k{i}".encode(), f"välue-{i}".encode(), []) for i in range(40) if i % 2 == parity
        ]


def test_streaming_write_resumes_from_checkpoint(
    spark: Any,
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Two AvailableNow runs on one checkpoint: every input row lands once, headers included."""
    topic = create_topic(topic_name("stream"), partitions=2)
    source = tmp_path / "in"
    schema = "id int, name string"

    def add_file(start: int, count: int) -> None:
        spark.createDataFrame(
            [(i, f"row-{i}") for i in range(start, start + count)], schema
        ).coalesce(1).write.mode("append").parquet(str(source))

    def run() -> None:
        stream = spark.readStream.schema(schema).parquet(str(source))
        out = stream.select(
            F.col("name").cast("binary").alias("key"),
            F.concat(F.lit(b"\x00"), F.col("name").cast("binary")).alias("value"),
            (F.col("id") % 2).alias("partition"),
            F.array(
                F.struct(
                    F.lit("id").alias("key"),
                    F.col("id").cast("string").cast("binary").alias("value"),
                )
            ).alias("headers"),
        )
        query = (
            out.writeStream.format("odradek")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        assert not query.isActive

    add_file(0, 25)
    run()
    add_file(25, 15)
    run()
    found = read_back(broker.bootstrap, topic, 2, 40)
    for partition in (0, 1):
        ids = [int(headers[0][1]) for _, _, headers in found[partition]]
        assert sorted(ids) == [i for i in range(40) if i % 2 == partition]
        for key, value, headers in found[partition]:
            assert key == f"row-{int(headers[0][1])}".encode()
            assert value == b"\x00" + key
            assert headers[0][0] == "id"


PLANNING_ERRORS = [
    ("id int, payload binary", {}, "append", "column 'value'"),
    ("value int", {}, "append", "column 'value' must be binary or string"),
    ("value binary, partition string", {}, "append", "column 'partition' must be int"),
    ("value binary, key int", {}, "append", "column 'key' must be binary or string"),
    ("value binary, topic int", {}, "append", "column 'topic' must be string"),
    ("value binary, headers array<string>", {}, "append", "column 'headers' must be array"),
    ("value binary", {"topic": None}, "append", "option 'topic'"),
    ("value binary", {}, "overwrite", "only appends"),
    ("value binary", {"kafka.value.serializer": "x"}, "append", "kafka.value.serializer"),
    ("value binary", {"kafka.linger.ms": "soon"}, "append", "kafka.linger.ms"),
    ("value binary", {"deliveryGuarantee": "exactly-once"}, "append", "streaming writes only"),
    ("value binary", {"deliveryGuarantee": "twice"}, "append", "deliveryGuarantee"),
    ("value binary", {"kafka.transactional.id": "x"}, "append", "kafka.transactional.id"),
]


def test_planning_errors_name_the_column_or_option(spark: Any, broker: BrokerProcess) -> None:
    for ddl, extra, mode, needle in PLANNING_ERRORS:
        frame = spark.createDataFrame([], ddl)
        options = {"kafka.bootstrap.servers": broker.bootstrap, "topic": "never-written"}
        options.update(extra)
        options = {k: v for k, v in options.items() if v is not None}
        with pytest.raises(Exception) as failure:
            frame.write.format("odradek").mode(mode).options(**options).save()
        assert needle in str(failure.value), (ddl, extra, mode, str(failure.value)[-600:])


def test_streaming_complete_mode_and_failed_delivery(
    spark: Any,
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """outputMode complete is refused; a record for a missing or negative partition fails."""
    source = tmp_path / "in"
    spark.createDataFrame([("a",), ("b",)], "value string").write.parquet(str(source))
    counts = spark.readStream.schema("value string").parquet(str(source)).groupBy("value").count()
    query = (
        counts.selectExpr("value")
        .writeStream.format("odradek")
        .outputMode("complete")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", "never-written")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="only appends"):
        query.awaitTermination(120)

    topic = create_topic(topic_name("one"), partitions=1)
    frame = spark.createDataFrame([(b"v", 5)], "value binary, partition int")
    with pytest.raises(Exception) as failure:
        frame.write.format("odradek").mode("append").option(
            "kafka.bootstrap.servers", broker.bootstrap
        ).option("topic", topic).option("kafka.delivery.timeout.ms", "5000").save()
    message = str(failure.value)
    assert "1 of 1 records" in message and f"{topic}-5" in message, message[-800:]

    negative = spark.createDataFrame([(b"v", -2)], "value binary, partition int")
    with pytest.raises(Exception, match="column 'partition' holds -2"):
        negative.write.format("odradek").mode("append").option(
            "kafka.bootstrap.servers", broker.bootstrap
        ).option("topic", topic).save()

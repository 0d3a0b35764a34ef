"""The read side on a real local[2] Spark against real brokers: batch reads column for
column, filter pushdown, task splitting, data loss, a gapped partition, bad options,
use_as_kafka, and a checkpointed stream restarted with exactly-once output."""

from __future__ import annotations

import datetime
import glob
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from odradek.client import (
    AdminClient,
    ConsumerGroupTopicPartitions,
    NewPartitions,
    Producer,
    TopicPartition,
)
from odradek.records.codec import Header, Record, encode_batch, encode_end_txn_marker
from odradek.spark import use_as_kafka
from odradek.spark.read_fetch import RangeSpec, read_range
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.slow
BASE_TS = 1_700_000_000_000


def produce(
    bootstrap: str, topic: str, count: int, partitions: int, first: int = 0
) -> list[dict[str, Any]]:
    """``count`` records spread over partitions; returns what Spark must read back."""
    expected: list[dict[str, Any]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        expected.append(
            {
                "key": message.key(),
                "value": message.value(),
                "topic": message.topic(),
                "partition": message.partition(),
                "offset": message.offset(),
                "timestamp": datetime.datetime.fromtimestamp(
                    message.timestamp()[1] / 1000, datetime.UTC
                ).replace(tzinfo=None),
                "timestampType": 0,
                "headers": [{"key": k, "value": v} for k, v in (message.headers() or [])],
            }
        )

    for i in range(first, first + count):
        producer.produce(
            topic,
            value=None if i % 17 == 5 else b"value-%d" % i + b"." * (i % 50),
            key=None if i % 7 == 3 else b"key-%d" % i,
            partition=i % partitions,
            timestamp=BASE_TS + i,
            headers=[("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else None,
            on_delivery=delivered,
        )
    producer.flush(30)
    producer.close(30)
    assert len(expected) == count
    return sorted(expected, key=lambda r: (r["partition"], r["offset"]))


def read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows(df: Any) -> list[dict[str, Any]]:
    out = [r.asDict(recursive=True) for r in df.collect()]
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


def test_batch_read_equals_what_was_produced(
    spark: Any, broker: BrokerProcess, create_topic: Callable[..., str], topic_name: Any
) -> None:
    topic = create_topic(topic_name(), 3)
    expected = produce(broker.bootstrap, topic, 600, 3)
    df = read(spark, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    got = rows(df)
    for row in got:
        row["key"] = None if row["key"] is None else bytes(row["key"])
        row["value"] = None if row["value"] is None else bytes(row["value"])
        for header in row["headers"]:
            header["value"] = None if header["value"] is None else bytes(header["value"])
    assert got == expected

    # Without headers the column is absent; filters on partition/offset/timestamp are pushed
    # down: a one-partition filter plans one task.
    plain = read(spark, broker.bootstrap, subscribe=topic)
    assert "headers" not in plain.columns
    one = plain.where("partition = 1 AND offset >= 10 AND offset < 20")
    assert one.rdd.getNumPartitions() == 1
    assert sorted(r.offset for r in one.collect()) == list(range(10, 20))
    cutoff = datetime.datetime.fromtimestamp((BASE_TS + 300) / 1000, datetime.UTC)
    late = plain.where(plain.timestamp >= cutoff.replace(tzinfo=None))
    assert late.count() == 300
    assert plain.where("offset IN (3, 5, 190)").count() == 3 * 3  # 3 partitions of 200
    # Spark's default (pushdown off) must work too: same rows, no pruning.
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        unpruned = plain.where("partition = 1 AND offset >= 10 AND offset < 20")
        assert unpruned.rdd.getNumPartitions() == 3
        assert sorted(r.offset for r in unpruned.collect()) == list(range(10, 20))
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")

    # use_as_kafka: format("kafka") in the Python API resolves to this source, for the
    # batch and streaming readers and the writer too.
    use_as_kafka(spark)
    try:
        aliased = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .load()
        )
        assert aliased.count() == 600
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .load()
        )
        assert stream.isStreaming and stream.columns == plain.columns
        copy = create_topic(topic_name("copy"))
        (
            aliased.select("key", "value")
            .write.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", copy)
            .mode("append")
            .save()
        )
        assert read(spark, broker.bootstrap, subscribe=copy).count() == 600
    finally:
        use_as_kafka(spark, enabled=False)
    with pytest.raises(Exception, match="kafka"):  # Spark's own (absent) Kafka source again
        spark.read.format("kafka").option("subscribe", topic).load().count()

    # Starting and ending by timestamp (records i have timestamp BASE_TS + i).
    since = read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=str(BASE_TS + 300))
    assert since.count() == 300
    window = read(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {str(p): BASE_TS + 300 for p in range(3)}}),
        endingTimestamp=str(BASE_TS + 450),
    )
    assert sorted(r.value for r in window.select("value").collect() if r.value) == sorted(
        r["value"] for r in expected if 300 <= r["offset"] * 3 + r["partition"] < 450 and r["value"]
    )
    future = str(BASE_TS + 10_000)
    with pytest.raises(Exception, match="'startingTimestamp'"):
        read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=future).count()
    assert (
        read(
            spark,
            broker.bootstrap,
            subscribe=topic,
            startingTimestamp=future,
            startingOffsetsByTimestampStrategy="latest",
        ).count()
        == 0
    )

    # Explicit ranges: assign + JSON offsets.
    ranged = read(
        spark,
        broker.bootstrap,
        assign=json.dumps({topic: [0, 2]}),
        startingOffsets=json.dumps({topic: {"0": 5, "2": -2}}),
        endingOffsets=json.dumps({topic: {"0": 15, "2": -1}}),
    )
    counts = {r["partition"]: r["count"] for r in ranged.groupBy("partition").count().collect()}
    assert counts == {0: 10, 2: 200}


def test_min_partitions_and_max_records_per_partition(
    spark: Any, broker: BrokerProcess, create_topic: Callable[..., str], topic_name: Any
) -> None:
    topic = create_topic(topic_name(), 2)
    produce(broker.bootstrap, topic, 1000, 2)
    df = read(spark, broker.bootstrap, subscribe=topic, minPartitions="7")
    assert df.rdd.getNumPartitions() == 7
    offsets = df.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in offsets) == [
        (p, o) for p in range(2) for o in range(500)
    ]
    capped = read(spark, broker.bootstrap, subscribe=topic, maxRecordsPerPartition="120")
    assert capped.rdd.getNumPartitions() == 2 * 5  # ceil(500 / 120) per partition
    assert capped.count() == 1000


def test_bad_options_fail_naming_the_option(
    spark: Any, broker: BrokerProcess, create_topic: Callable[..., str], topic_name: Any
) -> None:
    topic = create_topic(topic_name())
    assert read(spark, broker.bootstrap, subscribe=topic).count() == 0  # empty, not an error
    cases = [
        ({"subscribe": topic, "subscribePattern": "x.*"}, "'subscribePattern'"),
        ({"subscribe": topic, "startingOffsets": "latest"}, "'startingOffsets'"),
        ({"assign": json.dumps({"no-such-topic": [0]})}, "'assign': topic 'no-such-topic'"),
        ({"assign": json.dumps({topic: [3]})}, f"'assign': partition 3 of topic '{topic}'"),
        ({"subscribe": topic, "kafka.auto.offset.reset": "earliest"}, "'kafka.auto.offset.reset'"),
        (
            {"subscribe": topic, "startingOffsets": json.dumps({topic: {"0": 0, "1": 0}})},
            "'startingOffsets'",
        ),
    ]
    cases.append(({"subscribe": f"{topic},no-such-topic"}, "'subscribe': topic 'no-such-topic'"))
    for options, needle in cases:
        with pytest.raises(Exception) as raised:
            read(spark, broker.bootstrap, **options).collect()
        # Spark's error names the option on its first line, with no Python traceback.
        message = str(raised.value)
        assert needle in message.splitlines()[0], (options, message[-2000:])
        assert "Traceback" not in message, (options, message[-2000:])
    with pytest.raises(Exception, match="'endingOffsets'"):
        (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("endingOffsets", "latest")
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .start()
            .awaitTermination(60)
        )
    # A stream subscribed to a topic that does not exist fails (as Spark's source does)
    # instead of reading nothing forever.
    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", "no-such-topic")
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    try:
        with pytest.raises(Exception, match="'subscribe': topic 'no-such-topic' does not exist"):
            query.awaitTermination(60)
    finally:
        query.stop()


def test_fail_on_data_loss(
    spark: Any,
    broker: BrokerProcess,
    admin: AdminClient,
    create_topic: Callable[..., str],
    topic_name: Any,
) -> None:
    topic = create_topic(topic_name())
    produce(broker.bootstrap, topic, 100, 1)
    admin.delete_records({TopicPartition(topic, 0): 40})[TopicPartition(topic, 0)].result(30)
    start = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception) as raised:
        read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start).collect()
    message = str(raised.value)
    assert f"{topic}-0: offsets 10 to 39" in message and "starts at offset 40" in message
    assert "'failOnDataLoss'" in message
    kept = read(
        spark, broker.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert sorted(r.offset for r in kept.select("offset").collect()) == list(range(40, 100))
    # The default start (earliest) is simply after the deleted records.
    assert read(spark, broker.bootstrap, subscribe=topic).count() == 60


def _gapped_log(bootstrap_dir: Path, topic: str) -> list[int]:
    """Write a log with offset gaps and transaction markers straight into the partition
    (as compaction and transactions leave it); returns the data records' offsets."""
    log, _ = open_log(bootstrap_dir / f"{topic}-0", LogConfig())
    try:
        offsets: list[int] = []
        blob = b""
        for base, count in ((0, 5), (20, 5), (40, 1), (100, 10)):
            records = [
                Record(base + i, BASE_TS + base + i, b"k", b"v%d" % (base + i), (Header("h", b""),))
                for i in range(count)
            ]
            blob += bytes(encode_batch(records, base_offset=base))
            offsets += [base + i for i in range(count)]
            marker = encode_end_txn_marker(True, 0, offset=base + count, timestamp=BASE_TS)
            blob += bytes(
                encode_batch(
                    [marker],
                    base_offset=base + count,
                    producer_id=1,
                    producer_epoch=0,
                    is_control=True,
                    is_transactional=True,
                )
            )
        log.append_as_follower(blob)
        log.flush()
    finally:
        log.close()
    return offsets


def test_gapped_partition_reads_without_stalling(
    spark: Any, tmp_path: Path, topic_name: Any
) -> None:
    topic = topic_name()
    process = BrokerProcess(tmp_path / "data").start()
    try:
        with AdminClient({"bootstrap.servers": process.bootstrap}) as admin:
            from odradek.client import NewTopic

            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        port = process.port
        assert process.stop() == 0
        expected = _gapped_log(tmp_path / "data", topic)
        process.start(listen=f"127.0.0.1:{port}")
        bootstrap = process.bootstrap
        # Executor path directly, ranges ending inside gaps and on markers.
        for start, end, wanted in ((0, 111, expected), (3, 22, [3, 4, 20, 21]), (25, 40, [])):
            spec = RangeSpec(topic, 0, start, end, {"bootstrap.servers": bootstrap})
            got = [o for b in read_range(spec) for o in b.column("offset").to_pylist()]
            assert got == wanted, (start, end)
        # Batch and streaming through Spark: every record once, nothing waits for an offset
        # that does not exist.
        df = read(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="7")
        assert sorted(r.offset for r in df.select("offset").collect()) == expected
        out = tmp_path / "out"
        query = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "13")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180)
        got = sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())
        assert got == expected
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def _run_available_now(spark: Any, bootstrap: str, pattern: str, work: Path) -> list[int]:
    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", pattern)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "70")
        .option("commitOffsetsToGroup", "spark-test-lag")
        .option("includeHeaders", "true")
        .load()
        .writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress]


def test_stream_restarts_from_its_checkpoint_exactly_once(
    spark: Any,
    broker: BrokerProcess,
    admin: AdminClient,
    create_topic: Callable[..., str],
    topic_name: Any,
    tmp_path: Path,
) -> None:
    prefix = topic_name("stream")
    first = create_topic(f"{prefix}-a", 2)
    expected = produce(broker.bootstrap, first, 200, 2)
    pattern = f"{prefix}-.*"
    sizes = _run_available_now(spark, broker.bootstrap, pattern, tmp_path)
    assert sum(sizes) == 200 and max(sizes) <= 70, sizes

    # While stopped: more records, a new partition, and a newly matching topic.
    expected += produce(broker.bootstrap, first, 90, 2, first=200)
    admin.create_partitions([NewPartitions(first, 3)])[first].result(30)
    expected += produce(broker.bootstrap, first, 30, 3, first=290)
    second = create_topic(f"{prefix}-b", 1)
    expected += produce(broker.bootstrap, second, 40, 1)
    sizes = _run_available_now(spark, broker.bootstrap, pattern, tmp_path)
    assert sum(sizes) == 160 and max(sizes) <= 70, sizes

    # Every record exactly once in the Parquet output.
    out = spark.read.parquet(str(tmp_path / "out"))
    got = sorted(
        (r.topic, r.partition, r.offset, None if r.value is None else bytes(r.value))
        for r in out.collect()
    )
    assert got == sorted((r["topic"], r["partition"], r["offset"], r["value"]) for r in expected)

    # The checkpoint holds Spark's Kafka offsets JSON, and the group sees the same ends.
    ends: dict[tuple[str, int], int] = {}
    for r in expected:
        ends[(r["topic"], r["partition"])] = max(
            ends.get((r["topic"], r["partition"]), 0), r["offset"] + 1
        )
    last = sorted(glob.glob(str(tmp_path / "checkpoint" / "offsets" / "*")), key=_batch_number)[-1]
    offsets = json.loads(Path(last).read_text().splitlines()[-1])
    assert offsets == {
        t: {str(p): o for (t2, p), o in sorted(ends.items()) if t2 == t} for t, _ in ends
    }
    group = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("spark-test-lag")])[
        "spark-test-lag"
    ].result(30)
    committed = {(tp.topic, tp.partition): tp.offset for tp in group.topic_partitions}
    assert committed == ends


def _batch_number(path: str) -> int:
    name = Path(path).name
    return int(name) if name.isdigit() else -1

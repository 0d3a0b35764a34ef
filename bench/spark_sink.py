"""Spark sink benchmark: the exactly-once sink beside the at-least-once sink, same input.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/spark_sink.py
[--quick]`` (``--help`` lists the knobs). The full run moves 500,000 records per
measurement and takes a few minutes; ``--quick`` moves 50,000 (about a minute, most of
it Spark's start-up). This is the Spark part of issue 13's transactions benchmark
(bench/transactions.py measures the clients' transactional produce and read_committed).

What is measured, and how:

- Broker: ``python -m odradek serve`` on 127.0.0.1:0, data in a fresh
  ``var/bench-spark-sink-*/`` directory (deleted at the end). A source topic of 4
  partitions, filled once by confluent-kafka with N records of 1 KiB random values.
- Spark: one local[2] session in this process (the JVM, its Python workers and the
  broker share the machine's 2 cores). Each measurement is one streaming query from the
  source topic (``readStream.format("odradek")``, earliest, Trigger.AvailableNow,
  ``maxOffsetsPerTrigger`` = the micro-batch size, a fresh checkpoint) to a fresh sink
  topic of 4 partitions (``writeStream.format("odradek")``, ``topic`` option), with the
  same producer options for both: the client's defaults (acks=all, idempotent) and
  ``kafka.batch.size`` = 1 MiB. One query writes with ``deliveryGuarantee=at-least-once``
  (one idempotent producer per task), the other with ``exactly-once`` (one transaction
  and one batch marker per task and micro-batch: InitProducerId, OffsetFetch,
  AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn, and the commit markers).
  4 tasks per micro-batch (one per source partition).
- Two inputs: N records in micro-batches of ``--batch`` records (10,000 quick, 50,000
  full), where a transaction's fixed cost is spread over many records; and N/10 records
  (at most 10,000) in micro-batches of 500, where it shows.
- Time = ``start()`` → the AvailableNow query ends (every record acknowledged, or for
  exactly-once committed). Both sinks run once untimed first on the small input (Python
  worker start-up, the JVM's JIT). Then ``--rounds`` rounds (2 full, 1 quick), the two
  sinks in alternating order; the best of each is shown, with the ratio exactly-once /
  at-least-once and the extra time per micro-batch.
- Checked, untimed, after the last round: each sink topic read with confluent-kafka
  (read_committed) holds its input's records.

Other processes share the 2 cores and skew all of this, so the load average is printed
at start and end.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from _support import OdradekBroker, finish, load_average, show_load, warn_if_busy  # noqa: E402

VALUE_SIZE = 1024
PARTITIONS = 4
READY_TIMEOUT_S = 60.0
QUERY_TIMEOUT_S = 1800.0
MODES = ("at-least-once", "exactly-once")
SMALL_BATCH = 500  # records per micro-batch of the small-batch measurement


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


def fill(bootstrap: str, topic: str, count: int) -> None:
    """``count`` 1 KiB random records into ``topic``, spread evenly, with confluent-kafka."""
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 262_144,
        }
    )
    block = os.urandom(VALUE_SIZE * 64)
    values = [block[i * VALUE_SIZE : (i + 1) * VALUE_SIZE] for i in range(64)]
    failed: list[str] = []

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic, values[i % 64], partition=i % PARTITIONS, on_delivery=report
                )
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"filling {topic}: {left} left, {len(failed)} failed {failed[:1]}")


def count_committed(bootstrap: str, topic: str, expected: int) -> int:
    """Records of ``topic`` visible to read_committed (read until ``expected`` or 5 s idle)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        seen = 0
        idle_since = time.monotonic()
        while seen < expected and time.monotonic() - idle_since < 5:
            messages = consumer.consume(10_000, 0.5)
            seen += sum(1 for m in messages if m.error() is None)
            if messages:
                idle_since = time.monotonic()
        return seen
    finally:
        consumer.close()


def spark_session(workdir: Path) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-bench-sink")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", str(workdir / "spark-local"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def stream_write(
    spark: Any,
    broker: OdradekBroker,
    source: str,
    mode: str,
    batch_size: int,
    checkpoint: Path,
    count: int,
) -> tuple[str, float, int]:
    """One AvailableNow query ``source`` → a fresh sink topic; (topic, seconds, batches)."""
    sink = f"bench-sink-{mode}-{uuid.uuid4().hex[:6]}"
    broker.create_topic(sink, PARTITIONS)
    frame = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(batch_size))
        .load()
        .select("key", "value")
    )
    writer = (
        frame.writeStream.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", mode)
        .option("kafka.batch.size", str(1 << 20))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    started = time.perf_counter()
    query = writer.start()
    if not query.awaitTermination(QUERY_TIMEOUT_S):
        query.stop()
        raise RuntimeError(f"{mode}: the AvailableNow query did not finish")
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{mode}: {query.exception()}")
    done = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in done)
    if rows != count:
        raise RuntimeError(f"{mode}: the query read {rows} rows, not {count}")
    return sink, seconds, len(done)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50k records, 1 round")
    parser.add_argument("--records", type=int, help="records per measurement (500000)")
    parser.add_argument("--batch", type=int, help="records per micro-batch (quick 10000; 50000)")
    parser.add_argument("--rounds", type=int, help="rounds (2; quick 1)")
    parser.add_argument("--strict", action="store_true", help="accepted; this bench has no goal")
    parser.add_argument("--dir", type=Path, default=REPO / "var", help="parent of the work dir")
    args = parser.parse_args(argv)
    try:
        import confluent_kafka
        import pyspark
    except ImportError as error:
        print(f"spark sink bench skipped: {error} (install the extra: pip install -e '.[spark]')")
        return 0
    count = args.records or (50_000 if args.quick else 500_000)
    batch_size = args.batch or (10_000 if args.quick else 50_000)
    rounds = args.rounds or (1 if args.quick else 2)
    if count < PARTITIONS or batch_size < 1:
        parser.error(f"--records must be at least {PARTITIONS}, --batch at least 1")

    started = time.perf_counter()
    load_start = load_average()
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-sink-", dir=args.dir))
    shown = workdir.relative_to(REPO) if workdir.is_relative_to(REPO) else workdir
    print(
        f"### spark sink: exactly-once beside at-least-once (`make bench`; "
        f"`.venv/bin/python bench/spark_sink.py{' --quick' if args.quick else ''}`)\n\n"
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs shared by the broker and "
        f"Spark. pyspark {pyspark.__version__} local[2], confluent-kafka "
        f"{confluent_kafka.__version__} (the fill and the check). One odradek broker (data in "
        f"{shown}/); a source topic of {PARTITIONS} partitions holding {count:,} records of "
        f"{VALUE_SIZE} B values (and one of {min(count // 10, 10_000):,}), streamed "
        f"(AvailableNow, {PARTITIONS} tasks per micro-batch) into a fresh sink topic of "
        f"{PARTITIONS} partitions per query; producer defaults (acks=all, idempotent), "
        f"batch.size 1 MiB. Best of {rounds} round{'s' if rounds > 1 else ''}. Load average "
        f"at start: {show_load(load_start)}.\n",
        flush=True,
    )
    warn_if_busy(load_start)
    errors: list[str] = []
    broker: OdradekBroker | None = None
    spark = None
    # (label, topic, records, micro-batch size): large micro-batches, where the
    # transactions' fixed cost is amortised, and small ones, where it shows.
    small_count = max(min(count // 10, 10_000), PARTITIONS)
    setups = [
        ("large micro-batches", "bench-sink-source", count, batch_size),
        ("small micro-batches", "bench-sink-small", small_count, SMALL_BATCH),
    ]
    best: dict[tuple[str, str], tuple[float, int]] = {}
    try:
        broker = OdradekBroker(workdir, ready_timeout_s=READY_TIMEOUT_S)
        for _, topic, records, _ in setups:
            broker.create_topic(topic, PARTITIONS)
            progress(f"writing {records:,} records to {topic} with confluent-kafka")
            fill(broker.bootstrap, topic, records)
        progress("starting Spark; each sink once, untimed, on the small topic")
        spark = spark_session(workdir)
        _, small_topic, _, _ = setups[1]
        for mode in MODES:
            checkpoint = workdir / f"ck-warm-{mode}"
            stream_write(spark, broker, small_topic, mode, batch_size, checkpoint, small_count)
        sinks: dict[tuple[str, str], str] = {}
        for number in range(rounds):
            for label, topic, records, size in setups:
                for mode in MODES if number % 2 == 0 else reversed(MODES):
                    progress(f"round {number + 1}: {label}, {mode}")
                    checkpoint = workdir / f"ck-{topic}-{mode}-{number}"
                    sink, seconds, batches = stream_write(
                        spark, broker, topic, mode, size, checkpoint, records
                    )
                    sinks[label, mode] = sink
                    if (label, mode) not in best or seconds < best[label, mode][0]:
                        best[label, mode] = (seconds, batches)
        progress("checking the sink topics with read_committed")
        wanted = {label: records for label, _, records, _ in setups}
        for (label, mode), sink in sinks.items():
            seen = count_committed(broker.bootstrap, sink, wanted[label])
            if seen != wanted[label]:
                errors.append(f"{label}, {mode}: {sink} holds {seen} records, not {wanted[label]}")

        lines = [
            "| input | sink | rows/s | MB/s | seconds | micro-batches | vs at-least-once |",
            "|---|---|--:|--:|--:|--:|--:|",
        ]
        summary = []
        for label, _, records, size in setups:
            base = best[label, "at-least-once"][0]
            for mode in MODES:
                seconds, batches = best[label, mode]
                lines.append(
                    f"| {records:,} records, {label} of {size:,} | `{mode}` | "
                    f"{records / seconds:,.0f} | {records * VALUE_SIZE / seconds / 1e6:,.1f} | "
                    f"{seconds:.2f} | {batches} | {base / seconds:.2f}x |"
                )
            eos_seconds, batches = best[label, "exactly-once"]
            summary.append(
                f"- {label} ({size:,} records): exactly-once / at-least-once throughput "
                f"{base / eos_seconds:.2f}x; extra time per micro-batch ({PARTITIONS} "
                f"transactions) {(eos_seconds - base) / batches * 1000:+.0f} ms"
            )
        print("\n".join([*lines, "", *summary, ""]), flush=True)
    except Exception as error:  # a bench reports what failed, then cleans up
        errors.append(f"{type(error).__name__}: {error}")
        if broker is not None:
            errors.append(broker.log())
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return finish("spark sink", started, errors, 0, args.strict)


if __name__ == "__main__":
    sys.exit(main())

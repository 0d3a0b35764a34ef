"""Spark connector benchmark: rows/s of ``format("odradek")`` reads beside their ceilings.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/spark.py [--quick]``
(``--help`` lists the knobs; ``--records N`` for any size). The full run reads 1,000,000
records per measurement and takes a few minutes; ``--quick`` reads 100,000.

What is measured, and how:

- Broker: ``python -m odradek serve`` on 127.0.0.1:0, data in a fresh
  ``var/bench-spark-*/`` directory (deleted at the end). One topic of 4 partitions,
  filled once by confluent-kafka (librdkafka, the fastest producer at hand) with N
  records of 1 KiB random values, no keys, spread evenly over the partitions.
- Spark: one local[2] session in this process (the JVM and its Python workers share the
  machine's 2 cores with the broker), ``spark.sql.shuffle.partitions=2``. Every Spark
  measurement writes into the ``noop`` sink (rows are produced and dropped), so what is
  timed is the source: planning, the tasks, and the rows reaching the JVM.

  (a) batch read: ``spark.read.format("odradek")`` subscribe, earliest → latest;
  (b) streaming read: ``readStream.format("odradek")`` with Trigger.AvailableNow from
      earliest, a fresh checkpoint per run;
  (c) ``spark.range`` rows of the same seven columns and width (a 1 KiB binary value):
      the engine's own ceiling, all in the JVM;
  (d) Python source ceiling: a data source defined here whose tasks yield ready-made
      Arrow batches of the same schema, doing no I/O — what any Python data source can
      reach through Spark's Arrow path on this machine;
  (e) a plain confluent-kafka consumer in its own process reading the same N records
      (``assign`` from the beginning, ``consume(500)``, every value touched).

  Time = call → the last row in the sink (the consumer: ``assign`` → N-th record). Each
  Spark read runs once untimed first (Python worker start-up, and the JVM's JIT: the
  Arrow-to-row path of a fresh session runs several times slower until compiled). Each
  measurement then runs ``--rounds`` times (2 full, 1 quick); the best is shown.
- Where the time goes: the odradek reader alone (``BatchReader.read`` of every
  partition, one after the other, in this process, no Spark) gives the per-core rate of
  fetching and decoding into Arrow; with py-spy in the venv (``make bench-tools``) it is
  also profiled.
- The sink, for information: ``spark.range`` rows with a 1 KiB value written by
  ``df.write.format("odradek")`` (2 tasks, acks=1, idempotence off, like the fill)
  beside the confluent-kafka producer's rate when filling the topic.
- Goal: (a) and (b) >= 0.5x the plain consumer's records/s.

Other processes share the 2 cores and skew all of this, so the load average is printed
at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from _support import OdradekBroker, finish, load_average, show_load, warn_if_busy  # noqa: E402

VALUE_SIZE = 1024
PARTITIONS = 4
TOPIC = "bench-spark"
SINK_TOPIC = "bench-spark-sink"
GOAL = 0.5
READY_TIMEOUT_S = 60.0
WORKER_TIMEOUT_S = 900.0
QUERY_TIMEOUT_S = 1800.0
CEILING_BATCH_ROWS = 8000  # about what one 8 MiB fetch (the reader's default) yields
PROFILE_RATE_HZ = 200


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


# -- data ----------------------------------------------------------------------------------
def fill(bootstrap: str, count: int) -> float:
    """``count`` 1 KiB records into TOPIC with confluent-kafka; returns the seconds taken."""
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "enable.idempotence": False,
            "queue.buffering.max.kbytes": 262_144,
        }
    )
    block = os.urandom(VALUE_SIZE * 64)
    values = [block[i * VALUE_SIZE : (i + 1) * VALUE_SIZE] for i in range(64)]
    failed: list[str] = []

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(
                    TOPIC, values[i % 64], partition=i % PARTITIONS, on_delivery=report
                )
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"filling {TOPIC}: {left} left, {len(failed)} failed {failed[:1]}")
    return time.perf_counter() - started


def end_offsets(bootstrap: str) -> int:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    try:
        return sum(
            consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, p), 10)[1]
            for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


# -- (e) the plain consumer, in a child process --------------------------------------------
def consume_worker(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "group.id": "bench-spark-consumer",
            "enable.auto.commit": False,
        }
    )
    consumer.list_topics(TOPIC, timeout=10)
    count, got, size = spec["count"], 0, 0
    started = time.perf_counter()
    consumer.assign(
        [
            confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    last_record = time.monotonic()
    while got < count:
        messages = consumer.consume(500, 1.0)
        if not messages and time.monotonic() - last_record > 30:
            raise RuntimeError(f"consumer stalled at {got} of {count} records")
        for message in messages:
            if message.error() is None:
                size += len(message.value())
                got += 1
        if messages:
            last_record = time.monotonic()
    seconds = time.perf_counter() - started
    consumer.close()
    if size != got * VALUE_SIZE:
        raise RuntimeError(f"consumer read {size} value bytes for {got} records")
    return {"seconds": seconds, "count": got}


def run_consumer(bootstrap: str, count: int) -> dict[str, Any]:
    spec = json.dumps({"bootstrap": bootstrap, "count": count})
    process = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", spec],
        capture_output=True,
        timeout=WORKER_TIMEOUT_S,
        cwd=REPO,
        check=False,
    )
    lines = [line for line in process.stdout.decode().splitlines() if line.startswith("{")]
    if process.returncode or not lines:
        return {"error": f"exit {process.returncode}: {process.stderr.decode()[-1500:]}"}
    return dict(json.loads(lines[-1]))


# -- Spark -----------------------------------------------------------------------------------
def spark_session(workdir: Path) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-bench")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", str(workdir / "spark-local"))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(ceiling_source())
    return spark


def odradek_options(bootstrap: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
    }


def timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def batch_read(spark: Any, bootstrap: str) -> float:
    frame = spark.read.format("odradek").options(**odradek_options(bootstrap)).load()
    return timed(lambda: frame.write.format("noop").mode("overwrite").save())


def stream_read(spark: Any, bootstrap: str, checkpoint: Path, count: int) -> float:
    frame = spark.readStream.format("odradek").options(**odradek_options(bootstrap)).load()
    rows = 0

    def run() -> None:
        nonlocal rows
        query = (
            frame.writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            query.stop()
            raise RuntimeError("the AvailableNow query did not finish")
        rows = sum(p["numInputRows"] for p in query.recentProgress)

    seconds = timed(run)
    if rows != count:
        raise RuntimeError(f"the streaming read saw {rows} rows, not {count}")
    return seconds


def range_rows(spark: Any, count: int) -> float:
    from pyspark.sql import functions as F

    frame = spark.range(count, numPartitions=PARTITIONS).select(
        F.lit(None).cast("binary").alias("key"),
        # 1016 constant bytes + 8 bytes that differ per row: a 1 KiB value built per row
        F.concat(F.lit(bytes(VALUE_SIZE - 8)), F.lpad(F.hex("id"), 8, "0").cast("binary")).alias(
            "value"
        ),
        F.lit(TOPIC).alias("topic"),
        (F.col("id") % PARTITIONS).cast("int").alias("partition"),
        F.col("id").alias("offset"),
        F.current_timestamp().alias("timestamp"),
        F.lit(0).alias("timestampType"),
    )
    return timed(lambda: frame.write.format("noop").mode("overwrite").save())


def ceiling_source() -> type:
    """A Python data source yielding ready Arrow batches of the odradek schema, no I/O."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from odradek.spark.datasource import read_schema

    class CeilingReader(DataSourceReader):
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self) -> list[InputPartition]:
            share = self.rows // PARTITIONS
            return [
                InputPartition((p, share + (1 if p < self.rows % PARTITIONS else 0)))
                for p in range(PARTITIONS)
            ]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import numpy as np
            import pyarrow as pa

            from odradek.spark.read_arrow import ARROW_SCHEMA

            number, rows = partition.value
            block = np.frombuffer(os.urandom(VALUE_SIZE), dtype=np.uint8)
            n = CEILING_BATCH_ROWS
            values = pa.Array.from_buffers(
                pa.binary(),
                n,
                [
                    None,
                    pa.py_buffer(np.arange(n + 1, dtype=np.int32) * VALUE_SIZE),
                    pa.py_buffer(np.tile(block, n)),
                ],
            )
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.nulls(n, pa.binary()),
                    values,
                    pa.array([TOPIC] * n),
                    pa.array(np.full(n, number, dtype=np.int32)),
                    pa.array(np.arange(n, dtype=np.int64)),
                    pa.array(np.zeros(n, dtype=np.int64), type=pa.timestamp("us", tz="UTC")),
                    pa.array(np.zeros(n, dtype=np.int32)),
                ],
                schema=ARROW_SCHEMA,
            )
            sent = 0
            while sent < rows:
                take = min(n, rows - sent)
                yield batch if take == n else batch.slice(0, take)
                sent += take

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "benchceiling"

        def schema(self) -> Any:
            return read_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return CeilingReader(int(self.options["rows"]))

    return CeilingSource


def ceiling_read(spark: Any, count: int) -> float:
    frame = spark.read.format("benchceiling").option("rows", str(count)).load()
    return timed(lambda: frame.write.format("noop").mode("overwrite").save())


def sink_write(spark: Any, bootstrap: str, topic: str, count: int) -> float:
    """``spark.range`` rows with a 1 KiB value written with ``format("odradek")``."""
    from pyspark.sql import functions as F

    frame = spark.range(count, numPartitions=2).select(
        F.concat(F.lit(bytes(VALUE_SIZE - 8)), F.lpad(F.hex("id"), 8, "0").cast("binary")).alias(
            "value"
        )
    )
    writer = (
        frame.write.format("odradek")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.acks", "1")
        .option("kafka.enable.idempotence", "false")
        .option("kafka.batch.size", "1000000")
    )
    return timed(writer.save)


def check_batch_rows(spark: Any, bootstrap: str, count: int) -> None:
    """Untimed: the batch read returns every record with its 1 KiB value."""
    from pyspark.sql import functions as F

    frame = spark.read.format("odradek").options(**odradek_options(bootstrap)).load()
    rows, size = frame.agg(F.count("*"), F.sum(F.length("value"))).first()
    if rows != count or size != count * VALUE_SIZE:
        raise RuntimeError(f"the batch read returned {rows} rows of {size} bytes, not {count}")


# -- the reader alone, and its profile --------------------------------------------------------
def reader_alone(bootstrap: str) -> tuple[int, float]:
    """Every partition through ``BatchReader.read`` in this process (no Spark)."""
    from odradek.spark.datasource import read_schema
    from odradek.spark.read_batch import BatchReader

    reader = BatchReader(odradek_options(bootstrap), read_schema(False))
    rows = 0
    started = time.perf_counter()
    for partition in reader.partitions():
        for batch in reader.read(partition):
            rows += batch.num_rows
    return rows, time.perf_counter() - started


def reader_worker(spec: dict[str, Any]) -> dict[str, Any]:
    rows, seconds = reader_alone(spec["bootstrap"])
    return {"count": rows, "seconds": seconds}


def profile_reader(bootstrap: str, workdir: Path) -> list[str]:
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        return [f"py-spy not in the venv ({py_spy}); profile skipped (`make bench-tools`)."]
    raw = workdir / "profile-reader.txt"
    spec = json.dumps({"bootstrap": bootstrap, "reader": True})
    command = [str(py_spy), "record", "-o", str(raw), "--format", "raw"]
    command += ["-r", str(PROFILE_RATE_HZ), "--", sys.executable, __file__, "--worker", spec]
    process = subprocess.run(command, capture_output=True, timeout=WORKER_TIMEOUT_S, check=False)
    if process.returncode or not raw.exists():
        return [f"profile failed: {process.stderr.decode(errors='replace')[-800:]}"]
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = stack.split(";")
        if any("importlib" in frame for frame in frames):
            continue
        total += int(count_text)
        own[shorten(frames[-1])] += int(count_text)
    if not total:
        return ["profile: no samples"]
    lines = [
        f"odradek reader alone under py-spy ({total:,} samples of busy threads at "
        f"{PROFILE_RATE_HZ} Hz, imports left out), self time:",
        "",
        "| function | share |",
        "|---|--:|",
    ]
    lines += [f"| `{name}` | {n / total:.1%} |" for name, n in own.most_common(12)]
    return lines


def shorten(frame: str) -> str:
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    path = "odradek/" + path.rsplit("/odradek/", 1)[1] if "/odradek/" in path else Path(path).name
    return f"{path}:{name}"


# -- report -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k records, 1 round")
    parser.add_argument("--records", type=int, help="records per measurement (1000000)")
    parser.add_argument("--rounds", type=int, help="rounds (2; quick 1)")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    parser.add_argument("--strict", action="store_true", help="exit 1 if the goal is missed")
    parser.add_argument("--dir", type=Path, default=REPO / "var", help="parent of the work dir")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        result = reader_worker(spec) if spec.get("reader") else consume_worker(spec)
        print(json.dumps(result), flush=True)
        return 0
    try:
        import confluent_kafka
        import pyspark
    except ImportError as error:
        print(f"spark bench skipped: {error} (install the extra: pip install -e '.[spark]')")
        return 0
    count = args.records or (100_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 2)
    if count < PARTITIONS:
        parser.error(f"--records must be at least {PARTITIONS}")

    started = time.perf_counter()
    load_start = load_average()
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir))
    shown = workdir.relative_to(REPO) if workdir.is_relative_to(REPO) else workdir
    print(
        f'### spark: reading with `format("odradek")` (`make bench`; '
        f"`.venv/bin/python bench/spark.py{' --quick' if args.quick else ''}`)\n\n"
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs shared by the broker, "
        f"Spark and the consumer. pyspark {pyspark.__version__} local[2], confluent-kafka "
        f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}). One "
        f"odradek broker (data in {shown}/), one topic of {PARTITIONS} partitions holding "
        f"{count:,} records of {VALUE_SIZE} B values; every Spark read goes into the `noop` "
        f"sink. Best of {rounds} round{'s' if rounds > 1 else ''}. Load average at start: "
        f"{show_load(load_start)}.\n",
        flush=True,
    )
    warn_if_busy(load_start)
    errors: list[str] = []
    best: dict[str, float] = {}
    broker: OdradekBroker | None = None
    spark = None

    def record(kind: str, seconds: float | None) -> None:
        if seconds:
            best[kind] = max(best.get(kind, 0.0), count / seconds)

    try:
        broker = OdradekBroker(workdir, ready_timeout_s=READY_TIMEOUT_S)
        broker.create_topic(TOPIC, PARTITIONS)
        progress(f"writing {count:,} records with confluent-kafka")
        fill_s = fill(broker.bootstrap, count)
        written = end_offsets(broker.bootstrap)
        if written != count:
            raise RuntimeError(f"{TOPIC} holds {written} records, not {count}")
        progress(f"written in {fill_s:.1f} s; starting Spark")
        spark = spark_session(workdir)
        check_batch_rows(spark, broker.bootstrap, count)
        # The JVM compiles the Arrow-to-row path only after it has run a while: the first
        # runs of a fresh session are several times slower than the next ones. So every
        # Spark measurement runs once, untimed, before the rounds.
        progress("warming up the JVM (each Spark read once, untimed)")
        batch_read(spark, broker.bootstrap)
        stream_read(spark, broker.bootstrap, workdir / "checkpoint-warm-up", count)
        range_rows(spark, count)
        ceiling_read(spark, count)
        for number in range(rounds):
            progress(f"round {number + 1}: plain confluent-kafka consumer")
            consumed = run_consumer(broker.bootstrap, count)
            if "error" in consumed:
                errors.append(f"consumer: {consumed['error']}")
            else:
                record("consumer", consumed["seconds"])
            progress(f"round {number + 1}: batch read")
            record("batch", batch_read(spark, broker.bootstrap))
            progress(f"round {number + 1}: streaming read (AvailableNow)")
            checkpoint = workdir / f"checkpoint-{number}"
            record("stream", stream_read(spark, broker.bootstrap, checkpoint, count))
            progress(f"round {number + 1}: spark.range")
            record("range", range_rows(spark, count))
            progress(f"round {number + 1}: Python source ceiling")
            record("ceiling", ceiling_read(spark, count))
        progress("the sink: a batch write of the same rows (once, after a small warm-up)")
        broker.create_topic(SINK_TOPIC, PARTITIONS)
        sink_write(spark, broker.bootstrap, SINK_TOPIC, max(count // 10, PARTITIONS))
        write_s = sink_write(spark, broker.bootstrap, SINK_TOPIC, count)
        best["write"] = count / write_s
        best["fill"] = count / fill_s
        progress("the odradek reader alone")
        rows, seconds = reader_alone(broker.bootstrap)
        if rows != count:
            errors.append(f"reader alone: {rows} rows, not {count}")
        else:
            best["reader"] = rows / seconds

        consumer = best.get("consumer")
        names = {
            "batch": '(a) batch read `format("odradek")`',
            "stream": "(b) streaming read, AvailableNow",
            "range": "(c) `spark.range`, same width (engine ceiling)",
            "ceiling": "(d) Python source yielding ready Arrow batches (Python ceiling)",
            "consumer": "(e) plain confluent-kafka consumer",
            "reader": "odradek reader alone, no Spark, one process (one core)",
        }
        writes = {
            "write": 'batch write `df.write.format("odradek")` (2 tasks)',
            "fill": "confluent-kafka producer (the fill, one process)",
        }
        lines = [
            "| read | rows/s | MB/s | vs consumer | vs Python ceiling |",
            "|---|--:|--:|--:|--:|",
        ]
        for kind, label in names.items():
            value = best.get(kind)
            if value is None:
                lines.append(f"| {label} | error | | | |")
                continue
            vs_consumer = f"{value / consumer:.2f}x" if consumer else "—"
            ceiling = best.get("ceiling")
            vs_ceiling = f"{value / ceiling:.2f}x" if ceiling else "—"
            lines.append(
                f"| {label} | {value:,.0f} | {value * VALUE_SIZE / 1e6:,.1f} | {vs_consumer} "
                f"| {vs_ceiling} |"
            )
        print("\n".join([*lines, ""]), flush=True)
        lines = ["| write (informational) | rows/s | MB/s |", "|---|--:|--:|"]
        for kind, label in writes.items():
            value = best.get(kind)
            lines.append(f"| {label} | {value:,.0f} | {value * VALUE_SIZE / 1e6:,.1f} |")
        print("\n".join([*lines, ""]), flush=True)
        misses = 0
        if consumer:
            for kind in ("batch", "stream"):
                value = best.get(kind)
                ok = value is not None and value / consumer >= GOAL
                misses += not ok
                shown_ratio = f"{value / consumer:.2f}x" if value else "error"
                print(
                    f"- goal {names[kind]}: {shown_ratio} of the consumer "
                    f"(≥ {GOAL}x {'PASS' if ok else 'MISS'})",
                    flush=True,
                )
            print(flush=True)
        if not args.no_profile:
            print("#### Profile (py-spy)\n", flush=True)
            print("\n".join([*profile_reader(broker.bootstrap, workdir), ""]), flush=True)
    except Exception as error:
        errors.append(f"{type(error).__name__}: {error}")
        misses = 0
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return finish("spark", started, errors, misses, args.strict)


if __name__ == "__main__":
    sys.exit(main())

"""Clickstream job: page views per page per minute, from ``clicks`` to ``page-counts`` + Parquet.

A Structured Streaming job on the odradek connector::

    clicks (JSON) --readStream.format("odradek")--> from_json --> withWatermark("ts")
        --> count per (1-minute window, page) --> writeStream.format("odradek") to page-counts
                                             \\-> writeStream.format("parquet")

Each sink is its own streaming query with its own checkpoint (Spark keeps offsets,
aggregation state and sink progress there), so a restarted job resumes where it stopped.
Output mode is append: a window's count is written once, when the watermark passes the
window's end (events up to ``--watermark`` late are still counted). A ``page-counts``
record has the page as key and ``{"window_start", "window_end", "page", "views"}`` as
JSON value.

Run locally: ``python examples/clickstream/job.py --bootstrap-servers HOST:PORT``; on a
cluster with ``spark-submit`` (see examples/clickstream/README.md). ``--available-now``
processes what is in the topic and stops (Trigger.AvailableNow), otherwise micro-batches
run every ``--trigger-interval`` until interrupted or ``--timeout``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

CLICK_SCHEMA = "user string, page string, ts timestamp"
DEFAULT_OUTPUT = "var/clickstream"


def page_counts(
    spark: Any,
    bootstrap: str,
    *,
    topic: str = "clicks",
    starting_offsets: str = "earliest",
    window: str = "1 minute",
    watermark: str = "1 minute",
    max_offsets_per_trigger: int | None = None,
) -> Any:
    """The streaming DataFrame ``window_start, window_end, page, views``."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    clicks = (
        reader.load()
        .select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("click"))
        .select("click.*")
        .where(F.col("page").isNotNull() & F.col("ts").isNotNull())  # malformed events
    )
    return (
        clicks.withWatermark("ts", watermark)
        .groupBy(F.window("ts", window), "page")
        .count()
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            F.col("count").alias("views"),
        )
    )


def start_queries(
    counts: Any,
    bootstrap: str,
    *,
    output: Path,
    counts_topic: str = "page-counts",
    available_now: bool = False,
    trigger_interval: str = "5 seconds",
) -> list[Any]:
    """Start the two sinks of ``counts``: the topic and Parquet under ``output``."""
    from pyspark.sql import functions as F

    def trigger(writer: Any) -> Any:
        if available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=trigger_interval)

    to_topic = counts.select(
        F.col("page").alias("key"),
        F.to_json(F.struct("window_start", "window_end", "page", "views")).alias("value"),
    )
    topic_query = trigger(
        to_topic.writeStream.format("odradek")
        .queryName("page_counts_to_topic")
        .outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", counts_topic)
        .option("checkpointLocation", str(output / "checkpoints" / "topic"))
    ).start()
    parquet_query = trigger(
        counts.writeStream.format("parquet")
        .queryName("page_counts_to_parquet")
        .outputMode("append")
        .option("path", str(output / "parquet"))
        .option("checkpointLocation", str(output / "checkpoints" / "parquet"))
    ).start()
    return [topic_query, parquet_query]


def session(master: str | None, config: dict[str, str] | None = None) -> Any:
    from pyspark.sql import SparkSession

    import odradek.spark

    builder = SparkSession.builder.appName("odradek-clickstream")
    if master:
        builder = builder.master(master)
        if master.startswith("local"):
            # Local Python workers run this interpreter (the one with odradek installed);
            # on a cluster, PYSPARK_PYTHON comes from the cluster's configuration.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = (
        builder.config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    # Needed only when odradek is shipped with --py-files (an installed odradek is
    # found by Spark's static discovery of pyspark_odradek); harmless otherwise.
    odradek.spark.register(spark)
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--clicks-topic", default="clicks")
    parser.add_argument("--counts-topic", default="page-counts")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="Parquet + checkpoints")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--watermark", default="1 minute")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--available-now", action="store_true", help="process all, then stop")
    parser.add_argument("--trigger-interval", default="5 seconds")
    parser.add_argument("--timeout", type=float, default=None, help="stop after N seconds")
    parser.add_argument("--master", default=None, help="e.g. local[2]; spark-submit sets it")
    args = parser.parse_args(argv)

    spark = session(args.master)
    counts = page_counts(
        spark,
        args.bootstrap_servers,
        topic=args.clicks_topic,
        starting_offsets=args.starting_offsets,
        watermark=args.watermark,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    queries = start_queries(
        counts,
        args.bootstrap_servers,
        output=Path(args.output),
        counts_topic=args.counts_topic,
        available_now=args.available_now,
        trigger_interval=args.trigger_interval,
    )
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        for query in queries:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            query.awaitTermination(left)
    except KeyboardInterrupt:
        pass
    finally:
        for query in queries:
            query.stop()
    failed = [q for q in queries if q.exception() is not None]
    for query in failed:
        print(f"job: query {query.name} failed: {query.exception()}", file=sys.stderr)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

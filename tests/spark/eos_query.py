"""A checkpointed streaming query with the exactly-once odradek sink, run as its own
process so a test can SIGKILL it (driver, JVM and Python workers) mid-batch:

    python -m tests.spark.eos_query BOOTSTRAP SOURCE SINK CHECKPOINT WORK MODE

It reads SOURCE with the odradek source (read_committed, small micro-batches) and
writes key and value to SINK with ``deliveryGuarantee=exactly-once``. MODE ``forever``
runs micro-batches until killed; ``drain`` runs ``availableNow`` to the source's end,
prints each batch's input row count as ``rows N`` and exits 0. ``ready`` is printed once
the query has started. Where the test kills the query is not left to luck: it sets the
sink's test hook ``ODRADEK_SPARK_EOS_TEST_PAUSE`` (odradek/spark/write_exactly_once.py)
in this process's environment, which Spark's JVM and Python workers inherit, and the
sink stops at the named point of the named micro-batch until the test kills it.
"""

from __future__ import annotations

import os
import sys


def main(bootstrap: str, source: str, sink: str, checkpoint: str, work: str, mode: str) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-eos-query")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        # Small Arrow batches: a task sends its first rows (and opens its transaction)
        # long before it ends, so the "open" pause point has more rows to come.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
        .config("spark.local.dir", os.path.join(work, "local"))
        .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    stream = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "240")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    writer = (
        stream.select("key", "value")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("kafka.transaction.timeout.ms", "20000")
        .option("kafka.linger.ms", "5")
        .option("checkpointLocation", checkpoint)
    )
    if mode == "drain":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime="100 milliseconds").start()
    print("ready", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        print(f"failed {query.exception()}", flush=True)
        return 1
    for progress in query.recentProgress:
        print(f"rows {progress['numInputRows']}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))

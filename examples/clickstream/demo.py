"""``make demo``: broker, generator and Spark job end to end on one machine.

1. ``odradek serve`` on 127.0.0.1 with an ephemeral port, data in ``var/demo/`` (wiped
   at the start of every run);
2. the generator sends click events to ``clicks`` at a steady rate, with event time
   running 60x faster than the wall clock (one minute of clicks per second), so that the
   job's one-minute windows close while you watch;
3. the Structured Streaming job (``job.py``, local[2]) counts views per page per minute
   and writes closed windows to the topic ``page-counts`` and to Parquet; its progress
   (micro-batch, rows read, watermark) is printed as it runs;
4. once the generator is done and the job has caught up, the top pages are read back
   from Parquet and from ``page-counts`` (with odradek's consumer) and printed;
5. the job and then the broker (by pid) are stopped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import job  # noqa: E402

READY_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 120.0
TOP = 5


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``odradek serve`` on port 0; returns the process and its bootstrap address."""
    log = open(workdir / "broker.log", "ab")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--data-dir",
            str(workdir / "data"),
            "--listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=REPO,
    )
    log.close()
    assert process.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(process.stdout.fileno(), 1)
            if not chunk:
                break
            line += chunk
        elif process.poll() is not None:
            break
    text = line.decode().strip()
    if not text.startswith("odradek ready "):
        stop(process)
        raise RuntimeError(f"broker did not start ({text!r}); see {workdir / 'broker.log'}")
    return process, text.split()[2].split("://", 1)[1]


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM by pid, SIGKILL if it does not exit within 20 s."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def watermark_of(query: Any) -> datetime.datetime | None:
    report = query.lastProgress
    text = report.get("eventTime", {}).get("watermark") if report else None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def reached(watermark: datetime.datetime | None, final: datetime.datetime) -> bool:
    return watermark is not None and watermark >= final


def follow(
    queries: list[Any], generator: subprocess.Popen[bytes], final: datetime.datetime
) -> None:
    """Print each new micro-batch until the generator is done and both queries have run a
    batch at the final watermark (the one that writes every window it closes)."""
    shown: dict[str, int] = {}
    deadline: float | None = None
    while True:
        for query in queries:
            if query.exception() is not None:
                raise RuntimeError(f"{query.name} failed: {query.exception()}")
            report = query.lastProgress
            if report and shown.get(query.name) != report["batchId"]:
                shown[query.name] = report["batchId"]
                watermark = report.get("eventTime", {}).get("watermark", "-")
                print(
                    f"job: {query.name}: batch {report['batchId']}, "
                    f"{report['numInputRows']} clicks in, watermark {watermark}",
                    flush=True,
                )
        if generator.poll() is not None:
            if generator.returncode:
                raise RuntimeError(f"generator failed (exit {generator.returncode})")
            if deadline is None:
                print("demo: generator done; waiting for the job to catch up", flush=True)
                deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
            if all(reached(watermark_of(q), final) for q in queries):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the job did not reach watermark {final} in time")
        time.sleep(0.2)


def top_from_topic(bootstrap: str, topic: str) -> Counter[str]:
    from odradek.client import AdminClient, Consumer, TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        partitions = sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    finally:
        admin.close()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "demo-readback", "enable.auto.commit": False}
    )
    views: Counter[str] = Counter()
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        remaining = sum(ends.values())
        deadline = time.monotonic() + 30
        while remaining > 0 and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                if message.error() is None:
                    record = json.loads(message.value())
                    views[record["page"]] += record["views"]
                    remaining -= 1
    finally:
        consumer.close()
    return views


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=6_000)
    parser.add_argument("--rate", type=float, default=400.0, help="clicks per wall second")
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "demo")
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)

    broker, bootstrap = start_broker(args.workdir)
    print(f"demo: broker pid {broker.pid} at {bootstrap}, data in {args.workdir}", flush=True)
    generator: subprocess.Popen[bytes] | None = None
    spark = None
    try:
        import generator as clicks_generator

        clicks_generator.ensure_topic(bootstrap, "clicks", 2)
        clicks_generator.ensure_topic(bootstrap, "page-counts", 1)
        spark = job.session("local[2]", {"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        counts = job.page_counts(spark, bootstrap, watermark="1 minute")
        queries = job.start_queries(
            counts, bootstrap, output=args.workdir / "job", trigger_interval="2 seconds"
        )
        print("demo: job started (2 queries, micro-batches every 2 s)", flush=True)
        step_ms = 60_000 / args.rate  # one minute of event time per wall second
        start_ms = int(time.time() * 1000)
        last_ms = start_ms + int((args.clicks - 1) * step_ms)
        final = datetime.datetime.fromtimestamp((last_ms - 60_000) / 1000, datetime.UTC)
        generator = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "generator.py"),
                "--bootstrap-servers",
                bootstrap,
                "--count",
                str(args.clicks),
                "--rate",
                str(args.rate),
                "--event-step-ms",
                str(step_ms),
                "--start",
                clicks_generator.iso_ms(start_ms),
            ],
            cwd=REPO,
        )
        follow(queries, generator, final)
        for query in queries:
            query.stop()

        from pyspark.sql import functions as F

        windows = spark.read.parquet(str(args.workdir / "job" / "parquet"))
        closed = windows.select("window_start").distinct().count()
        top = (
            windows.groupBy("page")
            .agg(F.sum("views").alias("views"))
            .orderBy(F.desc("views"), "page")
            .limit(TOP)
            .collect()
        )
        from_topic = top_from_topic(bootstrap, "page-counts")
        print(
            f"\ntop {TOP} pages over {closed} closed one-minute windows "
            f"(the last minute or two are still open: the watermark lags by one minute)",
            flush=True,
        )
        print(f"{'page':<18} {'views (Parquet)':>16} {'views (page-counts)':>20}")
        for row in top:
            print(f"{row.page:<18} {row.views:>16} {from_topic.get(row.page, 0):>20}")
        same = sum(from_topic.values()) == windows.agg(F.sum("views")).first()[0]
        print(f"\nParquet and page-counts agree: {'yes' if same else 'NO'}", flush=True)
        return 0 if same else 1
    except Exception as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1
    finally:
        if generator is not None and generator.poll() is None:
            stop(generator)  # type: ignore[arg-type]
        if spark is not None:
            for query in spark.streams.active:
                query.stop()
            spark.stop()
        stop(broker)
        print(f"demo: broker (pid {broker.pid}) stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""``odradek perf produce|consume``: throughput and latency, like Kafka's perf tests.

How this works and why: ``produce`` sends ``--num-records`` records of
``--record-size`` bytes (optionally paced to ``--throughput`` records/s) and times
each from ``produce()`` to its delivery report; ``consume`` reads ``--messages``
records from the beginning of a topic. A rich progress bar runs on stderr while
they work; the summary goes to stdout (``--output json`` for scripts).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from odradek.cli.common import (
    CliError,
    admin_client,
    bootstrap_option,
    command_config,
    output_option,
    topic_partitions,
)
from odradek.client._core.types import TopicPartition
from odradek.client.consumer.blocking import OFFSET_BEGINNING, Consumer
from odradek.client.producer.blocking import Producer

MB = 1024 * 1024


def _progress(total: int, quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>10.0f} rec/s"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=quiet,
        transient=True,
    )


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(fraction * len(sorted_values)))
    return sorted_values[index]


def _report(output: str, summary: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(summary) if output == "json" else text)


@click.group()
def perf() -> None:
    """Measure produce and consume throughput and latency."""


@perf.command("produce")
@click.argument("topic")
@click.option("--num-records", "-n", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--record-size", "-s", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--throughput", type=int, default=-1, show_default=True, help="records/s, -1 = max")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True)
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=16_384, show_default=True)
@click.option("--quiet", "-q", is_flag=True, help="no progress bar")
@bootstrap_option
@output_option
def produce(
    topic: str,
    num_records: int,
    record_size: int,
    throughput: int,
    acks: str,
    compression: str,
    linger_ms: int,
    batch_size: int,
    quiet: bool,
    bootstrap: str,
    output: str,
) -> None:
    """Send NUM_RECORDS records to TOPIC and report records/s, MB/s and latency."""
    payload = os.urandom(record_size)
    latencies: list[float] = []
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "odradek-perf-producer",
            **command_config(),
            "acks": acks,
            "compression.type": compression,
            "linger.ms": linger_ms,
            "batch.size": batch_size,
            "enable.idempotence": acks in ("all", "-1"),
        }
    )
    try:
        # the Producer starts without a broker: an unreachable cluster fails here
        producer.list_topics(timeout=30)
    except BaseException:
        producer.close(0)
        raise
    start = time.perf_counter()
    try:
        with _progress(num_records, quiet) as progress:
            task = progress.add_task("producing", total=num_records, rate=0.0)
            for i in range(num_records):
                sent = time.perf_counter()

                def done(error: Any, _message: Any, sent: float = sent) -> None:
                    if error is not None:
                        errors.append(str(error))
                    else:
                        latencies.append((time.perf_counter() - sent) * 1000)

                while True:
                    try:
                        producer.produce(topic, payload, on_delivery=done)
                        break
                    except BufferError:
                        producer.poll(0.05)
                if throughput > 0:
                    ahead = (i + 1) / throughput - (time.perf_counter() - start)
                    if ahead > 0:
                        time.sleep(ahead)
                if i % 1000 == 999 or i == num_records - 1:
                    producer.poll(0)
                    elapsed = time.perf_counter() - start
                    progress.update(task, completed=i + 1, rate=(i + 1) / max(elapsed, 1e-9))
            producer.flush(120)
    finally:
        producer.close(10)
    elapsed = time.perf_counter() - start
    if errors:
        raise CliError(f"{len(errors)} records failed, first: {errors[0]}")
    latencies.sort()
    count = len(latencies)
    summary = {
        "records": count,
        "elapsed_s": round(elapsed, 3),
        "records_per_sec": round(count / elapsed, 1),
        "mb_per_sec": round(count * record_size / MB / elapsed, 2),
        "avg_latency_ms": round(sum(latencies) / count, 2) if count else 0.0,
        "max_latency_ms": round(latencies[-1], 2) if count else 0.0,
        "p50_ms": round(_percentile(latencies, 0.50), 2),
        "p95_ms": round(_percentile(latencies, 0.95), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
        "p999_ms": round(_percentile(latencies, 0.999), 2),
    }
    _report(
        output,
        summary,
        f"{count} records sent, {summary['records_per_sec']} records/sec "
        f"({summary['mb_per_sec']} MB/sec), {summary['avg_latency_ms']} ms avg latency, "
        f"{summary['max_latency_ms']} ms max latency, {summary['p50_ms']} ms 50th, "
        f"{summary['p95_ms']} ms 95th, {summary['p99_ms']} ms 99th, "
        f"{summary['p999_ms']} ms 99.9th.",
    )


@perf.command("consume")
@click.argument("topic")
@click.option("--messages", "-n", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="give up after this long without a record",
)
@click.option("--quiet", "-q", is_flag=True, help="no progress bar")
@bootstrap_option
@output_option
def consume(
    topic: str, messages: int, timeout_ms: int, quiet: bool, bootstrap: str, output: str
) -> None:
    """Read MESSAGES records of TOPIC from the beginning; report records/s and MB/s."""
    with admin_client(bootstrap) as admin:
        partitions = topic_partitions(admin, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "odradek-perf-consumer",
            **command_config(),
            "enable.auto.commit": False,
        }
    )
    count = size = 0
    start = time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        with _progress(messages, quiet) as progress:
            task = progress.add_task("consuming", total=messages, rate=0.0)
            idle = time.perf_counter()
            while count < messages:
                batch = consumer.consume(min(500, messages - count), 0.2)
                now = time.perf_counter()
                if not batch:
                    if now - idle > timeout_ms / 1000:
                        break
                    continue
                idle = now
                count += len(batch)
                size += sum(len(m.value() or b"") for m in batch)
                progress.update(task, completed=count, rate=count / max(now - start, 1e-9))
    finally:
        consumer.close()
    elapsed = time.perf_counter() - start
    summary = {
        "records": count,
        "elapsed_s": round(elapsed, 3),
        "records_per_sec": round(count / elapsed, 1),
        "mb": round(size / MB, 3),
        "mb_per_sec": round(size / MB / elapsed, 2),
    }
    _report(
        output,
        summary,
        f"{count} records read ({summary['mb']} MB) in {summary['elapsed_s']} s: "
        f"{summary['records_per_sec']} records/sec, {summary['mb_per_sec']} MB/sec.",
    )
    if count < messages:
        raise CliError(f"only {count} of {messages} records arrived within {timeout_ms} ms")

"""``odradek produce TOPIC``: one record per line of standard input.

How this works and why: lines are read as bytes (only the line break is dropped, so
values round-trip byte-exactly), split into key and value at the first
``--key-separator`` when one is given, and handed to the client's ``Producer``; the
first failed delivery is reported as one line with exit status 1 after a flush.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from odradek.cli.common import (
    CliError,
    bootstrap_option,
    command_config,
    one_topic,
    parse_pairs,
    topic_argument,
)
from odradek.client.producer.blocking import Producer

CHECK_TIMEOUT_S = 30.0


@click.command()
@topic_argument
@click.option("--key-separator", "-K", help="split each line into KEY<sep>VALUE at the first sep")
@click.option(
    "--headers",
    "-H",
    "headers",
    multiple=True,
    help="KEY=VALUE[,KEY=VALUE...] headers added to every record (repeatable)",
)
@click.option(
    "--compression",
    "-z",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@click.option(
    "--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True
)
@click.option("--partition", "-p", type=click.IntRange(min=0), help="send every record here")
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--property", "-X", "properties", multiple=True, help="producer KEY=VALUE")
@bootstrap_option
def produce(
    topic: str | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    compression: str,
    acks: str,
    partition: int | None,
    linger_ms: int,
    properties: tuple[str, ...],
    bootstrap: str,
    topic_option: str | None = None,
) -> None:
    """Send each line of standard input as a record to TOPIC."""
    topic = one_topic(topic, topic_option)
    record_headers = [(k, v.encode()) for k, v in parse_pairs(headers, "--headers").items()]
    separator = key_separator.encode() if key_separator else None
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "odradek-cli-producer",
        "compression.type": compression,
        "acks": acks,
        "linger.ms": linger_ms,
        "enable.idempotence": acks in ("all", "-1"),
        # keys land where kafka-console-producer (the Java client) puts them, not
        # where the Producer's confluent-kafka default would; --property overrides
        "partitioner": "murmur2_random",
    }
    config.update(command_config())
    config.update(parse_pairs(properties, "--property"))
    failures: list[str] = []

    def report(error: Any, message: Any) -> None:
        if error is not None and not failures:
            failures.append(str(error))

    producer = Producer(config)
    try:
        # The Producer starts without a broker (as confluent-kafka's does) and would
        # hold records until message.timeout.ms: an unreachable cluster fails here, in
        # one line, instead.
        producer.list_topics(timeout=CHECK_TIMEOUT_S)
        for number, raw in enumerate(sys.stdin.buffer, 1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            key: bytes | None = None
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    raise CliError(f"line {number} has no key separator {key_separator!r}")
            else:
                value = line
            while True:
                try:
                    producer.produce(
                        topic,
                        value,
                        key,
                        partition=-1 if partition is None else partition,
                        headers=record_headers or None,
                        on_delivery=report,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            if failures:
                break
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining:
            raise CliError(f"{remaining} records were not delivered in time")
    finally:
        producer.close(10)
    if failures:
        raise CliError(f"delivery failed: {failures[0]}")

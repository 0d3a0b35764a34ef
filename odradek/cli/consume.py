"""``odradek consume TOPIC``: print records, as text or JSON lines.

How this works and why: without ``--group`` the tool assigns the partitions itself
(all, or ``--partition``) and starts at ``--offset``, the beginning
(``--from-beginning``) or the end; with ``--group`` it joins the group (subscribe)
and commits what it printed. It stops after ``--max-messages`` records, after
``--timeout-ms`` without a record, or on Ctrl-C. Keys and values are written as raw
bytes in the text format; the JSON format decodes them as UTF-8 (replacing bad bytes).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, BinaryIO

import click

from odradek.cli.common import admin_client, bootstrap_option, parse_pairs, topic_partitions
from odradek.client.consumer_sync import OFFSET_BEGINNING, OFFSET_END, Consumer
from odradek.client.types import Message, TopicPartition


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def _write(out: BinaryIO, message: Message, options: dict[str, Any]) -> None:
    if options["format"] == "json":
        record = {
            "topic": message.topic(),
            "partition": message.partition(),
            "offset": message.offset(),
            "timestamp": message.timestamp()[1],
            "key": _text(message.key()),
            "value": _text(message.value()),
            "headers": {k: _text(v) for k, v in (message.headers() or [])},
        }
        out.write(json.dumps(record).encode() + b"\n")
        return
    separator: bytes = options["separator"]
    parts: list[bytes] = []
    if options["print_timestamp"]:
        kind, ts = message.timestamp()
        name = {1: "CreateTime", 2: "LogAppendTime"}.get(kind, "NoTimestamp")
        parts.append(f"{name}:{ts}".encode())
    if options["print_partition"]:
        parts.append(f"Partition:{message.partition()} Offset:{message.offset()}".encode())
    if options["print_headers"]:
        headers = message.headers() or []
        parts.append(
            b",".join(k.encode() + b":" + (v if v is not None else b"null") for k, v in headers)
            or b"NO_HEADERS"
        )
    if options["print_key"]:
        key = message.key()
        parts.append(b"null" if key is None else key)
    value = message.value()
    parts.append(b"null" if value is None else value)
    out.write(separator.join(parts) + b"\n")


@click.command()
@click.argument("topic")
@click.option("--group", "-g", help="consume as this group (and commit offsets)")
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset")
@click.option("--offset", type=int, help="start at this offset (needs --partition)")
@click.option("--partition", "-p", type=click.IntRange(min=0), help="only this partition")
@click.option("--max-messages", "-n", type=click.IntRange(min=1), help="stop after N records")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="stop after this long idle")
@click.option("--print-key", is_flag=True)
@click.option("--print-headers", is_flag=True)
@click.option("--print-timestamp", is_flag=True)
@click.option("--print-partition", is_flag=True, help="print partition and offset")
@click.option("--separator", default="\t", show_default=True, help="between printed fields")
@click.option("--format", "format_", type=click.Choice(["text", "json"]), default="text")
@click.option("--property", "-X", "properties", multiple=True, help="consumer KEY=VALUE")
@bootstrap_option
def consume(
    topic: str,
    group: str | None,
    from_beginning: bool,
    offset: int | None,
    partition: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_headers: bool,
    print_timestamp: bool,
    print_partition: bool,
    separator: str,
    format_: str,
    properties: tuple[str, ...],
    bootstrap: str,
) -> None:
    """Print records of TOPIC to standard output."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "odradek-cli-consumer",
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.auto.commit": group is not None,
    }
    if group is not None:
        config["group.id"] = group
    config.update(parse_pairs(properties, "--property"))
    options = {
        "format": format_,
        "separator": separator.encode(),
        "print_key": print_key,
        "print_headers": print_headers,
        "print_timestamp": print_timestamp,
        "print_partition": print_partition,
    }
    out = sys.stdout.buffer
    consumer = Consumer(config)
    try:
        if group is not None and partition is None:
            consumer.subscribe([topic])
        else:
            partitions = [partition] if partition is not None else _partitions(bootstrap, topic)
            start = OFFSET_BEGINNING if from_beginning else OFFSET_END
            if offset is not None:
                start = offset
            consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        seen = 0
        idle_since = time.monotonic()
        while max_messages is None or seen < max_messages:
            want = 500 if max_messages is None else min(500, max_messages - seen)
            messages = consumer.consume(want, 0.2)
            if not messages:
                if timeout_ms is not None and time.monotonic() - idle_since >= timeout_ms / 1000:
                    break
                continue
            idle_since = time.monotonic()
            for message in messages:
                _write(out, message, options)
            out.flush()
            seen += len(messages)
        if group is not None and seen:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _partitions(bootstrap: str, topic: str) -> list[int]:
    with admin_client(bootstrap) as admin:
        return topic_partitions(admin, topic)

"""``odradek consume TOPIC``: print records, as text or JSON lines.

How this works and why: without ``--group`` the tool assigns the partitions itself
(all, or ``--partition``) and starts at ``--offset`` (a number, ``earliest`` or
``latest``, as kafka-console-consumer takes it), the beginning
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

from odradek.cli.common import (
    CliError,
    admin_client,
    bootstrap_option,
    command_config,
    one_topic,
    parse_pairs,
    topic_argument,
    topic_partitions,
)
from odradek.client._core.errors import KafkaError
from odradek.client._core.errors import error_code as client_error_code
from odradek.client._core.types import KafkaException, Message, TopicPartition
from odradek.client.consumer.blocking import OFFSET_BEGINNING, OFFSET_END, Consumer


class StartOffset(click.ParamType):
    """kafka-console-consumer's ``--offset``: ``earliest``, ``latest`` or an offset >= 0."""

    name = "earliest|latest|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) or value in ("earliest", "latest"):
            return value
        word = str(value).strip().lower()
        if word in ("earliest", "latest"):
            return word
        if word.isdigit():
            return int(word)
        self.fail(f"{value!r} is not earliest, latest or an offset >= 0", param, ctx)


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
@topic_argument
@click.option("--group", "-g", help="consume as this group (and commit offsets)")
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset")
@click.option(
    "--offset",
    type=StartOffset(),
    help="start at earliest, latest or this offset (needs --partition)",
)
@click.option("--partition", "-p", type=click.IntRange(min=0), help="only this partition")
@click.option("--max-messages", "-n", type=click.IntRange(min=1), help="stop after N records")
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="stop after this long without a record (counted once partitions are assigned)",
)
@click.option("--print-key", is_flag=True)
@click.option("--print-headers", is_flag=True)
@click.option("--print-timestamp", is_flag=True)
@click.option("--print-partition", is_flag=True, help="print partition and offset")
@click.option("--separator", default="\t", show_default=True, help="between printed fields")
@click.option("--format", "format_", type=click.Choice(["text", "json"]), default="text")
@click.option("--property", "-X", "properties", multiple=True, help="consumer KEY=VALUE")
@bootstrap_option
def consume(
    topic: str | None,
    group: str | None,
    from_beginning: bool,
    offset: int | str | None,
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
    topic_option: str | None = None,
) -> None:
    """Print records of TOPIC to standard output."""
    topic = one_topic(topic, topic_option)
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
    config.update(command_config())
    config.update(parse_pairs(properties, "--property"))
    options = {
        "format": format_,
        "separator": separator.encode(),
        "print_key": print_key,
        "print_headers": print_headers,
        "print_timestamp": print_timestamp,
        "print_partition": print_partition,
    }
    consumer = Consumer(config)
    seen = 0
    try:
        if group is not None and partition is None:
            consumer.subscribe([topic])
        else:
            partitions = [partition] if partition is not None else _partitions(bootstrap, topic)
            start = OFFSET_BEGINNING if from_beginning or offset == "earliest" else OFFSET_END
            if isinstance(offset, int):
                assert partition is not None
                start = _checked_offset(consumer, topic, partition, offset, config)
            consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        seen = _print_records(consumer, options, max_messages, timeout_ms)
    except KeyboardInterrupt:  # Ctrl-C ends a consume: commit what was printed, quietly
        _commit(consumer, group, seen)
        consumer.close()
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    except BaseException:
        consumer.close()
        raise
    _commit(consumer, group, seen)
    consumer.close()


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
JOIN_ALLOWANCE_S = 30.0  # --timeout-ms waits this much longer for a first assignment


def _print_records(
    consumer: Consumer, options: dict[str, Any], max_messages: int | None, timeout_ms: int | None
) -> int:
    """Print records until ``max_messages``, or ``timeout_ms`` without one; the count.

    As with Kafka's ``--timeout-ms``, the idle time counts while partitions are
    assigned: joining a group (seconds) is not idleness."""
    out = sys.stdout.buffer
    seen = 0
    started = time.monotonic()
    idle_since: float | None = None
    while max_messages is None or seen < max_messages:
        want = 500 if max_messages is None else min(500, max_messages - seen)
        messages = [m for m in consumer.consume(want, 0.2) if m.error() is None]
        now = time.monotonic()
        if messages:
            idle_since = now
            for message in messages:
                _write(out, message, options)
            out.flush()
            seen += len(messages)
            continue
        if timeout_ms is None:
            continue
        if idle_since is None:
            if consumer.assignment():
                idle_since = now
            elif now - started >= timeout_ms / 1000 + JOIN_ALLOWANCE_S:
                break
        elif now - idle_since >= timeout_ms / 1000:
            break
    return seen


def _commit(consumer: Consumer, group: str | None, seen: int) -> None:
    """Commit what was printed; auto-commit may have done it already (``_NO_OFFSET``)."""
    if group is None or not seen:
        return
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as error:
        if client_error_code(error.error) != KafkaError._NO_OFFSET:
            raise


def _checked_offset(
    consumer: Consumer, topic: str, partition: int, offset: int, config: dict[str, Any]
) -> int:
    """``offset`` if the partition holds it (or it is the end); else say so, and where
    ``auto.offset.reset`` starts instead (or fail when it is ``none``/``error``)."""
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 30.0)
    if low <= offset <= high:
        return offset
    reset = str(config.get("auto.offset.reset", "latest")).lower()
    where = f"offset {offset} is out of range for {topic}-{partition} (offsets {low} to {high})"
    if reset in ("earliest", "smallest", "beginning"):
        click.echo(f"{where}: auto.offset.reset={reset} starts at {low}", err=True)
        return low
    if reset in ("latest", "largest", "end"):
        click.echo(f"{where}: auto.offset.reset={reset} starts at {high}", err=True)
        return high
    raise CliError(f"{where} and auto.offset.reset={reset}")


def _partitions(bootstrap: str, topic: str) -> list[int]:
    with admin_client(bootstrap) as admin:
        return topic_partitions(admin, topic)

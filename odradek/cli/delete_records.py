"""``odradek delete-records --offset-json-file F``: Kafka's ``kafka-delete-records.sh``.

How this works and why: the file is Kafka's,
``{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}``, where
``offset`` is the first offset to keep (-1: the high watermark, i.e. delete every
record). The whole file is checked before anything is sent, so a typo never deletes
half a plan. One DeleteRecords per leader goes through the client's ``AdminClient``,
and the output is Kafka's (``partition: t-0<TAB>low_watermark: 3`` or
``partition: t-0<TAB>error: ...`` per partition), so scripts written for the Kafka tool
read it unchanged. Unlike Kafka's tool, which exits 0 whatever happened, the exit status
is 1 when any partition failed, so a script can tell.
"""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import click

from odradek.cli.common import (
    REQUEST_TIMEOUT_S,
    CliError,
    admin_client,
    bootstrap_option,
    describe_failure,
)
from odradek.client._core.types import KafkaException, TopicPartition

HIGH_WATERMARK = -1  # DeleteRecords' "up to the high watermark" offset
FORMAT = '{"partitions": [{"topic": T, "partition": N, "offset": O}, ...], "version": 1}'


def read_plan(path: Path) -> dict[tuple[str, int], int]:
    """The file's ``{(topic, partition): offset}``; any flaw is one ``CliError``."""
    try:
        document: Any = json.loads(path.read_text())
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror or error}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CliError(f"{path} is not JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise CliError(f"{path}: expected {FORMAT}")
    version = document.get("version", 1)
    if version != 1:
        raise CliError(f"{path}: version {version!r} is not supported (only 1)")
    plan: dict[tuple[str, int], int] = {}
    duplicates: list[str] = []
    for index, entry in enumerate(document["partitions"]):
        where = f"{path}: partitions[{index}]"
        if not isinstance(entry, dict):
            raise CliError(f"{where} is not an object with topic, partition and offset")
        topic, partition, offset = (entry.get(k) for k in ("topic", "partition", "offset"))
        if not isinstance(topic, str) or not topic:
            raise CliError(f"{where}: topic must be a non-empty string, got {topic!r}")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise CliError(f"{where}: partition must be a number >= 0, got {partition!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < HIGH_WATERMARK:
            raise CliError(f"{where}: offset must be a number >= -1, got {offset!r}")
        if (topic, partition) in plan:
            duplicates.append(f"{topic}-{partition}")
        plan[(topic, partition)] = offset
    if duplicates:  # Kafka's message
        raise CliError(
            f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}"
        )
    if not plan:
        raise CliError(f"{path}: no partitions to delete records from")
    return plan


@click.command("delete-records")
@click.option(
    "--offset-json-file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help=f"the partitions and the offset to delete before: {FORMAT}",
)
@bootstrap_option
def delete_records(offset_json_file: Path, bootstrap: str) -> None:
    """Delete the records before the offsets of --offset-json-file (-1: all of them)."""
    plan = read_plan(offset_json_file)
    failed = 0
    with admin_client(bootstrap) as admin:
        click.echo("Executing records delete operation")
        before = {TopicPartition(t, p): offset for (t, p), offset in plan.items()}
        futures = admin.delete_records(before, request_timeout=REQUEST_TIMEOUT_S)
        click.echo("Records delete operation completed:")
        for (topic, partition), future in ((k, futures[TopicPartition(*k)]) for k in plan):
            try:
                deleted = future.result(REQUEST_TIMEOUT_S + 5)
            except KafkaException as error:
                failed += 1
                click.echo(f"partition: {topic}-{partition}\terror: {describe_failure(error)}")
                continue
            except concurrent.futures.TimeoutError:
                failed += 1
                click.echo(f"partition: {topic}-{partition}\terror: no answer in time")
                continue
            click.echo(f"partition: {topic}-{partition}\tlow_watermark: {deleted.low_watermark}")
    if failed:
        raise CliError(f"{failed} of {len(plan)} partitions failed")

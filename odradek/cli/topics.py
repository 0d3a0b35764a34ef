"""``odradek topics create|list|describe|delete|alter``.

How this works and why: every request goes through the client's ``AdminClient`` —
CreateTopics, DeleteTopics and CreatePartitions (one future per topic, so each topic's
error is reported by name), Metadata for listing and describing, ListOffsets for each
partition's earliest/latest offset, DescribeConfigs and IncrementalAlterConfigs for
configs. ``describe`` shows each partition's leader, replicas, ISR and offsets.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import click
from kio.schema.errors import ErrorCode

from odradek.cli.common import (
    REQUEST_TIMEOUT_S,
    CliError,
    admin_client,
    bootstrap_option,
    describe_failure,
    describe_topics,
    emit,
    error_code,
    list_offsets,
    output_option,
    parse_pairs,
    result,
)
from odradek.cli.configs import alter_configs, describe_configs
from odradek.cli.tools import KafkaActionGroup
from odradek.client._core.types import KafkaException
from odradek.client.admin.types import NewPartitions, NewTopic, OffsetSpec


def kafka_uuid(value: uuid.UUID | None) -> str | None:
    """A topic id as Kafka's tools print it: URL-safe base64 of the 16 bytes, unpadded."""
    if value is None:
        return None
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _names(
    names: tuple[str, ...], topic_options: tuple[str, ...], required: bool = False
) -> tuple[str, ...]:
    """NAMES and ``--topic`` (Kafka's spelling) together, each once."""
    every = tuple(dict.fromkeys((*names, *topic_options)))
    if required and not every:
        raise click.UsageError("Missing argument: name a topic (NAME or --topic NAME)")
    return every


@click.group(cls=KafkaActionGroup)
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


@topics.command("create")
@click.argument("names", nargs=-1)
@click.option("--topic", "topic_options", multiple=True, help="a topic (Kafka's spelling)")
@click.option("--partitions", "-p", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--replication-factor", "-r", type=click.IntRange(min=1), default=1, show_default=True
)
@click.option("--config", "-c", "config", multiple=True, help="KEY=VALUE (repeatable)")
@click.option("--if-not-exists", is_flag=True, help="succeed when the topic exists")
@bootstrap_option
def create(
    names: tuple[str, ...],
    partitions: int,
    replication_factor: int,
    config: tuple[str, ...],
    if_not_exists: bool,
    bootstrap: str,
    topic_options: tuple[str, ...] = (),
) -> None:
    """Create topics NAMES."""
    names = _names(names, topic_options, required=True)
    settings = parse_pairs(config)
    with admin_client(bootstrap) as admin:
        futures = admin.create_topics(
            [NewTopic(n, partitions, replication_factor, config=settings) for n in names],
            operation_timeout=REQUEST_TIMEOUT_S,
            request_timeout=REQUEST_TIMEOUT_S,
        )
        for name, future in futures.items():
            try:
                future.result(REQUEST_TIMEOUT_S + 5)
            except KafkaException as error:
                if if_not_exists and error_code(error) == ErrorCode.topic_already_exists:
                    continue
                raise CliError(f"cannot create topic {name}: {describe_failure(error)}") from None
            click.echo(f"Created topic {name}.")


@topics.command("list")
@click.option("--internal", is_flag=True, help="include internal topics")
@bootstrap_option
@output_option
def list_(internal: bool, bootstrap: str, output: str) -> None:
    """List topics."""
    with admin_client(bootstrap) as admin:
        names = sorted(admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
        described = describe_topics(admin, names, skip_missing=True)
    rows = [
        {
            "topic": name,
            "partitions": len(described[name].partitions),
            "internal": described[name].is_internal,
        }
        for name in described
        if internal or not described[name].is_internal
    ]
    if output == "json":
        emit(output, rows, [])
    else:
        for row in rows:
            click.echo(row["topic"])


@topics.command("describe")
@click.argument("names", nargs=-1)
@click.option("--topic", "topic_options", multiple=True, help="a topic (Kafka's spelling)")
@click.option("--configs", "with_configs", is_flag=True, help="also show non-default configs")
@bootstrap_option
@output_option
def describe(
    names: tuple[str, ...],
    with_configs: bool,
    bootstrap: str,
    output: str,
    topic_options: tuple[str, ...] = (),
) -> None:
    """Describe topics NAMES (default: all but internal ones)."""
    names = _names(names, topic_options)
    with admin_client(bootstrap) as admin:
        if names:
            described = describe_topics(admin, list(dict.fromkeys(names)))
        else:
            listed = sorted(admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
            every = describe_topics(admin, listed, skip_missing=True)
            described = {n: d for n, d in every.items() if not d.is_internal}
        # offline partitions (no live leader) have no offsets to ask for
        tps = [
            (name, p.id)
            for name, d in described.items()
            for p in d.partitions
            if p.leader is not None
        ]
        low = list_offsets(admin, tps, OffsetSpec.earliest())
        high = list_offsets(admin, tps, OffsetSpec.latest())
        live = set(admin.list_topics(timeout=REQUEST_TIMEOUT_S).brokers) if described else set()
        result_rows = []
        for name, d in described.items():
            parts = [
                {
                    "topic": name,
                    "partition": p.id,
                    "leader": p.leader.id if p.leader is not None else None,
                    "replicas": [n.id for n in p.replicas],
                    "isr": [n.id for n in p.isr],
                    "offline": [n.id for n in p.replicas if n.id not in live],
                    "earliest": low.get((name, p.id)),
                    "latest": high.get((name, p.id)),
                }
                for p in d.partitions
            ]
            entry: dict[str, Any] = {
                "topic": name,
                "topic_id": kafka_uuid(d.topic_id),
                "internal": d.is_internal,
                "partitions": parts,
            }
            if with_configs:
                entry["configs"] = {
                    c["name"]: c["value"]
                    for c in describe_configs(admin, "topic", name)
                    if not c["default"]
                }
            result_rows.append(entry)
    if output == "json":
        emit(output, result_rows, [])
        return
    for entry in result_rows:
        click.echo(
            f"Topic: {entry['topic']}  TopicId: {entry['topic_id']}  "
            f"PartitionCount: {len(entry['partitions'])}"
        )
        if entry.get("configs"):
            click.echo("Configs: " + ",".join(f"{k}={v}" for k, v in entry["configs"].items()))
        emit(
            output,
            entry["partitions"],
            ["partition", "leader", "replicas", "isr", "offline", "earliest", "latest"],
        )


@topics.command("delete")
@click.argument("names", nargs=-1)
@click.option("--topic", "topic_options", multiple=True, help="a topic (Kafka's spelling)")
@click.option("--if-exists", is_flag=True, help="succeed when a topic does not exist")
@bootstrap_option
def delete(
    names: tuple[str, ...], if_exists: bool, bootstrap: str, topic_options: tuple[str, ...] = ()
) -> None:
    """Delete topics NAMES."""
    names = _names(names, topic_options, required=True)
    with admin_client(bootstrap) as admin:
        futures = admin.delete_topics(
            list(dict.fromkeys(names)),
            operation_timeout=REQUEST_TIMEOUT_S,
            request_timeout=REQUEST_TIMEOUT_S,
        )
        for name, future in futures.items():
            try:
                future.result(REQUEST_TIMEOUT_S + 5)
            except KafkaException as error:
                if if_exists and error_code(error) == ErrorCode.unknown_topic_or_partition:
                    continue
                raise CliError(f"cannot delete topic {name}: {describe_failure(error)}") from None
            click.echo(f"Deleted topic {name}.")


@topics.command("alter")
@click.argument("name", required=False)
@click.option("--topic", "topic_options", multiple=True, help="a topic (Kafka's spelling)")
@click.option("--partitions", "-p", type=click.IntRange(min=1), help="new partition count")
@click.option("--config", "-c", "config", multiple=True, help="KEY=VALUE to set (repeatable)")
@click.option("--delete-config", "-d", multiple=True, help="KEY to reset to its default")
@bootstrap_option
def alter(
    name: str | None,
    partitions: int | None,
    config: tuple[str, ...],
    delete_config: tuple[str, ...],
    bootstrap: str,
    topic_options: tuple[str, ...] = (),
) -> None:
    """Grow a topic's partitions and/or change its configs."""
    given = _names((name,) if name else (), topic_options, required=True)
    if len(given) != 1:
        raise click.UsageError("alter one topic at a time")
    name = given[0]
    if partitions is None and not config and not delete_config:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    settings = parse_pairs(config)
    with admin_client(bootstrap) as admin:
        if partitions is not None:
            futures = admin.create_partitions(
                [NewPartitions(name, partitions)],
                operation_timeout=REQUEST_TIMEOUT_S,
                request_timeout=REQUEST_TIMEOUT_S,
            )
            result(futures[name], f"cannot alter topic {name}")
            click.echo(f"Topic {name} now has {partitions} partitions.")
        if settings or delete_config:
            alter_configs(admin, "topic", name, settings, list(delete_config))
            click.echo(f"Altered configs of topic {name}.")

"""``odradek topics create|list|describe|delete|alter``.

How this works and why: topic creation, deletion and partition growth go through the
client's ``AdminClient`` (one future per topic, raising on a per-topic error); config
changes and offsets use the raw ``Session`` from ``common``. ``describe`` shows each
partition's leader, replicas, ISR and its earliest/latest offsets.
"""

from __future__ import annotations

from typing import Any

import click

from odradek.cli.common import (
    DESCRIBE_CONFIGS,
    EARLIEST,
    LATEST,
    CliError,
    Session,
    bootstrap_option,
    emit,
    output_option,
    parse_pairs,
)
from odradek.cli.configs import alter_configs, describe_configs
from odradek.client.admin import AdminClient, NewPartitions, NewTopic
from odradek.client.types import KafkaException


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "client.id": "odradek-cli"})


def _wait(futures: dict[str, Any], verb: str) -> None:
    for name, future in futures.items():
        try:
            future.result(60)
        except KafkaException as error:
            raise CliError(f"cannot {verb} topic {name}: {error.error}") from None


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


@topics.command("create")
@click.argument("names", nargs=-1, required=True)
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
) -> None:
    """Create topics NAMES."""
    settings = parse_pairs(config)
    with _admin(bootstrap) as admin:
        futures = admin.create_topics(
            [NewTopic(n, partitions, replication_factor, config=settings) for n in names],
            operation_timeout=30,
        )
        for name, future in futures.items():
            try:
                future.result(60)
            except KafkaException as error:
                if if_not_exists and "TOPIC_ALREADY_EXISTS" in str(error.error):
                    continue
                raise CliError(f"cannot create topic {name}: {error.error}") from None
            click.echo(f"Created topic {name}.")


@topics.command("list")
@click.option("--internal", is_flag=True, help="include internal topics")
@bootstrap_option
@output_option
def list_(internal: bool, bootstrap: str, output: str) -> None:
    """List topics."""
    with Session(bootstrap) as session:
        metadata = session.metadata(None)
    rows = [
        {"topic": name, "partitions": len(info.partitions), "internal": info.is_internal}
        for name, info in sorted(metadata.topics.items())
        if internal or not info.is_internal
    ]
    if output == "json":
        emit(output, rows, [])
    else:
        for row in rows:
            click.echo(row["topic"])


@topics.command("describe")
@click.argument("names", nargs=-1)
@click.option("--configs", "with_configs", is_flag=True, help="also show non-default configs")
@bootstrap_option
@output_option
def describe(names: tuple[str, ...], with_configs: bool, bootstrap: str, output: str) -> None:
    """Describe topics NAMES (default: all)."""
    with Session(bootstrap) as session:
        metadata = session.metadata(list(names) if names else None)
        wanted = list(names) or sorted(n for n, i in metadata.topics.items() if not i.is_internal)
        missing = [n for n in wanted if n not in metadata.topics]
        if missing:
            raise CliError(f"unknown topic: {', '.join(missing)}")
        tps = [(t, p) for t in wanted for p in sorted(metadata.topics[t].partitions)]
        low = session.list_offsets(dict.fromkeys(tps, EARLIEST))
        high = session.list_offsets(dict.fromkeys(tps, LATEST))
        result = []
        for name in wanted:
            info = metadata.topics[name]
            parts = [
                {
                    "topic": name,
                    "partition": p.partition,
                    "leader": p.leader,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "earliest": low.get((name, p.partition)),
                    "latest": high.get((name, p.partition)),
                }
                for _, p in sorted(info.partitions.items())
            ]
            entry: dict[str, Any] = {
                "topic": name,
                "topic_id": str(info.topic_id) if info.topic_id else None,
                "partitions": parts,
            }
            if with_configs:
                entry["configs"] = {
                    c["name"]: c["value"]
                    for c in describe_configs(session, DESCRIBE_CONFIGS, "topic", name)
                    if not c["default"]
                }
            result.append(entry)
    if output == "json":
        emit(output, result, [])
        return
    for entry in result:
        click.echo(
            f"Topic: {entry['topic']}  TopicId: {entry['topic_id']}  "
            f"PartitionCount: {len(entry['partitions'])}"
        )
        if entry.get("configs"):
            click.echo("Configs: " + ",".join(f"{k}={v}" for k, v in entry["configs"].items()))
        emit(
            output,
            entry["partitions"],
            ["partition", "leader", "replicas", "isr", "earliest", "latest"],
        )


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="succeed when a topic does not exist")
@bootstrap_option
def delete(names: tuple[str, ...], if_exists: bool, bootstrap: str) -> None:
    """Delete topics NAMES."""
    with _admin(bootstrap) as admin:
        for name, future in admin.delete_topics(list(names), operation_timeout=30).items():
            try:
                future.result(60)
            except KafkaException as error:
                if if_exists and "UNKNOWN_TOPIC" in str(error.error):
                    continue
                raise CliError(f"cannot delete topic {name}: {error.error}") from None
            click.echo(f"Deleted topic {name}.")


@topics.command("alter")
@click.argument("name")
@click.option("--partitions", "-p", type=click.IntRange(min=1), help="new partition count")
@click.option("--config", "-c", "config", multiple=True, help="KEY=VALUE to set (repeatable)")
@click.option("--delete-config", "-d", multiple=True, help="KEY to reset to its default")
@bootstrap_option
def alter(
    name: str,
    partitions: int | None,
    config: tuple[str, ...],
    delete_config: tuple[str, ...],
    bootstrap: str,
) -> None:
    """Grow a topic's partitions and/or change its configs."""
    if partitions is None and not config and not delete_config:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    if partitions is not None:
        with _admin(bootstrap) as admin:
            _wait(admin.create_partitions([NewPartitions(name, partitions)], 30), "alter")
        click.echo(f"Topic {name} now has {partitions} partitions.")
    if config or delete_config:
        with Session(bootstrap) as session:
            alter_configs(session, "topic", name, parse_pairs(config), list(delete_config))
        click.echo(f"Altered configs of topic {name}.")

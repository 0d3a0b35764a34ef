"""``odradek configs describe|alter`` for topics and brokers.

How this works and why: DescribeConfigs and IncrementalAlterConfigs through the
client's ``AdminClient``; ``alter`` sets (``--set k=v``) and resets to the default
(``--delete k``) in one request, so a partial change never happens.
"""

from __future__ import annotations

from typing import Any

import click

from odradek.cli.common import (
    REQUEST_TIMEOUT_S,
    admin_client,
    bootstrap_option,
    emit,
    output_option,
    parse_pairs,
    result,
)
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.types import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

RESOURCE_TYPES = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER}


def describe_configs(admin: AdminClient, resource: str, name: str) -> list[dict[str, Any]]:
    """Every config of the topic or broker as rows, sorted by name."""
    wanted = ConfigResource(RESOURCE_TYPES[resource], name)
    futures = admin.describe_configs([wanted], request_timeout=REQUEST_TIMEOUT_S)
    entries: dict[str, ConfigEntry] = result(futures[wanted], f"{resource} {name}")
    return [
        {
            "name": e.name,
            "value": None if e.is_sensitive else e.value,
            "source": e.source.name,
            "default": e.source == ConfigSource.DEFAULT_CONFIG,
            "read_only": e.is_read_only,
            "sensitive": e.is_sensitive,
        }
        for e in sorted(entries.values(), key=lambda e: e.name)
    ]


def alter_configs(
    admin: AdminClient, resource: str, name: str, to_set: dict[str, str], to_delete: list[str]
) -> None:
    changes = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in to_set.items()
    ]
    changes += [
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in to_delete
    ]
    wanted = ConfigResource(RESOURCE_TYPES[resource], name, incremental_configs=changes)
    futures = admin.incremental_alter_configs([wanted], request_timeout=REQUEST_TIMEOUT_S)
    result(futures[wanted], f"cannot alter {resource} {name}")


def _resource(entity_type: str, name: str) -> tuple[str, str]:
    if entity_type == "broker" and not name.isdigit():
        raise click.BadParameter(f"broker id must be a number, got {name!r}", param_hint="NAME")
    return entity_type, name


@click.group()
def configs() -> None:
    """Describe and alter topic and broker configs."""


@configs.command("describe")
@click.option(
    "--entity-type",
    "-t",
    type=click.Choice(list(RESOURCE_TYPES)),
    default="topic",
    show_default=True,
)
@click.argument("name")
@click.option("--all", "show_all", is_flag=True, help="include configs left at their default")
@bootstrap_option
@output_option
def describe(entity_type: str, name: str, show_all: bool, bootstrap: str, output: str) -> None:
    """Show the configs of topic (or broker) NAME."""
    resource, name = _resource(entity_type, name)
    with admin_client(bootstrap) as admin:
        rows = describe_configs(admin, resource, name)
    hidden = 0 if show_all else sum(1 for r in rows if r["default"])
    if not show_all:
        rows = [r for r in rows if not r["default"]]
    emit(output, rows, ["name", "value", "source", "read_only"], title=f"{resource} {name}")
    if hidden and output != "json":
        click.echo(f"({hidden} configs left at their default not shown: add --all)", err=True)


@configs.command("alter")
@click.option(
    "--entity-type",
    "-t",
    type=click.Choice(list(RESOURCE_TYPES)),
    default="topic",
    show_default=True,
)
@click.argument("name")
@click.option("--set", "-s", "to_set", multiple=True, help="KEY=VALUE (repeatable)")
@click.option("--delete", "-d", "to_delete", multiple=True, help="KEY to reset (repeatable)")
@bootstrap_option
def alter(
    entity_type: str,
    name: str,
    to_set: tuple[str, ...],
    to_delete: tuple[str, ...],
    bootstrap: str,
) -> None:
    """Set or reset configs of topic (or broker) NAME."""
    if not to_set and not to_delete:
        raise click.UsageError("nothing to alter: give --set or --delete")
    resource, name = _resource(entity_type, name)
    settings = parse_pairs(to_set, "--set")
    with admin_client(bootstrap) as admin:
        alter_configs(admin, resource, name, settings, list(to_delete))
    click.echo(f"Altered configs of {resource} {name}.")


__all__ = ["alter_configs", "configs", "describe_configs"]

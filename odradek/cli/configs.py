"""``odradek configs describe|alter`` for topics and brokers.

How this works and why: DescribeConfigs (v4) and IncrementalAlterConfigs (v1) sent
through the raw ``Session``; ``alter`` sets (``--set k=v``) and resets to the default
(``--delete k``) in one request, so a partial change never happens.
"""

from __future__ import annotations

from typing import Any

import click

from odradek.cli.common import (
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    CliError,
    Session,
    bootstrap_option,
    check,
    emit,
    output_option,
    parse_pairs,
)

RESOURCE_TYPES = {"topic": 2, "broker": 4}
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
SET, DELETE = 0, 1


def describe_configs(
    session: Session, api_key: int, resource: str, name: str
) -> list[dict[str, Any]]:
    response = session.send(
        api_key,
        resources=(
            session.entity(
                DESCRIBE_CONFIGS,
                "DescribeConfigsResource",
                resource_type=RESOURCE_TYPES[resource],
                resource_name=name,
                configuration_keys=None,
            ),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    rows = []
    for result in response.results:
        check(result.error_code, f"{resource} {name}", result.error_message)
        for c in result.configs:
            source = SOURCES.get(int(c.config_source), str(c.config_source))
            rows.append(
                {
                    "name": c.name,
                    "value": None if c.is_sensitive else c.value,
                    "source": source,
                    "default": source == "DEFAULT_CONFIG",
                    "read_only": c.read_only,
                    "sensitive": c.is_sensitive,
                }
            )
    return sorted(rows, key=lambda r: r["name"])


def alter_configs(
    session: Session, resource: str, name: str, to_set: dict[str, str], to_delete: list[str]
) -> None:
    ops = [(k, SET, v) for k, v in to_set.items()] + [(k, DELETE, None) for k in to_delete]
    response = session.send(
        INCREMENTAL_ALTER_CONFIGS,
        resources=(
            session.entity(
                INCREMENTAL_ALTER_CONFIGS,
                "AlterConfigsResource",
                resource_type=RESOURCE_TYPES[resource],
                resource_name=name,
                configs=tuple(
                    session.entity(
                        INCREMENTAL_ALTER_CONFIGS,
                        "AlterableConfig",
                        name=k,
                        config_operation=op,
                        value=v,
                    )
                    for k, op, v in ops
                ),
            ),
        ),
        validate_only=False,
    )
    for r in response.responses:
        check(r.error_code, f"cannot alter {resource} {name}", r.error_message)


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
    with Session(bootstrap) as session:
        rows = describe_configs(session, DESCRIBE_CONFIGS, resource, name)
    if not show_all:
        rows = [r for r in rows if not r["default"]]
    emit(output, rows, ["name", "value", "source", "read_only"], title=f"{resource} {name}")


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
    with Session(bootstrap) as session:
        alter_configs(session, resource, name, parse_pairs(to_set, "--set"), list(to_delete))
    click.echo(f"Altered configs of {resource} {name}.")


__all__ = ["CliError", "alter_configs", "configs", "describe_configs"]

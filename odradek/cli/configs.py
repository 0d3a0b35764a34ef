"""``odradek configs describe|alter`` for topics, brokers, groups and users.

How this works and why: DescribeConfigs and IncrementalAlterConfigs through the
client's ``AdminClient``; ``alter`` sets (``--set k=v``) and resets to the default
(``--delete k``) in one request, so a partial change never happens. Both spellings
work: odradek's (``configs alter t -t topic --set k=v``) and kafka-configs.sh's
(``configs --alter --entity-type topics --entity-name t --add-config k=v,k2=[a,b]
--delete-config k3``, ``--entity-default`` for the cluster-wide broker defaults, the
``--topic``/``--broker``/``--broker-defaults``/``--group`` shortcuts); ``describe``
without a name describes every entity of the type, as Kafka's does. Users
(``--entity-type users``) carry SCRAM credentials, handled by configs_users.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from odradek.cli import configs_users
from odradek.cli.common import (
    REQUEST_TIMEOUT_S,
    admin_client,
    bootstrap_option,
    emit,
    output_option,
    parse_pairs,
    result,
)
from odradek.cli.tools import KafkaActionGroup
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.types import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

RESOURCE_TYPES = {
    "topic": ResourceType.TOPIC,
    "broker": ResourceType.BROKER,
    "group": ResourceType.GROUP,
}


def describe_configs(admin: AdminClient, resource: str, name: str) -> list[dict[str, Any]]:
    """Every config of the topic or broker as rows, sorted by name."""
    wanted = ConfigResource(RESOURCE_TYPES[resource], name)
    futures = admin.describe_configs([wanted], request_timeout=REQUEST_TIMEOUT_S)
    entries: dict[str, ConfigEntry] = result(futures[wanted], _label(resource, name))
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
    result(futures[wanted], f"cannot alter {_label(resource, name)}")


# --entity-type's words, singular (odradek's) and plural (kafka-configs.sh's).
ENTITY_TYPES = {
    "topic": "topic",
    "topics": "topic",
    "broker": "broker",
    "brokers": "broker",
    "group": "group",
    "groups": "group",
    "user": "user",
    "users": "user",
    "broker-loggers": "broker-loggers",
}
ENTITY_SOURCES = (
    "NAME, --entity-name, --entity-default, --topic, --broker, --broker-defaults, --group"
)


def kafka_config_list(text: str) -> dict[str, str]:
    """kafka-configs.sh's ``--add-config`` value: ``k1=v1,k2=[a,b],k3=v3`` (a value with
    commas in square brackets, which are dropped)."""
    pairs: dict[str, str] = {}
    position = 0
    while position < len(text):
        key_end = text.find("=", position)
        if key_end < 0 or key_end == position:
            item = text[position:].split(",", 1)[0]
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--add-config")
        key = text[position:key_end].strip()
        if text.startswith("[", key_end + 1):
            close = text.find("]", key_end + 2)
            if close < 0:
                raise click.BadParameter(f"{key}: '[' without ']'", param_hint="--add-config")
            value, position = text[key_end + 2 : close], close + 1
            if position < len(text) and text[position] != ",":
                raise click.BadParameter(f"{key}: text after ']'", param_hint="--add-config")
        else:
            comma = text.find(",", key_end)
            comma = len(text) if comma < 0 else comma
            value, position = text[key_end + 1 : comma], comma
        pairs[key] = value
        position += 1  # the comma
    return pairs


def properties_file(path: str) -> dict[str, str]:
    """``--add-config-file``: KEY=VALUE lines (``#`` and ``!`` comments, blank lines)."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()  # noqa: SIM115
    except OSError as error:
        raise click.BadParameter(
            f"cannot read {path}: {error.strerror or error}", param_hint="--add-config-file"
        ) from None
    pairs: dict[str, str] = {}
    for line in (raw.strip() for raw in lines):
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{line!r} is not KEY=VALUE", param_hint="--add-config-file")
        pairs[key.strip()] = value.strip()
    return pairs


def entity_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The entity a command acts on: NAME with ``--entity-type`` (odradek's spelling), or
    kafka-configs.sh's ``--entity-type topics --entity-name X``, ``--entity-default``
    and its shortcuts (``--topic``, ``--broker``, ``--broker-defaults``, ``--group``)."""
    options = [
        click.argument("name", required=False),
        click.option(
            "--entity-type",
            "-t",
            type=click.Choice(list(ENTITY_TYPES)),
            help="topic(s), broker(s), group(s) or user(s)  [default: topic]",
        ),
        click.option("--entity-name", help="the topic, broker id or group (Kafka's spelling)"),
        click.option("--entity-default", is_flag=True, help="the cluster-wide broker defaults"),
        click.option("--topic", "topic_name", help="as --entity-type topics --entity-name"),
        click.option("--broker", "broker_id", help="as --entity-type brokers --entity-name"),
        click.option(
            "--broker-defaults", is_flag=True, help="as --entity-type brokers --entity-default"
        ),
        click.option("--group", "group_name", help="as --entity-type groups --entity-name"),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def resolve_entity(
    name: str | None,
    entity_type: str | None,
    entity_name: str | None,
    entity_default: bool,
    topic_name: str | None,
    broker_id: str | None,
    broker_defaults: bool,
    group_name: str | None,
) -> tuple[str, str | None]:
    """(resource, name): "topic", "broker" or "group", and the name ("" for the broker
    defaults, None when none was given: every entity of the type)."""
    named = [
        (kind, value)
        for kind, value in (
            (None, name),
            (None, entity_name),
            (None, "" if entity_default else None),
            ("topic", topic_name),
            ("broker", broker_id),
            ("broker", "" if broker_defaults else None),
            ("group", group_name),
        )
        if value is not None
    ]
    if len(named) > 1:
        raise click.UsageError(f"name one entity, with one of {ENTITY_SOURCES}")
    implied, chosen = named[0] if named else (None, None)
    given = ENTITY_TYPES[entity_type] if entity_type is not None else None
    if implied is not None and given is not None and implied != given:
        raise click.UsageError(f"--entity-type {entity_type} does not go with --{implied}")
    resource = implied or given or "topic"
    if resource == "broker-loggers":
        raise click.UsageError(
            "broker-loggers are not supported: odradek sets log levels with serve --log-level"
        )
    if chosen == "" and resource != "broker":
        raise click.UsageError("--entity-default applies to brokers only")
    if resource == "broker" and chosen and not chosen.isdigit():
        raise click.BadParameter(f"broker id must be a number, got {chosen!r}", param_hint="NAME")
    return resource, chosen


def _label(resource: str, name: str) -> str:
    return "broker defaults" if resource == "broker" and name == "" else f"{resource} {name}"


def every_entity(admin: AdminClient, resource: str) -> list[str]:
    """Every topic, broker id or group of the cluster (kafka-configs.sh --describe
    without --entity-name)."""
    if resource == "topic":
        return sorted(admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
    if resource == "broker":
        cluster = result(admin.describe_cluster(request_timeout=REQUEST_TIMEOUT_S), "brokers")
        return [str(node.id) for node in sorted(cluster.nodes, key=lambda n: n.id)]
    listing = result(admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), "groups")
    return sorted(g.group_id for g in listing.valid)


@click.group(cls=KafkaActionGroup)
def configs() -> None:
    """Describe and alter topic, broker and group configs."""


@configs.command("describe")
@entity_options
@click.option("--all", "show_all", is_flag=True, help="include configs left at their default")
@bootstrap_option
@output_option
def describe(show_all: bool, bootstrap: str, output: str, **entity: Any) -> None:
    """Show the configs of topic (or broker, or group) NAME; every one without NAME."""
    resource, chosen = resolve_entity(**entity)
    hidden = 0
    with admin_client(bootstrap) as admin:
        if resource == "user":  # SCRAM credentials (configs_users.py)
            configs_users.describe_users(admin, chosen, output)
            return
        names = [chosen] if chosen is not None else every_entity(admin, resource)
        for name in names:
            rows = describe_configs(admin, resource, name)
            hidden += 0 if show_all else sum(1 for r in rows if r["default"])
            if not show_all:
                rows = [r for r in rows if not r["default"]]
            columns = ["name", "value", "source", "read_only"]
            emit(output, rows, columns, title=_label(resource, name))
    if hidden and output != "json":
        click.echo(f"({hidden} configs left at their default not shown: add --all)", err=True)


@configs.command("alter")
@entity_options
@click.option("--set", "-s", "to_set", multiple=True, help="KEY=VALUE (repeatable)")
@click.option("--delete", "-d", "to_delete", multiple=True, help="KEY to reset (repeatable)")
@click.option("--add-config", "add_config", multiple=True, help="Kafka's k1=v1,k2=[v1,v2] to set")
@click.option("--add-config-file", help="a properties file of configs to set")
@click.option("--delete-config", multiple=True, help="Kafka's k1,k2 to reset")
@bootstrap_option
def alter(
    to_set: tuple[str, ...],
    to_delete: tuple[str, ...],
    add_config: tuple[str, ...],
    add_config_file: str | None,
    delete_config: tuple[str, ...],
    bootstrap: str,
    **entity: Any,
) -> None:
    """Set or reset configs of topic (or broker, or group) NAME."""
    deletes = [*to_delete, *(k for item in delete_config for k in item.split(",") if k)]
    if not (to_set or add_config or add_config_file) and not deletes:
        raise click.UsageError(
            "nothing to alter: give --set, --add-config, --add-config-file or --delete"
        )
    resource, name = resolve_entity(**entity)
    if name is None:
        raise click.UsageError(f"Missing argument: name the entity to alter ({ENTITY_SOURCES})")
    settings = parse_pairs(to_set, "--set")
    for item in add_config:
        settings.update(kafka_config_list(item))
    if add_config_file is not None:
        settings.update(properties_file(add_config_file))
    both = sorted(set(settings) & set(deletes))
    if both:
        raise click.UsageError(f"set and deleted at once: {', '.join(both)}")
    with admin_client(bootstrap) as admin:
        if resource == "user" and configs_users.scram_change(settings, deletes):
            configs_users.alter_user(admin, name, settings, deletes)
        elif resource == "user":  # quotas (producer_byte_rate, ...) are not SCRAM keys
            raise click.UsageError(
                "only SCRAM credential configs (SCRAM-SHA-256, SCRAM-SHA-512) can be "
                "altered for users"
            )
        else:
            alter_configs(admin, resource, name, settings, deletes)
    click.echo(f"Altered configs of {_label(resource, name)}.")


__all__ = ["alter_configs", "configs", "describe_configs"]

"""``odradek groups list|describe|reset-offsets|delete``.

How this works and why: every request goes through the client's ``AdminClient``,
which finds each group's coordinator. ``describe`` joins three answers per
partition: the committed offset (``list_consumer_group_offsets``), the log end offset
(``list_offsets``) and the member assigned it (``describe_consumer_groups``, which
decodes the consumer protocol's assignments); lag is end - committed. ``reset-offsets``
computes the new offsets, clamped to each partition's [earliest, latest], and only
prints them unless ``--execute``; executing needs the group to be inactive, as in Kafka.
"""

from __future__ import annotations

import datetime
from typing import Any

import click
from kio.schema.errors import ErrorCode

from odradek.cli.common import (
    REQUEST_TIMEOUT_S,
    TP,
    CliError,
    admin_client,
    bootstrap_option,
    describe_failure,
    describe_topics,
    emit,
    error_code,
    list_offsets,
    output_option,
    result,
)
from odradek.cli.tools import KafkaActionGroup
from odradek.client._core.types import KafkaException, TopicPartition
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.types import (
    ConsumerGroupDescription,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    OffsetSpec,
)

# The state names Kafka's own tools print.
STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
INACTIVE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


@click.group(cls=KafkaActionGroup)
def groups() -> None:
    """List, describe, reset and delete consumer groups."""


def _describe(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    futures = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)
    described: ConsumerGroupDescription = result(futures[group], f"group {group}")
    return described


def _committed(admin: AdminClient, group: str) -> dict[TP, int]:
    """Every offset the group committed."""
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=REQUEST_TIMEOUT_S
    )
    listed = result(futures[group], f"offsets of group {group}")
    return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions if tp.offset >= 0}


def _listed(admin: AdminClient) -> list[Any]:
    listed = result(admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), "list groups")
    if listed.errors:
        raise CliError(f"list groups: {describe_failure(listed.errors[0])}")
    return sorted(listed.valid, key=lambda g: g.group_id)


def _group_names(
    admin: AdminClient, names: tuple[str, ...], options: tuple[str, ...], all_groups: bool
) -> list[str]:
    """GROUP arguments, ``--group`` (Kafka's spelling) or ``--all-groups``, each once."""
    given = list(dict.fromkeys((*names, *options)))
    if all_groups and given:
        raise click.UsageError("give groups or --all-groups, not both")
    if all_groups:
        return [g.group_id for g in _listed(admin)]
    if not given:
        raise click.UsageError("Missing argument: GROUP, --group GROUP or --all-groups")
    return given


@groups.command("list")
@bootstrap_option
@output_option
def list_(bootstrap: str, output: str) -> None:
    """List consumer groups."""
    with admin_client(bootstrap) as admin:
        listed = _listed(admin)
    rows = [
        {
            "group": g.group_id,
            "state": STATE_NAMES[g.state],
            "type": g.type.name.capitalize(),
            "simple": g.is_simple_consumer_group,
        }
        for g in listed
    ]
    emit(output, rows, ["group", "state", "type"])


@groups.command("describe")
@click.argument("names", nargs=-1)
@click.option("--group", "group_options", multiple=True, help="a group (Kafka's spelling)")
@click.option("--all-groups", is_flag=True, help="every group")
@click.option("--members", "show_members", is_flag=True, help="list members, not partitions")
@bootstrap_option
@output_option
def describe(
    names: tuple[str, ...],
    show_members: bool,
    bootstrap: str,
    output: str,
    group_options: tuple[str, ...] = (),
    all_groups: bool = False,
) -> None:
    """Show each group's state, members and their assignments, and lag per partition."""
    found: list[dict[str, Any]] = []
    with admin_client(bootstrap) as admin:
        for group in _group_names(admin, names, group_options, all_groups):
            described = _describe(admin, group)
            if described.state == ConsumerGroupState.DEAD:
                raise CliError(f"group {group} does not exist")
            owners = {
                (tp.topic, tp.partition): m
                for m in described.members
                for tp in m.assignment.topic_partitions
            }
            committed = _committed(admin, group)
            tps = sorted(set(committed) | set(owners))
            ends = list_offsets(admin, tps, OffsetSpec.latest())
            partitions = []
            for tp in tps:
                owner = owners.get(tp)
                current = committed.get(tp)
                end = ends.get(tp)
                partitions.append(
                    {
                        "group": group,
                        "topic": tp[0],
                        "partition": tp[1],
                        "current_offset": current,
                        "log_end_offset": end,
                        "lag": None if current is None or end is None else max(end - current, 0),
                        "consumer_id": owner.member_id if owner else None,
                        "host": owner.host if owner else None,
                        "client_id": owner.client_id if owner else None,
                    }
                )
            members = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "host": m.host,
                    "partitions": sorted(
                        f"{tp.topic}-{tp.partition}" for tp in m.assignment.topic_partitions
                    ),
                }
                for m in described.members
            ]
            coordinator = described.coordinator
            found.append(
                {
                    "group": group,
                    "state": STATE_NAMES[described.state],
                    "simple": described.is_simple_consumer_group,
                    "assignor": described.partition_assignor,
                    "coordinator": coordinator.id if coordinator is not None else None,
                    "members": members,
                    "partitions": partitions,
                }
            )
    if output == "json":
        emit(output, found, [])
        return
    for entry in found:
        click.echo(
            f"Group {entry['group']}: state {entry['state']}, {len(entry['members'])} member(s), "
            f"assignor {entry['assignor'] or '-'}, coordinator {entry['coordinator']}"
        )
        if show_members:
            emit(
                output,
                entry["members"],
                ["member_id", "group_instance_id", "client_id", "host", "partitions"],
            )
        else:
            emit(
                output,
                entry["partitions"],
                [
                    "topic",
                    "partition",
                    "current_offset",
                    "log_end_offset",
                    "lag",
                    "consumer_id",
                    "host",
                    "client_id",
                ],
            )


def _topic_specs(specs: tuple[str, ...]) -> list[tuple[str, list[int] | None]]:
    """``TOPIC`` or ``TOPIC:P,P`` options as (topic, partitions or None for all)."""
    parsed = []
    for spec in specs:
        name, sep, parts = spec.partition(":")
        chosen: list[int] | None = None
        if sep:
            try:
                chosen = sorted({int(p) for p in parts.split(",") if p})
            except ValueError:
                chosen = []
            if not chosen or min(chosen) < 0:
                raise click.BadParameter(
                    f"{spec!r} is not TOPIC or TOPIC:PARTITION[,PARTITION...]", param_hint="--topic"
                )
        if not name:
            raise click.BadParameter(f"{spec!r} has no topic name", param_hint="--topic")
        parsed.append((name, chosen))
    return parsed


def _scope(
    admin: AdminClient,
    specs: list[tuple[str, list[int] | None]],
    committed: dict[TP, int],
) -> list[TP]:
    if not specs:  # --all-topics
        return sorted(committed)
    described = describe_topics(admin, list(dict.fromkeys(name for name, _ in specs)))
    wanted: list[TP] = []
    for name, chosen in specs:
        known = [p.id for p in described[name].partitions]
        for p in known if chosen is None else chosen:
            if p not in known:
                raise CliError(f"unknown partition {name}-{p}")
            wanted.append((name, p))
    return sorted(set(wanted))


def _timestamp_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO-8601 date-time", param_hint="--to-datetime"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


@groups.command("reset-offsets")
@click.argument("group", required=False)
@click.option("--group", "group_option", help="the group (Kafka's spelling)")
@click.option("--topic", "-t", "topics", multiple=True, help="TOPIC or TOPIC:P,P (repeatable)")
@click.option("--all-topics", is_flag=True, help="every topic the group has offsets for")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=click.IntRange(min=0))
@click.option("--to-datetime", help="ISO-8601, e.g. 2024-01-31T12:00:00 (UTC unless zoned)")
@click.option("--shift-by", type=int, help="move each committed offset by N (may be negative)")
@click.option("--execute", is_flag=True, help="commit the new offsets (default: dry run)")
@bootstrap_option
@output_option
def reset_offsets(
    group: str | None,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    shift_by: int | None,
    execute: bool,
    bootstrap: str,
    output: str,
    group_option: str | None = None,
) -> None:
    """Move GROUP's committed offsets; a dry run unless --execute."""
    if (group is None) == (group_option is None) or group == "":
        raise click.UsageError("name one group (GROUP or --group GROUP)")
    group = group if group is not None else group_option
    assert group is not None
    chosen = [
        to_earliest,
        to_latest,
        to_offset is not None,
        to_datetime is not None,
        shift_by is not None,
    ]
    if sum(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"
        )
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    specs = _topic_specs(topics)
    stamp = _timestamp_ms(to_datetime) if to_datetime is not None else None
    with admin_client(bootstrap) as admin:
        described = _describe(admin, group)
        if execute and described.state not in INACTIVE:
            raise CliError(
                f"group {group} is {STATE_NAMES[described.state]}: "
                "stop its consumers before resetting"
            )
        committed = _committed(admin, group)
        tps = _scope(admin, specs, committed)
        low = list_offsets(admin, tps, OffsetSpec.earliest())
        high = list_offsets(admin, tps, OffsetSpec.latest())
        by_time: dict[TP, int] = {}
        if stamp is not None:
            by_time = list_offsets(admin, tps, OffsetSpec.for_timestamp(stamp))
        new: dict[TP, int] = {}
        for tp in tps:
            if to_earliest:
                target = low[tp]
            elif to_latest:
                target = high[tp]
            elif to_offset is not None:
                target = to_offset
            elif stamp is not None:
                target = by_time[tp] if by_time[tp] >= 0 else high[tp]
            else:
                assert shift_by is not None
                target = committed.get(tp, low[tp]) + shift_by
            new[tp] = min(max(target, low[tp]), high[tp])
        if execute and new:
            futures = admin.alter_consumer_group_offsets(
                [
                    ConsumerGroupTopicPartitions(
                        group, [TopicPartition(t, p, o) for (t, p), o in sorted(new.items())]
                    )
                ],
                request_timeout=REQUEST_TIMEOUT_S,
            )
            result(futures[group], f"cannot reset offsets of group {group}")
    rows = [
        {
            "group": group,
            "topic": t,
            "partition": p,
            "current_offset": committed.get((t, p)),
            "new_offset": o,
        }
        for (t, p), o in sorted(new.items())
    ]
    emit(output, rows, ["group", "topic", "partition", "current_offset", "new_offset"])
    if not execute and output != "json":
        click.echo("Dry run: nothing committed (add --execute to apply).", err=True)


@groups.command("delete")
@click.argument("names", nargs=-1)
@click.option("--group", "group_options", multiple=True, help="a group (Kafka's spelling)")
@click.option("--all-groups", is_flag=True, help="every group")
@bootstrap_option
def delete(
    names: tuple[str, ...],
    bootstrap: str,
    group_options: tuple[str, ...] = (),
    all_groups: bool = False,
) -> None:
    """Delete inactive groups NAMES and their committed offsets."""
    with admin_client(bootstrap) as admin:
        chosen = _group_names(admin, names, group_options, all_groups)
        if not chosen:
            return
        futures = admin.delete_consumer_groups(chosen, request_timeout=REQUEST_TIMEOUT_S)
        for group, future in futures.items():
            try:
                future.result(REQUEST_TIMEOUT_S + 5)
            except KafkaException as error:
                if error_code(error) == ErrorCode.non_empty_group:
                    raise CliError(f"group {group} has active members") from None
                if error_code(error) == ErrorCode.group_id_not_found:
                    raise CliError(f"group {group} does not exist") from None
                raise CliError(f"cannot delete group {group}: {describe_failure(error)}") from None
            click.echo(f"Deleted group {group}.")

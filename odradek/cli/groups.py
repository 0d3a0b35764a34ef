"""``odradek groups list|describe|reset-offsets|delete``.

How this works and why: requests go to the group's coordinator (FindCoordinator)
through the raw ``Session``. ``describe`` joins three answers per partition: the
committed offset (OffsetFetch), the log end offset (ListOffsets) and which member
is assigned it (DescribeGroups, assignments decoded with the consumer protocol);
lag is end - committed. ``reset-offsets`` computes the new offsets and only prints
them unless ``--execute``; executing needs the group to be inactive, as in Kafka.
"""

from __future__ import annotations

import datetime
from typing import Any

import click
from kio.schema.errors import ErrorCode

from odradek.cli.common import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    EARLIEST,
    LATEST,
    LIST_GROUPS,
    CliError,
    Session,
    bootstrap_option,
    check,
    emit,
    output_option,
)
from odradek.client.consumer_protocol import ConsumerProtocolError, decode_assignment

TP = tuple[str, int]


@click.group()
def groups() -> None:
    """List, describe, reset and delete consumer groups."""


def _describe(session: Session, group: str, node: int) -> Any:
    response = session.send(
        DESCRIBE_GROUPS, node=node, groups=(group,), include_authorized_operations=False
    )
    described = response.groups[0]
    check(described.error_code, f"group {group}")
    return described


def _assignments(described: Any) -> dict[TP, Any]:
    owners: dict[TP, Any] = {}
    if described.protocol_type != "consumer":
        return owners
    for member in described.members:
        try:
            assignment = decode_assignment(bytes(member.member_assignment))
        except (ConsumerProtocolError, ValueError, IndexError):
            continue
        for tp in assignment.partitions:
            owners[(tp.topic, tp.partition)] = member
    return owners


@groups.command("list")
@bootstrap_option
@output_option
def list_(bootstrap: str, output: str) -> None:
    """List consumer groups."""
    with Session(bootstrap) as session:
        response = session.send(LIST_GROUPS, states_filter=())
    check(response.error_code, "list groups")
    rows = [
        {"group": g.group_id, "state": g.group_state, "protocol_type": g.protocol_type}
        for g in sorted(response.groups, key=lambda g: g.group_id)
    ]
    emit(output, rows, ["group", "state", "protocol_type"])


@groups.command("describe")
@click.argument("names", nargs=-1, required=True)
@click.option("--members", "show_members", is_flag=True, help="list members, not partitions")
@bootstrap_option
@output_option
def describe(names: tuple[str, ...], show_members: bool, bootstrap: str, output: str) -> None:
    """Show each group's state, members and lag per partition."""
    result = []
    with Session(bootstrap) as session:
        for group in names:
            node = session.coordinator(group)
            described = _describe(session, group, node)
            if described.group_state == "Dead":
                raise CliError(f"group {group} does not exist")
            owners = _assignments(described)
            committed = session.committed(group, node)
            tps = sorted(set(committed) | set(owners))
            ends = session.list_offsets(dict.fromkeys(tps, LATEST))
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
                        "host": owner.client_host if owner else None,
                        "client_id": owner.client_id if owner else None,
                    }
                )
            members = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "host": m.client_host,
                    "partitions": sorted(
                        f"{t}-{p}" for (t, p), o in owners.items() if o.member_id == m.member_id
                    ),
                }
                for m in described.members
            ]
            result.append(
                {
                    "group": group,
                    "state": described.group_state,
                    "protocol_type": described.protocol_type,
                    "protocol": described.protocol_data,
                    "coordinator": node,
                    "members": members,
                    "partitions": partitions,
                }
            )
    if output == "json":
        emit(output, result, [])
        return
    for entry in result:
        click.echo(
            f"Group {entry['group']}: state {entry['state']}, {len(entry['members'])} member(s), "
            f"coordinator {entry['coordinator']}"
        )
        if show_members:
            emit(output, entry["members"], ["member_id", "client_id", "host", "partitions"])
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


def _scope(session: Session, group: str, topics: tuple[str, ...], all_topics: bool) -> list[TP]:
    if all_topics:
        return sorted(session.committed(group))
    names = [t.partition(":")[0] for t in topics]
    metadata = session.metadata(names)
    wanted: list[TP] = []
    for spec in topics:
        name, _, parts = spec.partition(":")
        info = metadata.topics.get(name)
        if info is None:
            raise CliError(f"unknown topic {name}")
        chosen = [int(p) for p in parts.split(",") if p] if parts else sorted(info.partitions)
        for p in chosen:
            if p not in info.partitions:
                raise CliError(f"unknown partition {name}-{p}")
            wanted.append((name, p))
    return wanted


def _timestamp_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO-8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "-t", "topics", multiple=True, help="TOPIC or TOPIC:P,P (repeatable)")
@click.option("--all-topics", is_flag=True, help="every topic the group has offsets for")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int)
@click.option("--to-datetime", help="ISO-8601, e.g. 2024-01-31T12:00:00 (UTC unless zoned)")
@click.option("--shift-by", type=int, help="move each committed offset by N (may be negative)")
@click.option("--execute", is_flag=True, help="commit the new offsets (default: dry run)")
@bootstrap_option
@output_option
def reset_offsets(
    group: str,
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
) -> None:
    """Move GROUP's committed offsets; a dry run unless --execute."""
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
    with Session(bootstrap) as session:
        node = session.coordinator(group)
        described = _describe(session, group, node)
        if execute and described.group_state not in ("Empty", "Dead"):
            raise CliError(
                f"group {group} is {described.group_state}: stop its consumers before resetting"
            )
        tps = _scope(session, group, topics, all_topics)
        committed = session.committed(group, node)
        low = session.list_offsets(dict.fromkeys(tps, EARLIEST))
        high = session.list_offsets(dict.fromkeys(tps, LATEST))
        if to_datetime is not None:
            stamp = _timestamp_ms(to_datetime)
            by_time = session.list_offsets(dict.fromkeys(tps, stamp))
        new: dict[TP, int] = {}
        for tp in tps:
            if to_earliest:
                target = low[tp]
            elif to_latest:
                target = high[tp]
            elif to_offset is not None:
                target = to_offset
            elif to_datetime is not None:
                target = by_time[tp] if by_time[tp] >= 0 else high[tp]
            else:
                assert shift_by is not None
                target = committed.get(tp, low[tp]) + shift_by
            new[tp] = min(max(target, low[tp]), high[tp])
        if execute and new:
            session.commit(group, new)
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
@click.argument("names", nargs=-1, required=True)
@bootstrap_option
def delete(names: tuple[str, ...], bootstrap: str) -> None:
    """Delete inactive groups NAMES and their committed offsets."""
    with Session(bootstrap) as session:
        for group in names:
            node = session.coordinator(group)
            response = session.send(DELETE_GROUPS, node=node, groups_names=(group,))
            for r in response.results:
                if r.error_code == ErrorCode.non_empty_group:
                    raise CliError(f"group {r.group_id} has active members")
                check(r.error_code, f"cannot delete group {r.group_id}")
                click.echo(f"Deleted group {r.group_id}.")

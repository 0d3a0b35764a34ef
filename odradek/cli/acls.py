"""``odradek acls``: add, list and remove ACLs, as ``kafka-acls.sh``.

How this works and why: Kafka's tool turns its flags into ACL bindings — the cross
product of the resources (``--topic``, ``--group``, ``--transactional-id``, each
repeatable, and ``--cluster``), the principals (``--allow-principal`` with
``--allow-host``, ``--deny-principal`` with ``--deny-host``; a host defaults to ``*``)
and the operations (``--operation``, repeatable, default All) — and sends them with
the admin client's CreateAcls, DescribeAcls and DeleteAcls (odradek's own
``AdminClient``, client/admin/acls.py). The convenience flags expand as Kafka's do:
``--producer`` is WRITE, DESCRIBE and CREATE on the topics (WRITE and DESCRIBE on
transactional ids, IDEMPOTENT_WRITE on the cluster with ``--idempotent``);
``--consumer`` is READ and DESCRIBE on the topics and READ on the groups.

``--list`` prints each resource's ACLs in Kafka's words ("Current ACLs for resource
`ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:" and one
"(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" line per ACL);
``--add`` says what it adds and then lists the resource; ``--remove`` without
principals removes every ACL of the resource, and asks first unless ``--force``.
``--resource-pattern-type`` is LITERAL (default) or PREFIXED for ``--add``; ANY or
MATCH too for ``--list`` and ``--remove``. Every failure is one line (status 1; bad
arguments: status 2).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, Final

import click

from odradek.cli.common import admin_client, command_config_option, describe_failure, result
from odradek.cli.subcommand import ArgparseStyleCommand, Args, invoke, one_of
from odradek.client._core.types import KafkaException
from odradek.client.admin.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

NAME: Final = "acls"
CLUSTER_NAME: Final = "kafka-cluster"
# kafka-acls.sh's spellings of operations (also accepted: READ, cluster_action, ...)
OPERATIONS: Final = {
    "all": AclOperation.ALL,
    "read": AclOperation.READ,
    "write": AclOperation.WRITE,
    "create": AclOperation.CREATE,
    "delete": AclOperation.DELETE,
    "alter": AclOperation.ALTER,
    "describe": AclOperation.DESCRIBE,
    "clusteraction": AclOperation.CLUSTER_ACTION,
    "describeconfigs": AclOperation.DESCRIBE_CONFIGS,
    "alterconfigs": AclOperation.ALTER_CONFIGS,
    "idempotentwrite": AclOperation.IDEMPOTENT_WRITE,
}
# Kafka's names of the resource types in its output (confluent's BROKER is the cluster)
TYPE_NAMES: Final = {
    ResourceType.TOPIC: "TOPIC",
    ResourceType.GROUP: "GROUP",
    ResourceType.BROKER: "CLUSTER",
    ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
}

Resource = tuple[ResourceType, str]


class AclsToolError(Exception):
    """A failure to report in one line (exit status 1)."""


def run(args: Args) -> int:
    try:
        lines = _run(args)
    except AclsToolError as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    except KafkaException as error:
        print(f"{NAME}: {describe_failure(error)}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


def _run(args: Args) -> list[str]:
    pattern = _pattern(args)
    resources = _resources(args)
    if args.add:
        if pattern not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
            raise AclsToolError("--add takes --resource-pattern-type literal or prefixed")
        bindings = _bindings(args, resources, pattern)
        with admin_client(args.bootstrap_server) as admin:
            return add(admin, bindings, pattern)
    with admin_client(args.bootstrap_server) as admin:
        if args.list:
            return list_acls(admin, resources, pattern, args.principal)
        return remove(admin, args, resources, pattern)


def _pattern(args: Args) -> ResourcePatternType:
    text = (args.resource_pattern_type or "literal").upper()
    return ResourcePatternType[text]


def _resources(args: Args) -> list[Resource]:
    resources: list[Resource] = [(ResourceType.TOPIC, t) for t in args.topic]
    resources += [(ResourceType.GROUP, g) for g in args.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster or args.idempotent:
        resources.append((ResourceType.BROKER, CLUSTER_NAME))
    if any(not name for _, name in resources):
        raise AclsToolError("a resource name may not be empty")
    return list(dict.fromkeys(resources))


def parse_operation(text: str) -> AclOperation:
    key = text.replace("_", "").replace("-", "").lower()
    if key not in OPERATIONS:
        known = ", ".join(sorted(OPERATIONS))
        raise ValueError(f"unknown operation {text!r} (one of: {known})")
    return OPERATIONS[key]


def _operations(args: Args, resource_type: ResourceType) -> list[AclOperation]:
    """The operations for one resource type: the convenience flags', else --operation's."""
    if args.producer:
        return {
            ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
            ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
            ResourceType.BROKER: [AclOperation.IDEMPOTENT_WRITE],
        }.get(resource_type, [])
    if args.consumer:
        return {
            ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
            ResourceType.GROUP: [AclOperation.READ],
        }.get(resource_type, [])
    return [parse_operation(op) for op in args.operation] or [AclOperation.ALL]


def _principals(args: Args) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) for every principal and host given."""
    entries = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        if hosts and not principals:
            kind = "allow" if permission == AclPermissionType.ALLOW else "deny"
            raise AclsToolError(f"--{kind}-host needs --{kind}-principal")
        for principal in principals:
            _check_principal(principal)
            for host in hosts or ["*"]:
                entries.append((principal, host, permission))
    return entries


def _check_principal(principal: str) -> None:
    kind, colon, name = principal.partition(":")
    if not colon or not kind or not name:
        raise AclsToolError(f"invalid principal {principal!r}: expected Type:name (User:alice)")


def _bindings(
    args: Args, resources: Sequence[Resource], pattern: ResourcePatternType
) -> list[AclBinding]:
    if not resources:
        raise AclsToolError(
            "--add needs a resource: --topic, --group, --cluster or --transactional-id"
        )
    if args.consumer and not (args.topic and args.group):
        raise AclsToolError("--consumer needs --topic and --group")
    if args.producer and not (args.topic or args.transactional_id):
        raise AclsToolError("--producer needs --topic or --transactional-id")
    principals = _principals(args)
    if not principals:
        raise AclsToolError("--add needs --allow-principal or --deny-principal")
    bindings = []
    for resource_type, name in resources:
        for operation in _operations(args, resource_type):
            for principal, host, permission in principals:
                bindings.append(
                    AclBinding(resource_type, name, pattern, principal, host, operation, permission)
                )
    return list(dict.fromkeys(bindings))


def add(admin: Any, bindings: list[AclBinding], pattern: ResourcePatternType) -> list[str]:
    lines: list[str] = []
    by_resource = _grouped(bindings)
    for (resource_type, name, _), entries in by_resource.items():
        lines.append(f"Adding ACLs for resource `{_pattern_text(resource_type, name, pattern)}`: ")
        lines.extend(_entry(b) for b in entries)
        lines.append("")
    for binding, future in admin.create_acls(bindings).items():
        result(future, f"ACL {_entry(binding).strip()}")
    for resource_type, name, _ in by_resource:
        lines.extend(list_acls(admin, [(resource_type, name)], pattern, ()))
    return lines


def list_acls(
    admin: Any,
    resources: Sequence[Resource],
    pattern: ResourcePatternType,
    principals: Iterable[str],
) -> list[str]:
    filters = [
        AclBindingFilter(rtype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
        for rtype, name in resources
    ] or [
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ]
    wanted = set(principals)
    found: list[AclBinding] = []
    for acl_filter in filters:
        found += result(admin.describe_acls(acl_filter), "list ACLs")
    lines: list[str] = []
    for (resource_type, name, bound), entries in _grouped(found).items():
        shown = [b for b in entries if not wanted or b.principal in wanted]
        if not shown:
            continue
        lines.append(f"Current ACLs for resource `{_pattern_text(resource_type, name, bound)}`: ")
        lines.extend(_entry(b) for b in shown)
        lines.append("")
    return lines


def remove(
    admin: Any, args: Args, resources: Sequence[Resource], pattern: ResourcePatternType
) -> list[str]:
    if not resources:
        raise AclsToolError(
            "--remove needs a resource: --topic, --group, --cluster or --transactional-id"
        )
    principals = _principals(args)
    filters: list[AclBindingFilter] = []
    for resource_type, name in resources:
        if not principals:  # every ACL of the resource
            filters.append(
                AclBindingFilter(
                    resource_type,
                    name,
                    pattern,
                    None,
                    None,
                    AclOperation.ANY,
                    AclPermissionType.ANY,
                )
            )
            continue
        for operation in _operations(args, resource_type):
            for principal, host, permission in principals:
                filters.append(
                    AclBindingFilter(
                        resource_type, name, pattern, principal, host, operation, permission
                    )
                )
    filters = list(dict.fromkeys(filters))
    what = ", ".join(f"`{_pattern_text(t, n, pattern)}`" for t, n in resources)
    if not args.force and not click.confirm(
        f"Are you sure you want to remove ACLs from resource filter {what}?", default=False
    ):
        return []
    lines = []
    for future in admin.delete_acls(filters).values():
        removed = result(future, "remove ACLs")
        for (resource_type, name, bound), entries in _grouped(removed).items():
            lines.append(
                f"Removed ACLs for resource `{_pattern_text(resource_type, name, bound)}`: "
            )
            lines.extend(_entry(b) for b in entries)
            lines.append("")
    return lines


def _grouped(
    bindings: Iterable[AclBinding],
) -> dict[tuple[ResourceType, str, ResourcePatternType], list[AclBinding]]:
    grouped: dict[tuple[ResourceType, str, ResourcePatternType], list[AclBinding]] = {}
    for b in bindings:
        key = (b.restype, b.name or "", b.resource_pattern_type)
        grouped.setdefault(key, []).append(b)
    return grouped


def _pattern_text(resource_type: ResourceType, name: str, pattern: ResourcePatternType) -> str:
    kind = TYPE_NAMES.get(resource_type, resource_type.name)
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern.name})"


def _entry(binding: AclBinding) -> str:
    return (
        f" \t(principal={binding.principal}, host={binding.host}, "
        f"operation={binding.operation.name}, permissionType={binding.permission_type.name}) "
    )


@click.command(
    NAME,
    cls=ArgparseStyleCommand,
    short_help="add, list and remove ACLs (kafka-acls.sh)",
    help="Manage the cluster's ACLs (the StandardAuthorizer's), like Kafka's kafka-acls.sh.",
)
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="brokers")
@command_config_option
@click.option("--add", is_flag=True, help="add ACLs")
@click.option("--remove", is_flag=True, help="remove ACLs")
@click.option("--list", is_flag=True, help="list ACLs")
@click.option("--allow-principal", multiple=True, metavar="TYPE:NAME", help="principal to allow")
@click.option("--deny-principal", multiple=True, metavar="TYPE:NAME", help="principal to deny")
@click.option("--allow-host", multiple=True, metavar="HOST", help="host the allow applies to")
@click.option("--deny-host", multiple=True, metavar="HOST", help="host the deny applies to")
@click.option(
    "--principal", multiple=True, metavar="TYPE:NAME", help="--list: only this principal's"
)
@click.option(
    "--operation",
    multiple=True,
    metavar="OPERATION",
    help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
    "AlterConfigs, IdempotentWrite or All (default All)",
)
@click.option("--topic", multiple=True, metavar="TOPIC", help="a topic (or * / a prefix)")
@click.option("--group", multiple=True, metavar="GROUP", help="a consumer group")
@click.option("--transactional-id", multiple=True, metavar="ID", help="a transactional id")
@click.option("--cluster", is_flag=True, help="the cluster")
@click.option(
    "--resource-pattern-type",
    type=click.Choice(["literal", "prefixed", "any", "match"], case_sensitive=False),
    help="literal (default) or prefixed; any or match to --list or --remove",
)
@click.option("--producer", is_flag=True, help="the ACLs a producer needs")
@click.option("--consumer", is_flag=True, help="the ACLs a consumer needs")
@click.option("--idempotent", is_flag=True, help="with --producer: IdempotentWrite on the cluster")
@click.option("--force", is_flag=True, help="remove without asking")
def command(**params: Any) -> int:
    one_of(params, ["--add", "--remove", "--list"])
    one_of(params, ["--producer", "--consumer", "--operation"], required=False)
    for op in params["operation"]:
        try:
            parse_operation(op)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--operation") from None
    return invoke(run, params)

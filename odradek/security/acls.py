"""ACL bindings, filters and the authorization decision (Kafka's StandardAuthorizer rules).

How this works and why: an ACL binding says that a principal (``User:alice``, or
``User:*`` for everyone) from a host (an address, or ``*``) is ALLOWed or DENYed one
operation on a resource pattern: a resource type with a LITERAL name (``*`` is the
literal wildcard: every resource of the type) or a PREFIXED name (every resource whose
name starts with it, KIP-290). The decision for (principal, host, operation, resource),
as Kafka's authorizer makes it:

1. a super user (``super.users``) is allowed everything;
2. every binding whose pattern covers the resource is looked at; if there is none at
   all (for any principal), the answer is ``allow.everyone.if.no.acl.found``;
3. a matching DENY wins: principal and host match and its operation is the one asked
   for or ALL (a DENY is never widened by implication);
4. otherwise a matching ALLOW allows: its operation is the one asked for, ALL, or one
   that implies it — READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
   implies DESCRIBE_CONFIGS;
5. otherwise DENIED.

``AclIndex`` keeps bindings by (resource type, literal name) and by (resource type,
prefix), so one decision looks up the name, the wildcard and each prefix of the name
(``len(name) + 1`` dictionary probes), never every binding. Filters (DescribeAcls,
DeleteAcls) add pattern types ANY (any pattern with exactly this name) and MATCH
(every binding that would apply to a resource of this name) and null fields that match
anything. This module is pure: the codes are Kafka's wire values, the bindings any
object with a binding's fields (the metadata image's ``AclEntry`` fits).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

WILDCARD: Final = "*"  # the literal resource name and host that match every one
WILDCARD_PRINCIPAL: Final = "User:*"
CLUSTER_NAME: Final = "kafka-cluster"  # the one CLUSTER resource's name


class AclOperation(enum.IntEnum):
    """Kafka's ACL operation codes (the bit positions of an authorized-operations field)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    """Kafka's ACL resource type codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's PatternType codes; ANY and MATCH are for filters only."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    """Kafka's AclPermissionType codes; ANY is for filters only."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_OP = AclOperation
# What an ALLOW of the key also allows (Kafka's implied operations).
IMPLIED_BY: Final[Mapping[AclOperation, frozenset[AclOperation]]] = {
    _OP.DESCRIBE: frozenset({_OP.READ, _OP.WRITE, _OP.DELETE, _OP.ALTER}),
    _OP.DESCRIBE_CONFIGS: frozenset({_OP.ALTER_CONFIGS}),
}


class Binding(Protocol):
    """An ACL binding's fields, as Kafka's wire codes."""

    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def pattern_type(self) -> int: ...
    @property
    def principal(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AclBinding:
    """A binding as plain data (the image's ``AclEntry`` has the same fields)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls/DeleteAcls: None (and ANY) fields match anything."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = Permission.ANY


class InvalidAcl(ValueError):
    """A binding or filter that cannot be created or used (INVALID_REQUEST)."""


def parse_principal(text: str) -> tuple[str, str]:
    """``Type:name`` -> (type, name); raises InvalidAcl for anything else."""
    kind, colon, name = text.partition(":")
    if not colon or not kind or not name:
        raise InvalidAcl(f"invalid principal {text!r}: expected Type:name, e.g. User:alice")
    return kind, name


def validate_binding(binding: Binding) -> None:
    """Kafka's checks of a new binding; raises InvalidAcl naming what is wrong."""
    try:
        resource_type = ResourceType(binding.resource_type)
        pattern_type = PatternType(binding.pattern_type)
        operation = AclOperation(binding.operation)
        permission = Permission(binding.permission_type)
    except ValueError as exc:
        raise InvalidAcl(f"unknown code in ACL binding: {exc}") from None
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidAcl(f"an ACL needs a concrete resource type, not {resource_type.name}")
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"an ACL's pattern type is LITERAL or PREFIXED, not {pattern_type.name}")
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise InvalidAcl(f"an ACL needs a concrete operation, not {operation.name}")
    if permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl(f"an ACL's permission is ALLOW or DENY, not {permission.name}")
    if not binding.resource_name:
        raise InvalidAcl("an ACL's resource name is empty")
    if resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        raise InvalidAcl(f"the cluster resource is named {CLUSTER_NAME!r}")
    parse_principal(binding.principal)
    if not binding.host:
        raise InvalidAcl("an ACL's host is empty (use * for every host)")


def validate_filter(acl_filter: AclFilter) -> None:
    """A filter's codes must be known (UNKNOWN matches nothing: Kafka rejects it)."""
    try:
        codes = (
            ResourceType(acl_filter.resource_type),
            PatternType(acl_filter.pattern_type),
            AclOperation(acl_filter.operation),
            Permission(acl_filter.permission_type),
        )
    except ValueError as exc:
        raise InvalidAcl(f"unknown code in ACL filter: {exc}") from None
    if any(int(code) == 0 for code in codes):
        raise InvalidAcl("an ACL filter with an UNKNOWN field matches nothing")


def operation_matches(acl_operation: int, operation: int, permission: int) -> bool:
    """Does a binding's operation cover ``operation`` (implied ones for ALLOW only)?"""
    if acl_operation in (AclOperation.ALL, operation):
        return True
    if permission != Permission.ALLOW:
        return False
    implied_by = IMPLIED_BY.get(AclOperation(operation))
    return implied_by is not None and acl_operation in implied_by


def pattern_covers(binding: Binding, resource_type: int, name: str) -> bool:
    """Does a binding's resource pattern apply to the resource (type, name)?"""
    if binding.resource_type != resource_type:
        return False
    if binding.pattern_type == PatternType.LITERAL:
        return binding.resource_name in (name, WILDCARD)
    if binding.pattern_type == PatternType.PREFIXED:
        return name.startswith(binding.resource_name)
    return False


def filter_matches(acl_filter: AclFilter, binding: Binding) -> bool:
    """Does a DescribeAcls/DeleteAcls filter select ``binding``?"""
    f = acl_filter
    if f.resource_type != ResourceType.ANY and f.resource_type != binding.resource_type:
        return False
    if f.pattern_type == PatternType.MATCH:
        if f.resource_name is not None and not pattern_covers(
            binding, binding.resource_type, f.resource_name
        ):
            return False
    else:
        if f.pattern_type != PatternType.ANY and f.pattern_type != binding.pattern_type:
            return False
        if f.resource_name is not None and f.resource_name != binding.resource_name:
            return False
    if f.principal is not None and f.principal != binding.principal:
        return False
    if f.host is not None and f.host != binding.host:
        return False
    if f.operation != AclOperation.ANY and f.operation != binding.operation:
        return False
    return f.permission_type in (Permission.ANY, binding.permission_type)


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    """The broker properties the decision depends on."""

    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False  # allow.everyone.if.no.acl.found


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: semicolon-separated principals; raises InvalidAcl on a bad one."""
    users = frozenset(part.strip() for part in text.split(";") if part.strip())
    for user in users:
        parse_principal(user)
    return users


class AclIndex:
    """Bindings indexed by (resource type, literal name) and (resource type, prefix)."""

    def __init__(self, bindings: Iterable[Binding], settings: AuthorizerSettings) -> None:
        self.settings = settings
        self._literal: dict[tuple[int, str], list[Binding]] = {}
        self._prefixed: dict[tuple[int, str], list[Binding]] = {}
        self._by_type: dict[int, list[Binding]] = {}
        for binding in bindings:
            prefixed = binding.pattern_type == PatternType.PREFIXED
            table = self._prefixed if prefixed else self._literal
            table.setdefault((binding.resource_type, binding.resource_name), []).append(binding)
            self._by_type.setdefault(binding.resource_type, []).append(binding)
        # the longest prefix any binding has, per resource type: how far to probe
        self._longest_prefix: dict[int, int] = {}
        for rtype, prefix in self._prefixed:
            self._longest_prefix[rtype] = max(self._longest_prefix.get(rtype, 0), len(prefix))

    def covering(self, resource_type: int, name: str) -> list[Binding]:
        """Every binding whose pattern applies to the resource."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        longest = min(len(name), self._longest_prefix.get(resource_type, -1))
        for end in range(longest + 1):
            found.extend(self._prefixed.get((resource_type, name[:end]), ()))
        return found

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """Kafka's decision (see the module doc)."""
        if principal in self.settings.super_users:
            return True
        bindings = self.covering(resource_type, name)
        if not bindings:
            return self.settings.allow_if_no_acl
        allowed = False
        for binding in bindings:
            if not _applies(binding, principal, host):
                continue
            if not operation_matches(binding.operation, operation, binding.permission_type):
                continue
            if binding.permission_type == Permission.DENY:
                return False
            if binding.permission_type == Permission.ALLOW:
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """May the principal do ``operation`` on *some* resource of the type? (Kafka's
        authorizeByResourceType, KIP-679: an idempotent producer with WRITE on any topic
        needs no IDEMPOTENT_WRITE.) True if an ALLOW pattern is not wholly covered by a
        DENY of the same principal and host."""
        if principal in self.settings.super_users:
            return True
        bindings = [
            b
            for b in self._by_type.get(resource_type, ())
            if _applies(b, principal, host)
            and operation_matches(b.operation, operation, b.permission_type)
        ]
        denies = [b for b in bindings if b.permission_type == Permission.DENY]
        for allow in bindings:
            if allow.permission_type != Permission.ALLOW:
                continue
            if not any(_deny_covers(deny, allow) for deny in denies):
                return True
        return False


def _applies(binding: Binding, principal: str, host: str) -> bool:
    if binding.principal != principal and binding.principal != WILDCARD_PRINCIPAL:
        return False
    return binding.host in (host, WILDCARD)


def _deny_covers(deny: Binding, allow: Binding) -> bool:
    """Does a DENY pattern take away every resource an ALLOW pattern gives?"""
    if deny.pattern_type == PatternType.LITERAL:
        if deny.resource_name == WILDCARD:
            return True
        literal = allow.pattern_type == PatternType.LITERAL
        return literal and allow.resource_name == deny.resource_name
    # a PREFIXED deny covers what starts with its prefix
    return allow.resource_name.startswith(deny.resource_name) and allow.resource_name != WILDCARD


__all__ = [
    "CLUSTER_NAME",
    "IMPLIED_BY",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclFilter",
    "AclIndex",
    "AclOperation",
    "AuthorizerSettings",
    "Binding",
    "InvalidAcl",
    "PatternType",
    "Permission",
    "ResourceType",
    "filter_matches",
    "operation_matches",
    "parse_principal",
    "parse_super_users",
    "pattern_covers",
    "validate_binding",
    "validate_filter",
]

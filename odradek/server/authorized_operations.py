"""Authorized operations (KIP-430): which ACL operations a client may perform on a resource.

How this works and why: Metadata (v8+, topics; v8-v10, the cluster), DescribeCluster,
DescribeGroups (v3+) and ConsumerGroupDescribe can report, when the request asks for
it, a 32-bit field whose bit ``n`` means "AclOperation ``n`` is allowed". When the
request does not ask, the field is INT32_MIN ("not requested"). Kafka without an
authorizer allows everything, so it answers with every operation the resource type
supports; odradek has no authorizer yet, so it does the same. This module is the one
place that knows the operation codes and which operations each resource type
supports (Kafka's ``AclEntry.supportedOperations``); the security issue adds the
authorizer that narrows ``authorized_operations`` to what the principal's ACLs allow.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final

NOT_REQUESTED: Final = -(2**31)  # INT32_MIN: the schema default, "not asked for"


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


_OP = AclOperation
SUPPORTED_OPERATIONS: Final[dict[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            _OP.READ,
            _OP.WRITE,
            _OP.CREATE,
            _OP.DESCRIBE,
            _OP.DELETE,
            _OP.ALTER,
            _OP.DESCRIBE_CONFIGS,
            _OP.ALTER_CONFIGS,
        }
    ),
    # DESCRIBE_CONFIGS / ALTER_CONFIGS on groups came with KIP-848's group configs.
    ResourceType.GROUP: frozenset(
        {_OP.READ, _OP.DESCRIBE, _OP.DELETE, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS}
    ),
    ResourceType.CLUSTER: frozenset(
        {
            _OP.CREATE,
            _OP.CLUSTER_ACTION,
            _OP.DESCRIBE_CONFIGS,
            _OP.ALTER_CONFIGS,
            _OP.IDEMPOTENT_WRITE,
            _OP.ALTER,
            _OP.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_OP.DESCRIBE, _OP.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_OP.DESCRIBE}),
    ResourceType.USER: frozenset({_OP.CREATE_TOKENS, _OP.DESCRIBE_TOKENS}),
}


def bit_field(operations: Iterable[AclOperation]) -> int:
    """The int32 field with one bit per operation code."""
    bits = 0
    for operation in operations:
        bits |= 1 << int(operation)
    return bits


def authorized_operations(resource_type: ResourceType, resource_name: str | None = None) -> int:
    """The operations allowed on one resource, as the response's bit field.

    With no authorizer every supported operation is allowed, whatever the name.
    """
    return bit_field(SUPPORTED_OPERATIONS[resource_type])


def requested(include: bool, resource_type: ResourceType, resource_name: str | None = None) -> int:
    """The field's value: the operations when the request asked, else NOT_REQUESTED."""
    return authorized_operations(resource_type, resource_name) if include else NOT_REQUESTED

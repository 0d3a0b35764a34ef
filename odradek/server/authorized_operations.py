"""Authorized operations (KIP-430): which ACL operations a client may perform on a resource.

How this works and why: Metadata (v8+, topics; v8-v10, the cluster), DescribeCluster,
DescribeGroups (v3+) and ConsumerGroupDescribe can report, when the request asks for
it, a 32-bit field whose bit ``n`` means "AclOperation ``n`` is allowed". When the
request does not ask, the field is INT32_MIN ("not requested"). Kafka without an
authorizer allows everything, so it answers with every operation the resource type
supports, and so does odradek with ``authorizer.class.name`` unset. This module knows
which operations each resource type supports (Kafka's
``AclEntry.supportedOperations``); with the authorizer on, server/authorizer.py keeps
of them those the principal's ACLs allow (``allowed``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

# The codes live with the matcher (security/acls.py); re-exported for the handlers.
from odradek.security.acls import AclOperation, ResourceType

NOT_REQUESTED: Final = -(2**31)  # INT32_MIN: the schema default, "not asked for"


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


def authorized_operations(
    resource_type: ResourceType, allowed: Callable[[AclOperation], bool] | None = None
) -> int:
    """The operations allowed on one resource, as the response's bit field: every
    supported one with no authorizer (``allowed`` None), else those ``allowed`` passes."""
    supported = SUPPORTED_OPERATIONS[resource_type]
    if allowed is None:
        return bit_field(supported)
    return bit_field(op for op in supported if allowed(op))


def requested(
    include: bool,
    resource_type: ResourceType,
    allowed: Callable[[AclOperation], bool] | None = None,
) -> int:
    """The field's value: the operations when the request asked, else NOT_REQUESTED."""
    return authorized_operations(resource_type, allowed) if include else NOT_REQUESTED

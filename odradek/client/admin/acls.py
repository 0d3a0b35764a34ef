"""ACL bindings and the CreateAcls / DescribeAcls / DeleteAcls admin operations.

How this works and why: the value types mirror confluent-kafka's (``AclBinding``,
``AclBindingFilter``, ``ResourcePatternType``, ``AclPermissionType``; ``ResourceType``
and ``AclOperation`` are types.py's), so code written for confluent's AdminClient runs
on odradek's: enums or their names or codes are accepted, a binding may not use the
filter-only values (ANY, MATCH), and bindings compare and hash by their fields (they
key the futures). The operations go to any broker (a broker forwards CreateAcls and
DeleteAcls to the active controller) and answer per item: ``create_acls`` None or the
error per binding, ``delete_acls`` the removed bindings or the error per filter,
``describe_acls`` the bindings matching one filter.
"""

from __future__ import annotations

import enum
import functools
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import request_entity
from odradek.client._core.errors import KafkaError
from odradek.client.admin.core import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, Outcome, check
from odradek.client.admin.types import AclOperation, ResourceType


class ResourcePatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # a filter: any pattern with exactly the name
    MATCH = 2  # a filter: every binding that applies to a resource of the name
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _enum(kind: type[enum.IntEnum], value: Any, field: str) -> Any:
    if isinstance(value, kind):
        return value
    if isinstance(value, enum.Enum):  # confluent's own enums: by name
        value = value.name
    try:
        if isinstance(value, str):
            return kind[value.upper()]
        return kind(int(value))
    except (KeyError, ValueError, TypeError):
        raise ValueError(f"{field}: {value!r} is not a {kind.__name__}") from None


@functools.total_ordering
class AclBinding:
    """A principal's permission for an operation on a resource pattern."""

    _forbidden: ClassVar[dict[str, tuple[enum.IntEnum, ...]]] = {
        "restype": (ResourceType.ANY,),
        "resource_pattern_type": (ResourcePatternType.ANY, ResourcePatternType.MATCH),
        "operation": (AclOperation.ANY,),
        "permission_type": (AclPermissionType.ANY,),
    }
    _nullable: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        restype: ResourceType | str | int,
        name: str | None,
        resource_pattern_type: ResourcePatternType | str | int,
        principal: str | None,
        host: str | None,
        operation: AclOperation | str | int,
        permission_type: AclPermissionType | str | int,
    ) -> None:
        self.restype = _enum(ResourceType, restype, "restype")
        self.name = name
        self.resource_pattern_type = _enum(
            ResourcePatternType, resource_pattern_type, "resource_pattern_type"
        )
        self.principal = principal
        self.host = host
        self.operation = _enum(AclOperation, operation, "operation")
        self.permission_type = _enum(AclPermissionType, permission_type, "permission_type")
        for field in ("name", "principal", "host"):
            value = getattr(self, field)
            if value is None and field not in self._nullable:
                raise ValueError(f"{field} may not be None")
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{field} must be a string")
        for field, forbidden in self._forbidden.items():
            if getattr(self, field) in forbidden:
                raise ValueError(
                    f"{type(self).__name__} cannot use {field}={getattr(self, field).name}"
                )

    def _to_tuple(self) -> tuple[Any, ...]:
        return (
            self.restype,
            self.name,
            self.resource_pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission_type,
        )

    def __repr__(self) -> str:
        fields = (
            f"ResourceType.{self.restype.name}",
            self.name,
            f"ResourcePatternType.{self.resource_pattern_type.name}",
            self.principal,
            self.host,
            f"AclOperation.{self.operation.name}",
            f"AclPermissionType.{self.permission_type.name}",
        )
        return f"{type(self).__name__}({','.join(str(f) for f in fields)})"

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._to_tuple()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AclBinding) or type(other) is not type(self):
            return NotImplemented
        return self._to_tuple() == other._to_tuple()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, AclBinding):
            return NotImplemented
        return tuple(str(f) for f in self._to_tuple()) < tuple(str(f) for f in other._to_tuple())


class AclBindingFilter(AclBinding):
    """A filter: None strings and ANY enums match anything; pattern type MATCH selects
    every binding that applies to a resource of the name."""

    _forbidden: ClassVar[dict[str, tuple[enum.IntEnum, ...]]] = {}
    _nullable: ClassVar[tuple[str, ...]] = ("name", "principal", "host")


# -- operations ---------------------------------------------------------------------
async def create_acls(cluster: Cluster, acls: list[AclBinding]) -> dict[AclBinding, Outcome]:
    """Per binding: the broker's outcome."""
    connection = await cluster.any_connection()
    v = connection.version_for(CREATE_ACLS)
    creations = tuple(
        request_entity(
            CREATE_ACLS,
            v,
            "AclCreation",
            resource_type=int(a.restype),
            resource_name=a.name,
            resource_pattern_type=int(a.resource_pattern_type),
            principal=a.principal,
            host=a.host,
            operation=int(a.operation),
            permission_type=int(a.permission_type),
        )
        for a in acls
    )
    response = await connection.send(request_entity(CREATE_ACLS, v, creations=creations))
    return {
        binding: Outcome(result.error_code, result.error_message)
        for binding, result in zip(acls, response.results, strict=False)
    }


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(f.restype),
        "resource_name_filter": f.name,
        "pattern_type_filter": int(f.resource_pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission_type),
    }


async def describe_acls(cluster: Cluster, acl_filter: AclBindingFilter) -> list[AclBinding]:
    """The bindings ``acl_filter`` selects; raises the broker's error."""
    connection = await cluster.any_connection()
    v = connection.version_for(DESCRIBE_ACLS)
    response = await connection.send(request_entity(DESCRIBE_ACLS, v, **_filter_fields(acl_filter)))
    check(response.error_code, "DescribeAcls", response.error_message)
    return sorted(
        AclBinding(
            int(r.resource_type),
            r.resource_name,
            int(r.pattern_type),
            a.principal,
            a.host,
            int(a.operation),
            int(a.permission_type),
        )
        for r in response.resources
        for a in r.acls
    )


async def delete_acls(
    cluster: Cluster, filters: list[AclBindingFilter]
) -> dict[AclBindingFilter, Any]:
    """Per filter: the bindings it removed, or its ``KafkaError``."""
    connection = await cluster.any_connection()
    v = connection.version_for(DELETE_ACLS)
    wire = tuple(
        request_entity(DELETE_ACLS, v, "DeleteAclsFilter", **_filter_fields(f)) for f in filters
    )
    response = await connection.send(request_entity(DELETE_ACLS, v, filters=wire))
    answers: dict[AclBindingFilter, Any] = {}
    for acl_filter, result in zip(filters, response.filter_results, strict=False):
        error = _error(result.error_code, result.error_message, acl_filter)
        answers[acl_filter] = (
            error
            if error is not None
            else [
                AclBinding(
                    int(m.resource_type),
                    m.resource_name,
                    int(m.pattern_type),
                    m.principal,
                    m.host,
                    int(m.operation),
                    int(m.permission_type),
                )
                for m in result.matching_acls
            ]
        )
    return answers


def _error(code: ErrorCode, message: str | None, what: object) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return KafkaError(code, f"{what}: {message}" if message else str(what))


__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "ResourcePatternType",
    "ResourceType",
    "create_acls",
    "delete_acls",
    "describe_acls",
]

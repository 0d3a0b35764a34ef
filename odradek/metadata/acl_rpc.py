"""CreateAcls and DeleteAcls forwarded to the active controller (RemoteControllerChannel).

How this works and why: a broker-only node of a quorum does not write ACL records;
like Kafka's brokers it forwards CreateAcls and DeleteAcls to the active controller
over the controller listener, whose handlers (server/handlers/acls.py, on both
planes) answer through that node's own controller. This module builds the requests
from the channel's plain data and reads the per-item results back into
``ControllerError``s and ``AclEntry``s, so the broker's handlers cannot tell the
forwarded path from the local one. The predicates say when the local image shows
the change (the channel's contract: on success the caller's image already has it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_entity
from odradek.metadata.controller_client import ControllerClient
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import AclEntry, MetadataImage
from odradek.security.acls import AclFilter

DESCRIBE_ACLS_KEY: Final = 29
CREATE_ACLS_KEY: Final = 30
DELETE_ACLS_KEY: Final = 31
ACL_VERSIONS: Final = (1, 3)  # kio has v1-v3 (Kafka 4 removed v0)

Predicate = Callable[[MetadataImage], bool]


def _error(code: ErrorCode, message: str | None) -> ControllerError | None:
    if code == ErrorCode.none:
        return None
    name = code.name.upper()
    return ControllerError(name, message or name)


async def create_acls(
    client: ControllerClient, timeout_s: float, bindings: Sequence[AclEntry]
) -> list[ControllerError | None]:
    def build(version: int) -> Any:
        creations = tuple(
            request_entity(
                CREATE_ACLS_KEY,
                version,
                "AclCreation",
                resource_type=b.resource_type,
                resource_name=b.resource_name,
                resource_pattern_type=b.pattern_type,
                principal=b.principal,
                host=b.host,
                operation=b.operation,
                permission_type=b.permission_type,
            )
            for b in bindings
        )
        return request_entity(CREATE_ACLS_KEY, version, creations=creations)

    response = await client.send(CREATE_ACLS_KEY, build, timeout_s=timeout_s)
    if len(response.results) != len(bindings):
        raise ControllerError("UNKNOWN_SERVER_ERROR", "CreateAcls answered the wrong count")
    return [_error(r.error_code, r.error_message) for r in response.results]


async def delete_acls(
    client: ControllerClient, timeout_s: float, filters: Sequence[AclFilter]
) -> list[ControllerError | list[AclEntry]]:
    def build(version: int) -> Any:
        wire = tuple(
            request_entity(
                DELETE_ACLS_KEY,
                version,
                "DeleteAclsFilter",
                resource_type_filter=f.resource_type,
                resource_name_filter=f.resource_name,
                pattern_type_filter=f.pattern_type,
                principal_filter=f.principal,
                host_filter=f.host,
                operation=f.operation,
                permission_type=f.permission_type,
            )
            for f in filters
        )
        return request_entity(DELETE_ACLS_KEY, version, filters=wire)

    response = await client.send(DELETE_ACLS_KEY, build, timeout_s=timeout_s)
    if len(response.filter_results) != len(filters):
        raise ControllerError("UNKNOWN_SERVER_ERROR", "DeleteAcls answered the wrong count")
    outcomes: list[ControllerError | list[AclEntry]] = []
    for result in response.filter_results:
        error = _error(result.error_code, result.error_message)
        if error is not None:
            outcomes.append(error)
            continue
        outcomes.append(
            [
                AclEntry(
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
    return outcomes


def created(bindings: Sequence[AclEntry], outcomes: Sequence[ControllerError | None]) -> Predicate:
    wanted = {b for b, o in zip(bindings, outcomes, strict=True) if o is None}

    def shown(image: MetadataImage) -> bool:
        return wanted <= set(image.acls.values())

    return shown


def deleted(outcomes: Sequence[ControllerError | list[AclEntry]]) -> Predicate:
    gone = {b for o in outcomes if not isinstance(o, ControllerError) for b in o}

    def shown(image: MetadataImage) -> bool:
        return not (gone & set(image.acls.values()))

    return shown


__all__ = [
    "ACL_VERSIONS",
    "CREATE_ACLS_KEY",
    "DELETE_ACLS_KEY",
    "DESCRIBE_ACLS_KEY",
    "create_acls",
    "created",
    "delete_acls",
    "deleted",
]

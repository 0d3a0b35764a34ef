"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31).

How this works and why: ACLs are metadata records (metadata/acl_changes.py), so
CreateAcls and DeleteAcls go through the controller channel like AlterConfigs: a
broker listener's handler checks the request's principal (ALTER on the cluster, as
Kafka asks) and calls its channel — this process's controller, or the active
controller over the controller listener (metadata/acl_rpc.py) on a broker-only node —
and the controller listener serves the forwarded requests through its own controller
(no second check: the forwarding broker made it). DescribeAcls (DESCRIBE on the
cluster) reads this node's image. Without an authorizer the broker answers
SECURITY_DISABLED, as Kafka does, since ACLs would have no effect.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from odradek.metadata.acl_rpc import (
    ACL_VERSIONS,
    CREATE_ACLS_KEY,
    DELETE_ACLS_KEY,
    DESCRIBE_ACLS_KEY,
)
from odradek.metadata.controller_channel import ControllerError
from odradek.metadata.image import AclEntry
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.security.acls import (
    AclFilter,
    AclOperation,
    InvalidAcl,
    ResourceType,
    filter_matches,
    validate_filter,
)
from odradek.server.handlers import Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import AdminServices, BrokerServices

DISABLED = ControllerError("SECURITY_DISABLED", "no authorizer is configured on the broker")
DENIED = ControllerError(
    "CLUSTER_AUTHORIZATION_FAILED", "the principal may not alter the cluster's ACLs"
)


def _refusal(services: BrokerServices, request: Request, operation: AclOperation) -> Any:
    if not services.authorizer.enabled:
        return DISABLED
    if not services.authorizer.allowed(request.session, operation, ResourceType.CLUSTER):
        return DENIED
    return None


def _filter(wire: Any) -> AclFilter:
    return AclFilter(
        int(wire.resource_type_filter),
        wire.resource_name_filter,
        int(wire.pattern_type_filter),
        wire.principal_filter,
        wire.host_filter,
        int(wire.operation),
        int(wire.permission_type),
    )


# -- DescribeAcls ------------------------------------------------------------------
@handles(DESCRIBE_ACLS_KEY, *ACL_VERSIONS)
async def describe_acls(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_ACLS_KEY, request.header.api_version)
    refusal = _refusal(services, request, AclOperation.DESCRIBE)
    acl_filter = _filter(request.body)
    if refusal is None:
        try:
            validate_filter(acl_filter)
        except InvalidAcl as exc:
            refusal = ControllerError("INVALID_REQUEST", str(exc))
    if refusal is not None:
        return make(
            module.DescribeAclsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(refusal.code),
            error_message=str(refusal),
            resources=(),
        )
    grouped: dict[tuple[int, str, int], list[AclEntry]] = {}
    for binding in services.metadata.image.acls.values():
        if filter_matches(acl_filter, binding):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            grouped.setdefault(key, []).append(binding)
    resources = tuple(
        make(
            module.DescribeAclsResource,
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            acls=tuple(
                make(
                    module.AclDescription,
                    principal=b.principal,
                    host=b.host,
                    operation=b.operation,
                    permission_type=b.permission_type,
                )
                for b in sorted(bindings, key=_order)
            ),
        )
        for (rtype, name, pattern), bindings in sorted(grouped.items())
    )
    return make(
        module.DescribeAclsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error_code("NONE"),
        error_message=None,
        resources=resources,
    )


def _order(binding: AclEntry) -> tuple[str, str, int, int]:
    return (binding.principal, binding.host, binding.operation, binding.permission_type)


# -- CreateAcls --------------------------------------------------------------------
@handles(CREATE_ACLS_KEY, *ACL_VERSIONS)
async def create_acls(services: BrokerServices, request: Request) -> Any:
    refusal = _refusal(services, request, AclOperation.ALTER)
    if refusal is not None:
        return _created(request, [refusal for _ in request.body.creations])
    return await _create(services, request)


@handles(CREATE_ACLS_KEY, *ACL_VERSIONS, plane=Plane.CONTROLLER)
async def forwarded_create_acls(services: AdminServices, request: Request) -> Any:
    return await _create(services, request)


async def _create(services: AdminServices, request: Request) -> Any:
    bindings = [
        AclEntry(
            int(c.resource_type),
            c.resource_name,
            int(c.resource_pattern_type),
            c.principal,
            c.host,
            int(c.operation),
            int(c.permission_type),
        )
        for c in request.body.creations
    ]
    outcomes = await services.controller.create_acls(bindings) if bindings else []
    return _created(request, outcomes)


def _created(request: Request, outcomes: Sequence[ControllerError | None]) -> Any:
    module = response_module(CREATE_ACLS_KEY, request.header.api_version)
    return make(
        module.CreateAclsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(
            make(
                module.AclCreationResult,
                error_code=error_code(o.code if o else "NONE"),
                error_message=str(o) if o else None,
            )
            for o in outcomes
        ),
    )


# -- DeleteAcls --------------------------------------------------------------------
@handles(DELETE_ACLS_KEY, *ACL_VERSIONS)
async def delete_acls(services: BrokerServices, request: Request) -> Any:
    refusal = _refusal(services, request, AclOperation.ALTER)
    if refusal is not None:
        return _deleted(request, [refusal for _ in request.body.filters])
    return await _delete(services, request)


@handles(DELETE_ACLS_KEY, *ACL_VERSIONS, plane=Plane.CONTROLLER)
async def forwarded_delete_acls(services: AdminServices, request: Request) -> Any:
    return await _delete(services, request)


async def _delete(services: AdminServices, request: Request) -> Any:
    filters = [_filter(f) for f in request.body.filters]
    outcomes = await services.controller.delete_acls(filters) if filters else []
    return _deleted(request, outcomes)


def _deleted(request: Request, outcomes: Sequence[ControllerError | list[AclEntry]]) -> Any:
    module = response_module(DELETE_ACLS_KEY, request.header.api_version)
    results = []
    for outcome in outcomes:
        failed = isinstance(outcome, ControllerError)
        matching = (
            ()
            if isinstance(outcome, ControllerError)
            else tuple(
                make(
                    module.DeleteAclsMatchingAcl,
                    error_code=error_code("NONE"),
                    error_message=None,
                    resource_type=b.resource_type,
                    resource_name=b.resource_name,
                    pattern_type=b.pattern_type,
                    principal=b.principal,
                    host=b.host,
                    operation=b.operation,
                    permission_type=b.permission_type,
                )
                for b in outcome
            )
        )
        results.append(
            make(
                module.DeleteAclsFilterResult,
                error_code=error_code(outcome.code if failed else "NONE"),  # type: ignore[union-attr]
                error_message=str(outcome) if failed else None,
                matching_acls=matching,
            )
        )
    return make(
        module.DeleteAclsResponse,
        throttle_time=datetime.timedelta(0),
        filter_results=tuple(results),
    )

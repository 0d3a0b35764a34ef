"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic and broker resources (the broker resource is this node's id, or "" for the
cluster-wide defaults). Values, sources and synonyms come from
``server/config_describe.py``; changes are checked by ``server/config_alter.py`` and
committed by the controller (through the controller channel), after which the broker's
metadata listener hands every affected log its new LogConfig. AlterConfigs replaces a
resource's whole set of dynamic configs; IncrementalAlterConfigs applies
SET/DELETE/APPEND/SUBTRACT.

AlterConfigs and IncrementalAlterConfigs are served on the controller plane too, for
the changes brokers forward: the same decoding and checks, through this node's own
controller (when it is the active one), except that a BROKER resource may name any
broker: the forwarding broker checked that it names itself.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.metadata.controller_channel import ConfigOp, ControllerError
from odradek.metadata.controller_rpc import FORWARDED_VERSIONS
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server import config_alter
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.config_describe import ConfigEntry, describe
from odradek.server.handlers import Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import AdminServices, BrokerServices, ControllerServices

DESCRIBE_CONFIGS_KEY = 32
ALTER_CONFIGS_KEY = 33
INCREMENTAL_ALTER_CONFIGS_KEY = 44
# ConfigResource.Type on the wire -> the ACL resource it is authorized on (brokers and
# broker loggers: the cluster)
ACL_RESOURCES = {2: ResourceType.TOPIC, 4: ResourceType.CLUSTER, 8: ResourceType.CLUSTER}
GROUP_CONFIG_RESOURCE = 32


def _require(
    services: AdminServices, request: Request, operation: AclOperation, resource: Any
) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the resource (Kafka's table); raises the
    authorization error as a ControllerError."""
    wire = resource.resource_type
    if wire == GROUP_CONFIG_RESOURCE:
        acl_type, name = ResourceType.GROUP, resource.resource_name
    elif wire in ACL_RESOURCES:
        acl_type = ACL_RESOURCES[wire]
        is_topic = acl_type == ResourceType.TOPIC
        name = resource.resource_name if is_topic else "kafka-cluster"
    else:
        return  # an unknown type: the describe/alter code answers it
    denial = services.authorizer.denial(request.session, operation, acl_type, name)
    if denial is not None:
        raise ControllerError(denial, f"not authorized to {operation.name} this resource")


@handles(DESCRIBE_CONFIGS_KEY, 1, 4)
async def describe_configs(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_CONFIGS_KEY, request.header.api_version)
    body = request.body
    synonyms = body.include_synonyms
    documentation = getattr(body, "include_documentation", False)
    results = []
    for resource in body.resources:
        keys = resource.configuration_keys or None  # null or empty: every config
        try:
            _require(services, request, AclOperation.DESCRIBE_CONFIGS, resource)
            entries = describe(services, resource.resource_type, resource.resource_name, keys)
            error = None
        except ControllerError as failure:
            entries, error = [], failure
        results.append(
            make(
                module.DescribeConfigsResult,
                error_code=error_code(error.code if error else "NONE"),
                error_message=str(error) if error else None,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(_entry(module, e, synonyms, documentation) for e in entries),
            )
        )
    return make(
        module.DescribeConfigsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(results),
    )


def _entry(module: Any, entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    return make(
        module.DescribeConfigsResourceResult,
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=entry.sensitive,
        synonyms=tuple(
            make(module.DescribeConfigsSynonym, name=s.name, value=s.value, source=s.source)
            for s in entry.synonyms
        )
        if synonyms
        else (),
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )


def _replacement_ops(resource: Any) -> list[ConfigOp]:
    return config_alter.replacement([(c.name, c.value) for c in resource.configs])


def _incremental_ops(resource: Any) -> list[ConfigOp]:
    return [ConfigOp(c.name, c.config_operation, c.value) for c in resource.configs]


@handles(ALTER_CONFIGS_KEY, *FORWARDED_VERSIONS[ALTER_CONFIGS_KEY])
async def alter_configs(services: BrokerServices, request: Request) -> Any:
    return await _alter(services, request, ALTER_CONFIGS_KEY, _replacement_ops, replace=True)


@handles(INCREMENTAL_ALTER_CONFIGS_KEY, *FORWARDED_VERSIONS[INCREMENTAL_ALTER_CONFIGS_KEY])
async def incremental_alter_configs(services: BrokerServices, request: Request) -> Any:
    return await _alter(
        services, request, INCREMENTAL_ALTER_CONFIGS_KEY, _incremental_ops, replace=False
    )


@handles(ALTER_CONFIGS_KEY, *FORWARDED_VERSIONS[ALTER_CONFIGS_KEY], plane=Plane.CONTROLLER)
async def forwarded_alter_configs(services: ControllerServices, request: Request) -> Any:
    return await _alter(
        services, request, ALTER_CONFIGS_KEY, _replacement_ops, replace=True, any_broker=True
    )


@handles(
    INCREMENTAL_ALTER_CONFIGS_KEY,
    *FORWARDED_VERSIONS[INCREMENTAL_ALTER_CONFIGS_KEY],
    plane=Plane.CONTROLLER,
)
async def forwarded_incremental_alter_configs(
    services: ControllerServices, request: Request
) -> Any:
    return await _alter(
        services,
        request,
        INCREMENTAL_ALTER_CONFIGS_KEY,
        _incremental_ops,
        replace=False,
        any_broker=True,
    )


async def _alter(
    services: AdminServices,
    request: Request,
    api_key: int,
    ops: Callable[[Any], list[ConfigOp]],
    *,
    replace: bool,
    any_broker: bool = False,
) -> Any:
    module = response_module(api_key, request.header.api_version)
    body = request.body
    resources = [(r.resource_type, r.resource_name) for r in body.resources]
    responses = []
    for resource in body.resources:
        try:
            if resources.count((resource.resource_type, resource.resource_name)) > 1:
                raise ControllerError("INVALID_REQUEST", "resource listed more than once")
            _require(services, request, AclOperation.ALTER_CONFIGS, resource)
            resource_type = config_alter.resolve(
                services, resource.resource_type, resource.resource_name, any_broker=any_broker
            )
            await services.controller.alter_configs(
                resource_type,
                resource.resource_name,
                ops(resource),
                replace=replace,
                validate_only=body.validate_only,
            )
            error = None
        except ControllerError as failure:
            error = failure
        responses.append(
            make(
                module.AlterConfigsResourceResponse,
                error_code=error_code(error.code if error else "NONE"),
                error_message=str(error) if error else None,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return make(
        getattr(module, type(body).__name__.replace("Request", "Response")),
        throttle_time=datetime.timedelta(0),
        responses=tuple(responses),
    )

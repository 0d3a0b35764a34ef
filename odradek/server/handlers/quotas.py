"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546.

Describe is answered from this broker's metadata image (quota_changes.py's
``describe``), as Kafka's brokers answer it from their metadata cache. Alter goes to
the controller through the channel — the local controller, or forwarded over the
controller listener to the active one on a quorum's broker — whose ``ClientQuota``
records every broker's quota manager picks up from its next image (server/quotas.py),
so a change applies without a restart. The controller listener serves AlterClientQuotas
too, for the changes brokers forward.

Each entry is answered on its own: a malformed entity or key is that entry's
INVALID_REQUEST, as is an entity listed twice in one request.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.metadata.controller_channel import ControllerError
from odradek.metadata.controller_rpc import FORWARDED_VERSIONS
from odradek.metadata.quota_changes import QuotaAlteration, check_entity, describe
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import AdminServices, BrokerServices, ControllerServices

DESCRIBE_CLIENT_QUOTAS_KEY = 48
ALTER_CLIENT_QUOTAS_KEY = 49


@handles(DESCRIBE_CLIENT_QUOTAS_KEY, 0, 1)
async def describe_client_quotas(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_CLIENT_QUOTAS_KEY, request.header.api_version)
    body = request.body
    components = [(c.entity_type, int(c.match_type), c.match) for c in body.components]
    try:
        denied = services.authorizer.denial(
            request.session, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER
        )
        if denied is not None:  # Kafka: DESCRIBE_CONFIGS on the cluster
            raise ControllerError(denied, "")
        found = describe(services.metadata.image, components, body.strict)
    except ControllerError as failure:
        return make(
            module.DescribeClientQuotasResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(failure.code),
            error_message=str(failure),
            entries=None,
        )
    entries = tuple(
        make(
            module.EntryData,
            entity=tuple(make(module.EntityData, entity_type=t, entity_name=n) for t, n in entity),
            values=tuple(make(module.ValueData, key=k, value=v) for k, v in sorted(values.items())),
        )
        for entity, values in found
    )
    return make(
        module.DescribeClientQuotasResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error_code("NONE"),
        error_message=None,
        entries=entries,
    )


@handles(ALTER_CLIENT_QUOTAS_KEY, *FORWARDED_VERSIONS[ALTER_CLIENT_QUOTAS_KEY])
async def alter_client_quotas(services: BrokerServices, request: Request) -> Any:
    return await _alter(services, request)


@handles(
    ALTER_CLIENT_QUOTAS_KEY, *FORWARDED_VERSIONS[ALTER_CLIENT_QUOTAS_KEY], plane=Plane.CONTROLLER
)
async def forwarded_alter_client_quotas(services: ControllerServices, request: Request) -> Any:
    return await _alter(services, request)


async def _alter(services: AdminServices, request: Request) -> Any:
    module = response_module(ALTER_CLIENT_QUOTAS_KEY, request.header.api_version)
    body = request.body
    outcomes: list[ControllerError | None] = []
    alterations: list[QuotaAlteration | None] = []
    denied = services.authorizer.denial(
        request.session, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER
    )
    for entry in body.entries:
        try:
            if denied is not None:  # Kafka: ALTER_CONFIGS on the cluster, for every entry
                raise ControllerError(denied, "")
            entity = check_entity([(e.entity_type, e.entity_name) for e in entry.entity])
            ops = tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops)
            alterations.append(QuotaAlteration(entity, ops))
            outcomes.append(None)
        except ControllerError as failure:
            alterations.append(None)
            outcomes.append(failure)
    entities: list[Any] = [a.entity if a is not None else None for a in alterations]
    for index, entity in enumerate(entities):
        if entity is not None and entities.count(entity) > 1:
            outcomes[index] = ControllerError("INVALID_REQUEST", "entity listed more than once")
    valid = [(i, a) for i, a in enumerate(alterations) if a is not None and outcomes[i] is None]
    if valid:
        results = await services.controller.alter_client_quotas(
            [a for _, a in valid], body.validate_only
        )
        for (index, _), result in zip(valid, results, strict=True):
            outcomes[index] = result
    responses = tuple(
        make(
            module.EntryData,
            error_code=error_code(outcome.code if outcome else "NONE"),
            error_message=str(outcome) if outcome else None,
            entity=tuple(
                make(module.EntityData, entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity
            ),
        )
        for entry, outcome in zip(body.entries, outcomes, strict=True)
    )
    return make(
        module.AlterClientQuotasResponse,
        throttle_time=datetime.timedelta(0),
        entries=responses,
    )

"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
ListGroups, DescribeGroups, DeleteGroups.

Thin: each decodes its fields (which vary by version) and calls the GroupCoordinator
(odradek/coordinator/group/), which owns the protocol. Request-level coordinator
errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID) become the
response's error code.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group.classic import JoinRequest, JoinResult
from odradek.coordinator.group.coordinator import OFFSETS_TOPIC, CoordinatorError
from odradek.coordinator.transaction.shard import TRANSACTION_STATE_TOPIC
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import NOT_REQUESTED, AclOperation, ResourceType
from odradek.server.handlers import handles
from odradek.server.handlers.metadata import request_listener

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

FIND_COORDINATOR_KEY = 10
JOIN_GROUP_KEY = 11
HEARTBEAT_KEY = 12
LEAVE_GROUP_KEY = 13
SYNC_GROUP_KEY = 14
DESCRIBE_GROUPS_KEY = 15
LIST_GROUPS_KEY = 16
DELETE_GROUPS_KEY = 42
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
_ZERO = datetime.timedelta(0)


READ = AclOperation.READ
DESCRIBE = AclOperation.DESCRIBE
GROUP = ResourceType.GROUP


def _require(
    services: BrokerServices, request: Request, operation: AclOperation, group_id: str
) -> None:
    """Raise the group's authorization error unless the principal may (Kafka's table:
    READ for membership and commits, DESCRIBE to describe, DELETE to delete)."""
    denial = services.authorizer.denial(request.session, operation, GROUP, group_id)
    if denial is not None:
        raise CoordinatorError(denial)


def _ms(value: datetime.timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else value


# -- FindCoordinator ----------------------------------------------------------------------
@handles(FIND_COORDINATOR_KEY, 0, 6)
async def find_coordinator(services: BrokerServices, request: Request) -> Any:
    module = response_module(FIND_COORDINATOR_KEY, request.header.api_version)
    body = request.body
    key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
    batched = hasattr(body, "coordinator_keys")
    keys = list(body.coordinator_keys) if batched else [body.key]
    found = [await _locate(services, request, key_type, key) for key in keys]
    if batched:
        coordinators = tuple(
            make(
                module.Coordinator,
                key=key,
                node_id=node,
                host=host,
                port=port,
                error_code=error_code(error),
                error_message=None if error == "NONE" else error,
            )
            for key, (error, node, host, port) in zip(keys, found, strict=True)
        )
        return make(module.FindCoordinatorResponse, throttle_time=_ZERO, coordinators=coordinators)
    error, node, host, port = found[0]
    return make(
        module.FindCoordinatorResponse,
        throttle_time=_ZERO,
        error_code=error_code(error),
        error_message=None if error == "NONE" else error,
        node_id=node,
        host=host,
        port=port,
    )


async def _locate(
    services: BrokerServices, request: Request, key_type: int, key: str
) -> tuple[str, int, str, int]:
    missing = ("COORDINATOR_NOT_AVAILABLE", -1, "", -1)
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE) or not key:
        return ("INVALID_REQUEST", -1, "", -1)
    resource = ResourceType.TRANSACTIONAL_ID if key_type == TRANSACTION_KEY_TYPE else GROUP
    denial = services.authorizer.denial(request.session, DESCRIBE, resource, key)
    if denial is not None:
        return (denial, -1, "", -1)
    if key_type == TRANSACTION_KEY_TYPE:  # the transaction coordinator's partition
        txns = services.txns
        if txns is None or not await txns.ensure_state_topic():
            return missing
        topic_name, index = TRANSACTION_STATE_TOPIC, txns.partition_for(key)
    else:
        if not await services.groups.ensure_offsets_topic():
            return missing
        topic_name, index = OFFSETS_TOPIC, services.groups.partition_for(key)
    topic = services.metadata.image.topics.get(topic_name)
    partition = topic.partitions.get(index) if topic else None
    if partition is None:
        return missing
    for endpoint in services.metadata.endpoints(
        services.metadata.image, request_listener(services, request)
    ):
        if endpoint.node_id == partition.leader:
            return ("NONE", endpoint.node_id, endpoint.host, endpoint.port)
    return missing


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------
@handles(JOIN_GROUP_KEY, 0, 9)
async def join_group(services: BrokerServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(JOIN_GROUP_KEY, version)
    body = request.body
    session_ms = _ms(body.session_timeout)
    join = JoinRequest(
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.header.client_id or "",
        client_host="/" + request.peer.rsplit(":", 1)[0] if request.peer else "",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=_ms(getattr(body, "rebalance_timeout", session_ms)),
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
        reason=getattr(body, "reason", None),
    )
    try:
        _require(services, request, READ, body.group_id)
        result = await services.groups.join(body.group_id, join)
    except CoordinatorError as error:
        result = JoinResult(error.code, member_id=body.member_id)
    return make(
        module.JoinGroupResponse,
        throttle_time=_ZERO,
        error_code=error_code(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 or result.protocol_name else "",
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            make(
                module.JoinGroupResponseMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata,
            )
            for m in result.members
        ),
    )


@handles(SYNC_GROUP_KEY, 0, 5)
async def sync_group(services: BrokerServices, request: Request) -> Any:
    module = response_module(SYNC_GROUP_KEY, request.header.api_version)
    body = request.body
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    try:
        _require(services, request, READ, body.group_id)
        result = await services.groups.sync(
            body.group_id,
            body.generation_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            getattr(body, "protocol_type", None),
            getattr(body, "protocol_name", None),
            assignments,
        )
        error, assignment = result.error, result.assignment
        protocol_type, protocol_name = result.protocol_type, result.protocol_name
    except CoordinatorError as failure:
        error, assignment, protocol_type, protocol_name = failure.code, b"", None, None
    return make(
        module.SyncGroupResponse,
        throttle_time=_ZERO,
        error_code=error_code(error),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignment=assignment,
    )


@handles(HEARTBEAT_KEY, 0, 4)
async def heartbeat(services: BrokerServices, request: Request) -> Any:
    module = response_module(HEARTBEAT_KEY, request.header.api_version)
    body = request.body
    try:
        _require(services, request, READ, body.group_id)
        error = await services.groups.heartbeat(
            body.group_id,
            body.generation_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
        )
    except CoordinatorError as failure:
        error = failure.code
    return make(module.HeartbeatResponse, throttle_time=_ZERO, error_code=error_code(error))


@handles(LEAVE_GROUP_KEY, 0, 5)
async def leave_group(services: BrokerServices, request: Request) -> Any:
    module = response_module(LEAVE_GROUP_KEY, request.header.api_version)
    body = request.body
    batched = hasattr(body, "members")
    leaving = (
        [(m.member_id, m.group_instance_id) for m in body.members]
        if batched
        else [(body.member_id, None)]
    )
    try:
        _require(services, request, READ, body.group_id)
        errors = await services.groups.leave(body.group_id, leaving)
        top = "NONE" if batched else errors[0]
    except CoordinatorError as failure:
        errors, top = [], failure.code
    members = (
        tuple(
            make(module.MemberResponse, member_id=m, group_instance_id=i, error_code=error_code(e))
            for (m, i), e in zip(leaving, errors, strict=False)
        )
        if batched
        else ()
    )
    return make(
        module.LeaveGroupResponse, throttle_time=_ZERO, error_code=error_code(top), members=members
    )


# -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------
@handles(LIST_GROUPS_KEY, 0, 5)
async def list_groups(services: BrokerServices, request: Request) -> Any:
    module = response_module(LIST_GROUPS_KEY, request.header.api_version)
    body = request.body
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    listed = []
    visible = _visible_groups(services, request)
    for group in services.groups.list_groups():
        if visible is not None and group.group_id not in visible:
            continue
        state = group.state.value
        if states and state.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        listed.append(
            make(
                module.ListedGroup,
                group_id=group.group_id,
                protocol_type=group.protocol_type or "",
                group_state=state,
                group_type="classic",
            )
        )
    for consumer_group in services.groups.list_consumer_groups():  # KIP-848
        if visible is not None and consumer_group.group_id not in visible:
            continue
        state = consumer_group.state.value
        if (states and state.lower() not in states) or (types and "consumer" not in types):
            continue
        listed.append(
            make(
                module.ListedGroup,
                group_id=consumer_group.group_id,
                protocol_type="consumer",
                group_state=state,
                group_type="consumer",
            )
        )
    return make(
        module.ListGroupsResponse,
        throttle_time=_ZERO,
        error_code=error_code("NONE"),
        groups=tuple(listed),
    )


def _visible_groups(services: BrokerServices, request: Request) -> set[str] | None:
    """ListGroups: None (every group) with DESCRIBE on the cluster, else the groups
    the principal may DESCRIBE, as Kafka filters them."""
    authorizer, session = services.authorizer, request.session
    if authorizer.allowed(session, DESCRIBE, ResourceType.CLUSTER):
        return None
    ids = [g.group_id for g in services.groups.list_groups()]
    ids += [g.group_id for g in services.groups.list_consumer_groups()]
    return authorizer.allowed_names(session, DESCRIBE, GROUP, ids)


@handles(DESCRIBE_GROUPS_KEY, 0, 5)
async def describe_groups(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_GROUPS_KEY, request.header.api_version)
    # v3+: a group described without error reports what the client may do with it.
    include = getattr(request.body, "include_authorized_operations", False)
    described = []
    for group_id in request.body.groups:
        operations = services.authorizer.operations(include, request.session, GROUP, group_id)
        try:
            _require(services, request, DESCRIBE, group_id)
            group = services.groups.describe(group_id)
        except CoordinatorError as failure:
            described.append(_described(module, group_id, failure.code, "Dead", "", "", ()))
            continue
        if group is None:
            described.append(
                _described(module, group_id, "NONE", "Dead", "", "", (), operations=operations)
            )
            continue
        info = group.describe()
        members = tuple(
            make(
                module.DescribedGroupMember,
                member_id=m["member_id"],
                group_instance_id=m["group_instance_id"],
                client_id=m["client_id"],
                client_host=m["client_host"],
                member_metadata=m["metadata"],
                member_assignment=m["assignment"],
            )
            for m in info["members"]
        )
        described.append(
            _described(
                module,
                group_id,
                "NONE",
                info["state"],
                info["protocol_type"],
                info["protocol_name"],
                members,
                operations=operations,
            )
        )
    return make(module.DescribeGroupsResponse, throttle_time=_ZERO, groups=tuple(described))


def _described(
    module: Any,
    group_id: str,
    error: str,
    state: str,
    protocol_type: str,
    protocol: str,
    members: tuple[Any, ...],
    *,
    operations: int = NOT_REQUESTED,
) -> Any:
    return make(
        module.DescribedGroup,
        error_code=error_code(error),
        error_message=None,
        group_id=group_id,
        group_state=state,
        protocol_type=protocol_type,
        protocol_data=protocol,
        members=members,
        authorized_operations=operations if error == "NONE" else NOT_REQUESTED,
    )


@handles(DELETE_GROUPS_KEY, 0, 2)
async def delete_groups(services: BrokerServices, request: Request) -> Any:
    module = response_module(DELETE_GROUPS_KEY, request.header.api_version)
    wanted = list(request.body.groups_names)
    deletable = services.authorizer.allowed_names(
        request.session, AclOperation.DELETE, GROUP, wanted
    )
    results = await services.groups.delete_groups([g for g in wanted if g in deletable])
    for group_id in wanted:  # Kafka answers the others in the request's results too
        if group_id not in deletable:
            results[group_id] = "GROUP_AUTHORIZATION_FAILED"
    return make(
        module.DeleteGroupsResponse,
        throttle_time=_ZERO,
        results=tuple(
            make(module.DeletableGroupResult, group_id=g, error_code=error_code(e))
            for g, e in results.items()
        ),
    )

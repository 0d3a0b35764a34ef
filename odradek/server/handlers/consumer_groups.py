"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Thin: the heartbeat's fields become a ``HeartbeatRequest`` for the GroupCoordinator,
which owns the protocol (coordinator/group/consumer.py); topic ids in assignments are
named from the metadata image for ConsumerGroupDescribe. Request-level coordinator
errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) become the error code.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group.consumer import ConsumerGroup
from odradek.coordinator.group.consumer_model import HeartbeatRequest, HeartbeatResult
from odradek.coordinator.group.coordinator import CoordinatorError
from odradek.metadata.image import MetadataImage
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import NOT_REQUESTED, AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69
_ZERO = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1 MemberType: uses the consumer protocol


@handles(CONSUMER_GROUP_HEARTBEAT_KEY, 0, 1)
async def consumer_group_heartbeat(services: BrokerServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(CONSUMER_GROUP_HEARTBEAT_KEY, version)
    body = request.body
    owned = None
    if body.topic_partitions is not None:
        owned = frozenset(
            (t.topic_id, p) for t in body.topic_partitions if t.topic_id for p in t.partitions
        )
    names = body.subscribed_topic_names
    heartbeat = HeartbeatRequest(
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=body.rebalance_timeout // _MS,
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=owned,
        client_id=request.header.client_id or "",
        client_host="/" + request.peer.rsplit(":", 1)[0] if request.peer else "",
    )
    try:
        denial = services.authorizer.denial(
            request.session, AclOperation.READ, ResourceType.GROUP, body.group_id
        )
        if denial is not None:
            raise CoordinatorError(denial)
        result = await services.groups.consumer_heartbeat(
            body.group_id, heartbeat, require_member_id=version >= 1
        )
    except CoordinatorError as failure:
        result = HeartbeatResult(failure.code, None, body.member_id, body.member_epoch)
    assignment = None
    if result.assignment is not None:
        assignment = make(
            module.Assignment, topic_partitions=_topic_partitions(module, result.assignment)
        )
    return make(
        module.ConsumerGroupHeartbeatResponse,
        throttle_time=_ZERO,
        error_code=error_code(result.error),
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


def _topic_partitions(
    module: Any, assignment: Mapping[uuid.UUID, tuple[int, ...]], image: MetadataImage | None = None
) -> tuple[Any, ...]:
    """Heartbeat assignments carry topic ids; describe's also carry names (from ``image``)."""
    entries = []
    for topic_id, partitions in assignment.items():
        name = None
        if image is not None:
            name = image.topic_names_by_id.get(topic_id)
            if name is None:
                continue  # deleted since: not shown
        entries.append(
            make(module.TopicPartitions, topic_id=topic_id, topic_name=name, partitions=partitions)
        )
    return tuple(entries)


@handles(CONSUMER_GROUP_DESCRIBE_KEY, 0, 1)
async def consumer_group_describe(services: BrokerServices, request: Request) -> Any:
    module = response_module(CONSUMER_GROUP_DESCRIBE_KEY, request.header.api_version)
    described = []
    for group_id in request.body.group_ids:
        if not group_id:
            described.append(_failed(module, group_id, "INVALID_GROUP_ID", None))
            continue
        try:
            denial = services.authorizer.denial(
                request.session, AclOperation.DESCRIBE, ResourceType.GROUP, group_id
            )
            if denial is not None:
                raise CoordinatorError(denial)
            group = services.groups.describe_consumer_group(group_id)
        except CoordinatorError as failure:
            described.append(_failed(module, group_id, failure.code, None))
            continue
        if group is None:
            described.append(
                _failed(module, group_id, "GROUP_ID_NOT_FOUND", f"Group {group_id} not found.")
            )
        elif not isinstance(group, ConsumerGroup):
            message = f"Group {group_id} is not a consumer group."
            described.append(_failed(module, group_id, "GROUP_ID_NOT_FOUND", message))
        else:
            operations = services.authorizer.operations(
                request.body.include_authorized_operations,
                request.session,
                ResourceType.GROUP,
                group_id,
            )
            described.append(_described(module, group, services.metadata.image, operations))
    return make(module.ConsumerGroupDescribeResponse, throttle_time=_ZERO, groups=tuple(described))


def _failed(module: Any, group_id: str, error: str, message: str | None) -> Any:
    return make(
        module.DescribedGroup,
        error_code=error_code(error),
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
        members=(),
        authorized_operations=NOT_REQUESTED,
    )


def _described(module: Any, group: ConsumerGroup, image: MetadataImage, operations: int) -> Any:
    info = group.describe()
    members = tuple(
        make(
            module.Member,
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=make(
                module.Assignment,
                topic_partitions=_topic_partitions(module, m.assignment, image),
            ),
            target_assignment=make(
                module.Assignment,
                topic_partitions=_topic_partitions(module, m.target_assignment, image),
            ),
            member_type=CONSUMER_MEMBER_TYPE,
        )
        for m in info.members
    )
    return make(
        module.DescribedGroup,
        error_code=error_code("NONE"),
        error_message=None,
        group_id=info.group_id,
        group_state=info.state,
        group_epoch=info.group_epoch,
        assignment_epoch=info.assignment_epoch,
        assignor_name=info.assignor_name,
        members=members,
        authorized_operations=operations,
    )

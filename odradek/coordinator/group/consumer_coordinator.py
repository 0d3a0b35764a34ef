"""The GroupCoordinator's side of consumer groups (KIP-848): lookup, the classic/consumer
split, timers, views.

How this works and why: a group id names either a classic group (classic.py) or a
consumer group (consumer.py), never both. As in Kafka, an *empty* group of one kind is
converted when a member of the other protocol arrives (offline migration); a group
with members refuses the other protocol with GROUP_ID_NOT_FOUND. Committed offsets are
shared: they belong to the group id, whatever its kind, and are persisted by the
GroupCoordinator in ``__consumer_offsets``. Consumer group membership is not
persisted: after a restart or a coordinator move the members' heartbeats get
UNKNOWN_MEMBER_ID and they rejoin with epoch 0. A group's own session timeout and
heartbeat interval (group configs ``consumer.session.timeout.ms`` /
``consumer.heartbeat.interval.ms`` in the metadata image) are read on every heartbeat,
so a change applies from each member's next heartbeat, as in Kafka.

These are functions of a ``GroupShard`` (shard.py), run in its partition's write
queue by the ``GroupCoordinator`` facade (coordinator.py): a heartbeat changes the
group's state but writes no record.
"""

from __future__ import annotations

import base64
import logging
import uuid
from typing import TYPE_CHECKING

from odradek.coordinator.group.classic import ClassicGroup, GroupState
from odradek.coordinator.group.consumer import ConsumerGroup
from odradek.coordinator.group.consumer_model import (
    JOIN_EPOCH,
    ConsumerGroupSettings,
    HeartbeatRequest,
    HeartbeatResult,
    heartbeat_problem,
)
from odradek.metadata.image import GROUP_RESOURCE

if TYPE_CHECKING:
    from odradek.coordinator.group.shard import GroupShard
    from odradek.metadata.image import MetadataImage

logger = logging.getLogger(__name__)


def heartbeat(
    shard: GroupShard,
    group_id: str,
    request: HeartbeatRequest,
    image: MetadataImage,
    *,
    require_member_id: bool,
) -> HeartbeatResult:
    """ConsumerGroupHeartbeat on the group's shard (the request was checked)."""
    group = shard.consumer_groups.get(group_id)
    settings = settings_of(shard.settings.consumer, image, group_id)
    if group is None:
        classic = shard.groups.get(group_id)
        if classic is not None and classic.state is not GroupState.DEAD:
            if classic.state is not GroupState.EMPTY or classic.members:
                return HeartbeatResult(
                    "GROUP_ID_NOT_FOUND",
                    f"Group {group_id} is not a consumer group.",
                    request.member_id,
                )
            logger.info("group %s: empty classic group becomes a consumer group", group_id)
            del shard.groups[group_id]
        if request.member_epoch != JOIN_EPOCH:
            return HeartbeatResult(
                "UNKNOWN_MEMBER_ID", f"group {group_id} has no members", request.member_id
            )
        group = ConsumerGroup(group_id, settings, clock=shard.clock, new_member_id=new_uuid)
        shard.consumer_groups[group_id] = group
    else:
        group.settings = settings
    return group.heartbeat(request, image, require_member_id=require_member_id)


def check(group_id: str, request: HeartbeatRequest, require_member_id: bool) -> str | None:
    """What makes the request invalid (INVALID_REQUEST), or None."""
    problem = "GroupId can't be empty." if not group_id else None
    return problem or heartbeat_problem(request, require_member_id)


def settings_of(
    defaults: ConsumerGroupSettings, image: MetadataImage, group_id: str
) -> ConsumerGroupSettings:
    return defaults.for_group(image.configs.get((GROUP_RESOURCE, group_id), {}))


def describe(shard: GroupShard, group_id: str) -> ConsumerGroup | ClassicGroup | None:
    """The group of this id, of either kind (ConsumerGroupDescribe tells them apart)."""
    group = shard.consumer_groups.get(group_id)
    if group is not None:
        return group
    classic = shard.groups.get(group_id)
    return classic if classic is not None and classic.state is not GroupState.DEAD else None


def new_uuid() -> str:
    """A member id as Kafka makes them: a random UUID, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

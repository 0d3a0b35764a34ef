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

``GroupCoordinator`` (coordinator.py) inherits this mixin; it provides the attributes
declared below.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable
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
    from odradek.coordinator.group.coordinator import CoordinatorSettings
    from odradek.metadata.view import MetadataView

logger = logging.getLogger(__name__)


class ConsumerGroupCoordination:
    metadata: MetadataView
    clock: Callable[[], int]
    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]

    settings: CoordinatorSettings
    _owned: set[int]  # partitions of __consumer_offsets this broker leads

    def _check_owner(self, group_id: str) -> None:  # provided by GroupCoordinator
        raise NotImplementedError

    def partition_for(self, group_id: str) -> int:  # provided by GroupCoordinator
        raise NotImplementedError

    async def consumer_heartbeat(
        self, group_id: str, request: HeartbeatRequest, *, require_member_id: bool
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat; request-level failures raise CoordinatorError."""
        problem = "GroupId can't be empty." if not group_id else None
        problem = problem or heartbeat_problem(request, require_member_id)
        if problem is not None:
            return HeartbeatResult("INVALID_REQUEST", problem, request.member_id)
        self._check_owner(group_id)
        group = self.consumer_groups.get(group_id)
        if group is None:
            classic = self.groups.get(group_id)
            if classic is not None and classic.state is not GroupState.DEAD:
                if classic.state is not GroupState.EMPTY or classic.members:
                    return HeartbeatResult(
                        "GROUP_ID_NOT_FOUND",
                        f"Group {group_id} is not a consumer group.",
                        request.member_id,
                    )
                logger.info("group %s: empty classic group becomes a consumer group", group_id)
                del self.groups[group_id]
            if request.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(
                    "UNKNOWN_MEMBER_ID", f"group {group_id} has no members", request.member_id
                )
            group = ConsumerGroup(
                group_id, self._settings_of(group_id), clock=self.clock, new_member_id=new_uuid
            )
            self.consumer_groups[group_id] = group
        else:
            group.settings = self._settings_of(group_id)
        return group.heartbeat(request, self.metadata.image, require_member_id=require_member_id)

    def _settings_of(self, group_id: str) -> ConsumerGroupSettings:
        configs = self.metadata.image.configs.get((GROUP_RESOURCE, group_id), {})
        return self.settings.consumer.for_group(configs)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroup | ClassicGroup | None:
        """The group of this id, of either kind (ConsumerGroupDescribe tells them apart)."""
        self._check_owner(group_id)
        group = self.consumer_groups.get(group_id)
        if group is not None:
            return group
        classic = self.groups.get(group_id)
        return classic if classic is not None and classic.state is not GroupState.DEAD else None

    def list_consumer_groups(self) -> list[ConsumerGroup]:
        owned = self._owned
        return [
            g
            for g in self.consumer_groups.values()
            if not g.dead and self.partition_for(g.group_id) in owned
        ]

    def tick_consumer_groups(self, now: int) -> None:
        for group in list(self.consumer_groups.values()):
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline <= now:
                try:
                    group.tick()
                except Exception:  # one group's failure must not stop the timers
                    logger.exception("timer of consumer group %s failed", group.group_id)

    def drop_consumer_groups(self, partition: int | None) -> None:
        """Forget the consumer groups of a partition this broker no longer leads (None: all)."""
        for group_id in list(self.consumer_groups):
            if partition is None or self.partition_for(group_id) == partition:
                self.consumer_groups.pop(group_id).mark_dead()

    def take_empty_consumer_group(self, group_id: str, *, convert: bool) -> bool:
        """Whether the classic protocol may use this id: False while a consumer group with
        members holds it; an empty one is dropped when ``convert`` (it becomes classic)."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            return True
        if not group.is_empty:
            return False
        if not convert:
            return True
        logger.info("group %s: empty consumer group becomes a classic group", group_id)
        del self.consumer_groups[group_id]
        group.mark_dead()
        return True


def new_uuid() -> str:
    """A member id as Kafka makes them: a random UUID, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

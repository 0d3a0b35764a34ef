"""A consumer group of the new protocol (KIP-848), as a sans-IO state machine.

How this works and why: members send one request, ConsumerGroupHeartbeat, every
``group.consumer.heartbeat.interval.ms``; the coordinator answers at once (nothing is
parked). Three epochs drive the group:

- the *group epoch* moves when membership, a subscription, the chosen server
  assignor or the metadata of a subscribed topic (its id, its partition count)
  changes;
- the *assignment epoch* is the group epoch the target assignment was computed for;
  a heartbeat that finds it behind runs the server-side assignor (assignors.py) —
  so between a change and the next heartbeat the group is "Assigning";
- each *member epoch* reaches the assignment epoch once the member has reconciled
  (consumer_model.reconcile): it gives up what the target takes away before it
  receives partitions another member still holds.

A member joins with epoch 0 (v0: the coordinator names it when the id is empty; v1,
KIP-1082: the client names it), leaves with -1, or with -2 as a static member that
keeps its place and assignment until the session ends so its restart (same instance
id, new member id) does not move partitions. A member is removed when its session
(``group.consumer.session.timeout.ms`` since its last heartbeat) ends, or when it does
not revoke within its rebalance timeout; a removed member's next heartbeat gets
UNKNOWN_MEMBER_ID and it rejoins with epoch 0. A heartbeat with an epoch the member
does not have is FENCED_MEMBER_EPOCH, except the previous epoch with owned partitions
inside the current assignment: the response with the new epoch may have been lost.

No I/O: the clock and member-id generator are injected, the metadata is passed in,
and the owner calls ``tick()`` when ``next_deadline_ms()`` has passed. Membership is
not persisted (only committed offsets are, by the coordinator); after a coordinator
move members get UNKNOWN_MEMBER_ID and rejoin.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable

from odradek.coordinator.group.assignors import ASSIGNORS
from odradek.coordinator.group.consumer_model import (
    INTERNAL_TOPICS,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    NO_PARTITIONS,
    STATIC_LEAVE_EPOCH,
    UNCHANGED,
    ConsumerGroupSettings,
    ConsumerGroupState,
    ConsumerMember,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    MemberDescription,
    MemberState,
    MetadataView,
    Partitions,
    TopicPartition,
    by_topic,
    flatten,
    heartbeat_problem,
    reconcile,
)

logger = logging.getLogger(__name__)


class ConsumerGroup:
    def __init__(
        self,
        group_id: str,
        settings: ConsumerGroupSettings,
        *,
        clock: Callable[[], int],
        new_member_id: Callable[[], str],
    ) -> None:
        self.group_id = group_id
        self.settings = settings
        self._clock = clock
        self._new_member_id = new_member_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.assignor_name = settings.assignors[0]
        self.members: dict[str, ConsumerMember] = {}  # in join order
        self.target: dict[str, Partitions] = {}  # member id -> target assignment
        self.dead = False
        self._static: dict[str, str] = {}  # instance id -> member id
        self._holder: dict[TopicPartition, str] = {}  # assigned or pending revocation
        self._subscribed: dict[str, tuple[uuid.UUID, int]] = {}  # name -> (topic id, count)
        self._regex_matches: dict[str, frozenset[str]] = {}
        self._metadata_seen: object | None = None

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------
    def heartbeat(
        self, request: HeartbeatRequest, metadata: MetadataView, *, require_member_id: bool
    ) -> HeartbeatResult:
        problem = heartbeat_problem(request, require_member_id)
        if problem is not None:
            return self._error(request, "INVALID_REQUEST", problem)
        if self.dead:
            return self._error(request, "COORDINATOR_NOT_AVAILABLE")
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(request)
        if request.server_assignor is not None and (
            request.server_assignor not in self.settings.assignors
        ):
            return self._error(
                request, "UNSUPPORTED_ASSIGNOR", f"{request.server_assignor} is not supported"
            )
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as error:
                return self._error(request, "INVALID_REGULAR_EXPRESSION", str(error))
        member_or_error = self._member_for(request)
        if isinstance(member_or_error, HeartbeatResult):
            return member_or_error
        member, joined = member_or_error
        changes = self._update_member(member, request)
        if joined:
            changes.append(f"member {member.member_id} joined")
        member.last_heartbeat_ms = self._clock()
        changes += self._refresh_metadata(metadata, force=bool(changes))
        if changes:
            self._bump("; ".join(changes))
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()
        before = member.assigned
        self._reconcile(member, request.owned)
        send = request.is_full or member.assigned != before
        return HeartbeatResult(
            "NONE",
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            assignment=by_topic(member.assigned) if send else None,
        )

    def _error(self, request: HeartbeatRequest, error: str, message: str = "") -> HeartbeatResult:
        return HeartbeatResult(
            error,
            message or None,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
        )

    def _member_for(
        self, request: HeartbeatRequest
    ) -> tuple[ConsumerMember, bool] | HeartbeatResult:
        """The member this heartbeat is from, and whether it just joined; or an error."""
        if request.member_epoch == JOIN_EPOCH:
            member_id = request.member_id or self._new_member_id()
            instance_id = request.instance_id
            static_id = self._static.get(instance_id) if instance_id is not None else None
            if static_id is not None and static_id != member_id:
                previous = self.members[static_id]
                if not previous.left_static:
                    return self._error(
                        request,
                        "UNRELEASED_INSTANCE_ID",
                        f"instance {instance_id} is still used by member {static_id}",
                    )
                return self._replace_static(previous, member_id), False
            member = self.members.get(member_id)
            if member is not None:  # a known member starting over (after an error)
                member.left_static = False
                return member, False
            if len(self.members) >= self.settings.max_size:
                return self._error(
                    request,
                    "GROUP_MAX_SIZE_REACHED",
                    f"group {self.group_id} has {len(self.members)} members",
                )
            member = ConsumerMember(
                member_id,
                instance_id,
                request.rack_id,
                request.client_id,
                request.client_host,
                request.rebalance_timeout_ms,
            )
            self.members[member_id] = member
            if instance_id is not None:
                self._static[instance_id] = member_id
            return member, True
        member = self.members.get(request.member_id)
        if member is None:
            return self._error(request, "UNKNOWN_MEMBER_ID", f"{request.member_id} is not a member")
        if request.instance_id is not None and request.instance_id != member.instance_id:
            return self._error(request, "FENCED_INSTANCE_ID")
        epoch = request.member_epoch
        previous_ok = (
            epoch == member.previous_epoch
            and request.owned is not None
            and request.owned <= member.assigned
        )
        if member.left_static or (epoch != member.member_epoch and not previous_ok):
            return self._error(
                request,
                "FENCED_MEMBER_EPOCH",
                f"epoch {epoch}, the member is at {member.member_epoch}",
            )
        return member, False

    def _replace_static(self, previous: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member restarted under a new id: it takes over its old place."""
        old_id = previous.member_id
        logger.info("group %s: static member %s is now %s", self.group_id, old_id, member_id)
        self.members = {(member_id if k == old_id else k): m for k, m in self.members.items()}
        previous.member_id = member_id
        previous.left_static = False
        assert previous.instance_id is not None
        self._static[previous.instance_id] = member_id
        if old_id in self.target:
            self.target[member_id] = self.target.pop(old_id)
        for tp in previous.held:
            self._holder[tp] = member_id
        return previous

    def _update_member(self, member: ConsumerMember, request: HeartbeatRequest) -> list[str]:
        """Apply the fields the heartbeat sets; the changes that move the group epoch."""
        changes = []
        member.client_id, member.client_host = request.client_id, request.client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms != UNCHANGED:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        names = request.subscribed_topic_names
        if names is not None and tuple(sorted(set(names))) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(sorted(set(names)))
            changes.append(
                f"{member.member_id} subscribed to {list(member.subscribed_topic_names)}"
            )
        regex = request.subscribed_topic_regex
        if regex is not None and (regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = regex or None
            changes.append(f"{member.member_id} subscribed to /{regex}/")
        assignor = request.server_assignor
        if assignor is not None and assignor != member.server_assignor:
            member.server_assignor = assignor
            changes.append(f"{member.member_id} asks for assignor {assignor}")
        return changes

    def _leave(self, request: HeartbeatRequest) -> HeartbeatResult:
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            assert request.instance_id is not None
            static_id = self._static.get(request.instance_id)
            if static_id is None:
                return self._error(request, "UNKNOWN_MEMBER_ID")
            if static_id != request.member_id:
                return self._error(request, "FENCED_INSTANCE_ID")
            member = self.members[static_id]
            member.left_static = True  # keeps its assignment until its session ends
            member.last_heartbeat_ms = self._clock()
            logger.info("group %s: static member %s left for now", self.group_id, static_id)
        else:
            found = self.members.get(request.member_id)
            if found is None:
                return self._error(request, "UNKNOWN_MEMBER_ID")
            self._remove(found, "left the group")
        return HeartbeatResult(
            "NONE",
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
        )

    # -- epochs, metadata, the target assignment ----------------------------------------
    def _bump(self, reason: str) -> None:
        self.group_epoch += 1
        logger.info("group %s: epoch %d: %s", self.group_id, self.group_epoch, reason)

    def _refresh_metadata(self, metadata: MetadataView, *, force: bool) -> list[str]:
        """Re-resolve the subscriptions when the metadata or a subscription changed."""
        if metadata is self._metadata_seen and not force:
            return []
        self._metadata_seen = metadata
        regexes = {m.subscribed_topic_regex for m in self.members.values()}
        self._regex_matches = {
            regex: _matching_topics(regex, metadata.topics) for regex in regexes if regex
        }
        names: set[str] = set()
        for matches in self._regex_matches.values():
            names |= matches
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
        subscribed = {}
        for name in sorted(names):
            topic = metadata.topics.get(name)
            if topic is not None:
                subscribed[name] = (topic.topic_id, len(topic.partitions))
        if subscribed == self._subscribed:
            return []
        self._subscribed = subscribed
        return [f"subscribed topics now {sorted(subscribed)}"]

    def _topics_of(self, member: ConsumerMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= self._regex_matches.get(member.subscribed_topic_regex, frozenset())
        return {n for n in names if n in self._subscribed}

    def _choose_assignor(self) -> str:
        """The assignor most members ask for (ties: configuration order), else the default."""
        votes: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor is not None:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        if not votes:
            return self.settings.assignors[0]
        order = self.settings.assignors
        return max(sorted(votes, key=order.index), key=lambda name: votes[name])

    def _compute_target(self) -> None:
        self.assignor_name = self._choose_assignor()
        subscriptions = {
            member_id: frozenset(self._subscribed[name][0] for name in self._topics_of(member))
            for member_id, member in self.members.items()
        }
        counts = {topic_id: count for topic_id, count in self._subscribed.values()}
        previous = {m: by_topic(self.target.get(m, NO_PARTITIONS)) for m in self.members}
        result = ASSIGNORS[self.assignor_name](subscriptions, counts, previous)
        self.target = {m: flatten(result.get(m, {})) for m in self.members}
        self.assignment_epoch = self.group_epoch
        logger.info(
            "group %s: target assignment of epoch %d by %s: %s",
            self.group_id,
            self.assignment_epoch,
            self.assignor_name,
            {m: len(ps) for m, ps in self.target.items()},
        )

    def _reconcile(self, member: ConsumerMember, owned: Partitions | None) -> None:
        target = self.target.get(member.member_id, NO_PARTITIONS)
        step = reconcile(member, target, self.assignment_epoch, owned, self._holder.get)
        was_revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        self._set_held(member, step.assigned, step.pending_revocation)
        if step.member_epoch != member.member_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = step.member_epoch
        member.state = step.state
        if step.state is MemberState.UNREVOKED_PARTITIONS:
            if not was_revoking:
                member.revocation_deadline_ms = self._clock() + member.rebalance_timeout_ms
        else:
            member.revocation_deadline_ms = None

    def _set_held(self, member: ConsumerMember, assigned: Partitions, pending: Partitions) -> None:
        for tp in member.held - (assigned | pending):
            if self._holder.get(tp) == member.member_id:
                del self._holder[tp]
        for tp in assigned | pending:
            self._holder[tp] = member.member_id
        member.assigned, member.pending_revocation = assigned, pending

    def _remove(self, member: ConsumerMember, reason: str) -> None:
        member_id = member.member_id
        self._set_held(member, NO_PARTITIONS, NO_PARTITIONS)
        del self.members[member_id]
        self.target.pop(member_id, None)
        if member.instance_id is not None and self._static.get(member.instance_id) == member_id:
            del self._static[member.instance_id]
        self._bump(f"member {member_id} {reason}")
        if not self.members:
            self._subscribed = {}
            self._metadata_seen = None
            self.target = {}
            self.assignment_epoch = self.group_epoch

    # -- timers --------------------------------------------------------------------------
    def _deadlines(self) -> Iterable[tuple[int, str, str]]:
        session_ms = self.settings.session_timeout_ms
        for member in self.members.values():
            yield member.last_heartbeat_ms + session_ms, member.member_id, "session timed out"
            if member.revocation_deadline_ms is not None:
                reason = "did not revoke its partitions within its rebalance timeout"
                yield member.revocation_deadline_ms, member.member_id, reason

    def next_deadline_ms(self) -> int | None:
        return min((deadline for deadline, _, _ in self._deadlines()), default=None)

    def tick(self) -> None:
        """Remove every member whose session or revocation deadline has passed."""
        now = self._clock()
        for deadline, member_id, reason in sorted(self._deadlines()):
            if deadline > now:
                break
            member = self.members.get(member_id)
            if member is not None:
                self._remove(member, reason)

    # -- OffsetCommit / OffsetFetch ------------------------------------------------------
    def validate_offset_commit(
        self, member_epoch: int, member_id: str, instance_id: str | None
    ) -> str:
        """A commit comes from a member at its current epoch, or from outside (epoch < 0)
        while the group is empty."""
        if self.dead:
            return "COORDINATOR_NOT_AVAILABLE"
        if member_epoch < 0 and not self.members:
            return "NONE"
        member = self.members.get(member_id)
        if member is None:
            return "UNKNOWN_MEMBER_ID"
        if instance_id is not None and instance_id != member.instance_id:
            return "FENCED_INSTANCE_ID"
        return "NONE" if member_epoch == member.member_epoch else "STALE_MEMBER_EPOCH"

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> str:
        if not member_id and member_epoch < 0:
            return "NONE"  # an admin client, or a client outside the group
        member = self.members.get(member_id or "")
        if member is None:
            return "UNKNOWN_MEMBER_ID"
        return "NONE" if member_epoch == member.member_epoch else "STALE_MEMBER_EPOCH"

    # -- views -----------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state is not (
                MemberState.STABLE
            ):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topics(self) -> set[str]:
        return set(self._subscribed)

    def mark_dead(self) -> None:
        self.dead = True

    def describe(self) -> GroupDescription:
        members = tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.rack_id,
                m.member_epoch,
                m.client_id,
                m.client_host,
                m.subscribed_topic_names,
                m.subscribed_topic_regex,
                by_topic(m.assigned),
                by_topic(self.target.get(m.member_id, NO_PARTITIONS)),
            )
            for m in self.members.values()
        )
        return GroupDescription(
            self.group_id,
            self.state.value,
            self.group_epoch,
            self.assignment_epoch,
            self.assignor_name,
            members,
        )


def _matching_topics(regex: str, topics: Iterable[str]) -> frozenset[str]:
    try:
        pattern = re.compile(regex)
    except re.error:
        return frozenset()
    return frozenset(t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t))

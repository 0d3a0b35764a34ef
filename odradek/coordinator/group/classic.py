"""The classic consumer-group protocol of one group, as a sans-IO state machine.

How this works and why (seeds/000 Group Coordinator, 再平衡, 静态关系; seeds/003): a
group moves Empty → PreparingRebalance → CompletingRebalance → Stable and back, as in
Kafka's GroupCoordinator. A rebalance has two phases. In the join phase every member
(re)sends JoinGroup and is parked until all known members have rejoined or the
rebalance timeout passes (from Empty: ``group.initial.rebalance.delay.ms``, extended
while members keep arriving); then the generation increments, a protocol is voted,
and every parked join is answered — the leader with all members' metadata. In the
sync phase the leader's SyncGroup carries the assignment; it makes the group Stable
and answers every parked SyncGroup. The broker never looks inside the metadata or
assignments, which is why cooperative rebalancing (KIP-429) needs nothing here.
Static members (KIP-345) keep their place across restarts: a known instance rejoining
with no member id takes over its entry under a new id, fencing the old id, without a
rebalance when the group is Stable. New dynamic members first get a member id with
MEMBER_ID_REQUIRED (KIP-394) so a retried join cannot leave a ghost member behind.

No I/O and no timers: requests come in as method calls; a request that must wait is
parked with an opaque ``waiter`` and its result appears in ``drain()`` once complete —
each waiter exactly once. Time comes from the injected ``clock``; the owner calls
``tick()`` when ``next_deadline_ms()`` has passed. **After every call the owner
drains**, persists if ``take_persist_request()`` says so, and answers the waiters.
Every state change goes through ``_transition``, which asserts it is legal and logs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence

from odradek.coordinator.group.classic_model import (
    LEGAL_TRANSITIONS,
    ErrorName,
    GroupDescription,
    GroupSettings,
    GroupState,
    JoinedMember,
    JoinRequest,
    JoinResult,
    Member,
    MemberRecord,
    SyncResult,
    describe_group,
    join_admission_error,
    member_from_record,
    select_protocol,
    subscribed_topics,
)

logger = logging.getLogger(__name__)

E = ErrorName
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# Deadline kinds, in the order they are applied when due at the same instant.
_PENDING, _SESSION, _JOIN_PHASE, _SYNC_PHASE = range(4)


class ClassicGroup:
    def __init__(
        self,
        group_id: str,
        settings: GroupSettings,
        *,
        clock: Callable[[], int],
        new_member_id: Callable[[str], str],
    ) -> None:
        self.group_id = group_id
        self.settings = settings
        self._clock = clock
        self._new_member_id = new_member_id  # prefix (client id, or instance id) -> unique id
        self.state = EMPTY
        self.state_timestamp_ms = clock()
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.members: dict[str, Member] = {}  # in join order
        self._static: dict[str, str] = {}  # group instance id -> member id
        self._pending: dict[str, int] = {}  # MEMBER_ID_REQUIRED ids -> expiry deadline
        self._pending_sync: set[str] = set()  # members of this generation yet to SyncGroup
        self._join_deadline_ms: int | None = None
        self._join_cap_ms: int | None = None  # set while the initial delay runs
        self._new_member_added = False  # during the initial delay, since it last fired
        self._sync_deadline_ms: int | None = None
        self._subscribed: frozenset[str] = frozenset()
        self._completed: list[tuple[object, JoinResult | SyncResult]] = []
        self._persist = False

    @classmethod
    def restore(
        cls,
        group_id: str,
        settings: GroupSettings,
        *,
        clock: Callable[[], int],
        new_member_id: Callable[[str], str],
        protocol_type: str | None,
        generation_id: int,
        protocol_name: str | None,
        leader_id: str,
        members: Sequence[Member | MemberRecord],
        state_timestamp_ms: int,
    ) -> ClassicGroup:
        """Rebuild a group from ``__consumer_offsets``: Stable with members, else Empty."""
        group = cls(group_id, settings, clock=clock, new_member_id=new_member_id)
        now = clock()
        group.protocol_type = protocol_type or None
        group.generation_id = generation_id
        if members:
            if not protocol_name or not protocol_type:
                raise ValueError(f"group {group_id} has members but no protocol")
            group.protocol_name = protocol_name
            for record in members:
                member = member_from_record(record, protocol_type, protocol_name, now)
                group.members[member.member_id] = member
                if member.group_instance_id is not None:
                    group._static[member.group_instance_id] = member.member_id
            group.leader_id = leader_id if leader_id in group.members else next(iter(group.members))
            group.state = STABLE  # the first state of a restored group, not a transition
            group._subscribed = subscribed_topics(
                protocol_type, protocol_name, group.members.values()
            )
        group.state_timestamp_ms = state_timestamp_ms
        return group

    # -- JoinGroup -----------------------------------------------------------------------
    def join(self, request: JoinRequest, waiter: object) -> JoinResult | None:
        """The result now, or None: parked, the result for ``waiter`` comes from drain()."""
        assert waiter is not None
        error = self._join_error(request)
        if error is not None:
            return JoinResult(error, member_id=request.member_id)
        if request.member_id == "":
            result = self._join_new_member(request, waiter)
        else:
            result = self._join_known_member(request, waiter)
        self._maybe_complete_join()
        return result

    def _join_error(self, request: JoinRequest) -> str | None:
        existing: Member | None = None
        if request.member_id:
            existing = self.members.get(request.member_id)
        elif request.group_instance_id is not None:
            existing = self.members.get(self._static.get(request.group_instance_id, ""))
        return join_admission_error(
            request, self.settings, self.state, self.protocol_type, self.members, existing
        )

    def _join_new_member(self, request: JoinRequest, waiter: object) -> JoinResult | None:
        instance_id = request.group_instance_id
        if instance_id is not None:
            new_id = self._allocate_member_id(instance_id)
            old_id = self._static.get(instance_id)
            if old_id is not None:
                return self._replace_static_member(request, old_id, new_id, waiter)
            self._add_member_and_rebalance(request, new_id, waiter)
            return None
        new_id = self._allocate_member_id(request.client_id)
        if request.require_known_member_id:
            self._pending[new_id] = self._clock() + request.session_timeout_ms
            logger.info("group %s: new member %s must rejoin with its id", self.group_id, new_id)
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id)
        self._add_member_and_rebalance(request, new_id, waiter)
        return None

    def _join_known_member(self, request: JoinRequest, waiter: object) -> JoinResult | None:
        member_id = request.member_id
        if member_id in self._pending:
            if request.group_instance_id is not None:  # pending ids are given to dynamic members
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
            del self._pending[member_id]
            self._add_member_and_rebalance(request, member_id, waiter)
            return None
        error = self._member_error(member_id, request.group_instance_id)
        if error is not None:
            return JoinResult(error, member_id=member_id)
        assert self.state in (PREPARING, COMPLETING, STABLE), self.state
        member = self.members[member_id]
        member.last_heartbeat_ms = self._clock()
        unchanged = self.state is not PREPARING and member.matches(request.protocols)
        if unchanged and (self.state is COMPLETING or member_id != self.leader_id):
            # Its previous response was lost, or a follower with nothing new: answer with
            # the current generation. A Stable leader's join forces a rebalance, so the
            # leader can react to changes the metadata does not show (topic metadata).
            return self._generation_result(member_id)
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        self._park_join(member, waiter)
        self._maybe_prepare_rebalance(f"member {member_id} rejoined ({request.reason or ''})")
        return None

    def _allocate_member_id(self, prefix: str) -> str:
        member_id = self._new_member_id(prefix)
        assert member_id and member_id not in self.members and member_id not in self._pending
        return member_id

    def _add_member_and_rebalance(
        self, request: JoinRequest, member_id: str, waiter: object
    ) -> None:
        if not self.members:
            self.protocol_type = request.protocol_type
        member = Member.from_request(request, member_id, self._clock())
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self._static[request.group_instance_id] = member_id
        if not self.leader_id:
            self.leader_id = member_id
        if self.state is PREPARING:
            self._new_member_added = True
        member.join_waiter = waiter
        self._maybe_prepare_rebalance(f"member {member_id} joined ({request.reason or ''})")

    def _replace_static_member(
        self, request: JoinRequest, old_id: str, new_id: str, waiter: object
    ) -> JoinResult | None:
        """A known instance restarted: its entry moves to ``new_id``; ``old_id`` is fenced."""
        old_leader_id = self.leader_id
        member = self.members[old_id]
        self._complete_waiters(member, E.FENCED_INSTANCE_ID)  # a duplicate still waiting
        self.members = {(new_id if k == old_id else k): m for k, m in self.members.items()}
        member.member_id = new_id
        assert request.group_instance_id is not None
        self._static[request.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self._pending_sync:
            self._pending_sync.remove(old_id)
            self._pending_sync.add(new_id)
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.protocols = request.protocols
        member.last_heartbeat_ms = self._clock()
        logger.info(
            "group %s: static member is now %s, %s is fenced", self.group_id, new_id, old_id
        )
        if self.state is STABLE and select_protocol(self.members.values()) == self.protocol_name:
            self._persist = True  # the new member id must survive a coordinator move
            if request.supports_skip_assignment and self.leader_id == new_id:
                return self._generation_result(new_id, skip_assignment=True)
            return JoinResult(
                E.NONE,
                generation_id=self.generation_id,
                protocol_type=self.protocol_type,
                protocol_name=self.protocol_name,
                leader_id=old_leader_id,
                member_id=new_id,
            )
        member.join_waiter = waiter
        if self.state is not PREPARING:
            # Stable with a protocol change, or CompletingRebalance, where the leader may
            # be assigning to the old member id.
            self._prepare_rebalance(f"static member {request.group_instance_id} rejoined")
        return None

    def _generation_result(self, member_id: str, *, skip_assignment: bool = False) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if member_id == self.leader_id:
            members = tuple(m.joined(self.protocol_name) for m in self.members.values())
        return JoinResult(
            E.NONE,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            member_id=member_id,
            members=members,
            skip_assignment=skip_assignment,
        )

    # -- the join phase ------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, reason: str) -> None:
        if self.state in (EMPTY, COMPLETING, STABLE):
            self._prepare_rebalance(reason)

    def _prepare_rebalance(self, reason: str) -> None:
        now = self._clock()
        if self.state is COMPLETING:  # the assignment being made is void: rejoin
            for member in self.members.values():
                member.assignment = b""
                self._complete_sync(member, SyncResult(E.REBALANCE_IN_PROGRESS))
        self._pending_sync.clear()
        self._sync_deadline_ms = None
        timeout_ms = self._rebalance_timeout_ms()
        if self.state is EMPTY:
            # Kafka's InitialDelayedJoin: wait for more members of a starting group, one
            # delay at a time while they keep coming, never past the rebalance timeout.
            delay_ms = self.settings.initial_rebalance_delay_ms
            self._join_deadline_ms = now + delay_ms
            self._join_cap_ms = now + max(timeout_ms, delay_ms)
            self._new_member_added = False
        else:
            self._join_deadline_ms = now + timeout_ms
            self._join_cap_ms = None
        self._transition(PREPARING, reason)

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _maybe_complete_join(self) -> None:
        """End the join phase early once every member and pending member has rejoined."""
        if self.state is not PREPARING or self._join_cap_ms is not None:
            return  # the initial delay always runs to its deadline
        if self._pending or any(m.join_waiter is None for m in self.members.values()):
            return
        self._complete_join()

    def _on_join_deadline(self, now: int) -> None:
        cap_ms = self._join_cap_ms
        if cap_ms is not None and self._new_member_added and now < cap_ms:
            self._new_member_added = False
            self._join_deadline_ms = min(now + self.settings.initial_rebalance_delay_ms, cap_ms)
            return
        self._complete_join()

    def _complete_join(self) -> None:
        assert self.state is PREPARING
        now = self._clock()
        for member in list(self.members.values()):
            # Static members that did not rejoin keep their place (and their session)
            # across the rebalance, as in Kafka: that is what static membership is for.
            if member.join_waiter is None and member.group_instance_id is None:
                self._drop_member(member, "did not rejoin in time")
        joined = [m for m in self.members.values() if m.join_waiter is not None]
        if self.members and not joined:
            # Only absent static members are left: wait again for them or their sessions.
            self._join_deadline_ms = now + self._rebalance_timeout_ms()
            self._join_cap_ms = None
            return
        leader = self.members.get(self.leader_id)
        if leader is None or leader.join_waiter is None:
            self.leader_id = joined[0].member_id if joined else ""
        self._join_deadline_ms = self._join_cap_ms = None
        self._new_member_added = False
        self.generation_id += 1
        if not self.members:
            self.protocol_name = None
            self._subscribed = frozenset()
            self._transition(EMPTY, f"generation {self.generation_id} has no members")
            self._persist = True
            return
        self.protocol_name = select_protocol(self.members.values())
        self._subscribed = subscribed_topics(
            self.protocol_type, self.protocol_name, self.members.values()
        )
        self._transition(
            COMPLETING,
            f"generation {self.generation_id}: {len(self.members)} members, "
            f"protocol {self.protocol_name}, leader {self.leader_id}",
        )
        self._pending_sync = set(self.members)
        self._sync_deadline_ms = now + self._rebalance_timeout_ms()
        for member in self.members.values():
            member.is_new = False
            member.last_heartbeat_ms = now
            waiter, member.join_waiter = member.join_waiter, None
            if waiter is not None:
                self._complete(waiter, self._generation_result(member.member_id))

    # -- SyncGroup -----------------------------------------------------------------------
    def sync(
        self,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        waiter: object,
    ) -> SyncResult | None:
        """The result now, or None: parked until the leader's assignment (or a rebalance)."""
        assert waiter is not None
        if self.state is DEAD:
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        error = self._member_error(member_id, group_instance_id)
        if error is None and generation_id != self.generation_id:
            error = E.ILLEGAL_GENERATION
        if error is None and protocol_type is not None and protocol_type != self.protocol_type:
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is None and protocol_name is not None and protocol_name != self.protocol_name:
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return SyncResult(error)
        member = self.members[member_id]
        member.last_heartbeat_ms = self._clock()
        if self.state is PREPARING:
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        self._synced(member_id)
        if self.state is STABLE:
            return SyncResult(E.NONE, self.protocol_type, self.protocol_name, member.assignment)
        assert self.state is COMPLETING, self.state
        if member.sync_waiter is not None:  # superseded by this retry
            self._complete_sync(member, SyncResult(E.REBALANCE_IN_PROGRESS))
        member.sync_waiter = waiter
        if member_id == self.leader_id:
            self._apply_assignment(assignments)
        return None

    def _synced(self, member_id: str) -> None:
        self._pending_sync.discard(member_id)
        if not self._pending_sync:
            self._sync_deadline_ms = None

    def _apply_assignment(self, assignments: Mapping[str, bytes]) -> None:
        missing = [member_id for member_id in self.members if member_id not in assignments]
        if missing:
            logger.warning("group %s: no assignment for %s; they get none", self.group_id, missing)
        for member in self.members.values():
            member.assignment = bytes(assignments.get(member.member_id, b""))
        self._transition(STABLE, f"leader {self.leader_id} sent the assignment")
        self._persist = True
        now = self._clock()
        for member in self.members.values():
            if member.sync_waiter is not None:
                member.last_heartbeat_ms = now
                result = SyncResult(
                    E.NONE, self.protocol_type, self.protocol_name, member.assignment
                )
                self._complete_sync(member, result)

    def _on_sync_deadline(self) -> None:
        assert self.state in (COMPLETING, STABLE) and self._pending_sync, self.state
        late = [m for m in self.members.values() if m.member_id in self._pending_sync]
        for member in late:
            self._drop_member(member, "did not send SyncGroup in time")
        self._prepare_rebalance(f"{[m.member_id for m in late]} did not send SyncGroup in time")

    # -- Heartbeat, LeaveGroup, OffsetCommit ---------------------------------------------
    def heartbeat(self, generation_id: int, member_id: str, group_instance_id: str | None) -> str:
        if self.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = self._member_error(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != self.generation_id:
            return E.ILLEGAL_GENERATION
        self.members[member_id].last_heartbeat_ms = self._clock()
        return E.REBALANCE_IN_PROGRESS if self.state is PREPARING else E.NONE

    def leave(self, member_id: str, group_instance_id: str | None) -> str:
        """One member of a LeaveGroup; ``member_id`` "" removes a static instance (admin)."""
        if self.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if member_id == "":
            static_id = None if group_instance_id is None else self._static.get(group_instance_id)
            if static_id is None:
                return E.UNKNOWN_MEMBER_ID
            member_id = static_id
        elif member_id in self._pending:
            del self._pending[member_id]
            self._maybe_complete_join()
            return E.NONE
        else:
            error = self._member_error(member_id, group_instance_id)
            if error is not None:
                return error
        member = self.members[member_id]
        self._remove_member_and_rebalance(member, "left the group")
        self._maybe_complete_join()
        return E.NONE

    def validate_offset_commit(
        self,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        *,
        transactional: bool = False,
    ) -> str:
        """OffsetCommit's (or TxnOffsetCommit's) group checks; an accepted commit of a
        member counts as its heartbeat."""
        if self.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is EMPTY:
            # An admin client or a consumer outside group management; whatever member
            # id it sends (librdkafka's KIP-848 consumer makes one before it joins, and
            # its assign()-based commits carry it), as Kafka: nobody is a member to fence.
            return E.NONE
        if generation_id < 0 and member_id == "" and group_instance_id is None:
            # A standalone commit into a group with members is refused (old
            # TxnOffsetCommit versions carry no member, so they pass regardless).
            return E.NONE if transactional else E.UNKNOWN_MEMBER_ID
        error = self._member_error(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != self.generation_id:
            return E.ILLEGAL_GENERATION
        if transactional:
            return E.NONE
        if self.state is COMPLETING:
            return E.REBALANCE_IN_PROGRESS  # valid member, but its assignment is not out yet
        self.members[member_id].last_heartbeat_ms = self._clock()
        return E.NONE  # also in PreparingRebalance: members commit while they revoke

    def _member_error(self, member_id: str, group_instance_id: str | None) -> str | None:
        """Kafka's validateCurrentMember: the instance maps to this id, the id exists."""
        if group_instance_id is not None:
            current = self._static.get(group_instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                return E.FENCED_INSTANCE_ID
            return None
        return None if member_id in self.members else E.UNKNOWN_MEMBER_ID

    # -- timers --------------------------------------------------------------------------
    def _deadlines(self) -> Iterator[tuple[int, int, str]]:
        """(deadline_ms, kind, member id or "") of everything that can time out."""
        if self.state is DEAD:
            return
        for member_id, expiry_ms in self._pending.items():
            yield expiry_ms, _PENDING, member_id
        for member in self.members.values():
            if member.sync_waiter is not None:
                continue  # a parked request is proof of life
            if member.join_waiter is None:
                yield (
                    member.last_heartbeat_ms + member.session_timeout_ms,
                    _SESSION,
                    member.member_id,
                )
            elif member.is_new:  # a new member's join may outlive its client
                timeout_ms = self.settings.new_member_join_timeout_ms
                yield member.last_heartbeat_ms + timeout_ms, _SESSION, member.member_id
        if self.state is PREPARING and self._join_deadline_ms is not None:
            yield self._join_deadline_ms, _JOIN_PHASE, ""
        if self._sync_deadline_ms is not None:
            yield self._sync_deadline_ms, _SYNC_PHASE, ""

    def next_deadline_ms(self) -> int | None:
        return min((deadline for deadline, _, _ in self._deadlines()), default=None)

    def tick(self) -> None:
        """Apply every timeout due at clock(), earliest first."""
        now = self._clock()
        steps_max = 2 * (len(self.members) + len(self._pending)) + 8  # each step removes
        for _ in range(steps_max):  # a member, or ends a phase; the rest waits a tick
            due = min((d for d in self._deadlines() if d[0] <= now), default=None)
            if due is None:
                return
            _, kind, member_id = due
            if kind == _PENDING:
                del self._pending[member_id]
                logger.info("group %s: pending member %s never rejoined", self.group_id, member_id)
            elif kind == _SESSION:
                self._remove_member_and_rebalance(self.members[member_id], "session timed out")
            elif kind == _JOIN_PHASE:
                self._on_join_deadline(now)
            else:
                self._on_sync_deadline()
            self._maybe_complete_join()

    # -- membership changes --------------------------------------------------------------
    def _remove_member_and_rebalance(self, member: Member, reason: str) -> None:
        self._drop_member(member, reason)
        if self.state in (COMPLETING, STABLE):
            self._prepare_rebalance(f"member {member.member_id} {reason}")

    def _drop_member(self, member: Member, reason: str) -> None:
        member_id = member.member_id
        logger.info("group %s: removing member %s: %s", self.group_id, member_id, reason)
        self._complete_waiters(member, E.UNKNOWN_MEMBER_ID)
        del self.members[member_id]
        instance_id = member.group_instance_id
        if instance_id is not None and self._static.get(instance_id) == member_id:
            del self._static[instance_id]
        self._synced(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), "")

    def mark_dead(self, error: str = E.COORDINATOR_NOT_AVAILABLE) -> None:
        """DeleteGroups or unload (pass NOT_COORDINATOR): answer every parked request."""
        if self.state is DEAD:
            return
        for member in self.members.values():
            self._complete_waiters(member, error)
        self._pending.clear()
        self._pending_sync.clear()
        self._join_deadline_ms = self._join_cap_ms = self._sync_deadline_ms = None
        if error == "NOT_COORDINATOR":  # unloaded (shutdown, leadership moved): data kept
            self._transition(DEAD, "unloaded: no longer its coordinator", logging.DEBUG)
        else:
            self._transition(DEAD, "marked dead")

    # -- completion, state, persistence ---------------------------------------------------
    def _park_join(self, member: Member, waiter: object) -> None:
        if member.join_waiter is not None:  # superseded by this retry
            self._complete(
                member.join_waiter, JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member.member_id)
            )
        member.join_waiter = waiter

    def _complete_waiters(self, member: Member, error: str) -> None:
        if member.join_waiter is not None:
            waiter, member.join_waiter = member.join_waiter, None
            self._complete(waiter, JoinResult(error, member_id=member.member_id))
        self._complete_sync(member, SyncResult(error))

    def _complete_sync(self, member: Member, result: SyncResult) -> None:
        if member.sync_waiter is not None:
            waiter, member.sync_waiter = member.sync_waiter, None
            self._complete(waiter, result)

    def _complete(self, waiter: object, result: JoinResult | SyncResult) -> None:
        assert all(w is not waiter for w, _ in self._completed), "waiter completed twice"
        self._completed.append((waiter, result))

    def drain(self) -> list[tuple[object, JoinResult | SyncResult]]:
        """Parked requests completed since the last drain, in completion order."""
        completed, self._completed = self._completed, []
        return completed

    def take_persist_request(self) -> bool:
        """True once after a change that must be written to ``__consumer_offsets``."""
        persist, self._persist = self._persist, False
        return persist

    def _transition(self, to: GroupState, reason: str = "", level: int = logging.INFO) -> None:
        assert to in LEGAL_TRANSITIONS[self.state], (
            f"group {self.group_id}: illegal transition {self.state.value} -> {to.value}"
        )
        logger.log(
            level, "group %s: %s -> %s: %s", self.group_id, self.state.value, to.value, reason
        )
        self.state = to
        self.state_timestamp_ms = self._clock()

    # -- views ---------------------------------------------------------------------------
    @property
    def pending_member_ids(self) -> frozenset[str]:
        return frozenset(self._pending)

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self._static.get(group_instance_id)

    def subscribed_topics(self) -> set[str]:
        """Topics of a consumer group's subscriptions as of its generation (OffsetDelete)."""
        return set(self._subscribed)

    def describe(self) -> GroupDescription:
        members = [] if self.state is DEAD else self.members.values()
        return describe_group(
            self.group_id, self.state, self.protocol_type, self.protocol_name, members
        )

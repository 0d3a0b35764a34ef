"""The data of the consumer group protocol (KIP-848): settings, requests, members, and
the pure reconciliation step.

How this works and why: ``ConsumerGroup`` (consumer.py) is the state machine of one
group; this module holds what it reads and answers with, plus the two pure leaves it
calls — the shape checks of a ConsumerGroupHeartbeat (``heartbeat_problem``) and
``reconcile``, which moves one member one step towards its target assignment:

- partitions the member holds but the target does not are *revoked* first: the member
  is told its assignment without them and stays at its epoch (UNREVOKED_PARTITIONS)
  until a heartbeat shows it no longer owns them;
- only then does its epoch advance to the target assignment epoch and does it get the
  new partitions — those still held by another member (assigned to it, or pending its
  revocation) are withheld (UNRELEASED_PARTITIONS) until that member lets them go.

So a partition is never owned by two members at once, and members that keep their
partitions are never stopped (incremental, cooperative rebalancing).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

TopicPartition = tuple[uuid.UUID, int]
Partitions = frozenset[TopicPartition]
NO_PARTITIONS: Final[Partitions] = frozenset()

JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1
STATIC_LEAVE_EPOCH: Final = -2
UNCHANGED: Final = -1  # rebalance timeout of a heartbeat that does not change it
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"  # the group epoch moved, the target assignment not yet
    RECONCILING = "Reconciling"  # some member has not reached the target assignment
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; first = default
    max_size: int = 2**31 - 1  # group.consumer.max.size

    def for_group(self, configs: Mapping[str, str]) -> ConsumerGroupSettings:
        """These broker-wide settings with one group's own configs (KIP-848 group configs,
        checked when they were set) in place of the broker's."""
        if not configs:
            return self
        session = configs.get("consumer.session.timeout.ms")
        heartbeat = configs.get("consumer.heartbeat.interval.ms")
        return replace(
            self,
            session_timeout_ms=int(session) if session else self.session_timeout_ms,
            heartbeat_interval_ms=int(heartbeat) if heartbeat else self.heartbeat_interval_ms,
        )


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat; None (and -1 for the timeout) means "unchanged"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = UNCHANGED
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None  # the partitions the member owns (TopicPartitions)
    client_id: str = ""
    client_host: str = ""

    @property
    def is_full(self) -> bool:
        """A join, or a heartbeat resent after an error, carries every field."""
        subscribed = (
            self.subscribed_topic_names is not None or self.subscribed_topic_regex is not None
        )
        return self.member_epoch == JOIN_EPOCH or (
            self.rebalance_timeout_ms != UNCHANGED and subscribed and self.owned is not None
        )


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: str
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[uuid.UUID, tuple[int, ...]] | None = None  # None: unchanged


def heartbeat_problem(request: HeartbeatRequest, require_member_id: bool) -> str | None:
    """Why the request is INVALID_REQUEST (Kafka's messages), or None."""
    epoch = request.member_epoch
    if require_member_id and not request.member_id:
        return "MemberId can't be empty."
    if epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == UNCHANGED:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.owned is None or request.owned:
            return "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        return None
    if epoch > 0 or epoch == LEAVE_EPOCH:
        return None if request.member_id else "MemberId can't be empty."
    if epoch == STATIC_LEAVE_EPOCH:
        if not request.member_id:
            return "MemberId can't be empty."
        return None if request.instance_id is not None else "InstanceId can't be null."
    return "MemberEpoch is invalid."


@dataclass(slots=True, eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = NO_PARTITIONS  # what the member was told it owns
    pending_revocation: Partitions = NO_PARTITIONS  # taken away, not yet given up
    last_heartbeat_ms: int = 0
    revocation_deadline_ms: int | None = None  # rebalance timeout while revoking
    left_static: bool = False  # left with epoch -2: keeps its place for the session

    @property
    def held(self) -> Partitions:
        return self.assigned | self.pending_revocation


@dataclass(frozen=True, slots=True)
class Reconciled:
    state: MemberState
    member_epoch: int
    assigned: Partitions
    pending_revocation: Partitions


def reconcile(
    member: ConsumerMember,
    target: Partitions,
    target_epoch: int,
    owned: Partitions | None,
    holder: Callable[[TopicPartition], str | None],
) -> Reconciled:
    """One step of ``member`` towards ``target`` (KIP-848's reconciliation).

    ``owned`` is what the member reports owning (None: unchanged, so assumed to still
    hold everything it was given); ``holder`` names the member holding a partition.
    """
    current = Reconciled(
        member.state, member.member_epoch, member.assigned, member.pending_revocation
    )
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & member.pending_revocation:
            return current  # still revoking
    elif member.state is MemberState.STABLE and member.member_epoch == target_epoch:
        return current
    keep = member.assigned & target
    revoke = member.assigned - target
    if revoke and (owned is None or owned & revoke):
        return Reconciled(MemberState.UNREVOKED_PARTITIONS, member.member_epoch, keep, revoke)
    new = target - member.assigned
    free = frozenset(tp for tp in new if holder(tp) in (None, member.member_id))
    state = MemberState.UNRELEASED_PARTITIONS if free != new else MemberState.STABLE
    return Reconciled(state, target_epoch, keep | free, NO_PARTITIONS)


def by_topic(partitions: Iterable[TopicPartition]) -> dict[uuid.UUID, tuple[int, ...]]:
    grouped: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in partitions:
        grouped.setdefault(topic_id, []).append(partition)
    return {t: tuple(sorted(ps)) for t, ps in sorted(grouped.items(), key=lambda i: str(i[0]))}


def flatten(assignment: Mapping[uuid.UUID, Iterable[int]]) -> Partitions:
    return frozenset((t, p) for t, ps in assignment.items() for p in ps)


class TopicView(Protocol):
    """A topic as the metadata image holds it (metadata.image.TopicImage has this shape)."""

    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def partitions(self) -> Mapping[int, object]: ...


class MetadataView(Protocol):
    """The cluster's topics (metadata.image.MetadataImage has this shape)."""

    @property
    def topics(self) -> Mapping[str, TopicView]: ...


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Mapping[uuid.UUID, tuple[int, ...]]
    target_assignment: Mapping[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[MemberDescription, ...] = field(default=())

"""The data of the classic group protocol: states, requests, results, members.

How this works and why: ``ClassicGroup`` (classic.py) is the state machine; this module
holds what it reads and answers with, plus the pure leaves it calls (JoinGroup
admission checks, protocol vote, consumer subscription parsing, the description), so
the state machine stays about transitions. The names follow Kafka's JoinGroup/SyncGroup
schemas; errors are Kafka error names (``ErrorName``) that the handlers turn into codes
with ``protocol.build.error_code``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, TypedDict


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's GroupState transitions (GroupMetadata.validPreviousStates, read forwards).
LEGAL_TRANSITIONS: Final[Mapping[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


class ErrorName:
    """The Kafka error names this protocol answers with (kio ``ErrorCode`` members)."""

    NONE: Final = "NONE"
    COORDINATOR_NOT_AVAILABLE: Final = "COORDINATOR_NOT_AVAILABLE"
    FENCED_INSTANCE_ID: Final = "FENCED_INSTANCE_ID"
    GROUP_MAX_SIZE_REACHED: Final = "GROUP_MAX_SIZE_REACHED"
    ILLEGAL_GENERATION: Final = "ILLEGAL_GENERATION"
    INCONSISTENT_GROUP_PROTOCOL: Final = "INCONSISTENT_GROUP_PROTOCOL"
    INVALID_SESSION_TIMEOUT: Final = "INVALID_SESSION_TIMEOUT"
    MEMBER_ID_REQUIRED: Final = "MEMBER_ID_REQUIRED"
    REBALANCE_IN_PROGRESS: Final = "REBALANCE_IN_PROGRESS"
    UNKNOWN_MEMBER_ID: Final = "UNKNOWN_MEMBER_ID"


Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str  # "" for a new member
    group_instance_id: str | None  # static membership (KIP-345) when set
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # JoinGroup v0 has none: the handler passes the session timeout
    protocol_type: str  # e.g. "consumer"
    protocols: Protocols
    require_known_member_id: bool  # JoinGroup v4+ (KIP-394); ignored for static members
    reason: str | None = None
    # JoinGroup v9+ (KIP-814): a restarted static leader of a Stable group is told it is
    # the leader, with the members, and asked to skip the assignment. Older versions get
    # the old leader's id instead, so the client does not think it leads.
    supports_skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()  # only for the leader
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: str
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupSettings:
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member's JoinGroup may hang
    # in a long rebalance after its client gave up; it is dropped after this long.
    new_member_join_timeout_ms: int = 300_000


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    last_heartbeat_ms: int = 0  # any accepted request counts as a heartbeat
    is_new: bool = False  # joined in the current join phase, not yet in a generation
    join_waiter: object | None = field(default=None, repr=False)  # parked JoinGroup
    sync_waiter: object | None = field(default=None, repr=False)  # parked SyncGroup

    @classmethod
    def from_request(cls, request: JoinRequest, member_id: str, now_ms: int) -> Member:
        return cls(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            last_heartbeat_ms=now_ms,
            is_new=True,
        )

    def joined(self, protocol_name: str | None) -> JoinedMember:
        """This member as the leader sees it in the JoinGroup response."""
        return JoinedMember(
            self.member_id, self.group_instance_id, self.metadata_for(protocol_name)
        )

    def metadata_for(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {sorted(candidates)}")


class MemberRecord(Protocol):
    """A member as ``__consumer_offsets`` stores it (records.MemberValue has this shape)."""

    @property
    def member_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_host(self) -> str: ...
    @property
    def rebalance_timeout_ms(self) -> int: ...
    @property
    def session_timeout_ms(self) -> int: ...
    @property
    def subscription(self) -> bytes: ...  # metadata for the group's protocol
    @property
    def assignment(self) -> bytes: ...


def member_from_record(
    record: Member | MemberRecord, protocol_type: str, protocol_name: str, now_ms: int
) -> Member:
    if isinstance(record, Member):
        protocols = record.protocols
    else:
        protocols = ((protocol_name, bytes(record.subscription)),)
    return Member(
        member_id=record.member_id,
        group_instance_id=record.group_instance_id,
        client_id=record.client_id,
        client_host=record.client_host,
        session_timeout_ms=record.session_timeout_ms,
        rebalance_timeout_ms=record.rebalance_timeout_ms,
        protocol_type=protocol_type,
        protocols=protocols,
        assignment=bytes(record.assignment),
        last_heartbeat_ms=now_ms,
    )


class MemberDescription(TypedDict):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # of the chosen protocol; b"" unless Stable (as Kafka)
    assignment: bytes  # b"" unless Stable


class GroupDescription(TypedDict):
    group_id: str
    state: str  # GroupState value, e.g. "Stable"
    protocol_type: str
    protocol_name: str  # "" unless Stable
    members: list[MemberDescription]


def join_admission_error(
    request: JoinRequest,
    settings: GroupSettings,
    state: GroupState,
    protocol_type: str | None,
    members: Mapping[str, Member],
    existing: Member | None,
) -> str | None:
    """The checks of a JoinGroup before membership: session timeout, state, size, protocols.

    ``existing`` is the member the join updates (its member id) or takes over (its static
    instance id), if any.
    """
    timeout_ms = request.session_timeout_ms
    if not settings.min_session_timeout_ms <= timeout_ms <= settings.max_session_timeout_ms:
        return ErrorName.INVALID_SESSION_TIMEOUT
    if state is GroupState.DEAD:
        return ErrorName.COORDINATOR_NOT_AVAILABLE  # the owner has replaced this group object
    if not request.protocol_type or not request.protocols:
        return ErrorName.INCONSISTENT_GROUP_PROTOCOL
    if state is GroupState.EMPTY:
        return None
    # group.max.size as Kafka counts it (acceptJoiningMember). While members rejoin, only
    # those that rejoined count, so the last ones are turned away when over a lowered limit.
    if state is GroupState.PREPARING_REBALANCE:
        awaiting = sum(1 for m in members.values() if m.join_waiter is not None)
        accepted = (existing is not None and existing.join_waiter is not None) or (
            awaiting < settings.max_size
        )
    else:
        accepted = existing is not None or len(members) < settings.max_size
    if not accepted:
        return ErrorName.GROUP_MAX_SIZE_REACHED
    # The joiner and all other members must share a protocol of the group's type. The
    # joiner's own previous protocols are left out (Kafka counts them, which stops a
    # member from switching to a protocol that all the others already support).
    if request.protocol_type != protocol_type:
        return ErrorName.INCONSISTENT_GROUP_PROTOCOL
    common = {name for name, _ in request.protocols}
    for member in members.values():
        if member is not existing:
            common &= member.protocol_names()
    return None if common else ErrorName.INCONSISTENT_GROUP_PROTOCOL


def describe_group(
    group_id: str,
    state: GroupState,
    protocol_type: str | None,
    protocol_name: str | None,
    members: Iterable[Member],
) -> GroupDescription:
    """DescribeGroups' view: metadata and assignments only of a Stable group (as Kafka)."""
    stable = state is GroupState.STABLE
    return {
        "group_id": group_id,
        "state": state.value,
        "protocol_type": protocol_type or "",
        "protocol_name": (protocol_name or "") if stable else "",
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "metadata": m.metadata_for(protocol_name) if stable else b"",
                "assignment": m.assignment if stable else b"",
            }
            for m in members
        ],
    }


def select_protocol(members: Iterable[Member]) -> str:
    """Kafka's vote: each member votes for its favourite protocol that all members support.

    The most votes wins; a tie goes to the protocol voted for first (members in join
    order) — Kafka leaves ties to hash order, this keeps them deterministic.
    """
    members = list(members)
    assert members, "no protocol to select without members"
    candidates = set.intersection(*(m.protocol_names() for m in members))
    assert candidates, "members share no protocol (the join checks should prevent this)"
    votes: dict[str, int] = {}
    for member in members:
        choice = member.vote(candidates)
        votes[choice] = votes.get(choice, 0) + 1
    return max(votes, key=lambda name: votes[name])  # max keeps the first of equals


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription, read through its v0 prefix.

    Every version starts with ``version int16, topics [int16-length string]`` (non-
    flexible), which is all Kafka reads too (GroupMetadata.computeSubscribedTopics).
    None when the bytes do not parse.
    """
    try:
        position = _I16.size
        (count,) = _I32.unpack_from(metadata, position)
        position += _I32.size
        if count < 0 or count > len(metadata):
            return None
        topics = set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, position)
            position += _I16.size
            if length < 0 or position + length > len(metadata):
                return None
            topics.add(metadata[position : position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def subscribed_topics(
    protocol_type: str | None, protocol_name: str | None, members: Iterable[Member]
) -> frozenset[str]:
    """Union of the members' subscribed topics; empty unless a parseable consumer group."""
    if protocol_type != "consumer" or protocol_name is None:
        return frozenset()
    topics: set[str] = set()
    for member in members:
        parsed = consumer_subscription_topics(member.metadata_for(protocol_name))
        if parsed is None:
            return frozenset()
        topics |= parsed
    return frozenset(topics)

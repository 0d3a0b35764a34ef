"""The vocabulary of a Partition: its states and their legal moves, follower records.

How this works and why: replica/partition.py is the state machine; what it is made
of — the role enum with the one table of legal transitions (house style, as
coordinator/group/classic_model.py beside classic.py), what a leader knows of each
follower (Kafka's ReplicaState and its "caught up" rule), and the per-partition error
— lives here so the machine itself stays readable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from odradek.records.errors import CodedError

UNKNOWN_OFFSET: Final = -1
DEFAULT_LAG_TIME_MAX_MS: Final = 30_000  # replica.lag.time.max.ms
# AlterPartition errors after which the controller surely did not apply the change.
NOT_APPLIED: Final = frozenset({"OPERATION_NOT_ATTEMPTED", "INELIGIBLE_REPLICA"})


class PartitionError(Exception):
    """An error for one partition in a request; ``code`` is the Kafka error name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


class NotFollowerError(PartitionError, CodedError):
    """A fetcher drove a partition that no longer follows here (its role changed
    between the request and the response): also a ``StorageError``, which is what a
    ``FollowerLog`` raises, so the fetcher backs off and finds the new role."""

    def __init__(self, message: str) -> None:
        super().__init__("NOT_LEADER_OR_FOLLOWER", message)


class PartitionState(enum.Enum):
    NEW = "New"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    OFFLINE = "Offline"


NEW, LEADER, FOLLOWER, OFFLINE = (
    PartitionState.NEW,
    PartitionState.LEADER,
    PartitionState.FOLLOWER,
    PartitionState.OFFLINE,
)
LEGAL_TRANSITIONS: Final = {
    NEW: frozenset({LEADER, FOLLOWER, OFFLINE}),
    LEADER: frozenset({LEADER, FOLLOWER, OFFLINE}),  # LEADER -> LEADER: a new epoch
    FOLLOWER: frozenset({LEADER, FOLLOWER, OFFLINE}),
    OFFLINE: frozenset(),  # until a restart recovers the log
}


@dataclass(slots=True)
class FollowerState:
    """What a leader knows of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    broker_epoch: int = -1

    def is_caught_up(self, leader_end: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return self.log_end_offset == leader_end or now_ms - self.last_caught_up_ms <= (
            lag_time_max_ms
        )

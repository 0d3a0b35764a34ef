"""The state of one transactional id: its states, the legal moves, and the metadata.

How this works and why (KIP-98; seeds/000 事务实现): a transactional id lives through
Empty → Ongoing (AddPartitionsToTxn) → PrepareCommit/PrepareAbort (EndTxn, or the
coordinator aborting) → CompleteCommit/CompleteAbort (once every partition holds the
marker) → Ongoing again with the next transaction, or Empty (InitProducerId bumping
the epoch), or Dead (the id expired and is removed). PrepareEpochFence is an
in-memory state: an InitProducerId (or the timeout check) that finds a transaction
Ongoing first fences the producer's epoch and aborts it, and the id sits in
PrepareEpochFence while that abort is being written.

Every change is made in two steps, as Kafka's ``TxnTransitMetadata`` does: a write
computes the ``Transit`` (the full metadata it wants) and marks the id ``pending``;
only once the record is durable does ``complete`` move the metadata there, through
the one ``_transition`` that asserts the move is in ``LEGAL_TRANSITIONS`` and logs
it. A failed append ``abandon``s the transit and nothing changed. The coordinator
runtime already runs one write at a time per partition, so ``pending`` is what
readers outside that queue and the marker phase see: an id with a write in flight
answers CONCURRENT_TRANSACTIONS, as in Kafka.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Final

from odradek.coordinator.transaction.records import TransactionValue

logger = logging.getLogger(__name__)

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
MAX_EPOCH: Final = 32767  # Short.MAX_VALUE
TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Kafka's state names (what DescribeTransactions/ListTransactions show)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


S = TxnState
# Kafka's state ids, the status byte of the log value (Dead and PrepareEpochFence are
# never written).
STATUS: Final = {
    S.EMPTY: 0,
    S.ONGOING: 1,
    S.PREPARE_COMMIT: 2,
    S.PREPARE_ABORT: 3,
    S.COMPLETE_COMMIT: 4,
    S.COMPLETE_ABORT: 5,
    S.DEAD: 6,
    S.PREPARE_EPOCH_FENCE: 7,
}
STATE_OF_STATUS: Final = {code: state for state, code in STATUS.items()}

LEGAL_TRANSITIONS: Final[dict[TxnState, frozenset[TxnState]]] = {
    # InitProducerId bumps the epoch (Empty again); AddPartitionsToTxn opens a
    # transaction; an idle id expires.
    S.EMPTY: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    # More partitions; EndTxn; a fence (InitProducerId of a new instance, timeout).
    S.ONGOING: frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}),
    S.PREPARE_COMMIT: frozenset({S.COMPLETE_COMMIT}),
    S.PREPARE_ABORT: frozenset({S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.COMPLETE_ABORT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    # The fencing abort is written; or its append failed and the transaction goes on
    # as it was (the client never saw the bumped epoch).
    S.PREPARE_EPOCH_FENCE: frozenset({S.PREPARE_ABORT, S.ONGOING}),
    S.DEAD: frozenset(),
}

COMPLETED: Final = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARED: Final = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
IDLE: Final = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(AssertionError):
    """A bug: a move that is not in LEGAL_TRANSITIONS."""


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's rule: an epoch this high gets a new producer id at the next bump (one
    value stays free so that fencing the last handed-out epoch cannot overflow)."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class Transit:
    """The metadata a write wants once its record is durable."""

    state: TxnState
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    partitions: frozenset[TopicPartition]
    start_ms: int
    update_ms: int

    def value(self) -> TransactionValue:
        """The log value of this transit (PrepareEpochFence is written as the abort)."""
        assert self.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE), self.state
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = (
            None
            if self.state is S.EMPTY
            else tuple((topic, tuple(ids)) for topic, ids in by_topic.items())
        )
        return TransactionValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            STATUS[self.state],
            partitions,
            self.update_ms,
            self.start_ms,
            previous_producer_id=self.last_producer_id,
        )


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id as the coordinator knows it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    update_ms: int
    state: TxnState = S.EMPTY
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    pending: Transit | None = None  # a write in flight

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionValue) -> TransactionMetadata:
        state = STATE_OF_STATUS[value.status]
        partitions = {
            (topic, partition) for topic, ids in value.partitions or () for partition in ids
        }
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            value.last_update_ms,
            state=state,
            last_producer_id=value.previous_producer_id,
            partitions=partitions,
            start_ms=value.start_ms,
        )

    def transit(self, state: TxnState, now_ms: int, **changes: object) -> Transit:
        """A Transit to ``state`` from the current metadata with ``changes``."""
        base: dict[str, object] = {
            "state": state,
            "producer_id": self.producer_id,
            "last_producer_id": self.last_producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "partitions": frozenset(self.partitions),
            "start_ms": self.start_ms,
            "update_ms": now_ms,
        }
        base.update(changes)
        return Transit(**base)  # type: ignore[arg-type]

    def prepare(self, transit: Transit) -> None:
        """Mark ``transit`` as in flight (the caller appends its record)."""
        assert self.pending is None, f"{self.transactional_id}: a write is already in flight"
        if transit.state not in LEGAL_TRANSITIONS[self.state]:
            raise IllegalTransition(
                f"{self.transactional_id}: illegal transition "
                f"{self.state.value} -> {transit.state.value}"
            )
        self.pending = transit

    def complete(self, transit: Transit) -> None:
        """The record of ``transit`` is durable: move there."""
        assert self.pending is transit, f"{self.transactional_id}: not the write in flight"
        self.pending = None
        self._transition(transit.state)
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.update_ms = transit.update_ms

    def abandon(self, transit: Transit) -> None:
        """The append of ``transit`` failed: nothing changes."""
        if self.pending is transit:
            self.pending = None

    def fence(self) -> None:
        """Ongoing → PrepareEpochFence, in memory, while the fencing abort is written."""
        self._transition(S.PREPARE_EPOCH_FENCE)

    def unfence(self) -> None:
        """The fencing abort was not written: the transaction is Ongoing again."""
        if self.state is S.PREPARE_EPOCH_FENCE:
            self._transition(S.ONGOING)

    def _transition(self, to: TxnState) -> None:
        if to not in LEGAL_TRANSITIONS[self.state]:
            raise IllegalTransition(
                f"{self.transactional_id}: illegal transition {self.state.value} -> {to.value}"
            )
        if to is not self.state:
            logger.debug(
                "transactional id %s (producer %d epoch %d): %s -> %s",
                self.transactional_id,
                self.producer_id,
                self.producer_epoch,
                self.state.value,
                to.value,
            )
        self.state = to

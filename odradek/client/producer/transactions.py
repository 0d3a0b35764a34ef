"""The transactional producer's state machine, free of I/O (KIP-98, as librdkafka has it).

How this works and why: a producer with ``transactional.id`` moves through the states
below, and every move goes through ``TransactionState.transition``, which checks it
against ``TRANSITIONS`` — one table, so an illegal call (``commit_transaction`` before
``begin_transaction``, say) is refused the same way everywhere, with a ``_STATE`` error,
before any request is sent. The I/O glue (``transaction_manager.py``) asks this module
what to do and tells it what happened; tests drive it directly.

    Uninitialized -> Initializing -> Ready -> InTransaction -> Committing -> Ready
                                               InTransaction -> Aborting   -> Ready
             (a failed produce, AddPartitionsToTxn, ...) -> AbortableError -> Aborting
                        (fenced, not authorized, broker says INVALID_TXN_STATE) -> FatalError

Errors are classified as librdkafka does (``classify``):

- *fatal*: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, UNSUPPORTED_VERSION / FOR_MESSAGE_FORMAT
  and anything else unexpected from the transaction coordinator. The producer is done:
  every later call raises the same error (``fatal()`` is True).
- *abortable*: the current transaction cannot commit, but abort works (a record that
  failed delivery, a topic or group authorization failure, a group member fenced in
  TxnOffsetCommit). ``txn_requires_abort()`` is True.
- *retried inside*: COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR (find the coordinator
  again), COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS (the previous
  transaction's markers are still being written), UNKNOWN_TOPIC_OR_PARTITION and
  OPERATION_NOT_ATTEMPTED (another partition of the same request failed), with backoff.

Partitions: a record may only be *sent* to a partition the coordinator knows is in the
transaction. ``need_partition`` records a new partition (the sender holds its batches
back), ``take_pending`` hands the pending set to one AddPartitionsToTxn request (all
new partitions in one request), and ``partitions_added`` / ``partitions_failed``
record the answer. ``has_content`` says whether EndTxn is needed at all: a transaction
that added neither partitions nor offsets is unknown to the coordinator, so ending it
is local (as the Java client and librdkafka do).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.errors import KafkaError, LocalError

TP = tuple[str, int]
OffsetsLike = Mapping[Any, Any] | Iterable[Any]


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "Committing"
    ABORTING = "Aborting"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


S = TxnState
# Every legal move; FATAL_ERROR is reachable from anywhere and left by nothing.
TRANSITIONS: Final[dict[TxnState, frozenset[TxnState]]] = {
    S.UNINITIALIZED: frozenset({S.INITIALIZING}),
    # READY again: the epoch bump after an abort that left a sequence gap
    S.INITIALIZING: frozenset({S.READY}),
    S.READY: frozenset({S.IN_TRANSACTION, S.INITIALIZING}),
    S.IN_TRANSACTION: frozenset({S.COMMITTING, S.ABORTING, S.ABORTABLE_ERROR}),
    S.COMMITTING: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.ABORTING: frozenset({S.READY, S.INITIALIZING}),
    S.ABORTABLE_ERROR: frozenset({S.ABORTING, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(),
}


class ErrorClass(enum.Enum):
    FATAL = "fatal"
    ABORTABLE = "abortable"
    RETRY = "retry"  # retry the same request after a backoff
    REFIND = "refind"  # find the coordinator again, then retry


FATAL_CODES: Final = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.invalid_txn_state,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.transaction_coordinator_fenced,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.unsupported_version,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.invalid_transaction_timeout,
    }
)
FENCED_CODES: Final = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})
REFIND_CODES: Final = frozenset({ErrorCode.coordinator_not_available, ErrorCode.not_coordinator})
RETRY_CODES: Final = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.operation_not_attempted,
        ErrorCode.request_timed_out,
    }
)
# Answers that only end the current transaction, from any request.
ABORTABLE_CODES: Final = frozenset(
    {
        ErrorCode.topic_authorization_failed,
        ErrorCode.group_authorization_failed,
        ErrorCode.unknown_member_id,
        ErrorCode.illegal_generation,
        ErrorCode.fenced_instance_id,
        ErrorCode.rebalance_in_progress,
        ErrorCode.transaction_abortable,
        ErrorCode.unknown_producer_id,
        ErrorCode.out_of_order_sequence_number,
    }
)


def classify(code: ErrorCode) -> ErrorClass:
    """What an error answered by the transaction or group coordinator means."""
    if code in REFIND_CODES:
        return ErrorClass.REFIND
    if code in RETRY_CODES:
        return ErrorClass.RETRY
    if code in ABORTABLE_CODES:
        return ErrorClass.ABORTABLE
    return ErrorClass.FATAL


def classify_produce(code: ErrorCode | LocalError | None) -> ErrorClass:
    """A record's delivery failed for good inside a transaction: fencing ends the
    producer, anything else only the transaction."""
    if code in FENCED_CODES or code == ErrorCode.transactional_id_authorization_failed:
        return ErrorClass.FATAL
    return ErrorClass.ABORTABLE


def fatal_error(code: ErrorCode | LocalError, message: str) -> KafkaError:
    if code in FENCED_CODES:
        # librdkafka reports a fenced producer as _FENCED, fatal
        return KafkaError(LocalError.fenced, f"{message} ({code.name.upper()})", fatal=True)
    return KafkaError(code, message, fatal=True)


def abortable_error(code: ErrorCode | LocalError, message: str) -> KafkaError:
    return KafkaError(code, message, txn_requires_abort=True)


def state_error(message: str) -> KafkaError:
    return KafkaError(LocalError.state, message)


def as_transaction_error(error: BaseException, kind: ErrorClass, what: str) -> KafkaError:
    """``error`` re-raised with its class's flags (fatal / txn_requires_abort)."""
    code: ErrorCode | LocalError = (
        error.code() if isinstance(error, KafkaError) else ErrorCode.unknown_server_error
    )
    message = f"{what}: {error}"
    if kind is ErrorClass.FATAL:
        return fatal_error(code, message)
    return abortable_error(code, message)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What ``send_offsets_to_transaction`` needs of a consumer (confluent-kafka's
    opaque ``Consumer.consumer_group_metadata()``): the group coordinator refuses
    offsets from a member that left the generation (a zombie)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionState:
    """The state of one transactional producer; every method is synchronous."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self.state = TxnState.UNINITIALIZED
        self.error: KafkaError | None = None  # what put it in AbortableError / FatalError
        self.added: set[TP] = set()  # the coordinator knows these are in the transaction
        self.pending: set[TP] = set()  # need AddPartitionsToTxn
        self.adding: set[TP] = set()  # in the AddPartitionsToTxn request in flight
        self.offsets_added = False  # AddOffsetsToTxn succeeded in this transaction

    # -- states ----------------------------------------------------------------------
    def transition(self, to: TxnState) -> None:
        if to is TxnState.FATAL_ERROR or to in TRANSITIONS[self.state]:
            self.state = to
            return
        if self.state is TxnState.FATAL_ERROR and self.error is not None:
            raise self.error
        raise state_error(f"transactional producer cannot go from {self.state.value} to {to.value}")

    def check(self, *allowed: TxnState, what: str) -> None:
        """Raise unless in one of ``allowed``: the fatal error itself once fatal, the
        abortable one for anything but abort once abortable, else ``_STATE``."""
        if self.state in allowed:
            return
        if self.state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR) and self.error:
            raise self.error
        raise state_error(f"{what} is not allowed in state {self.state.value}")

    def set_abortable(self, error: KafkaError) -> None:
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.ABORTABLE_ERROR):
            if self.state is not TxnState.ABORTABLE_ERROR or self.error is None:
                self.error = error
            self.transition(TxnState.ABORTABLE_ERROR)
        # while aborting, initializing or ready an abortable error changes nothing

    def set_fatal(self, error: KafkaError) -> None:
        if self.state is not TxnState.FATAL_ERROR:
            self.error = error
        self.transition(TxnState.FATAL_ERROR)

    @property
    def in_transaction(self) -> bool:
        return self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)

    # -- the calls ---------------------------------------------------------------------
    def begin(self) -> None:
        self.check(TxnState.READY, what="begin_transaction")
        self.added.clear()
        self.pending.clear()
        self.adding.clear()
        self.offsets_added = False
        self.error = None
        self.transition(TxnState.IN_TRANSACTION)

    def start_commit(self) -> None:
        self.check(TxnState.IN_TRANSACTION, what="commit_transaction")
        self.transition(TxnState.COMMITTING)

    def start_abort(self) -> None:
        self.check(
            TxnState.IN_TRANSACTION,
            TxnState.ABORTABLE_ERROR,
            TxnState.ABORTING,
            what="abort_transaction",
        )
        if self.state is not TxnState.ABORTING:
            self.transition(TxnState.ABORTING)

    def completed(self) -> None:
        """EndTxn succeeded (or was not needed): ready for the next transaction."""
        self.transition(TxnState.READY)
        self.added.clear()
        self.pending.clear()
        self.adding.clear()
        self.offsets_added = False
        self.error = None

    @property
    def has_content(self) -> bool:
        """Whether the coordinator knows of this transaction (EndTxn needed)."""
        return bool(self.added or self.adding) or self.offsets_added

    # -- partitions ----------------------------------------------------------------------
    def sendable(self, tp: TP) -> bool:
        """May a batch of ``tp`` be sent now? A new partition becomes pending."""
        if tp in self.added:
            return self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING) and tp not in self.adding:
            self.pending.add(tp)
        return False

    def take_pending(self) -> list[TP]:
        """The partitions for the next AddPartitionsToTxn (none while one is in flight)."""
        if self.adding or not self.pending or not self.in_transaction:
            return []
        taken = sorted(self.pending)
        self.pending.clear()
        self.adding.update(taken)
        return taken

    def partitions_added(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self.adding.discard(tp)
            self.added.add(tp)

    def partitions_failed(self, tps: Iterable[TP], retry: bool) -> None:
        """The request failed for ``tps``: back to pending when ``retry``."""
        for tp in tps:
            self.adding.discard(tp)
            if retry:
                self.pending.add(tp)


def parse_offsets(offsets: OffsetsLike) -> dict[tuple[str, int], tuple[int, int, str | None]]:
    """{(topic, partition): (offset, leader epoch, metadata)} from confluent's list of
    TopicPartition (offset = the next record to consume) or aiokafka's mapping of
    TopicPartition to an offset or an OffsetAndMetadata-like object. Negative offsets
    (OFFSET_INVALID: nothing consumed there) are left out, as librdkafka does."""
    out: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    items: Iterable[tuple[Any, Any]] = (
        offsets.items() if isinstance(offsets, Mapping) else ((tp, tp) for tp in offsets)
    )
    for tp, value in items:
        topic, partition = _topic_partition(tp)
        offset: Any = getattr(value, "offset", value)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise KafkaError(LocalError.invalid_arg, f"{topic}-{partition}: offset {offset!r}")
        if offset < 0:
            continue
        epoch: Any = getattr(value, "leader_epoch", None)
        epoch = -1 if epoch is None or callable(epoch) else int(epoch)
        metadata = getattr(value, "metadata", None)
        out[(topic, partition)] = (offset, epoch, metadata if isinstance(metadata, str) else None)
    return out


def _topic_partition(tp: Any) -> tuple[str, int]:
    if isinstance(tp, tuple):
        return str(tp[0]), int(tp[1])
    return str(tp.topic), int(tp.partition)


def purged_error() -> KafkaError:
    """What a record dropped unsent by abort_transaction is reported with."""
    return KafkaError(
        LocalError.purge_queue, "transaction aborted: record not sent", txn_requires_abort=True
    )


def worst_error(codes: set[ErrorCode]) -> ErrorCode:
    """The error of a multi-partition answer that decides what happens: fatal before
    abortable before retried; OPERATION_NOT_ATTEMPTED only if nothing else."""
    order = {
        ErrorClass.FATAL: 0,
        ErrorClass.ABORTABLE: 1,
        ErrorClass.REFIND: 2,
        ErrorClass.RETRY: 3,
    }
    ranked = sorted(
        codes,
        key=lambda c: (order[classify(c)], c == ErrorCode.operation_not_attempted, int(c)),
    )
    return ranked[0]

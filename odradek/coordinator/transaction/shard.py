"""TransactionShard: the transactional ids of one ``__transaction_state`` partition.

How this works and why (KIP-98, KIP-360, KIP-588, KIP-890 part 1): the
CoordinatorRuntime (coordinator/runtime.py) gives each partition this node leads a
shard and runs every request on it as a write, one at a time. Each op decides, from
the id's ``TransactionMetadata`` (state.py), the answer and the record to append; the
metadata moves only once the record is durable (``apply``), and a failed append
leaves it as it was (``rollback``). What the ops decide, as Kafka's coordinator does:

- ``init_producer_id``: a new id gets the producer id the facade allocated, epoch 0;
  a known idle id gets its epoch bumped (fencing the previous instance), or a new
  producer id once the epoch is exhausted; an id whose transaction is Ongoing is
  fenced first — its epoch bumped and the transaction aborted (PrepareEpochFence →
  PrepareAbort) — and the caller gets CONCURRENT_TRANSACTIONS, retrying until the
  abort completes. With KIP-360's expected producer id/epoch, a stale instance is
  PRODUCER_FENCED and the retry of a bump it never heard of gets the same answer.
- ``add_partitions`` opens (Empty/Complete* → Ongoing, starting the timeout clock) or
  extends a transaction; ``verify_partitions`` (KIP-890 part 1) only checks that a
  partition is in the ongoing transaction of that producer id and epoch.
- ``end_txn`` moves Ongoing to PrepareCommit/PrepareAbort; the answer goes out once
  that record is durable and the facade then writes the markers (the ``listener``
  hears ``prepared``) and ``complete`` writes CompleteCommit/CompleteAbort. A retried
  EndTxn is answered as Kafka does: NONE once the same outcome completed,
  CONCURRENT_TRANSACTIONS while it is being completed, INVALID_TXN_STATE for the
  other outcome.
- ``tick`` aborts transactions open longer than their timeout (fencing the epoch, as
  Kafka does, so the late producer cannot go on) and removes ids idle longer than
  ``transactional.id.expiration.ms`` with a tombstone.

``replay`` keeps the last value of each id (a tombstone removes it; a malformed
record is logged and skipped); ``on_loaded`` hands every transaction found in
PrepareCommit/PrepareAbort to the listener, so a new coordinator finishes what the
old one decided (seeds/000 故障恢复).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from odradek.coordinator.runtime import CoordinatorError, CoordinatorResult, KeyValue
from odradek.coordinator.transaction.records import (
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from odradek.coordinator.transaction.state import (
    COMPLETED,
    IDLE,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TopicPartition,
    TransactionMetadata,
    Transit,
    TxnState,
    epoch_exhausted,
)
from odradek.records.codec import Record

if TYPE_CHECKING:
    from odradek.coordinator.transaction.coordinator import TransactionSettings

logger = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
# The most ids one tick aborts or expires: bounds the batch a tick appends; the rest
# are taken at the next tick.
MAX_IDS_PER_TICK: Final = 500
# Asked of the facade when an op needs a producer id it was not given (a new id, or
# an exhausted epoch): the facade allocates one and runs the op again.
NEED_PRODUCER_ID: Final = "NEED_PRODUCER_ID"
S = TxnState
T_ = TypeVar("T_")


@dataclass(frozen=True, slots=True)
class InitResult:
    error: str
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class ShardListener(Protocol):
    def prepared(self, shard: TransactionShard, metadata: TransactionMetadata) -> None:
        """A PrepareCommit/PrepareAbort of ``metadata`` is durable (or was loaded)."""
        ...

    def unloaded(self, shard: TransactionShard) -> None:
        """The shard no longer serves: stop finishing its transactions."""
        ...


class TransactionShard:
    def __init__(
        self,
        partition: int,
        settings: TransactionSettings,
        clock: Callable[[], int],
        listener: ShardListener | None = None,
        coordinator_epoch: int = 0,
    ) -> None:
        self.partition = partition
        self.settings = settings
        self.clock = clock
        self.listener = listener
        self.coordinator_epoch = coordinator_epoch
        self.ids: dict[str, TransactionMetadata] = {}
        self.serving = False  # loaded and not yet unloaded
        now = clock()
        self._next_abort_check_ms = now + settings.abort_check_interval_ms
        self._next_expiration_check_ms = now + settings.expiration_check_interval_ms

    # -- CoordinatorShard ----------------------------------------------------------------
    def replay(self, record: Record) -> None:
        if record.key is None:
            return
        try:
            transactional_id = decode_key(record.key)
            if record.value is None:
                self.ids.pop(transactional_id, None)
                return
            value = decode_value(record.value)
        except RecordFormatError as error:
            logger.warning(
                "skipping malformed %s-%d record at %d: %s",
                TRANSACTION_STATE_TOPIC,
                self.partition,
                record.offset,
                error,
            )
            return
        self.ids[transactional_id] = TransactionMetadata.from_value(transactional_id, value)

    def on_loaded(self) -> None:
        self.serving = True
        if self.listener is None:
            return
        for metadata in list(self.ids.values()):
            if metadata.state in PREPARED:
                self.listener.prepared(self, metadata)

    def on_unloaded(self) -> None:
        self.serving = False
        if self.listener is not None:
            self.listener.unloaded(self)

    def next_deadline_ms(self) -> int | None:
        return min(self._next_abort_check_ms, self._next_expiration_check_ms)

    def tick(self, now_ms: int) -> CoordinatorResult[None]:
        writes: list[_Write] = []
        if now_ms >= self._next_abort_check_ms:
            self._next_abort_check_ms = now_ms + self.settings.abort_check_interval_ms
            for metadata in self._timed_out(now_ms):
                logger.info(
                    "aborting the transaction of %s (producer %d epoch %d): open longer "
                    "than its timeout of %d ms",
                    metadata.transactional_id,
                    metadata.producer_id,
                    metadata.producer_epoch,
                    metadata.timeout_ms,
                )
                writes.append(self._fence_and_abort(metadata, now_ms, timed_out=True))
        if now_ms >= self._next_expiration_check_ms:
            self._next_expiration_check_ms = now_ms + self.settings.expiration_check_interval_ms
            for metadata in self._expired(now_ms, MAX_IDS_PER_TICK - len(writes)):
                writes.append(self._expire(metadata, now_ms))

        def apply() -> None:
            for write in writes:
                write.apply()

        def failed(error: CoordinatorError) -> None:
            logger.warning(
                "%s-%d: timers' records not written: %s",
                TRANSACTION_STATE_TOPIC,
                self.partition,
                error,
            )
            for write in writes:
                write.rollback()

        return CoordinatorResult(None, [w.record for w in writes], apply, failed)

    def _timed_out(self, now_ms: int) -> list[TransactionMetadata]:
        found = []
        for metadata in self.ids.values():
            if (
                metadata.state is S.ONGOING
                and metadata.pending is None
                and metadata.start_ms + metadata.timeout_ms < now_ms
            ):
                found.append(metadata)
                if len(found) >= MAX_IDS_PER_TICK:
                    break
        return found

    def _expired(self, now_ms: int, limit: int) -> list[TransactionMetadata]:
        found: list[TransactionMetadata] = []
        horizon = now_ms - self.settings.id_expiration_ms
        for metadata in self.ids.values():
            if len(found) >= limit:
                break
            idle = metadata.state in IDLE and metadata.pending is None
            if idle and metadata.update_ms <= horizon:
                found.append(metadata)
        return found

    def _expire(self, metadata: TransactionMetadata, now_ms: int) -> _Write:
        transit = metadata.transit(S.DEAD, now_ms)
        metadata.prepare(transit)

        def apply() -> None:
            metadata.complete(transit)
            if self.ids.get(metadata.transactional_id) is metadata:
                del self.ids[metadata.transactional_id]
            logger.info("transactional id %s expired", metadata.transactional_id)

        return _Write((encode_key(metadata.transactional_id), None), apply, transit, metadata)

    # -- InitProducerId ----------------------------------------------------------------------
    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        new_producer_id: int | None,
    ) -> CoordinatorResult[InitResult]:
        """``expected``: KIP-360's (producer id, epoch) the client holds, or None.
        ``new_producer_id``: an id the facade allocated, for a new transactional id or
        an exhausted epoch; an op that needs one without it answers NEED_PRODUCER_ID."""
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return CoordinatorResult(InitResult("INVALID_TRANSACTION_TIMEOUT"))
        now = self.clock()
        metadata = self.ids.get(transactional_id)
        created = metadata is None
        if metadata is None:
            if new_producer_id is None:
                return CoordinatorResult(InitResult(NEED_PRODUCER_ID))
            metadata = TransactionMetadata(
                transactional_id, new_producer_id, NO_PRODUCER_EPOCH, timeout_ms, now
            )
        if metadata.pending is not None:
            return CoordinatorResult(InitResult("CONCURRENT_TRANSACTIONS"))
        if expected is not None and not _valid_expected(metadata, expected):
            return CoordinatorResult(InitResult("PRODUCER_FENCED"))
        if metadata.state is S.ONGOING:
            # Fence the current instance and abort its transaction; the caller retries
            # (CONCURRENT_TRANSACTIONS) and gets a further bump once it completed.
            write = self._fence_and_abort(metadata, now)
            return self._result(InitResult("CONCURRENT_TRANSACTIONS"), [write])
        if metadata.state not in IDLE:  # Prepare*, a fence or a removal being written
            return CoordinatorResult(InitResult("CONCURRENT_TRANSACTIONS"))
        expected_epoch = None if expected is None else expected[1]
        if epoch_exhausted(metadata.producer_epoch) and expected_epoch in (
            None,
            metadata.producer_epoch,
        ):
            if new_producer_id is None or new_producer_id == metadata.producer_id:
                return CoordinatorResult(InitResult(NEED_PRODUCER_ID))
            transit = metadata.transit(
                S.EMPTY,
                now,
                producer_id=new_producer_id,
                last_producer_id=metadata.producer_id,
                producer_epoch=0,
                last_producer_epoch=(
                    metadata.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
                ),
                timeout_ms=timeout_ms,
                partitions=frozenset(),
                start_ms=-1,
            )
        else:
            bumped = _bump(metadata, expected_epoch)
            if bumped is None:
                return CoordinatorResult(InitResult("PRODUCER_FENCED"))
            epoch, last_epoch = bumped
            transit = metadata.transit(
                S.EMPTY,
                now,
                producer_epoch=epoch,
                last_producer_epoch=last_epoch,
                timeout_ms=timeout_ms,
                partitions=frozenset(),
                start_ms=-1,
            )
        metadata.prepare(transit)
        answer = InitResult("NONE", transit.producer_id, transit.producer_epoch)
        chosen = metadata

        def apply() -> None:
            if created:
                self.ids[transactional_id] = chosen
            chosen.complete(transit)

        write = _Write(self._record(metadata, transit), apply, transit, metadata)
        return self._result(answer, [write])

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------
    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> CoordinatorResult[str]:
        metadata = self.ids.get(transactional_id)
        error = _check_producer(metadata, producer_id, producer_epoch)
        if error != "NONE":
            return CoordinatorResult(error)
        assert metadata is not None
        wanted = set(partitions)
        if metadata.state is S.ONGOING and wanted <= metadata.partitions:
            return CoordinatorResult("NONE")  # a retry: nothing to write
        now = self.clock()
        start_ms = now if metadata.state in IDLE else metadata.start_ms
        transit = metadata.transit(
            S.ONGOING,
            now,
            partitions=frozenset(metadata.partitions | wanted),
            start_ms=start_ms,
        )
        metadata.prepare(transit)

        def apply() -> None:
            metadata.complete(transit)

        write = _Write(self._record(metadata, transit), apply, transit, metadata)
        return self._result("NONE", [write])

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, str]:
        """KIP-890 part 1, read-only: NONE for each partition in the ongoing transaction
        of this producer id and epoch, INVALID_TXN_STATE for one that is not."""
        metadata = self.ids.get(transactional_id)
        error = _check_producer(metadata, producer_id, producer_epoch)
        if error != "NONE":
            return {tp: error for tp in partitions}
        assert metadata is not None
        return {
            tp: "NONE"
            if metadata.state is S.ONGOING and tp in metadata.partitions
            else "INVALID_TXN_STATE"
            for tp in partitions
        }

    # -- EndTxn ------------------------------------------------------------------------------
    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> CoordinatorResult[str]:
        metadata = self.ids.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return CoordinatorResult("INVALID_PRODUCER_ID_MAPPING")
        if metadata.producer_epoch != producer_epoch:
            return CoordinatorResult("PRODUCER_FENCED")
        if metadata.pending is not None:
            return CoordinatorResult("CONCURRENT_TRANSACTIONS")
        state = metadata.state
        same = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        preparing = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if state is same:
            return CoordinatorResult("NONE")  # a retry of an end that completed
        if state is preparing:
            return CoordinatorResult("CONCURRENT_TRANSACTIONS")  # being completed
        if state is not S.ONGOING:
            if state in (S.PREPARE_EPOCH_FENCE, S.DEAD):
                return CoordinatorResult("CONCURRENT_TRANSACTIONS")
            return CoordinatorResult("INVALID_TXN_STATE")  # Empty, or the other outcome
        transit = metadata.transit(preparing, self.clock())
        metadata.prepare(transit)
        return self._result("NONE", [self._prepare_write(metadata, transit)])

    def complete(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> CoordinatorResult[bool]:
        """The markers are written: Prepare* → Complete*. True once nothing is left to
        do (also when the transaction is no longer the one prepared)."""
        metadata = self.ids.get(transactional_id)
        preparing = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if (
            metadata is None
            or metadata.state is not preparing
            or metadata.producer_id != producer_id
            or metadata.producer_epoch != producer_epoch
        ):
            return CoordinatorResult(True)
        if metadata.pending is not None:
            return CoordinatorResult(False)
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        transit = metadata.transit(done, self.clock(), partitions=frozenset())
        metadata.prepare(transit)

        def apply() -> None:
            metadata.complete(transit)

        def rollback(error: CoordinatorError) -> bool:
            metadata.abandon(transit)
            raise error

        return CoordinatorResult(True, [self._record(metadata, transit)], apply, rollback)

    def marker_written(self, transactional_id: str, tp: TopicPartition) -> None:
        """A partition of a preparing transaction has its marker: DescribeTransactions
        shows only the partitions still waiting (as Kafka does). In memory only: the
        Complete* record clears them all."""
        metadata = self.ids.get(transactional_id)
        if metadata is not None and metadata.state in PREPARED:
            metadata.partitions.discard(tp)

    # -- reading -------------------------------------------------------------------------------
    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self.ids.get(transactional_id)

    # -- helpers -------------------------------------------------------------------------------
    def _fence_and_abort(
        self, metadata: TransactionMetadata, now_ms: int, *, timed_out: bool = False
    ) -> _Write:
        """Ongoing → PrepareEpochFence → PrepareAbort with the epoch bumped, so the
        fenced instance can neither produce nor end the transaction.

        KIP-588: after a timeout the producer may claim the bumped epoch with an
        InitProducerId carrying its old one (the "retry" case of ``_bump``), so the old
        epoch is remembered as the last one; a fence by a new instance remembers
        none, so the fenced instance cannot claim it back (in memory only, as Kafka's
        last epoch)."""
        assert metadata.state is S.ONGOING and metadata.pending is None
        epoch = metadata.producer_epoch
        bumped = epoch + 1 if epoch < MAX_EPOCH else epoch
        metadata.fence()
        transit = metadata.transit(
            S.PREPARE_ABORT,
            now_ms,
            producer_epoch=bumped,
            last_producer_epoch=epoch if timed_out else NO_PRODUCER_EPOCH,
        )
        metadata.prepare(transit)
        return self._prepare_write(metadata, transit)

    def _prepare_write(self, metadata: TransactionMetadata, transit: Transit) -> _Write:
        def apply() -> None:
            metadata.complete(transit)
            if self.listener is not None and self.serving:
                self.listener.prepared(self, metadata)

        return _Write(self._record(metadata, transit), apply, transit, metadata)

    def _record(self, metadata: TransactionMetadata, transit: Transit) -> KeyValue:
        return encode_key(metadata.transactional_id), encode_value(transit.value())

    def _result(self, answer: T_, writes: list[_Write]) -> CoordinatorResult[T_]:
        def apply() -> None:
            for write in writes:
                write.apply()

        def rollback(error: CoordinatorError) -> T_:
            for write in writes:
                write.rollback()
            return _failed_answer(answer, error)  # type: ignore[return-value]

        return CoordinatorResult(answer, [w.record for w in writes], apply, rollback)


@dataclass(slots=True)
class _Write:
    """One id's record in a write, with what completes or abandons its transit."""

    record: KeyValue
    apply: Callable[[], None]
    transit: Transit
    metadata: TransactionMetadata

    def rollback(self) -> None:
        self.metadata.abandon(self.transit)
        self.metadata.unfence()


def _failed_answer(answer: object, error: CoordinatorError) -> object:
    """The answer of a write whose append failed: the runtime's error code."""
    if isinstance(answer, InitResult):
        return InitResult(error.code)
    return error.code


def _valid_expected(metadata: TransactionMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: may a client holding ``expected`` (producer id, epoch) re-initialize?
    Yes if the id was just created, if it holds the current producer id (its epoch is
    checked by the bump), or if it holds the previous producer id at an exhausted epoch
    (a retry of a rotation whose answer it lost)."""
    producer_id, epoch = expected
    return (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == metadata.producer_id
        or (producer_id == metadata.last_producer_id and epoch_exhausted(epoch))
    )


def _bump(metadata: TransactionMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """(new epoch, last epoch) of an InitProducerId on an idle id, or None: fenced."""
    current = metadata.producer_epoch
    assert not epoch_exhausted(current) or expected_epoch not in (None, current)
    if expected_epoch is None or current == NO_PRODUCER_EPOCH or expected_epoch == current:
        return current + 1, current
    if expected_epoch == metadata.last_producer_epoch:
        return current, metadata.last_producer_epoch  # a retry of the last bump
    return None


def _check_producer(metadata: TransactionMetadata | None, producer_id: int, epoch: int) -> str:
    """The checks AddPartitionsToTxn and its verification share."""
    if metadata is None or metadata.producer_id != producer_id:
        return "INVALID_PRODUCER_ID_MAPPING"
    if metadata.producer_epoch != epoch:
        return "PRODUCER_FENCED"
    if metadata.pending is not None:
        return "CONCURRENT_TRANSACTIONS"
    if metadata.state not in IDLE and metadata.state is not S.ONGOING:
        return "CONCURRENT_TRANSACTIONS"  # being completed or fenced
    return "NONE"


__all__ = [
    "COMPLETED",
    "NEED_PRODUCER_ID",
    "TRANSACTION_STATE_TOPIC",
    "InitResult",
    "ShardListener",
    "TransactionShard",
]

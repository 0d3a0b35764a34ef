"""TransactionCoordinator: transactional ids and their transactions, in ``__transaction_state``.

How this works and why (KIP-98; seeds/000 事务实现 1-5, 故障恢复): a transactional id
belongs to partition ``abs(java hashCode(id)) % transaction.state.log.num.partitions``
of ``__transaction_state`` (the same hash as a group's partition of
``__consumer_offsets``), and the broker leading that partition is its coordinator.
Leadership, loading, the serialized write queue per partition and the timers are the
``CoordinatorRuntime`` (coordinator/runtime.py), fed exactly as the group
coordinator's: ``on_leadership(partition, leader epoch | None)`` from metadata deltas.
A partition's ids are its ``TransactionShard`` (shard.py); this facade finds an id's
partition, allocates producer ids (``ProducerIdManager``) for the shard, and runs
each request as a write on the shard.

The second phase of the commit is here: when a PrepareCommit/PrepareAbort record is
durable (an EndTxn, a fence by InitProducerId, a timeout) or is found by a load (a
new coordinator after a failover), the facade writes the marker to every partition
of the transaction through the ``TxnMarkerChannel`` (markers.py), retrying failed
partitions with a backoff until each is written (a deleted topic's partition is
dropped), then writes CompleteCommit/CompleteAbort. The client's EndTxn is answered
once the Prepare record is durable, as in Kafka: the outcome is decided then, and
until Complete is written further requests for the id get CONCURRENT_TRANSACTIONS.
The markers carry the partition's leader epoch as the coordinator epoch, so a
partition leader can refuse markers of a coordinator that was replaced. Finishing
stops when the shard is unloaded; whoever loads the partition next resumes it.

``__transaction_state`` is created on first use (FindCoordinator) with its full
replication factor (internal_topic.py), compacted.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from odradek.coordinator.group.records import partition_for_group
from odradek.coordinator.internal_topic import InternalTopic, InternalTopicCreator
from odradek.coordinator.partition_writer import PartitionWriter, TopicCreator
from odradek.coordinator.runtime import (
    CoordinatorError,
    CoordinatorResult,
    CoordinatorRuntime,
    PartitionState,
)
from odradek.coordinator.transaction.markers import DROPPED_ERRORS, MarkerEntry, TxnMarkerChannel
from odradek.coordinator.transaction.shard import (
    NEED_PRODUCER_ID,
    TRANSACTION_STATE_TOPIC,
    InitResult,
    TransactionShard,
)
from odradek.coordinator.transaction.state import (
    IDLE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TopicPartition,
    TransactionMetadata,
    TxnState,
    epoch_exhausted,
)
from odradek.metadata.controller_channel import ControllerError
from odradek.tasks import cancel_and_wait

if TYPE_CHECKING:
    from odradek.metadata.view import MetadataView

logger = logging.getLogger(__name__)

OFFSETS_TOPIC: Final = "__consumer_offsets"

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "InitResult",
    "ListResult",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionSettings",
]

# An InitProducerId that keeps needing a fresh producer id (others took the one it
# was given): give up after this many and let the client retry.
MAX_PRODUCER_ID_ATTEMPTS: Final = 3


class ProducerIdSource(Protocol):
    async def next_producer_id(self) -> int:
        """A producer id never handed out; raises ControllerError (with ``code``)."""
        ...


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    """Kafka's broker configs of the transaction coordinator (defaults as Kafka's)."""

    partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 3  # transaction.state.log.replication.factor
    min_isr: int = 2  # transaction.state.log.min.isr (the topic's min.insync.replicas)
    segment_bytes: int = 104_857_600  # transaction.state.log.segment.bytes
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_check_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    expiration_check_interval_ms: int = 3_600_000
    # odradek's own: the first and the longest wait before writing markers again to
    # partitions that failed (Kafka retries at its request backoff).
    marker_retry_backoff_ms: int = 100
    marker_retry_backoff_max_ms: int = 5_000


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One id as DescribeTransactions answers it."""

    transactional_id: str
    error: str
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class ListResult:
    """ListTransactions: (transactional id, producer id, state name) per id."""

    error: str
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[tuple[str, int, str], ...] = ()


@dataclass(slots=True)
class _Finishing:
    shard: TransactionShard
    task: asyncio.Task[None]


class TransactionCoordinator:
    """Transactions of the partitions of ``__transaction_state`` this node leads.

    It sees the cluster through ``metadata``, writes and replays its partitions
    through ``writer``, creates the topic through ``topics``, gets producer ids from
    ``producer_ids`` and writes markers through ``markers`` — never the broker.
    """

    def __init__(
        self,
        metadata: MetadataView,
        writer: PartitionWriter,
        topics: TopicCreator,
        settings: TransactionSettings,
        clock: Callable[[], int],
        producer_ids: ProducerIdSource,
        markers: TxnMarkerChannel,
    ) -> None:
        self.metadata = metadata
        self.settings = settings
        self.clock = clock
        self.producer_ids = producer_ids
        self.markers = markers
        self._leader_epochs: dict[int, int] = {}
        self._finishing: dict[tuple[int, str], _Finishing] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # every finishing task, until done
        self.runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime(
            TRANSACTION_STATE_TOPIC, writer, self._new_shard, clock
        )
        self.state_topic = InternalTopicCreator(
            metadata,
            topics,
            InternalTopic(
                TRANSACTION_STATE_TOPIC,
                settings.partitions,
                settings.replication_factor,
                "transaction.state.log.replication.factor",
                {
                    "cleanup.policy": "compact",
                    "compression.type": "uncompressed",
                    "min.insync.replicas": str(settings.min_isr),
                    "segment.bytes": str(settings.segment_bytes),
                    "unclean.leader.election.enable": "false",
                },
            ),
        )

    def _new_shard(self, partition: int) -> TransactionShard:
        return TransactionShard(
            partition,
            self.settings,
            self.clock,
            self,
            coordinator_epoch=self._leader_epochs.get(partition, 0),
        )

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self.runtime.start()

    async def stop(self) -> None:
        await self.runtime.stop()  # unloads: the shards' finishing tasks are cancelled
        self._finishing.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            await cancel_and_wait(task)

    # -- partitions of __transaction_state ---------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for_group(transactional_id, self.settings.partitions)

    def on_leadership(self, partition: int, leader_epoch: int | None) -> None:
        """This node leads ``partition`` in ``leader_epoch`` (None: no longer)."""
        if leader_epoch is not None:
            self._leader_epochs[partition] = max(
                leader_epoch, self._leader_epochs.get(partition, leader_epoch)
            )
        self.runtime.on_leadership(partition, leader_epoch)

    async def ensure_state_topic(self) -> bool:
        """Create __transaction_state on first use; True once it exists."""
        return await self.state_topic.ensure() is None

    def _partition(self, transactional_id: str) -> int:
        """The id's partition if its shard serves now; else the CoordinatorError."""
        partition = self.partition_for(transactional_id)
        self.runtime.shard(partition)
        return partition

    # -- InitProducerId -------------------------------------------------------------------
    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitResult:
        """InitProducerId with a transactional id; ``producer_id``/``producer_epoch``
        are KIP-360's (v3+; -1 when the client has none)."""
        if not transactional_id:
            return InitResult("INVALID_REQUEST")
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return InitResult("INVALID_REQUEST")
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return InitResult("INVALID_TRANSACTION_TIMEOUT")
        try:
            partition = self._partition(transactional_id)
            shard = self.runtime.shard(partition)
            new_id: int | None = None
            if _needs_producer_id(shard.get(transactional_id), expected):
                new_id = await self.producer_ids.next_producer_id()
            for _ in range(MAX_PRODUCER_ID_ATTEMPTS):
                given = new_id

                def op(
                    s: TransactionShard, given: int | None = given
                ) -> CoordinatorResult[InitResult]:
                    return s.init_producer_id(transactional_id, timeout_ms, expected, given)

                result = await self.runtime.write(partition, op)
                if result.error != NEED_PRODUCER_ID:
                    return result
                new_id = await self.producer_ids.next_producer_id()
            return InitResult("CONCURRENT_TRANSACTIONS")
        except CoordinatorError as error:
            return InitResult(error.code)
        except ControllerError as error:  # no producer id block could be reserved
            return InitResult(error.code)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------
    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, str]:
        """One error name per partition (all the same: the add is all-or-nothing)."""
        error = await self._add(transactional_id, producer_id, producer_epoch, partitions)
        return {tp: error for tp in partitions}

    async def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets_partition: int,
    ) -> str:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition (the caller's
        ``GroupCoordinator.partition_for(group_id)``) joins the transaction, so the
        commit/abort marker reaches the transactional offset commits."""
        return await self._add(
            transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, offsets_partition)]
        )

    async def _add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> str:
        if not transactional_id:
            return "INVALID_REQUEST"
        try:
            return await self.runtime.write(
                self._partition(transactional_id),
                lambda s: s.add_partitions(
                    transactional_id, producer_id, producer_epoch, partitions
                ),
            )
        except CoordinatorError as error:
            return error.code

    async def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, str]:
        """KIP-890 part 1 (AddPartitionsToTxn v4+ verify_only, or the partition leader's
        local call): NONE for each partition in the producer's ongoing transaction."""
        if not transactional_id:
            return {tp: "INVALID_REQUEST" for tp in partitions}
        try:
            partition = self._partition(transactional_id)
            return await self.runtime.write(
                partition,
                lambda s: CoordinatorResult(
                    s.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
                ),
            )
        except CoordinatorError as error:
            return {tp: error.code for tp in partitions}

    # -- EndTxn -----------------------------------------------------------------------------
    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> str:
        """The error name; NONE once the decision (Prepare*) is durable."""
        if not transactional_id:
            return "INVALID_REQUEST"
        try:
            return await self.runtime.write(
                self._partition(transactional_id),
                lambda s: s.end_txn(transactional_id, producer_id, producer_epoch, commit),
            )
        except CoordinatorError as error:
            return error.code

    # -- DescribeTransactions / ListTransactions -------------------------------------------
    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        results = []
        for transactional_id in transactional_ids:
            try:
                shard = self.runtime.shard(self.partition_for(transactional_id))
            except CoordinatorError as error:
                results.append(TransactionDescription(transactional_id, error.code))
                continue
            metadata = shard.get(transactional_id)
            if metadata is None or metadata.state is TxnState.DEAD:
                results.append(
                    TransactionDescription(transactional_id, "TRANSACTIONAL_ID_NOT_FOUND")
                )
                continue
            results.append(_describe(metadata))
        return results

    def list_transactions(
        self,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_ms: int = -1,
        pattern: str | None = None,
    ) -> ListResult:
        """ListTransactions over every partition this node serves; filters as Kafka:
        state names (unknown ones are reported back), producer ids, transactions
        running at least ``duration_ms`` (v1), a transactional id regex (v2, matched
        whole)."""
        known = {state.value: state for state in TxnState}
        unknown = tuple(name for name in states if name not in known)
        wanted = {known[name] for name in states if name in known}
        if states and not wanted:
            return ListResult("NONE", unknown)
        matcher = None
        if pattern:
            try:
                matcher = re.compile(pattern)
            except re.error:
                return ListResult("INVALID_REQUEST", unknown)
        for partition in sorted(self._leader_epochs):
            if self.runtime.state(partition) in (
                PartitionState.LOADING,
                PartitionState.AWAITING_HW,
            ):
                return ListResult("COORDINATOR_LOAD_IN_PROGRESS", unknown)
        now = self.clock()
        pids = set(producer_ids)
        found = []
        for _, shard in self.runtime.active_shards():
            for metadata in shard.ids.values():
                if metadata.state is TxnState.DEAD:
                    continue
                if wanted and metadata.state not in wanted:
                    continue
                if pids and metadata.producer_id not in pids:
                    continue
                if duration_ms >= 0 and (
                    metadata.start_ms < 0 or now - metadata.start_ms < duration_ms
                ):
                    continue
                if matcher is not None and matcher.fullmatch(metadata.transactional_id) is None:
                    continue
                found.append(
                    (metadata.transactional_id, metadata.producer_id, metadata.state.value)
                )
        return ListResult("NONE", unknown, tuple(sorted(found)))

    # -- the second phase: markers, then Complete* (ShardListener) ------------------------
    def prepared(self, shard: TransactionShard, metadata: TransactionMetadata) -> None:
        assert metadata.state in PREPARED, metadata.state
        key = (shard.partition, metadata.transactional_id)
        old = self._finishing.pop(key, None)
        if old is not None and not old.task.done():
            old.task.cancel()  # a previous shard's (unloaded) or a stale job
        commit = metadata.state is TxnState.PREPARE_COMMIT
        entry = MarkerEntry(
            metadata.producer_id,
            metadata.producer_epoch,
            shard.coordinator_epoch,
            commit,
            tuple(sorted(metadata.partitions)),
        )
        task = asyncio.get_running_loop().create_task(
            self._finish(shard, metadata.transactional_id, entry),
            name=f"finish txn {metadata.transactional_id}",
        )
        job = _Finishing(shard, task)
        self._finishing[key] = job
        self._tasks.add(task)
        task.add_done_callback(lambda _: self._forget(key, job))

    def unloaded(self, shard: TransactionShard) -> None:
        for key, job in list(self._finishing.items()):
            if job.shard is shard:
                del self._finishing[key]
                job.task.cancel()

    def _forget(self, key: tuple[int, str], job: _Finishing) -> None:
        self._tasks.discard(job.task)
        if self._finishing.get(key) is job:
            del self._finishing[key]

    def finishing(self) -> int:
        """How many transactions are between Prepare* and Complete* here (tests)."""
        return len(self._finishing)

    async def _finish(
        self, shard: TransactionShard, transactional_id: str, entry: MarkerEntry
    ) -> None:
        try:
            await self._write_markers(shard, transactional_id, entry)
            await self._complete(shard, transactional_id, entry)
        except asyncio.CancelledError:
            raise
        except Exception:  # never a silent "Task exception was never retrieved"
            logger.exception("finishing the transaction of %s failed", transactional_id)

    async def _write_markers(
        self, shard: TransactionShard, transactional_id: str, entry: MarkerEntry
    ) -> None:
        remaining = set(entry.partitions)
        backoff_ms = self.settings.marker_retry_backoff_ms
        while remaining and shard.serving:
            attempt = MarkerEntry(
                entry.producer_id,
                entry.producer_epoch,
                entry.coordinator_epoch,
                entry.commit,
                tuple(sorted(remaining)),
            )
            try:
                answers = dict(await self.markers.write_markers([attempt]))
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("writing markers of %s failed", transactional_id)
                answers = {}
            failed = {}
            for tp in attempt.partitions:
                error = answers.get(tp, "UNKNOWN_SERVER_ERROR")
                if error == "NONE" or error in DROPPED_ERRORS:
                    if error != "NONE":
                        logger.info(
                            "no %s marker of %s for %s-%d: %s",
                            "commit" if entry.commit else "abort",
                            transactional_id,
                            tp[0],
                            tp[1],
                            error,
                        )
                    remaining.discard(tp)
                    shard.marker_written(transactional_id, tp)
                else:
                    failed[tp] = error
            if remaining:
                logger.debug("markers of %s not written yet: %s", transactional_id, failed)
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, self.settings.marker_retry_backoff_max_ms)

    async def _complete(
        self, shard: TransactionShard, transactional_id: str, entry: MarkerEntry
    ) -> None:
        backoff_ms = self.settings.marker_retry_backoff_ms

        def op(current: TransactionShard) -> CoordinatorResult[bool]:
            if current is not shard:
                return CoordinatorResult(True)  # a newer load finishes it itself
            return current.complete(
                transactional_id, entry.producer_id, entry.producer_epoch, entry.commit
            )

        while shard.serving:
            try:
                if await self.runtime.write(shard.partition, op):
                    return
            except CoordinatorError as error:
                if error.code == "NOT_COORDINATOR":
                    return  # unloaded: the next leader resumes from the Prepare record
                logger.info("completing %s not written: %s", transactional_id, error)
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, self.settings.marker_retry_backoff_max_ms)


def _needs_producer_id(
    metadata: TransactionMetadata | None, expected: tuple[int, int] | None
) -> bool:
    """Whether an InitProducerId will (probably) need a fresh producer id."""
    if metadata is None:
        return True
    return (
        metadata.state in IDLE
        and epoch_exhausted(metadata.producer_epoch)
        and (expected is None or expected[1] == metadata.producer_epoch)
    )


def _describe(metadata: TransactionMetadata) -> TransactionDescription:
    return TransactionDescription(
        metadata.transactional_id,
        "NONE",
        metadata.state.value,
        metadata.timeout_ms,
        metadata.start_ms,
        metadata.producer_id,
        metadata.producer_epoch,
        tuple(sorted(metadata.partitions)),
    )

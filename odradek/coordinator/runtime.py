"""CoordinatorRuntime: the partitions of an internal topic this node leads, as shards.

How this works and why (Kafka's CoordinatorRuntime, KIP-848's group coordinator
rewrite; seeds/000 Group Coordinator, 故障恢复): a coordinator keeps its state in the
partitions of an internal topic (``__consumer_offsets``; ``__transaction_state``
next) and serves a partition's keys only on the node that leads it. What follows
leadership is the same for every coordinator, so it lives here, and a coordinator is
a *shard* type (``CoordinatorShard``) plus a facade that routes its requests:

- **Ownership follows the partition leader and its leader epoch**
  (``on_leadership(partition, epoch | None)``, fed from metadata deltas and later by
  the replica layer). A newer epoch unloads and reloads, a stale or repeated one is
  ignored, None unloads. Each load is a ``_Context`` tied to its epoch; a load whose
  context is no longer the partition's current one is discarded when it next looks.
- **A load reads to the log end**, not the high watermark (a new leader's HW may
  trail records the old leader acknowledged) — once the replica itself leads in the
  load's epoch (``PartitionWriter.leader_epoch``; before that it may still be a
  follower appending, and the load waits) — replaying every record into a fresh
  shard, then waits until the HW passes what it read
  (``PartitionWriter.wait_for_high_watermark``: woken by the HW advance itself, not
  a timer; it raises once the replica stops leading, and an unload cancels it):
  until then requests get COORDINATOR_LOAD_IN_PROGRESS, so nothing is answered from
  records a further leader change could still take back. A load that fails
  outright is retried with a backoff, COORDINATOR_NOT_AVAILABLE meanwhile; a
  damaged batch is logged and skipped (``group/loader.py`` says why later batches
  are still used).
- **One serialized write queue per partition**: ``write(partition, op)`` queues
  ``op``; when its turn comes it runs against the shard and returns a
  ``CoordinatorResult`` (records to persist, the response, ``apply``/``rollback``).
  The records are appended and the append awaited (``PartitionWriter.append``
  completes at the high watermark once replication exists); then ``apply`` runs and
  the response is answered, or, if the append failed, ``rollback`` undoes what ``op``
  changed and gives the answer (without one, the error is raised to the caller).
  Because the next op runs only after that, every op sees the state its
  predecessors left, as a single-threaded state machine over the log would.
- **Unload** (leadership gone, a newer epoch, shutdown): queued writes are answered
  NOT_COORDINATOR at once, the shard's ``on_unloaded`` answers what it parked, and an
  append already in flight finishes on its own (its answer is what the log says).
- **Timers**: one ticker, from an injected clock, sleeps until the earliest
  ``next_deadline_ms`` of any active shard (between MIN_TICK_S and TICK_S) and queues
  ``tick(now)`` as a write of each shard due, so timer changes are serialized with
  requests like any other write.

The partition state is the house state machine (an enum, one legal-transition
table, one ``_transition``); the asyncio part is the queue pump, the load task and
the ticker.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from odradek.coordinator.group.loader import Damage, ReplayBatch
from odradek.coordinator.partition_writer import PartitionWriteError, PartitionWriter
from odradek.metadata.delta import MetadataDelta
from odradek.records.codec import Record, decode_end_txn_marker, encode_batch
from odradek.records.errors import CorruptRecordError
from odradek.tasks import cancel_and_wait

logger = logging.getLogger(__name__)

TICK_S: Final = 0.05  # longest sleep of the ticker of all shards' deadlines
MIN_TICK_S: Final = 0.002  # shortest (a deadline a tick cannot clear must not spin)
LOAD_RETRY_MAX_S: Final = 30  # backoff cap of a partition whose load failed
REPLICA_EPOCH_POLL_S: Final = 0.01  # a load waiting for its replica to lead in its epoch

T = TypeVar("T")
KeyValue = tuple[bytes, bytes | None]


class CoordinatorError(Exception):
    """A request-level error: ``code`` is the Kafka error name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A transaction's end, written into a coordinator's own partition: the
    COMMIT/ABORT control batch of ``producer_id`` (TxnOffsetCommit's offsets there)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class CoordinatorResult(Generic[T]):
    """What a write op decided: records to append, then ``apply`` and ``response``;
    on a failed append ``rollback(error)`` undoes the op and gives the answer
    (None: the error is raised to the caller). ``producer`` (id, epoch) makes the
    records one transactional batch of that producer (TxnOffsetCommit); ``marker``
    appends that control batch instead of records."""

    response: T
    records: Sequence[KeyValue] = ()
    apply: Callable[[], None] | None = None
    rollback: Callable[[CoordinatorError], T] | None = None
    producer: tuple[int, int] | None = None
    marker: TxnMarker | None = None


class CoordinatorShard(Protocol):
    """One partition's coordinator state (the group coordinator's ``GroupShard``; the
    transaction coordinator's next)."""

    def replay(self, record: Record) -> None:
        """Apply one record of the partition during a load (keys and tombstones)."""
        ...

    def on_loaded(self) -> None:
        """The load is complete and the HW has passed it: the shard serves from now."""
        ...

    def on_unloaded(self) -> None:
        """Leadership is gone: answer whatever the shard parked with NOT_COORDINATOR."""
        ...

    def next_deadline_ms(self) -> int | None:
        """The earliest time ``tick`` has something to do (None: nothing scheduled)."""
        ...

    def tick(self, now_ms: int) -> CoordinatorResult[None]:
        """Run what is due at ``now_ms``; a write like any other."""
        ...


S = TypeVar("S", bound=CoordinatorShard)


class PartitionState(enum.Enum):
    LOADING = "Loading"  # replaying the partition to its log end
    AWAITING_HW = "AwaitingHighWatermark"  # replayed; the HW has not passed it yet
    ACTIVE = "Active"  # serving requests and timers
    FAILED = "Failed"  # the load failed; retried after a backoff
    UNLOADED = "Unloaded"  # leadership gone (terminal: a new epoch is a new context)


P = PartitionState
LEGAL_TRANSITIONS: Final[dict[PartitionState, frozenset[PartitionState]]] = {
    P.LOADING: frozenset({P.AWAITING_HW, P.FAILED, P.UNLOADED}),
    P.AWAITING_HW: frozenset({P.ACTIVE, P.FAILED, P.UNLOADED}),
    P.ACTIVE: frozenset({P.UNLOADED}),
    P.FAILED: frozenset({P.LOADING, P.UNLOADED}),
    P.UNLOADED: frozenset(),
}

# The answer to a request for a partition in each state (ACTIVE serves).
STATE_ERRORS: Final = {
    P.LOADING: "COORDINATOR_LOAD_IN_PROGRESS",
    P.AWAITING_HW: "COORDINATOR_LOAD_IN_PROGRESS",
    P.FAILED: "COORDINATOR_NOT_AVAILABLE",
    P.UNLOADED: "NOT_COORDINATOR",
}


@dataclass(slots=True)
class _Write(Generic[T]):
    op: Callable[[Any], CoordinatorResult[T]]
    future: asyncio.Future[T]


@dataclass(slots=True)
class _Context(Generic[S]):
    """One load of one partition in one leader epoch."""

    topic: str
    partition: int
    epoch: int
    state: PartitionState = P.LOADING
    shard: S | None = None  # set once replayed (AWAITING_HW and ACTIVE)
    failure: str = ""  # why the load failed (FAILED)
    queue: deque[_Write[Any]] = field(default_factory=deque)
    pump: asyncio.Task[None] | None = None
    load: asyncio.Task[None] | None = None
    tick_queued: bool = False

    def transition(self, to: PartitionState, reason: str = "") -> None:
        assert to in LEGAL_TRANSITIONS[self.state], (
            f"{self.topic}-{self.partition}: illegal transition {self.state.value} -> {to.value}"
        )
        logger.debug(
            "%s-%d epoch %d: %s -> %s %s",
            self.topic,
            self.partition,
            self.epoch,
            self.state.value,
            to.value,
            reason,
        )
        self.state = to

    def error(self) -> CoordinatorError:
        code = STATE_ERRORS[self.state]
        return CoordinatorError(code, self.failure if self.state is P.FAILED else code)


class CoordinatorRuntime(Generic[S]):
    """The shards of ``topic``'s partitions this node leads (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        writer: PartitionWriter,
        new_shard: Callable[[int], S],
        clock: Callable[[], int],
        *,
        compression: int = 0,
    ) -> None:
        self.topic = topic
        self.compression = compression  # the codec of its record batches
        self.writer = writer
        self.new_shard = new_shard
        self.clock = clock
        self._contexts: dict[int, _Context[S]] = {}
        self._ticker: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    async def stop(self) -> None:
        """Unload every partition (parked requests are answered) and stop all tasks."""
        tasks = [] if self._ticker is None else [self._ticker]
        for context in list(self._contexts.values()):
            tasks += [t for t in (context.load, context.pump) if t is not None]
            self._unload(context, "shutdown")
        self._contexts.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            await cancel_and_wait(task)

    # -- leadership ------------------------------------------------------------------
    def on_leadership(self, partition: int, leader_epoch: int | None) -> None:
        """This node leads ``partition`` in ``leader_epoch`` (None: it does not)."""
        context = self._contexts.get(partition)
        if context is not None:
            if leader_epoch is not None and leader_epoch <= context.epoch:
                return  # the epoch being served, or a stale event
            reason = "not the leader" if leader_epoch is None else f"leader epoch {leader_epoch}"
            del self._contexts[partition]
            self._unload(context, reason)
        if leader_epoch is None:
            return
        context = _Context(self.topic, partition, leader_epoch)
        self._contexts[partition] = context
        context.load = asyncio.get_running_loop().create_task(self._load(context))

    def _unload(self, context: _Context[S], reason: str) -> None:
        was_serving = context.state is P.ACTIVE or context.state is P.AWAITING_HW
        if context.state is not P.UNLOADED:
            context.transition(P.UNLOADED, reason)
        if context.load is not None and context.load is not asyncio.current_task():
            context.load.cancel()
        error = CoordinatorError("NOT_COORDINATOR", f"{self.topic}-{context.partition}: {reason}")
        while context.queue:
            write = context.queue.popleft()
            if not write.future.done():
                write.future.set_exception(error)
        if context.shard is not None:
            try:
                context.shard.on_unloaded()
            except Exception:  # the other partitions must still unload
                logger.exception("unloading %s-%d failed", self.topic, context.partition)
        if was_serving:
            logger.info(
                "unloaded %s-%d (epoch %d): %s",
                self.topic,
                context.partition,
                context.epoch,
                reason,
            )

    def _current(self, context: _Context[S]) -> bool:
        return self._contexts.get(context.partition) is context

    # -- loading ---------------------------------------------------------------------
    async def _load(self, context: _Context[S]) -> None:
        attempt = 0
        while self._current(context):
            try:
                await self._load_once(context)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # never a silent "Task exception was never retrieved"
                if not self._current(context):
                    return
                delay_s = min(LOAD_RETRY_MAX_S, 2**attempt)
                attempt += 1
                context.failure = f"{type(error).__name__}: {error}"
                context.shard = None
                context.transition(P.FAILED, context.failure)
                logger.error(
                    "cannot load %s-%d (%s); its keys get COORDINATOR_NOT_AVAILABLE; "
                    "retrying in %d s",
                    self.topic,
                    context.partition,
                    context.failure,
                    delay_s,
                )
                await asyncio.sleep(delay_s)
                if self._current(context):
                    context.transition(P.LOADING, f"retry {attempt}")

    async def _load_once(self, context: _Context[S]) -> None:
        tp = (self.topic, context.partition)
        started = self.clock()
        while self.writer.leader_epoch(tp) < context.epoch:
            # The replica has not become leader in this epoch yet (it may still be a
            # follower appending what it fetches): its log end is not final yet.
            await asyncio.sleep(REPLICA_EPOCH_POLL_S)
            if not self._current(context):
                return
        shard = self.new_shard(context.partition)
        end = self.writer.log_end_offset(tp)
        count = 0
        for item in self.writer.read(tp, 0, end):
            if isinstance(item, Damage):
                logger.error(
                    "%s-%d: %s: what it held is not replayed (its keys fall back to what was "
                    "written before it); restore the directory from a replica or backup to "
                    "get it back",
                    self.topic,
                    context.partition,
                    item.describe(),
                )
                continue
            count += _replay_batch(shard, item)
            await asyncio.sleep(0)  # let other work run during long loads
            if not self._current(context):
                return  # unloaded or superseded meanwhile: discard
        context.shard = shard
        context.transition(P.AWAITING_HW, f"replayed to {end}")
        await self.writer.wait_for_high_watermark(tp, end)
        if not self._current(context):
            return
        context.transition(P.ACTIVE, f"high watermark reached {end}")
        context.failure = ""
        shard.on_loaded()
        if count:
            logger.info(
                "loaded %s-%d (epoch %d): %d records in %d ms",
                self.topic,
                context.partition,
                context.epoch,
                count,
                self.clock() - started,
            )

    # -- requests --------------------------------------------------------------------
    def state(self, partition: int) -> PartitionState:
        context = self._contexts.get(partition)
        return P.UNLOADED if context is None else context.state

    def shard(self, partition: int) -> S:
        """The partition's shard to read; CoordinatorError unless it is active."""
        context = self._contexts.get(partition)
        if context is None:
            raise CoordinatorError("NOT_COORDINATOR")
        if context.state is not P.ACTIVE:
            raise context.error()
        assert context.shard is not None
        return context.shard

    def active_shards(self) -> Iterator[tuple[int, S]]:
        for partition, context in list(self._contexts.items()):
            if context.state is P.ACTIVE and context.shard is not None:
                yield partition, context.shard

    async def write(self, partition: int, op: Callable[[S], CoordinatorResult[T]]) -> T:
        """Run ``op`` in the partition's write queue (see the module docstring)."""
        return await self._enqueue(partition, op)

    def submit(self, partition: int, op: Callable[[S], CoordinatorResult[Any]]) -> None:
        """``write`` with nobody waiting for the answer: a failure is logged."""
        try:
            future = self._enqueue(partition, op)
        except CoordinatorError:
            return
        future.add_done_callback(self._log_failure)

    def _log_failure(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, CoordinatorError):
            logger.info("%s write not done: %s", self.topic, error)
        elif error is not None:
            logger.error("%s write failed", self.topic, exc_info=error)

    def _enqueue(
        self, partition: int, op: Callable[[S], CoordinatorResult[T]]
    ) -> asyncio.Future[T]:
        context = self._contexts.get(partition)
        if context is None:
            raise CoordinatorError("NOT_COORDINATOR")
        if context.state is not P.ACTIVE:
            raise context.error()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        context.queue.append(_Write(op, future))
        if context.pump is None or context.pump.done():
            context.pump = asyncio.get_running_loop().create_task(self._pump(context))
        return future

    async def _pump(self, context: _Context[S]) -> None:
        while context.queue and context.state is P.ACTIVE:
            write = context.queue.popleft()
            if write.future.done():
                continue  # its caller went away before its turn
            assert context.shard is not None
            try:
                result = write.op(context.shard)
            except Exception as error:  # CoordinatorError or a bug: that caller's answer
                write.future.set_exception(error)
                continue
            try:
                if result.marker is not None:
                    await self._append_marker(context, result.marker)
                elif result.records:
                    await self._append(context, result.records, result.producer)
                if result.apply is not None:
                    result.apply()
                answer = result.response
            except CoordinatorError as failure:
                if result.rollback is None:
                    _settle(write.future, error=failure)
                    continue
                try:
                    answer = result.rollback(failure)
                except Exception as error:
                    _settle(write.future, error=error)
                    continue
            except asyncio.CancelledError:  # shutdown: the caller must not wait forever
                _settle(write.future, error=CoordinatorError("NOT_COORDINATOR", "shutting down"))
                raise
            except Exception as error:
                _settle(write.future, error=error)
                continue
            _settle(write.future, answer)

    async def _append(
        self,
        context: _Context[S],
        records: Sequence[KeyValue],
        producer: tuple[int, int] | None = None,
    ) -> None:
        now = self.clock()
        entries = [Record(i, now, k, v) for i, (k, v) in enumerate(records)]
        if producer is None:
            batch = encode_batch(entries, compression=self.compression)
        else:  # a transactional batch of the coordinator's origin: no sequence
            batch = encode_batch(
                entries,
                compression=self.compression,
                producer_id=producer[0],
                producer_epoch=producer[1],
                is_transactional=True,
            )
        try:
            await self.writer.append((self.topic, context.partition), batch)
        except PartitionWriteError as error:
            raise _coordinator_error(error) from None

    async def _append_marker(self, context: _Context[S], marker: TxnMarker) -> None:
        try:
            await self.writer.append_marker(
                (self.topic, context.partition),
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.commit,
            )
        except PartitionWriteError as error:
            raise _coordinator_error(error) from None

    # -- timers ----------------------------------------------------------------------
    def next_tick_s(self) -> float:
        """Seconds until the earliest deadline of any active shard, between MIN_TICK_S
        and TICK_S: a deadline is served when due rather than up to a tick later (one
        set while the ticker sleeps waits at most TICK_S)."""
        now = self.clock()
        earliest = now + int(TICK_S * 1000)
        for _, shard in self.active_shards():
            deadline = shard.next_deadline_ms()
            if deadline is not None and deadline < earliest:
                earliest = deadline
        # +1 ms: the clock counts whole milliseconds, so "due" is reached a bit after.
        return min(TICK_S, max(MIN_TICK_S, (earliest - now + 1) / 1000))

    def run_due_timers(self) -> int:
        """Queue ``tick`` on every active shard that is due; how many were queued."""
        now = self.clock()
        queued = 0
        for context in list(self._contexts.values()):
            shard = context.shard
            if context.state is not P.ACTIVE or shard is None or context.tick_queued:
                continue
            deadline = shard.next_deadline_ms()
            if deadline is None or deadline > now:
                continue
            context.tick_queued = True
            self.submit(context.partition, _ticker_op(context, self.clock))
            queued += 1
        return queued

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.next_tick_s())
            try:
                self.run_due_timers()
            except Exception:  # the timers must keep running
                logger.exception("%s timers failed", self.topic)


def _ticker_op(
    context: _Context[Any], clock: Callable[[], int]
) -> Callable[[CoordinatorShard], CoordinatorResult[None]]:
    def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
        context.tick_queued = False
        return shard.tick(clock())

    return op


def _coordinator_error(error: PartitionWriteError) -> CoordinatorError:
    code = "NOT_COORDINATOR" if error.code == "NOT_LEADER_OR_FOLLOWER" else None
    return CoordinatorError(code or "COORDINATOR_NOT_AVAILABLE", str(error))


def _replay_batch(shard: CoordinatorShard, batch: list[Record]) -> int:
    """Replay one batch into ``shard``; the number of records. A transactional batch
    (``ReplayBatch``) goes to the shard's ``replay_transactional`` and a marker to its
    ``replay_end_transaction``: only a shard whose partition takes TxnOffsetCommit has
    them, and one that does not gets neither kind of batch (logged and skipped)."""
    if isinstance(batch, ReplayBatch) and (batch.control or batch.transactional):
        if batch.control:
            handler = getattr(shard, "replay_end_transaction", None)
        else:
            handler = getattr(shard, "replay_transactional", None)
        if handler is None:
            logger.warning("skipping a transactional batch a %s cannot hold", type(shard).__name__)
            return 0
        for record in batch:
            if batch.control:
                try:
                    commit, _ = decode_end_txn_marker(record)
                except CorruptRecordError as error:
                    logger.warning("skipping a control record: %s", error)
                    continue
                handler(batch.producer_id, commit)
            else:
                handler(batch.producer_id, record)
        return len(batch)
    for record in batch:
        shard.replay(record)
    return len(batch)


def _settle(
    future: asyncio.Future[T], answer: Any = None, error: BaseException | None = None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(answer)


def leadership_changes(
    delta: MetadataDelta, topic: str, node_id: int
) -> list[tuple[int, int | None]]:
    """``on_leadership`` events for ``topic`` in one metadata delta, in order: None for
    each partition of a deleted ``topic`` first (a namesake created in the same delta
    starts over), then (partition, leader epoch) where this node leads, else None."""
    events: list[tuple[int, int | None]] = []
    for deleted in delta.deleted_topics.values():
        if deleted.name == topic:
            events += [(partition, None) for partition in sorted(deleted.partitions)]
    changes = [c.new for c in delta.partitions.values() if c.topic.name == topic]
    for new in sorted(changes, key=lambda p: p.partition):
        events.append((new.partition, new.leader_epoch if new.leader == node_id else None))
    return events

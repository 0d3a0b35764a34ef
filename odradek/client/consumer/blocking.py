"""Blocking consumer shaped like confluent-kafka's ``Consumer``.

How this works and why: the asyncio core (``ConsumerCore`` + ``GroupMember``) runs on
a background event-loop thread, so heartbeats, fetches and auto-commits go on while
the application is busy between polls. Rebalance callbacks are the exception: like
confluent-kafka they run on the application's thread, inside ``poll``/``consume``/
``close`` — the group task hands each callback to a queue and waits until the
calling thread has run it, so a callback may call ``assign``, ``commit``, ``seek``.
As in confluent-kafka, a callback that sets the assignment itself (``assign`` /
``unassign``, or with ``cooperative-sticky`` ``incremental_assign`` /
``incremental_unassign``: cooperative callbacks get only the partitions that move)
replaces the consumer's own change, which is made otherwise.

Offsets: with ``enable.auto.offset.store=true`` (the default) the offset after each
record handed out is the one ``commit()`` and auto-commit commit; with ``false``
only what the application passed to ``store_offsets`` is. As in librdkafka, a
``commit()`` without offsets commits only what changed since the group's last commit,
and with nothing to commit fails with ``_NO_OFFSET``; while the assignment is lost
(fenced, or ``max.poll.interval.ms`` exceeded) a commit fails with
``_ASSIGNMENT_LOST``. Going longer than ``max.poll.interval.ms`` between polls makes
the consumer leave the group; the next ``poll``/``consume`` returns a
``_MAX_POLL_EXCEEDED`` error message and the consumer rejoins (``group.py``).

``poll()`` and prefetching: a round trip to the loop thread costs ~30 µs, so ``poll()``
takes up to ``POLL_CHUNK`` records per round trip into a local buffer and returns them
one at a time. The core runs in prefetch mode: draining records does not move what is
committed; each record returned marks its partition consumed up to it (``_PartState.
consumed``), so commits, auto-commit and ``position()`` cover only records the
application received. A buffered record is returned only if its partition is still
assigned (same state), not sought or reset since (same epoch), not paused and not being
revoked — checked under ``core.hand_lock``, which the revocation takes too. Records
dropped while their partition stays where it was (paused, being revoked) make the core
seek back to the first of them, so none is skipped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core.config import ClientConfig
from odradek.client._core.connection import KafkaConnectionError
from odradek.client._core.errors import KafkaError, LocalError
from odradek.client._core.loop_thread import LoopThread, weak_callback
from odradek.client._core.sasl import is_authentication
from odradek.client._core.types import (
    KafkaException,
    Message,
    TopicPartition,
)
from odradek.client.admin.topics import blocking_list_topics
from odradek.client.admin.types import ClusterMetadata
from odradek.client.consumer.assignors import COOPERATIVE
from odradek.client.consumer.core import (
    EARLIEST,
    LATEST,
    TP,
    ConsumerCore,
    _PartState,
    committable_position,
)
from odradek.client.consumer.group import GroupMember
from odradek.client.producer.transactions import ConsumerGroupMetadata

T = TypeVar("T")
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001
UserCallback = Callable[["Consumer", list[TopicPartition]], None] | None
# Records poll() takes per round trip to the loop thread. confluent-kafka has no such
# setting (librdkafka queues whole fetches); 500 is the Java client's max.poll.records
# default: the ~30 µs round trip is then well under 0.1 µs per record, and what waits
# in the buffer stays small (a rebalance or pause drops it and fetches it again).
POLL_CHUNK = 500
# One partition's run of buffered records: partition, its state and epoch when drained,
# its position right after the drain, and the index in the chunk after its last record.
_Run = tuple[TP, _PartState, int, int, int]


def _tps(partitions: Iterable[TP]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in partitions]


def _expired(error: KafkaError) -> Message:
    """The message poll/consume return once after max.poll.interval.ms ran out."""
    text = str(error.args[0]).split(": ", 1)[-1].encode()
    return Message(None, 0, None, None, text, None, (0, -1), error)  # type: ignore[arg-type]


class Consumer:
    """``Consumer({"bootstrap.servers": ..., "group.id": ...})`` like confluent-kafka."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self.config = ClientConfig({**config, **kwargs}, "consumer")
        self._thread = LoopThread("odradek-consumer")
        self._callbacks: queue.SimpleQueue[
            tuple[Callable[[], bool], concurrent.futures.Future[bool]]
        ]
        self._callbacks = queue.SimpleQueue()
        self._closed = False
        self._chunk: list[Message] = []  # records poll() has taken and not returned
        self._at = 0  # the next of them
        self._run_now: _Run | None = None  # the run self._at is in
        self._runs: deque[_Run] = deque()  # the runs after it
        self._in_callback = False  # a rebalance callback is running
        self._callback_assigned = False  # ... and it set the assignment itself

        async def build() -> tuple[ConsumerCore, GroupMember | None]:
            core = ConsumerCore(self.config)
            core.record_type = Message  # built straight from the fetched columns
            core.prefetch = True  # commits cover what poll() returned, not what it took
            return core, GroupMember(core) if core.group_id else None

        self._core, self._member = self._thread.run(build())
        self._error_cb: Callable[[KafkaError], None] | None = self.config["error_cb"]
        if self._error_cb is not None:
            self._core.cluster.on_unreachable = weak_callback(self._report_unreachable)
        self._on_commit: Callable[[KafkaError | None, list[TopicPartition]], None] | None
        self._on_commit = self.config["on_commit"]
        if self._on_commit is not None:
            self._core.commit_listener = self._report_commit

    def _report_unreachable(self, error: BaseException) -> None:
        """On the loop: no broker reachable; error_cb hears librdkafka's _TRANSPORT
        from the next poll()/consume() on the caller's thread."""
        error_cb = self._error_cb
        assert error_cb is not None
        servers = self.config["bootstrap.servers"]
        code = LocalError.authentication if is_authentication(error) else LocalError.transport
        kafka_error = KafkaError(code, f"{servers}: {error}")

        def call() -> bool:
            error_cb(kafka_error)
            return False

        self._callbacks.put((call, concurrent.futures.Future()))

    def _report_commit(self, error: BaseException | None, offsets: dict[TP, int]) -> None:
        """confluent's ``on_commit(err, partitions)``: the outcome of every automatic and
        asynchronous commit (a synchronous one raises instead), called from the next
        poll()/consume() on the caller's thread, like the rebalance callbacks."""
        on_commit = self._on_commit
        assert on_commit is not None
        if error is not None and not isinstance(error, KafkaError):
            error = KafkaError(ErrorCode.unknown_server_error, f"{type(error).__name__}: {error}")
        partitions = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]

        def call() -> bool:
            on_commit(error, partitions)
            return False

        self._callbacks.put((call, concurrent.futures.Future()))

    # -- running coroutines while serving rebalance callbacks ---------------------------
    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            raise RuntimeError("Consumer closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._thread.loop)
        while True:
            self._serve_callbacks()
            try:
                return future.result(0.02)
            except concurrent.futures.TimeoutError:
                continue
            except (KafkaError, KafkaConnectionError) as error:
                raise KafkaException(error) from None

    def _serve_callbacks(self) -> None:
        while True:
            try:
                call, done = self._callbacks.get_nowait()
            except queue.Empty:
                return
            if not done.set_running_or_notify_cancel():
                continue  # the rebalance it belonged to was abandoned (close)
            try:
                done.set_result(call())
            except Exception as error:  # raised by the next poll; see GroupMember._call
                done.set_exception(error)

    def _wrap(self, callback: UserCallback) -> Any:
        if callback is None:
            return None

        def call(partitions: list[TP]) -> bool:
            self._in_callback, self._callback_assigned = True, False
            try:
                callback(self, _tps(partitions))
            finally:
                self._in_callback = False
            return self._callback_assigned

        async def on_loop(partitions: list[TP]) -> bool:
            done: concurrent.futures.Future[bool] = concurrent.futures.Future()
            self._callbacks.put((lambda: call(partitions), done))
            return await asyncio.wrap_future(done)

        return on_loop

    def _assignment_changed(self, incremental: bool) -> None:
        """Called by every assignment method; inside a cooperative rebalance callback
        only the incremental ones are allowed, as in confluent-kafka."""
        cooperative = self._member is not None and self._member.protocol == COOPERATIVE
        if self._in_callback and cooperative and not incremental:
            raise KafkaException(
                RuntimeError(
                    "a cooperative rebalance changes the assignment with "
                    "incremental_assign() / incremental_unassign()"
                )
            )
        self._callback_assigned = self._in_callback

    # -- subscription and assignment ---------------------------------------------------
    def subscribe(
        self,
        topics: list[str],
        on_assign: UserCallback = None,
        on_revoke: UserCallback = None,
        on_lost: UserCallback = None,
    ) -> None:
        member = self._member
        if member is None:
            raise KafkaException(ValueError("subscribe needs group.id"))

        async def go() -> None:
            member.subscribe(
                topics, self._wrap(on_assign), self._wrap(on_revoke), self._wrap(on_lost)
            )

        self._run(go())

    def unsubscribe(self) -> None:
        """Revoke everything (on the next poll) and leave the group, as
        confluent-kafka does (static members too)."""
        if self._member is not None:
            member = self._member

            async def go() -> None:
                member.unsubscribe(leave_static=True)

            self._run(go())

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._assignment_changed(incremental=False)
        self._run(self._assign(partitions))

    async def _assign(self, partitions: list[TopicPartition], keep: bool = False) -> None:
        core = self._core
        keys = [(tp.topic, tp.partition) for tp in partitions]
        await core.assign(core.assignment() + keys if keep else keys)
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if tp.offset >= 0:
                core.seek(key, tp.offset)
            elif tp.offset == OFFSET_BEGINNING:
                core.seek_to_beginning([key])
            elif tp.offset == OFFSET_END:
                core.seek_to_end([key])

    def unassign(self) -> None:
        self._assignment_changed(incremental=False)
        self._run(self._core.assign([]))

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Add partitions (with optional start offsets) to the assignment."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        current = set(self._core.assignment())
        for t, p in keys:
            if (t, p) in current or keys.count((t, p)) > 1:
                raise KafkaException(
                    ValueError(f"{t} [{p}] is already part of the current assignment")
                )
        self._assignment_changed(incremental=True)
        self._run(self._assign(partitions, keep=True))

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        """Remove partitions from the assignment (their offsets are ignored)."""
        gone = {(tp.topic, tp.partition) for tp in partitions}
        current = self._core.assignment()
        for t, p in sorted(gone - set(current)):
            raise KafkaException(
                ValueError(f"{t} [{p}] can't be unassigned: it is not in the current assignment")
            )
        self._assignment_changed(incremental=True)
        self._run(self._core.assign([tp for tp in current if tp not in gone]))

    def assignment(self) -> list[TopicPartition]:
        return _tps(self._core.assignment())

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """confluent-kafka's ClusterMetadata: every topic, or ``topic`` (with its error
        when it does not exist); brokers, partitions with leader, replicas and isrs.
        Past ``timeout`` seconds (None or negative: no limit) KafkaException(_TIMED_OUT)."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        return blocking_list_topics(self._thread, self._core.cluster, topic, timeout)

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """For ``Producer.send_offsets_to_transaction``: the group, and this member's
        generation, member id and instance id as of now (confluent's opaque object)."""
        member = self._member
        if member is None:
            raise KafkaException(KafkaError(ErrorCode.invalid_group_id, "no group.id"))

        async def read() -> ConsumerGroupMetadata:
            return ConsumerGroupMetadata(
                str(self._core.group_id),
                member.generation_id,
                member.member_id,
                member.instance_id,
            )

        return self._run(read())

    # -- records ----------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> Message | None:
        member = self._member
        if member is None:
            return self._poll(timeout)
        expired = member.poll_begin()  # max.poll.interval.ms is timed from poll to poll
        try:
            return self._poll(timeout) if expired is None else _expired(expired)
        finally:
            member.poll_end()

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        member = self._member
        if member is None:
            return self._consume(num_messages, timeout)
        expired = member.poll_begin()
        try:
            if expired is None:
                return self._consume(num_messages, timeout)
            # As librdkafka: an error message first, then (consume) on with the rest.
            rest = self._consume(num_messages - 1, timeout) if num_messages > 1 else []
            return [_expired(expired), *rest]
        finally:
            member.poll_end()

    def _poll(self, timeout: float | None) -> Message | None:
        if not self._callbacks.empty():
            self._serve_callbacks()
        member = self._member
        if member is not None and member.error is not None:
            self._raise_group_error()
        message = self._pop()
        if message is not None:
            return message
        wait = 1e9 if timeout is None or timeout < 0 else timeout
        self._chunk, runs = self._run(self._take(POLL_CHUNK, wait, keep=True))
        self._at, self._runs = 0, deque(runs)
        self._run_now = self._runs.popleft() if runs else None
        self._serve_callbacks()
        message = self._pop()
        if message is None:  # an error raised now would lose records: the next call raises
            self._raise_group_error()
        return message

    def _consume(self, num_messages: int, timeout: float | None) -> list[Message]:
        self._raise_group_error()
        records = self._pop_many(num_messages)  # what poll() took comes first
        if records:
            self._serve_callbacks()
            return records
        wait = 1e9 if timeout is None or timeout < 0 else timeout
        records, _runs = self._run(self._take(num_messages, wait, keep=False))
        self._serve_callbacks()
        if not records:  # an error raised now would lose them: the next call raises it
            self._raise_group_error()
        return records

    async def _take(self, count: int, wait: float, keep: bool) -> tuple[list[Message], list[_Run]]:
        """On the loop: up to ``count`` records and their runs. Unless ``keep`` (poll()
        buffers them), they all go to the application: mark them consumed now."""
        marks: list[tuple[TP, _PartState, int]] = []
        records = await self._core.getmany(count, wait, marks)
        runs, stop = [], 0
        for tp, state, taken in marks:
            stop += taken
            assert state.position is not None
            runs.append((tp, state, state.epoch, state.position, stop))
            if not keep:
                state.consumed = (state.epoch, state.position)
        return records, runs

    def _deliverable(self, tp: TP, state: _PartState, epoch: int) -> bool:
        """Call with core.hand_lock held."""
        return (
            state.epoch == epoch
            and not state.paused
            and not state.revoking
            and self._core._parts.get(tp) is state
        )

    def _pop(self) -> Message | None:
        """The next buffered record the application may have (see the module doc)."""
        while (run := self._run_now) is not None:
            tp, state, epoch, end, stop = run
            at = self._at
            if at < stop:
                with self._core.hand_lock:
                    if self._deliverable(tp, state, epoch):
                        message = self._chunk[at]
                        self._at = at = at + 1
                        state.consumed = (epoch, end if at == stop else message[2] + 1)
                        return message
                self._drop(run)
            self._next_run()
        return None

    def _pop_many(self, count: int) -> list[Message]:
        out: list[Message] = []
        while len(out) < count and (run := self._run_now) is not None:
            tp, state, epoch, end, stop = run
            at = self._at
            if at < stop:
                with self._core.hand_lock:
                    if self._deliverable(tp, state, epoch):
                        self._at = upto = min(stop, at + count - len(out))
                        out += self._chunk[at:upto]
                        state.consumed = (epoch, end if upto == stop else out[-1][2] + 1)
                        continue
                self._drop(run)
            self._next_run()
        return out

    def _next_run(self) -> None:
        if self._runs:
            self._run_now = self._runs.popleft()
        else:
            self._run_now, self._chunk, self._at = None, [], 0

    def _drop(self, run: _Run) -> None:
        """Drop the rest of a run. If its partition was not moved (paused, or being
        revoked and maybe kept after all), the core seeks back to the first dropped."""
        tp, state, epoch, _end, stop = run
        offset = self._chunk[self._at][2]
        self._at = stop
        if state.epoch == epoch and self._core._parts.get(tp) is state:
            self._thread.loop.call_soon_threadsafe(self._rewind, tp, state, epoch, offset)

    def _rewind(self, tp: TP, state: _PartState, epoch: int, offset: int) -> None:
        """On the loop: back to ``offset`` unless the partition moved meanwhile."""
        if self._core._parts.get(tp) is state and state.epoch == epoch:
            self._core.seek(tp, offset)

    def _pending(self, partitions: Iterable[TP]) -> list[tuple[TP, _PartState, int, int]]:
        """(partition, state, epoch, first offset) of buffered records of ``partitions``."""
        wanted = set(partitions)
        out, at = [], self._at
        for run in [self._run_now, *self._runs] if self._run_now is not None else []:
            tp, state, epoch, _end, stop = run
            if tp in wanted and at < stop:
                out.append((tp, state, epoch, self._chunk[at][2]))
            at = stop
        return out

    def _raise_group_error(self) -> None:
        """A group error, or the exception a rebalance callback raised (as is, like
        confluent-kafka), from the background group task."""
        if self._member is not None and self._member.error is not None:
            error, self._member.error = self._member.error, None
            if isinstance(error, KafkaError | KafkaConnectionError):
                raise KafkaException(error)
            raise error

    def seek(self, partition: TopicPartition) -> None:
        async def go() -> None:
            key = (partition.topic, partition.partition)
            if partition.offset == OFFSET_BEGINNING:
                self._core.seek_to_beginning([key])
            elif partition.offset == OFFSET_END:
                self._core.seek_to_end([key])
            else:
                self._core.seek(key, partition.offset)

        self._run(go())

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The offset after the last record returned, per partition."""

        async def go() -> list[TopicPartition]:
            out = []
            for tp in partitions:
                state = self._core._parts.get((tp.topic, tp.partition))
                position = committable_position(state) if state is not None else None
                out.append(
                    TopicPartition(
                        tp.topic, tp.partition, OFFSET_INVALID if position is None else position
                    )
                )
            return out

        return self._run(go())

    def pause(self, partitions: list[TopicPartition]) -> None:
        """Pause fetching; records poll() buffered for them are dropped and fetched
        again on resume (librdkafka purges its fetch queue likewise)."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        pending = self._pending(keys)

        async def go() -> None:
            self._core.pause(keys)
            for tp, state, epoch, offset in pending:
                self._rewind(tp, state, epoch, offset)

        self._run(go())

    def resume(self, partitions: list[TopicPartition]) -> None:
        async def go() -> None:
            self._core.resume([(tp.topic, tp.partition) for tp in partitions])

        self._run(go())

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        key = (partition.topic, partition.partition)
        if cached:
            state = self._core._parts.get(key)
            return (OFFSET_INVALID, state.high_watermark if state else OFFSET_INVALID)
        low = self._run(self._core.list_offsets({key: EARLIEST}))[key][0]
        high = self._run(self._core.list_offsets({key: LATEST}))[key][0]
        return low, high

    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        query = {(tp.topic, tp.partition): tp.offset for tp in partitions}
        found = self._run(self._core.offsets_for_times(query))
        return [
            TopicPartition(t, p, found[(t, p)][0] if found[(t, p)] else OFFSET_END)  # type: ignore[index]
            for t, p in query
        ]

    # -- commits -------------------------------------------------------------------------
    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        wanted: dict[TP, int] | None = None
        if message is not None:
            wanted = {(message.topic(), message.partition()): message.offset() + 1}
        elif offsets is not None:
            wanted = {(tp.topic, tp.partition): tp.offset for tp in offsets}
        if self._member is not None and self._member.lost:
            error = KafkaError(LocalError.assignment_lost, "the group's assignment was lost")
            if asynchronous:
                return None
            raise KafkaException(error)
        if asynchronous:
            coroutine = self._commit(wanted, report=True)
            future = asyncio.run_coroutine_threadsafe(coroutine, self._thread.loop)
            future.add_done_callback(self._async_commit_done)  # never unretrieved
            return None
        # A synchronous commit raises instead: confluent's on_commit is not called for it.
        done = self._run(self._commit(wanted, report=False))
        return [TopicPartition(t, p, o) for (t, p), o in done.items()]

    def _async_commit_done(self, future: concurrent.futures.Future[dict[TP, int]]) -> None:
        error = None if future.cancelled() else future.exception()
        # Failed requests were reported by the core; nothing to commit never reaches it.
        nothing = isinstance(error, KafkaError) and error.code() == LocalError.no_offset
        if nothing and self._on_commit is not None:  # as librdkafka: the assignment, -1001
            self._report_commit(error, dict.fromkeys(self._core.assignment(), OFFSET_INVALID))

    async def _commit(self, wanted: dict[TP, int] | None, report: bool) -> dict[TP, int]:
        done = await self._core.commit(wanted, changed_only=True, consumed_only=True, report=report)
        if not done:
            raise KafkaError(LocalError.no_offset, "no offset stored to commit")
        return done

    def store_offsets(
        self, message: Message | None = None, offsets: list[TopicPartition] | None = None
    ) -> None:
        """Store the offset after ``message``, or ``offsets``, for the next commit
        (``commit()`` without offsets, auto-commit); needs enable.auto.offset.store=false."""
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is None and offsets is None:
            raise ValueError("expected either message or offsets")
        if self.config["enable.auto.offset.store"]:
            raise KafkaException(
                KafkaError(
                    ErrorCode.invalid_config,
                    "store_offsets needs enable.auto.offset.store=false",
                )
            )
        if message is not None:
            wanted = {(message.topic(), message.partition()): message.offset() + 1}
        else:
            wanted = {(tp.topic, tp.partition): tp.offset for tp in offsets or ()}
        for (t, p), offset in wanted.items():
            if offset < 0:
                raise KafkaException(ValueError(f"{t} [{p}]: {offset} is not an offset to store"))

        async def go() -> list[TP]:
            return self._core.store_offsets(wanted)

        missing = self._run(go())
        if wanted and len(missing) == len(wanted):
            names = ", ".join(f"{t} [{p}]" for t, p in missing)
            raise KafkaException(
                KafkaError(ErrorCode.unknown_topic_or_partition, f"not assigned: {names}")
            )

    def committed(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        found = self._run(self._core.committed([(tp.topic, tp.partition) for tp in partitions]))
        return [
            TopicPartition(t, p, o if o >= 0 else OFFSET_INVALID)
            for (t, p), (o, _m) in found.items()
        ]

    def memberid(self) -> str | None:
        return self._member.member_id if self._member is not None else None

    # -- close ---------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._member is not None:
                self._run(self._member.close())
            elif self.config["enable.auto.commit"] and self._core.group_id:
                with contextlib.suppress(KafkaException):
                    self._run(self._core.commit())
            self._run(self._core.close())
        finally:
            self._closed = True
            self._run_now, self._runs, self._chunk = None, deque(), []
            self._thread.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The producer's record accumulator: per-partition batches, linger, buffer memory.

How this works and why: ``append`` encodes each record straight into the records
section (a ``bytearray``) of the last open batch of its partition — a new batch when
that one would pass ``batch.size`` — so a batch is bytes from the start and sending
it only adds the header (``frame_batch``). The sender drains a partition's head batch
once it is full, has waited ``linger.ms``, or a flush or close is in progress. Every
queued byte counts against ``buffer.memory``; an append that does not fit waits for
the sender to free space, at most ``max.block.ms``, then fails with a
``BufferFullError`` (backpressure instead of unbounded memory). Batches carry their
own retry state (attempts, next retry time, producer id, epoch and sequence) so a
failed batch can go back to the front of its queue unchanged and keep its order.

Threads: the blocking ``Producer`` appends from the application's thread while the
sender runs on the event loop's thread, so every method that touches the queues,
the batches or the counters holds ``lock`` (a plain ``threading.Lock``: uncontended
it costs well under a microsecond, and the asyncio face pays it too). Waiting for
space is a ``threading.Condition`` on that lock for threads and an asyncio event for
coroutines. The asyncio events (``wakeup``, the empty and space waiters) are only
touched on the loop; ``append`` returns whether the sender must be woken and the
caller does it from the right thread.

Delivery: a record may carry a *waiter* (whatever the face needs to report it: an
asyncio future, a callback); the batch keeps ``(index, waiter)`` only for those,
and ``on_complete(batch)`` is called once per finished batch, on the loop, with
``base_offset``/``log_append_time`` or ``error`` set — one call per batch, not per
record, when nobody waits for single records.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from odradek.records.batch import CREATE_TIME, NO_COMPRESSION
from odradek.records.codec import append_record, frame_batch

BATCH_OVERHEAD = 61  # v2 batch header
Header = tuple[str, bytes | None]


class BufferFullError(BufferError):
    """``buffer.memory`` stayed full for ``max.block.ms``."""


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """An upper bound of a record's encoded size (for space checks before encoding)."""
    size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for name, data in headers:
        size += 10 + len(name.encode()) + (len(data) if data is not None else 0)
    return size


class ProducerBatch:
    """Records for one partition, encoded as they come, sent as one v2 record batch."""

    __slots__ = (
        "_payload",
        "attempts",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "body",
        "closed",
        "completed",
        "count",
        "created",
        "deadline",
        "error",
        "log_append_time",
        "log_start_offset",
        "max_timestamp",
        "partition",
        "producer_epoch",
        "producer_id",
        "retry_at",
        "size",
        "topic",
        "waiters",
    )

    def __init__(self, topic: str, partition: int, deadline: float) -> None:
        self.topic = topic
        self.partition = partition
        self.body = bytearray()  # the records section, uncompressed
        self.count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0
        self.size = BATCH_OVERHEAD  # header + body: what it holds of buffer.memory
        self.waiters: list[tuple[int, Any]] = []
        self.created = time.monotonic()
        self.deadline = deadline  # monotonic: delivery.timeout.ms after creation
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self._payload: bytes | None = None
        self.completed = False
        self.closed = False  # takes no more records (a batch the application built)
        # the outcome, set once: offset of the first record (-1 with acks=0), the
        # broker's LogAppendTime (None for CreateTime), or the error
        self.base_offset = -1
        self.log_append_time: int | None = None
        self.log_start_offset = -1  # the partition's, from the produce response
        self.error: BaseException | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def add(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header],
        waiter: Any,
    ) -> int:
        """Encode one record into the batch; returns its size in bytes."""
        count = self.count
        if count == 0:
            self.base_timestamp = self.max_timestamp = timestamp
        elif timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        size = append_record(self.body, count, timestamp - self.base_timestamp, key, value, headers)
        if waiter is not None:
            self.waiters.append((count, waiter))
        self.count = count + 1
        self.size += size
        return size

    def set_producer_state(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        if (producer_id, epoch, base_sequence) != (
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
        ):
            self.producer_id = producer_id
            self.producer_epoch = epoch
            self.base_sequence = base_sequence
            self._payload = None

    def payload(self, compression: int = NO_COMPRESSION, transactional: bool = False) -> bytes:
        if self._payload is None:
            self._payload = frame_batch(
                self.body,
                record_count=self.count,
                last_offset_delta=self.count - 1,
                base_timestamp=self.base_timestamp,
                max_timestamp=self.max_timestamp,
                compression=compression,
                timestamp_type=CREATE_TIME,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                is_transactional=transactional,
            )
        return self._payload


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        max_block_ms: int,
        delivery_timeout_ms: int,
        on_batch_closed: Callable[[str, int], None] | None = None,
        on_complete: Callable[[ProducerBatch], None] | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.on_batch_closed = on_batch_closed  # the partitioner's on_new_batch
        self.on_complete = on_complete  # a batch was delivered or failed (on the loop)
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)  # notified whenever space is freed
        self.queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.used = 0
        self.records_pending = 0  # appended and not yet completed
        self.flushing = 0
        self.closing = False
        self.wakeup = asyncio.Event()  # set when the sender may have work
        self._empty_waiter: asyncio.Event | None = None
        self._space_waiter: asyncio.Event | None = None

    # -- appending (any thread) -----------------------------------------------------
    def reserve(self, size: int, deadline: float) -> None:
        """Take ``size`` bytes of buffer.memory, waiting until the monotonic ``deadline``.

        For threads other than the loop's (the blocking producer); holds ``lock``.
        A record bigger than the whole buffer still goes in when nothing else is.
        """
        assert self.lock.locked()
        while self.used + size > self.buffer_memory and self.used > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"buffer.memory ({self.buffer_memory} bytes) full for max.block.ms"
                )
            self.space.wait(remaining)
        self.used += size

    def try_reserve(self, size: int) -> bool:
        """``reserve`` without waiting (holds ``lock``)."""
        assert self.lock.locked()
        if self.used + size > self.buffer_memory and self.used > 0:
            return False
        self.used += size
        return True

    def add(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header],
        waiter: Any,
        reserved: int,
    ) -> bool:
        """Encode a record into its partition's open batch; holds ``lock``.

        ``reserved`` bytes of buffer.memory were taken for it (``record_size``); the
        difference to its real size is given back. True when the sender must be
        woken (a batch filled up, or a new one has a linger deadline to learn).
        """
        assert self.lock.locked()
        tp = (topic, partition)
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = deque()
        batch = queue[-1] if queue else None
        if (
            batch is None
            or batch.attempts
            or batch.closed
            or (batch.count and batch.size + reserved > self.batch_size)
        ):
            if (
                batch is not None
                and not batch.attempts
                and not batch.closed
                and self.on_batch_closed is not None
            ):
                self.on_batch_closed(topic, partition)
            batch = ProducerBatch(topic, partition, time.monotonic() + self.delivery_timeout_s)
            queue.append(batch)
        size = batch.add(key, value, timestamp, headers, waiter)
        self.used += size - reserved
        self.records_pending += 1
        # A new batch closed the one before it (sendable now) and has a linger
        # deadline; a full one or linger 0 wants sending now.
        return batch.count == 1 or batch.size >= self.batch_size or self.linger_s == 0

    async def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header],
        waiter: Any,
    ) -> None:
        """On the loop: ``add``, waiting up to max.block.ms for buffer space."""
        size = record_size(key, value, headers)
        deadline = time.monotonic() + self.max_block_s
        while True:
            with self.lock:
                if self.try_reserve(size):
                    wake = self.add(topic, partition, key, value, timestamp, headers, waiter, size)
                    break
                if self._space_waiter is None:
                    self._space_waiter = asyncio.Event()
                event = self._space_waiter
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"buffer.memory ({self.buffer_memory} bytes) full for max.block.ms"
                )
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                continue  # looks once more, then fails
        if wake:
            self.wakeup.set()

    async def append_batch(self, batch: ProducerBatch) -> None:
        """On the loop: queue a batch built whole by the application (``closed``, so
        no record joins it), waiting up to max.block.ms for its buffer space."""
        deadline = time.monotonic() + self.max_block_s
        reserved = batch.size - BATCH_OVERHEAD  # what complete() gives back
        while True:
            with self.lock:
                if self.try_reserve(reserved):
                    tp = batch.tp
                    queue = self.queues.get(tp)
                    if queue is None:
                        queue = self.queues[tp] = deque()
                    last = queue[-1] if queue else None
                    open_batch = last is not None and not last.attempts and not last.closed
                    if open_batch and self.on_batch_closed is not None:
                        self.on_batch_closed(batch.topic, batch.partition)
                    queue.append(batch)
                    self.records_pending += batch.count
                    break
                if self._space_waiter is None:
                    self._space_waiter = asyncio.Event()
                event = self._space_waiter
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"buffer.memory ({self.buffer_memory} bytes) full for max.block.ms"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
        self.wakeup.set()

    # -- completing (on the loop) ----------------------------------------------------
    def complete(
        self,
        batch: ProducerBatch,
        base_offset: int = -1,
        log_append_time: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        """A batch is finished (delivered, or failed with ``error``): report, free it."""
        if batch.completed:
            return
        batch.completed = True
        batch.body.clear()  # the reports keep only what they need (waiters)
        batch._payload = None
        batch.base_offset = base_offset
        batch.log_append_time = log_append_time
        batch.error = error
        with self.lock:
            self.used -= batch.size - BATCH_OVERHEAD
            self.records_pending -= batch.count
            empty = self.records_pending == 0
            self.space.notify_all()
        if self.on_complete is not None:
            self.on_complete(batch)
        if self._space_waiter is not None:
            self._space_waiter.set()
            self._space_waiter = None
        if empty and self._empty_waiter is not None:
            self._empty_waiter.set()
            self._empty_waiter = None

    async def wait_empty(self) -> None:
        """Until no appended record is left undelivered."""
        while self.records_pending:
            if self._empty_waiter is None:
                self._empty_waiter = asyncio.Event()
            await self._empty_waiter.wait()

    # -- draining (on the loop) --------------------------------------------------------
    def ready(self, now: float, sendable: Any) -> tuple[list[tuple[str, int]], float]:
        """Partitions whose head batch may be sent now, and when to look again.

        ``sendable(tp)`` says whether the sender allows another batch of ``tp`` in flight.
        """
        ready = []
        next_check = now + 1.0
        force = self.flushing > 0 or self.closing
        with self.lock:
            for tp, queue in self.queues.items():
                if not queue:
                    continue
                head = queue[0]
                if head.retry_at > now:
                    next_check = min(next_check, head.retry_at)
                    continue
                due = head.created + self.linger_s
                full = head.closed or head.size >= self.batch_size
                if force or len(queue) > 1 or full or due <= now:
                    if sendable(tp):
                        ready.append(tp)
                else:
                    next_check = min(next_check, due)
                next_check = min(next_check, head.deadline)
        return ready, next_check

    def take(self, tps: list[tuple[str, int]], max_bytes: int) -> list[ProducerBatch]:
        """Pop the head batch of each of ``tps`` while they fit in ``max_bytes`` together
        (the first one always); these batches take no more records."""
        batches: list[ProducerBatch] = []
        size = 0
        with self.lock:
            for tp in tps:
                queue = self.queues[tp]
                if batches and size + queue[0].size > max_bytes:
                    break
                batch = queue.popleft()
                if not queue and not batch.attempts and self.on_batch_closed is not None:
                    self.on_batch_closed(tp[0], tp[1])
                size += batch.size
                batches.append(batch)
        return batches

    def requeue(self, batches: list[ProducerBatch], retry_at: float) -> None:
        """Put failed batches back at the front of their queues, in sequence order."""
        with self.lock:
            for batch in sorted(batches, key=lambda b: b.base_sequence, reverse=True):
                batch.retry_at = retry_at
                self.queues.setdefault(batch.tp, deque()).appendleft(batch)
        self.wakeup.set()

    def expired(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches past their delivery deadline."""
        out: list[ProducerBatch] = []
        with self.lock:
            for queue in self.queues.values():
                while queue and queue[0].deadline <= now:
                    out.append(queue.popleft())
        return out

    def take_all(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (abort_transaction drops them)."""
        with self.lock:
            out = [batch for queue in self.queues.values() for batch in queue]
            for queue in self.queues.values():
                queue.clear()
        return out

    def all_batches(self) -> list[ProducerBatch]:
        with self.lock:
            return [batch for queue in self.queues.values() for batch in queue]

    def has_queued(self) -> bool:
        with self.lock:
            return any(self.queues.values())

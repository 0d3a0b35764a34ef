"""The producer's record accumulator: per-partition batches, linger, buffer memory.

How this works and why: ``send`` appends each record to the last open batch of its
partition (a new batch when that one would pass ``batch.size``), and the sender drains
a partition's head batch once it is full, has waited ``linger.ms``, or a flush or close
is in progress. Every queued byte counts against ``buffer.memory``; an append that
does not fit waits for the sender to free space, at most ``max.block.ms``, then fails
with a ``BufferFullError`` (backpressure instead of unbounded memory). Batches carry
their own retry state (attempts, next retry time, producer id, epoch and sequence) so
a failed batch can go back to the front of its queue unchanged and keep its order.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from odradek.client.types import RecordMetadata
from odradek.storage.batch import CREATE_TIME, NO_COMPRESSION
from odradek.storage.records import Header, Record, encode_batch

BATCH_OVERHEAD = 61  # v2 batch header
RECORD_OVERHEAD = 21  # worst-case varints and attributes of one record


class BufferFullError(BufferError):
    """``buffer.memory`` stayed full for ``max.block.ms``."""


def record_size(key: bytes | None, value: bytes | None, headers: tuple[Header, ...]) -> int:
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for header in headers:
        size += 10 + len(header.key) + len(header.value or b"")
    return size


class PendingRecord:
    __slots__ = ("future", "headers", "key", "timestamp", "value")

    def __init__(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: tuple[Header, ...],
        future: asyncio.Future[RecordMetadata],
    ) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = headers
        self.future = future


class ProducerBatch:
    """Records for one partition, sent together as one v2 record batch."""

    def __init__(self, topic: str, partition: int, deadline: float) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[PendingRecord] = []
        self.size = BATCH_OVERHEAD
        self.created = time.monotonic()
        self.deadline = deadline  # monotonic: delivery.timeout.ms after creation
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self._payload: bytes | None = None
        self.completed = False

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def has_room(self, size: int, batch_size: int) -> bool:
        return not self.records or self.size + size <= batch_size

    def append(self, record: PendingRecord, size: int) -> None:
        self.records.append(record)
        self.size += size
        self._payload = None

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
            records = [
                Record(index, r.timestamp, r.key, r.value, r.headers)
                for index, r in enumerate(self.records)
            ]
            self._payload = encode_batch(
                records,
                compression=compression,
                timestamp_type=CREATE_TIME,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                is_transactional=transactional,
            )
        return self._payload

    def done(self, base_offset: int, log_append_time: int | None) -> None:
        self.completed = True
        for index, record in enumerate(self.records):
            if record.future.done():
                continue
            offset = base_offset + index if base_offset >= 0 else -1
            timestamp = record.timestamp if log_append_time is None else log_append_time
            record.future.set_result(
                RecordMetadata(
                    self.topic,
                    self.partition,
                    offset,
                    timestamp,
                    0 if log_append_time is None else 1,
                    len(record.key) if record.key is not None else -1,
                    len(record.value) if record.value is not None else -1,
                )
            )

    def fail(self, error: BaseException) -> None:
        self.completed = True
        for record in self.records:
            if not record.future.done():
                record.future.set_exception(error)


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
    ) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.on_batch_closed = on_batch_closed  # the partitioner's on_new_batch
        self.queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.used = 0
        self.records_pending = 0  # appended and not yet completed
        self.flushing = 0
        self.closing = False
        self.wakeup = asyncio.Event()  # set when the sender may have work
        self.empty = asyncio.Event()  # set while no record is pending
        self.empty.set()
        self._space = asyncio.Condition()

    # -- appending -----------------------------------------------------------------
    async def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: tuple[Header, ...],
    ) -> asyncio.Future[RecordMetadata]:
        size = record_size(key, value, headers)
        await self._reserve(size)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        queue = self.queues.setdefault((topic, partition), deque())
        batch = queue[-1] if queue else None
        if batch is None or batch.attempts or not batch.has_room(size, self.batch_size):
            if batch is not None and not batch.attempts and self.on_batch_closed is not None:
                self.on_batch_closed(topic, partition)
            batch = ProducerBatch(topic, partition, time.monotonic() + self.delivery_timeout_s)
            queue.append(batch)
        batch.append(PendingRecord(key, value, timestamp, headers, future), size)
        self.records_pending += 1
        self.empty.clear()
        if batch.size >= self.batch_size or len(queue) > 1 or self.linger_s == 0:
            self.wakeup.set()
        elif len(batch.records) == 1:
            self.wakeup.set()  # the sender must learn the new linger deadline
        return future

    async def _reserve(self, size: int) -> None:
        if self.used + size <= self.buffer_memory or self.used == 0:
            self.used += size
            return
        async with self._space:
            try:
                await asyncio.wait_for(
                    self._space.wait_for(
                        lambda: self.used + size <= self.buffer_memory or self.used == 0
                    ),
                    self.max_block_s,
                )
            except TimeoutError:
                raise BufferFullError(
                    f"buffer.memory ({self.buffer_memory} bytes) full for max.block.ms"
                ) from None
            self.used += size

    def release(self, batch: ProducerBatch) -> None:
        """A batch is finished (delivered or failed): free its memory."""
        self.used -= batch.size - BATCH_OVERHEAD
        self.records_pending -= len(batch.records)
        if self.records_pending == 0:
            self.empty.set()
        asyncio.get_running_loop().create_task(self._notify_space())

    async def _notify_space(self) -> None:
        async with self._space:
            self._space.notify_all()

    # -- draining ------------------------------------------------------------------
    def ready(self, now: float, sendable: Any) -> tuple[list[tuple[str, int]], float]:
        """Partitions whose head batch may be sent now, and when to look again.

        ``sendable(tp)`` says whether the sender allows another batch of ``tp`` in flight.
        """
        ready = []
        next_check = now + 1.0
        force = self.flushing > 0 or self.closing
        for tp, queue in self.queues.items():
            if not queue:
                continue
            head = queue[0]
            if head.retry_at > now:
                next_check = min(next_check, head.retry_at)
                continue
            due = head.created + self.linger_s
            if force or len(queue) > 1 or head.size >= self.batch_size or due <= now:
                if sendable(tp):
                    ready.append(tp)
            else:
                next_check = min(next_check, due)
            next_check = min(next_check, head.deadline)
        return ready, next_check

    def pop(self, tp: tuple[str, int]) -> ProducerBatch:
        queue = self.queues[tp]
        batch = queue.popleft()
        if not queue and not batch.attempts and self.on_batch_closed is not None:
            self.on_batch_closed(tp[0], tp[1])
        return batch

    def requeue(self, batches: list[ProducerBatch], retry_at: float) -> None:
        """Put failed batches back at the front of their queues, in sequence order."""
        for batch in sorted(batches, key=lambda b: b.base_sequence, reverse=True):
            batch.retry_at = retry_at
            self.queues.setdefault(batch.tp, deque()).appendleft(batch)
        self.wakeup.set()

    def expired(self, now: float) -> Iterator[ProducerBatch]:
        """Remove and yield queued batches past their delivery deadline."""
        for queue in self.queues.values():
            while queue and queue[0].deadline <= now:
                yield queue.popleft()

    def all_batches(self) -> Iterator[ProducerBatch]:
        for queue in self.queues.values():
            yield from queue

    def has_queued(self) -> bool:
        return any(self.queues.values())

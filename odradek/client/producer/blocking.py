"""Blocking, confluent-kafka-shaped ``Producer`` over the asyncio core.

How this works and why: the core runs on a background thread with its own event loop
(uvloop when installed), where the sender builds and sends the requests. ``produce``
does not wait for that loop: on the caller's thread it picks the partition and
encodes the record into its batch in the shared accumulator (under the accumulator's
lock), waking the loop only when a batch is new or full — a round trip to the loop
per record would cost more than everything else a record needs. It waits only for
``buffer.memory`` (at most ``max.block.ms``, then ``BufferError`` like
confluent-kafka). A record whose topic's metadata is not known yet goes to the loop
instead, which waits for the metadata (up to max.block.ms) and appends it; until
those records are in, later ones queue behind them, so order holds.

Delivery results come back once per finished batch through a thread-safe queue, and
user callbacks run in the caller's thread, inside ``poll`` or ``flush``, exactly like
librdkafka's delivery reports; a record without a callback costs nothing there but
a count. ``len(producer)`` counts records whose delivery report has not been served
yet.

Transactions (``transactional.id``): confluent-kafka's calls — ``init_transactions``,
``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction`` — run on the loop (transaction_manager.py) and raise
``KafkaException(KafkaError)`` with ``fatal()``/``txn_requires_abort()``/``retriable()``
as librdkafka classifies the error. A timeout (seconds; None or negative: no limit)
leaves the call running: it raises a retriable ``_TIMED_OUT`` and calling it again
goes on waiting. ``commit_transaction`` first flushes, serving delivery callbacks on
the caller's thread as librdkafka does.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core.config import ClientConfig
from odradek.client._core.connection import KafkaConnectionError
from odradek.client._core.errors import KafkaError, LocalError
from odradek.client._core.loop_thread import LoopThread, weak_callback
from odradek.client._core.sasl import is_authentication
from odradek.client._core.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaException,
    Message,
    as_bytes,
)
from odradek.client.admin.topics import blocking_list_topics
from odradek.client.admin.types import ClusterMetadata
from odradek.client.producer.accumulator import BufferFullError, ProducerBatch, record_size
from odradek.client.producer.core import AsyncProducer, HeadersLike, encode_headers
from odradek.client.producer.sender import MSG_TIMED_OUT
from odradek.client.producer.transactions import ConsumerGroupMetadata, OffsetsLike

T = TypeVar("T")
DeliveryCallback = Callable[[Exception | None, Message], None]


class Producer:
    """``Producer({"bootstrap.servers": ...})`` as in confluent-kafka."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self._config = ClientConfig({**config, **kwargs}, "producer")
        self._default_callback: DeliveryCallback | None = self._config["on_delivery"]
        self._max_block_s = self._config["max.block.ms"] / 1000
        self._max_messages: int | None = self._config["queue.buffering.max.messages"]
        self._max_record: int = self._config["max.request.size"]  # = message.max.bytes
        # Finished batches (and records that failed before reaching one), served by
        # poll/flush on the caller's thread.
        self._reports: queue.SimpleQueue[ProducerBatch | _FailedRecord | _Fatal | _ErrorEvent]
        self._reports = queue.SimpleQueue()
        self._produced = 0  # records accepted by produce(), under the accumulator lock
        self._served = 0  # records whose report poll() served, under _served_lock
        self._served_lock = threading.Lock()
        # Records waiting for metadata, appended in order by the loop (see produce).
        self._handoff: collections.deque[_HandedOff] = collections.deque()
        self._drain_scheduled = False
        self._handoff_purge = 0  # how many records at the head of _handoff purge() dropped
        self._wake_scheduled = False
        self._core = AsyncProducer(self._config, on_complete=self._reports.put)
        self._thread = LoopThread("odradek-producer")
        self._closed = False
        self._error_cb: Callable[[KafkaError], None] | None = self._config["error_cb"]
        self._message_timeout_s = self._config["delivery.timeout.ms"] / 1000
        try:
            self._thread.run(self._core.start(on_unreachable=weak_callback(self._unreachable)))
        except BaseException:
            self._thread.stop()
            raise
        assert self._core.accumulator is not None
        self._accumulator = self._core.accumulator
        if self._core.transactions is not None:
            self._core.transactions.on_fatal = lambda error: self._reports.put(_Fatal(error))

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: HeadersLike = None,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Queue one record; waits at most max.block.ms for buffer space, then
        BufferError. A key, value or header of the wrong type raises TypeError here;
        a partition the topic does not have, like every delivery error, goes to the
        callback."""
        if self._closed:
            raise RuntimeError("producer is closed")
        manager = self._core.transactions
        if manager is not None:
            try:
                manager.check_send()
            except KafkaError as error:
                raise KafkaException(error) from None
        report = on_delivery or callback or self._default_callback
        key_bytes = key if key is None or type(key) is bytes else as_bytes(key, "key")
        value_bytes = value if value is None or type(value) is bytes else as_bytes(value, "value")
        header_list = encode_headers(headers) if headers else _NO_HEADERS
        if not timestamp:
            timestamp = time.time_ns() // 1_000_000
        waiter = (
            None if report is None else (report, key_bytes, value_bytes, header_list, timestamp)
        )
        size = record_size(key_bytes, value_bytes, header_list)
        if size > self._max_record:  # as librdkafka refuses it in produce()
            raise KafkaException(
                KafkaError(
                    ErrorCode.message_too_large,
                    f"Unable to produce message: {size} bytes > message.max.bytes "
                    f"({self._max_record})",
                )
            )
        accumulator = self._accumulator
        deadline = time.monotonic() + self._max_block_s
        failure: Exception | None = None
        with accumulator.lock:
            if self._max_messages is not None and len(self) >= self._max_messages:
                raise BufferError(
                    f"Local: Queue full ({self._max_messages} records await their delivery "
                    "report: queue.buffering.max.messages)"
                )
            try:
                accumulator.reserve(size, deadline)
            except BufferFullError as error:
                raise BufferError(str(error)) from None
            self._produced += 1
            try:
                # Straight into the accumulator from this thread, unless records handed
                # to the loop (their topic's metadata was not known) are still waiting:
                # they go first, so this one queues behind them.
                chosen = (
                    None if self._handoff else self._core.partition_for(topic, key_bytes, partition)
                )
            except Exception as error:  # no such partition, a custom partitioner's failure
                accumulator.used -= size
                accumulator.space.notify_all()
                failure = error
            else:
                if chosen is not None:
                    wake = accumulator.add(
                        topic, chosen, key_bytes, value_bytes, timestamp, header_list, waiter, size
                    )
                else:
                    self._handoff.append(
                        (
                            topic,
                            key_bytes,
                            value_bytes,
                            partition,
                            timestamp,
                            header_list,
                            waiter,
                            size,
                            time.monotonic() + self._message_timeout_s,
                        )
                    )
                    drain = not self._drain_scheduled
                    self._drain_scheduled = True
        if failure is not None:
            # reported like a failed delivery, as before this record reached a batch
            self._reports.put(
                _FailedRecord(
                    topic,
                    partition,
                    key_bytes,
                    value_bytes,
                    header_list,
                    timestamp,
                    failure,
                    waiter,
                )
            )
        elif chosen is None:
            if drain:
                self._thread.loop.call_soon_threadsafe(self._start_drain)
        elif wake and not self._wake_scheduled:
            # One wake-up of the sender per new batch, not per record.
            self._wake_scheduled = True
            self._thread.loop.call_soon_threadsafe(self._wake_sender)

    def _unreachable(self, error: BaseException) -> None:
        """On the loop: no broker answered at start; error_cb hears it from poll()."""
        servers = self._config["bootstrap.servers"]
        code = LocalError.authentication if is_authentication(error) else LocalError.transport
        self._reports.put(_ErrorEvent(KafkaError(code, f"{servers}: {error or 'timed out'}")))

    def _wake_sender(self) -> None:
        self._wake_scheduled = False
        self._accumulator.wakeup.set()

    def _start_drain(self) -> None:
        self._thread.loop.create_task(self._drain())

    async def _drain(self) -> None:
        """On the loop: wait for the metadata of handed-over records and append them,
        in order; the records stay in ``_handoff`` until appended (see produce)."""
        accumulator = self._accumulator
        while True:
            with accumulator.lock:
                if not self._handoff:
                    self._drain_scheduled = False
                    return
                topic, key, value, partition, timestamp, headers, waiter, size, due = self._handoff[
                    0
                ]
            try:
                # as librdkafka: a record waits for its topic up to message.timeout.ms
                try:
                    await self._core.wait_metadata(topic, max(0.0, due - time.monotonic()))
                except (TimeoutError, KafkaConnectionError) as error:
                    raise KafkaError(
                        LocalError.msg_timed_out, f"{MSG_TIMED_OUT}: no metadata for {topic}"
                    ) from error
                with accumulator.lock:
                    purged = self._handoff_purge > 0
                    if purged:
                        self._handoff_purge -= 1
                if purged:
                    raise KafkaError(LocalError.purge_queue, "Local: Purged in queue")
                await self._core.append_record(
                    topic, key, value, partition, timestamp, headers, waiter, reserved=size
                )
            except BaseException as error:
                with accumulator.lock:
                    accumulator.used -= size
                    accumulator.space.notify_all()
                failure = error if isinstance(error, Exception) else RuntimeError(repr(error))
                self._reports.put(
                    _FailedRecord(topic, partition, key, value, headers, timestamp, failure, waiter)
                )
                if not isinstance(error, Exception):
                    raise
            finally:
                with accumulator.lock:
                    self._handoff.popleft()

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery callbacks; waits up to ``timeout`` s for the first report.

        Returns the number of records whose delivery was reported. Once after the
        transactional producer failed fatally, raises that error (as confluent-kafka).
        """
        served = 0
        wait = timeout is None or timeout > 0
        while True:
            try:
                if served == 0 and wait:
                    report = self._reports.get(timeout=timeout)
                else:
                    report = self._reports.get_nowait()
            except queue.Empty:
                return served
            if isinstance(report, _Fatal):
                raise KafkaException(report.error)
            if isinstance(report, _ErrorEvent):
                if self._error_cb is not None:
                    self._error_cb(report.error)
                wait = False
                continue
            with self._served_lock:
                self._served += report.count
            served += report.count
            if isinstance(report, _FailedRecord):
                report.serve()
            elif report.waiters:
                _serve_batch(report)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything, serve the callbacks; the number of records still queued."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        loop = self._thread.loop
        loop.call_soon_threadsafe(self._begin_flush)
        try:
            while len(self) > 0:
                remaining = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
                if remaining <= 0:
                    break
                self.poll(remaining)
        finally:
            # wait for lingering to resume: a record produced right after flush()
            # returns waits for linger.ms again, and purge() still finds it queued
            ended = threading.Event()

            def end_flush() -> None:
                self._end_flush()
                ended.set()

            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(end_flush)
                if loop.is_running():
                    ended.wait(5.0)
        self.poll(0)
        return len(self)

    def _begin_flush(self) -> None:
        """On the loop: no lingering until ``_end_flush``."""
        self._accumulator.flushing += 1
        self._accumulator.wakeup.set()

    def _end_flush(self) -> None:
        self._accumulator.flushing -= 1

    def __len__(self) -> int:
        """Records produced whose delivery report has not been served yet."""
        return self._produced - self._served

    # -- transactions ------------------------------------------------------------------
    def _transactional(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            return self._thread.run(coroutine)
        except KafkaError as error:
            raise KafkaException(error) from None

    def init_transactions(self, timeout: float | None = -1) -> None:
        """Get the producer id and epoch from the transaction coordinator, fencing any
        older instance with the same transactional.id (whose open transaction the
        coordinator aborts)."""
        self._transactional(self._core.init_transactions(_seconds(timeout)))

    def begin_transaction(self) -> None:
        async def begin() -> None:
            self._core.begin_transaction()

        self._transactional(begin())

    def send_offsets_to_transaction(
        self,
        positions: OffsetsLike,
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = -1,
    ) -> None:
        """Commit the consumer's ``positions`` (TopicPartitions, offset = the next
        record to consume) with the transaction; ``group_metadata`` from
        ``Consumer.consumer_group_metadata()``."""
        self._transactional(
            self._core.send_offsets_to_transaction(positions, group_metadata, _seconds(timeout))
        )

    def commit_transaction(self, timeout: float | None = -1) -> None:
        """Flush (serving delivery callbacks), wait for every record's acknowledgement,
        then commit. A failed record makes the error abortable (txn_requires_abort)."""
        limit = _seconds(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        manager = self._core.transactions
        if manager is not None and manager.txn.in_transaction:
            self.flush(limit)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self._transactional(self._core.commit_transaction(left))

    def abort_transaction(self, timeout: float | None = -1) -> None:
        """Drop records not yet sent (reported with _PURGE_QUEUE), wait for those in
        flight, abort."""
        self._transactional(self._core.abort_transaction(_seconds(timeout)))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """confluent-kafka's ClusterMetadata: every topic, or ``topic`` (with its error
        when it does not exist); brokers, partitions with leader, replicas and isrs.
        Past ``timeout`` seconds (None or negative: no limit) KafkaException(_TIMED_OUT)."""
        assert self._core.cluster is not None
        return blocking_list_topics(self._thread, self._core.cluster, topic, timeout)

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        callback: DeliveryCallback | None = None,
    ) -> int:
        """confluent-kafka's ``produce_batch``: each message a dict with ``value``,
        ``key``, ``partition``, ``timestamp``, ``headers`` and ``callback`` (or
        ``on_delivery``), all optional; the number of messages queued. A message that
        cannot be queued (a full queue, a bad key) gets an ``_error`` entry, as in
        confluent-kafka, and is not counted."""
        if not isinstance(messages, list):
            raise TypeError("messages must be a list of dicts")
        default = on_delivery or callback
        queued = 0
        for message in messages:
            if not isinstance(message, dict):
                raise TypeError("each message must be a dict")
            try:
                self.produce(
                    topic,
                    message.get("value"),
                    message.get("key"),
                    message.get("partition", partition),
                    message.get("callback") or message.get("on_delivery") or default,
                    message.get("timestamp", 0),
                    message.get("headers"),
                )
            except (BufferError, TypeError, KafkaException) as error:
                message["_error"] = error
            else:
                queued += 1
        return queued

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """confluent-kafka's ``purge``: with ``in_queue``, records not sent yet fail with
        ``_PURGE_QUEUE`` (their callbacks run from the next poll/flush). Not purged, and
        reported with their real outcome: batches already sent once (in flight, or
        waiting to be retried — dropping them would break the idempotent producer's
        sequence). Records waiting for their topic's metadata are purged too. ``in_flight``
        and ``blocking`` are accepted for that reason and change nothing."""
        if self._closed:
            raise RuntimeError("producer is closed")
        if not in_queue:
            return
        accumulator = self._accumulator
        purged = KafkaError(LocalError.purge_queue, "Local: Purged in queue")

        async def purge_queued() -> None:
            taken = []
            with accumulator.lock:
                # records waiting for their topic's metadata: failed by _drain, in order
                self._handoff_purge = len(self._handoff)
                for batches in accumulator.queues.values():
                    unsent = [b for b in batches if b.base_sequence < 0 and b.attempts == 0]
                    if unsent:
                        kept = [b for b in batches if b not in unsent]
                        batches.clear()
                        batches.extend(kept)
                        taken.extend(unsent)
            for batch in taken:
                accumulator.complete(batch, error=purged)

        self._thread.run(purge_queued())

    def close(self, timeout: float | None = None) -> int:
        """Flush (up to ``timeout``), stop the background loop; records left undelivered."""
        if self._closed:
            return len(self)
        try:
            left = self.flush(timeout)
        except KafkaException:  # the fatal error, already raised by the calls
            left = self.flush(timeout)
        self._closed = True
        with contextlib.suppress(Exception):
            self._thread.run(self._core.close(0 if left else None), 30)
        self._thread.stop()
        with contextlib.suppress(KafkaException):
            self.poll(0)
        return left

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed:
                self._closed = True
                self._thread.stop()


def _seconds(timeout: float | None) -> float | None:
    """confluent's timeouts: seconds, -1 (or None) for no limit."""
    return None if timeout is None or timeout < 0 else float(timeout)


_NO_HEADERS: list[tuple[str, bytes | None]] = []  # shared, never mutated
# what produce() hands to the loop when the topic's metadata is not known yet
_HandedOff = tuple[
    str, bytes | None, bytes | None, int, int, list[tuple[str, bytes | None]], Any, int, float
]
# errors delivery callbacks get as the KafkaError itself, as confluent-kafka passes them
_PLAIN_ERRORS = frozenset({LocalError.purge_queue, LocalError.msg_timed_out})


def _serve_batch(batch: ProducerBatch) -> None:
    """Run the delivery callbacks of a finished batch (each waiter: callback, key,
    value, headers, timestamp), as confluent-kafka does in poll()."""
    error = batch.error
    if error is not None and not isinstance(error, Exception):
        error = RuntimeError(repr(error))
    base = batch.base_offset
    append_time = batch.log_append_time
    for index, (callback, key, value, headers, timestamp) in batch.waiters:
        if error is not None:
            offset, stamp = -1001, (TIMESTAMP_CREATE_TIME, timestamp)
        else:
            offset = base + index if base >= 0 else -1
            stamp = (
                (TIMESTAMP_CREATE_TIME, timestamp)
                if append_time is None
                else (TIMESTAMP_LOG_APPEND_TIME, append_time)
            )
        message = Message(batch.topic, batch.partition, offset, key, value, headers, stamp, error)
        callback(error, message)


class _ErrorEvent:
    """A client-level error (no broker reachable) for error_cb, served by poll()."""

    __slots__ = ("error",)
    count = 0

    def __init__(self, error: KafkaError) -> None:
        self.error = error


class _Fatal:
    """The transactional producer failed fatally: poll() raises it, once."""

    __slots__ = ("error",)
    count = 0

    def __init__(self, error: KafkaError) -> None:
        self.error = error


class _FailedRecord:
    """A record that failed before it reached a batch (its topic's metadata, say)."""

    __slots__ = ("error", "headers", "key", "partition", "timestamp", "topic", "value", "waiter")
    count = 1

    def __init__(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
        timestamp: int,
        error: Exception,
        waiter: Any,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self.error = error
        self.waiter = waiter

    def serve(self) -> None:
        if self.waiter is None:
            return
        error = self.error
        if isinstance(error, BufferFullError):
            error = BufferError(str(error))
        elif isinstance(error, KafkaError) and error.code() not in _PLAIN_ERRORS:
            error = KafkaException(error)
        message = Message(
            self.topic,
            self.partition,
            -1001,
            self.key,
            self.value,
            self.headers,
            (TIMESTAMP_CREATE_TIME, self.timestamp),
            error,
        )
        self.waiter[0](error, message)

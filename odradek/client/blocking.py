"""Blocking, confluent-kafka-shaped ``Producer`` over the asyncio core.

How this works and why: the core runs on a background thread with its own event loop
(uvloop when installed). ``produce`` hands each record to that loop and waits only
until it is queued (at most ``max.block.ms`` when ``buffer.memory`` is full, then
``BufferError`` like confluent-kafka). Delivery results come back through a
thread-safe queue and user callbacks run in the caller's thread, inside ``poll`` or
``flush``, exactly like librdkafka's delivery reports. ``len(producer)`` counts
records whose delivery report has not been served yet.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from odradek.client.accumulator import BufferFullError
from odradek.client.cluster import KafkaError
from odradek.client.config import ClientConfig
from odradek.client.producer import AsyncProducer, HeadersLike
from odradek.client.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaException,
    Message,
    RecordMetadata,
)

T = TypeVar("T")
DeliveryCallback = Callable[[Exception | None, Message], None]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class LoopThread:
    """An event loop running on a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
        if not self.loop.is_running():
            self.loop.close()


class Producer:
    """``Producer({"bootstrap.servers": ...})`` as in confluent-kafka."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self._config = ClientConfig({**config, **kwargs}, "producer")
        self._default_callback: DeliveryCallback | None = self._config["on_delivery"]
        self._reports: queue.SimpleQueue[tuple[DeliveryCallback | None, Message]] = (
            queue.SimpleQueue()
        )
        self._outstanding = 0
        self._lock = threading.Lock()
        # produce() hands records to the loop thread through this deque.
        self._handoff: collections.deque[tuple[Any, ...]] = collections.deque()
        self._handoff_bytes = 0
        self._handoff_limit = self._config["buffer.memory"]
        self._handoff_space = threading.Condition(self._lock)
        self._drain_scheduled = False
        self._core = AsyncProducer(self._config)
        self._thread = LoopThread("odradek-producer")
        self._closed = False
        try:
            self._thread.run(self._core.start())
        except BaseException:
            self._thread.stop()
            raise

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
        if self._closed:
            raise RuntimeError("producer is closed")
        report = on_delivery or callback or self._default_callback
        size = _size(key) + _size(value)
        with self._handoff_space:
            # Backpressure: records wait here while the loop cannot take them (its
            # accumulator is full), at most max.block.ms, then BufferError as in
            # confluent-kafka.
            deadline = time.monotonic() + self._config["max.block.ms"] / 1000
            while self._buffered_bytes() + size > self._handoff_limit and (
                self._handoff or self._buffered_bytes()
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferError("local queue full: buffer.memory exceeded for max.block.ms")
                # Woken by the drain; the accumulator frees space silently, hence a
                # short timeout to look again.
                self._handoff_space.wait(min(remaining, 0.01))
            self._handoff.append((topic, value, key, partition, timestamp, headers, report, size))
            self._handoff_bytes += size
            self._outstanding += 1
            schedule = not self._drain_scheduled
            self._drain_scheduled = True
        if schedule:
            # One wake-up of the loop per burst of produce() calls, not per record.
            self._thread.loop.call_soon_threadsafe(self._start_drain)

    def _buffered_bytes(self) -> int:
        """Bytes waiting here plus those in the accumulator (read across threads: an int)."""
        accumulator = self._core.accumulator
        return self._handoff_bytes + (accumulator.used if accumulator is not None else 0)

    def _start_drain(self) -> None:
        self._thread.loop.create_task(self._drain())

    async def _drain(self) -> None:
        """On the loop: move handed-over records into the accumulator, in order."""
        while True:
            with self._handoff_space:
                if not self._handoff:
                    self._drain_scheduled = False
                    return
                item = self._handoff.popleft()
            topic, value, key, partition, timestamp, headers, report, size = item
            try:
                while True:
                    try:
                        await self._produce(
                            topic, value, key, partition, timestamp, headers, report
                        )
                        break
                    except BufferFullError:
                        # produce() already bounded the wait (max.block.ms): a record
                        # it accepted waits here for accumulator space, never fails.
                        continue
            except BaseException as error:
                failure = error if isinstance(error, Exception) else RuntimeError(repr(error))
                if isinstance(error, BufferFullError):
                    failure = BufferError(str(error))
                elif isinstance(error, KafkaError):
                    failure = KafkaException(error)
                self._reports.put(
                    (report, _failed_message(topic, partition, key, value, timestamp, failure))
                )
            finally:
                with self._handoff_space:
                    self._handoff_bytes -= size
                    self._handoff_space.notify_all()

    async def _produce(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int,
        timestamp: int,
        headers: HeadersLike,
        report: DeliveryCallback | None,
    ) -> None:
        future = await self._core.send(
            topic, value, key, partition if partition >= 0 else None, timestamp, headers
        )
        header_list = None
        if headers:
            items: Any = headers.items() if isinstance(headers, dict) else headers
            header_list = [(str(k), v.encode() if isinstance(v, str) else v) for k, v in items]
        key_bytes = key.encode() if isinstance(key, str) else key
        value_bytes = value.encode() if isinstance(value, str) else value

        def done(result: asyncio.Future[RecordMetadata]) -> None:
            error = result.exception()
            if error is None:
                meta = result.result()
                kind = TIMESTAMP_LOG_APPEND_TIME if meta.timestamp_type else TIMESTAMP_CREATE_TIME
                message = Message(
                    topic,
                    meta.partition,
                    meta.offset,
                    key_bytes,
                    value_bytes,
                    header_list,
                    (kind, meta.timestamp),
                )
            else:
                message = Message(
                    topic,
                    partition,
                    -1001,
                    key_bytes,
                    value_bytes,
                    header_list,
                    (TIMESTAMP_CREATE_TIME, timestamp),
                    error if isinstance(error, Exception) else RuntimeError(repr(error)),
                )
            self._reports.put((report, message))

        future.add_done_callback(done)

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery callbacks; waits up to ``timeout`` s for the first one."""
        served = 0
        wait = timeout is None or timeout > 0
        while True:
            try:
                if served == 0 and wait:
                    report, message = self._reports.get(timeout=timeout)
                else:
                    report, message = self._reports.get_nowait()
            except queue.Empty:
                return served
            with self._lock:
                self._outstanding -= 1
            served += 1
            if report is not None:
                report(message.error(), message)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything, serve the callbacks; the number of records still queued."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        future = asyncio.run_coroutine_threadsafe(self._flush_all(timeout), self._thread.loop)
        while len(self) > 0:
            remaining = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if remaining <= 0:
                break
            self.poll(remaining)
        self.poll(0)
        with contextlib.suppress(Exception):
            future.cancel()
        return len(self)

    async def _flush_all(self, timeout: float | None) -> bool:
        """On the loop: wait until every handed-over record is in the accumulator, then flush.

        Flushing starts first, so lingering batches go out and free the space the
        drain may be waiting for.
        """
        accumulator = self._core.accumulator
        assert accumulator is not None
        accumulator.flushing += 1
        accumulator.wakeup.set()
        try:
            while True:
                with self._handoff_space:
                    if not self._drain_scheduled:
                        break
                await asyncio.sleep(0.001)
            return await self._core.flush(timeout)
        finally:
            accumulator.flushing -= 1

    def __len__(self) -> int:
        with self._lock:
            return self._outstanding

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        assert self._core.cluster is not None
        return self._thread.run(self._core.cluster.refresh([topic] if topic else None))

    def close(self, timeout: float | None = None) -> int:
        """Flush (up to ``timeout``), stop the background loop; records left undelivered."""
        if self._closed:
            return len(self)
        left = self.flush(timeout)
        self._closed = True
        with contextlib.suppress(Exception):
            self._thread.run(self._core.close(0 if left else None), 30)
        self._thread.stop()
        self.poll(0)
        return left

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed:
                self._closed = True
                self._thread.stop()


def _size(data: Any) -> int:
    return len(data) if isinstance(data, (bytes, bytearray, memoryview, str)) else 0


def _failed_message(
    topic: str, partition: int, key: Any, value: Any, timestamp: int, error: Exception
) -> Message:
    key_bytes = key.encode() if isinstance(key, str) else key
    value_bytes = value.encode() if isinstance(value, str) else value
    return Message(
        topic,
        partition,
        -1001,
        key_bytes,
        value_bytes,
        None,
        (TIMESTAMP_CREATE_TIME, timestamp),
        error,
    )

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
        with self._lock:
            self._outstanding += 1
        try:
            self._thread.run(
                self._produce(topic, value, key, partition, timestamp, headers, report)
            )
        except BaseException as error:
            with self._lock:
                self._outstanding -= 1
            if isinstance(error, BufferFullError):
                raise BufferError(str(error)) from None
            if isinstance(error, KafkaError):
                raise KafkaException(error) from None
            raise

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
        future = asyncio.run_coroutine_threadsafe(self._core.flush(timeout), self._thread.loop)
        while len(self) > 0:
            remaining = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if remaining <= 0:
                break
            self.poll(remaining)
        self.poll(0)
        with contextlib.suppress(Exception):
            future.cancel()
        return len(self)

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

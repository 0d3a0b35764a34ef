"""Blocking consumer shaped like confluent-kafka's ``Consumer``.

How this works and why: the asyncio core (``ConsumerCore`` + ``GroupMember``) runs on
a background event-loop thread, so heartbeats, fetches and auto-commits go on while
the application is busy between polls. Rebalance callbacks are the exception: like
confluent-kafka they run on the application's thread, inside ``poll``/``consume``/
``close`` — the group task hands each callback to a queue and waits until the
calling thread has run it, so a callback may call ``assign``, ``commit``, ``seek``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from odradek.client.blocking import LoopThread
from odradek.client.cluster import KafkaError
from odradek.client.config import ClientConfig
from odradek.client.connection import KafkaConnectionError
from odradek.client.consumer import EARLIEST, LATEST, TP, ConsumerCore, ConsumerRecord
from odradek.client.consumer_group import GroupMember
from odradek.client.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaException,
    Message,
    TopicPartition,
)

T = TypeVar("T")
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001
UserCallback = Callable[["Consumer", list[TopicPartition]], None] | None


def to_message(record: ConsumerRecord) -> Message:
    ts_type = TIMESTAMP_LOG_APPEND_TIME if record.timestamp_type else TIMESTAMP_CREATE_TIME
    return Message(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        list(record.headers) or None,
        (ts_type, record.timestamp),
    )


def _tps(partitions: Iterable[TP]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in partitions]


class Consumer:
    """``Consumer({"bootstrap.servers": ..., "group.id": ...})`` like confluent-kafka."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self.config = ClientConfig({**config, **kwargs}, "consumer")
        self._thread = LoopThread("odradek-consumer")
        self._callbacks: queue.SimpleQueue[
            tuple[Callable[[], None], concurrent.futures.Future[None]]
        ]
        self._callbacks = queue.SimpleQueue()
        self._closed = False

        async def build() -> tuple[ConsumerCore, GroupMember | None]:
            core = ConsumerCore(self.config)
            return core, GroupMember(core) if core.group_id else None

        self._core, self._member = self._thread.run(build())

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
            try:
                call()
                done.set_result(None)
            except Exception as error:  # surfaces in the group task's log
                done.set_exception(error)

    def _wrap(self, callback: UserCallback) -> Any:
        if callback is None:
            return None

        async def on_loop(partitions: list[TP]) -> None:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._callbacks.put((lambda: callback(self, _tps(partitions)), done))
            await asyncio.wrap_future(done)

        return on_loop

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
        if self._member is not None:
            member = self._member

            async def go() -> None:
                member.topics, member.patterns = [], []
                member.rejoin()

            self._run(go())

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._run(self._assign(partitions))

    async def _assign(self, partitions: list[TopicPartition]) -> None:
        core = self._core
        await core.assign([(tp.topic, tp.partition) for tp in partitions])
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if tp.offset >= 0:
                core.seek(key, tp.offset)
            elif tp.offset == OFFSET_BEGINNING:
                core.seek_to_beginning([key])
            elif tp.offset == OFFSET_END:
                core.seek_to_end([key])

    def unassign(self) -> None:
        self._run(self._core.assign([]))

    def assignment(self) -> list[TopicPartition]:
        return _tps(self._core.assignment())

    # -- records -----------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> Message | None:
        records = self.consume(1, timeout)
        return records[0] if records else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        wait = 1e9 if timeout is None or timeout < 0 else timeout
        records = self._run(self._core.getmany(num_messages, wait))
        self._serve_callbacks()
        if self._member is not None and self._member.error is not None:
            error, self._member.error = self._member.error, None
            raise KafkaException(error)
        return [to_message(r) for r in records]

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
        async def go() -> list[TopicPartition]:
            out = []
            for tp in partitions:
                state = self._core._parts.get((tp.topic, tp.partition))
                position = state.position if state is not None else None
                out.append(
                    TopicPartition(
                        tp.topic, tp.partition, OFFSET_INVALID if position is None else position
                    )
                )
            return out

        return self._run(go())

    def pause(self, partitions: list[TopicPartition]) -> None:
        async def go() -> None:
            self._core.pause([(tp.topic, tp.partition) for tp in partitions])

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
        coroutine = self._core.commit(wanted)
        if asynchronous:
            future = asyncio.run_coroutine_threadsafe(coroutine, self._thread.loop)
            future.add_done_callback(lambda f: f.exception())  # never unretrieved
            return None
        done = self._run(coroutine)
        return [TopicPartition(t, p, o) for (t, p), o in done.items()]

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
            self._thread.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Asyncio consumer shaped like aiokafka's ``AIOKafkaConsumer``.

How this works and why: a thin face over ``ConsumerCore`` (fetching, offsets) and
``GroupMember`` (subscribe); keyword arguments map to Kafka property names so the
same validation as the blocking face applies. A rebalance listener's
``on_partitions_revoked`` / ``on_partitions_assigned`` (and ``on_partitions_lost``,
which falls back to ``on_partitions_revoked``) may be sync or async; as with Java's
listener, revoked partitions are still assigned while it runs and assigned ones
already are. With ``partition_assignment_strategy=("cooperative-sticky",)`` they get
only the partitions that move (KIP-429), and the others are consumed throughout.

As in aiokafka, going longer than ``max_poll_interval_ms`` without ``getone`` /
``getmany`` makes the consumer leave the group (its partitions are lost:
``on_partitions_lost``), and the next call rejoins; nothing is raised.
``unsubscribe`` revokes and leaves the group (a static member only stops
heartbeating, as in aiokafka).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

from odradek.client._core.config import ClientConfig
from odradek.client._core.types import TopicPartition
from odradek.client.consumer.core import EARLIEST, LATEST, TP, ConsumerCore, ConsumerRecord
from odradek.client.consumer.group import GroupMember

_KEYWORDS = {
    "bootstrap_servers": "bootstrap.servers",
    "client_id": "client.id",
    "group_id": "group.id",
    "group_instance_id": "group.instance.id",
    "auto_offset_reset": "auto.offset.reset",
    "enable_auto_commit": "enable.auto.commit",
    "auto_commit_interval_ms": "auto.commit.interval.ms",
    "session_timeout_ms": "session.timeout.ms",
    "heartbeat_interval_ms": "heartbeat.interval.ms",
    "max_poll_interval_ms": "max.poll.interval.ms",
    "fetch_min_bytes": "fetch.min.bytes",
    "fetch_max_bytes": "fetch.max.bytes",
    "fetch_max_wait_ms": "fetch.max.wait.ms",
    "max_partition_fetch_bytes": "max.partition.fetch.bytes",
    "isolation_level": "isolation.level",
    "request_timeout_ms": "request.timeout.ms",
    "retry_backoff_ms": "retry.backoff.ms",
    "metadata_max_age_ms": "metadata.max.age.ms",
    "check_crcs": "check.crcs",
}


def _key(tp: Any) -> TP:
    return (tp[0], tp[1])


class AIOKafkaConsumer:
    def __init__(
        self,
        *topics: str,
        max_poll_records: int | None = None,
        partition_assignment_strategy: Any = ("range",),
        **kwargs: Any,
    ) -> None:
        props: dict[str, Any] = {}
        for name, value in kwargs.items():
            if name not in _KEYWORDS:
                raise TypeError(f"unknown argument {name!r}")
            if value is not None:
                props[_KEYWORDS[name]] = ",".join(value) if isinstance(value, list) else value
        props.setdefault("bootstrap.servers", "localhost:9092")
        props["partition.assignment.strategy"] = ",".join(
            getattr(s, "name", s) for s in partition_assignment_strategy
        )
        self.config = ClientConfig(props, "consumer")
        self.max_poll_records = max_poll_records or 500
        self._topics = list(topics)
        self._core: ConsumerCore | None = None
        self._member: GroupMember | None = None

    @property
    def core(self) -> ConsumerCore:
        if self._core is None:
            raise RuntimeError("call start() first")
        return self._core

    async def start(self) -> None:
        self._core = ConsumerCore(self.config)
        if self._core.group_id:
            self._member = GroupMember(self._core)
        await self._core.cluster.with_retry(lambda: self.core.cluster.refresh())
        if self._topics:
            self.subscribe(self._topics)

    async def stop(self) -> None:
        if self._core is None:
            return
        if self._member is not None:
            await self._member.close()
        elif self.config["enable.auto.commit"] and self._core.group_id:
            await self._core.commit()
        await self._core.close()

    async def __aenter__(self) -> AIOKafkaConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- subscription ----------------------------------------------------------------
    def subscribe(self, topics: Any = (), pattern: str | None = None, listener: Any = None) -> None:
        if self._member is None:
            raise ValueError("subscribe needs group_id")
        names = list(topics) + (
            [pattern if pattern.startswith("^") else "^" + pattern] if pattern else []
        )

        def adapt(method: str) -> Any:
            callback = getattr(listener, method, None)
            if callback is None:
                return None

            async def call(partitions: list[TP]) -> None:
                result = callback({TopicPartition(t, p) for t, p in partitions})
                if inspect.isawaitable(result):
                    await result

            return call

        self._member.subscribe(
            names,
            adapt("on_partitions_assigned"),
            adapt("on_partitions_revoked"),
            adapt("on_partitions_lost"),
            assign_first=True,
        )

    def subscription(self) -> set[str]:
        return set(self._member.subscribed_topics) if self._member else set()

    def unsubscribe(self) -> None:
        if self._member is not None:
            self._member.unsubscribe(leave_static=False)

    def assign(self, partitions: Any) -> Any:
        return self.core.assign([_key(tp) for tp in partitions])

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, p in self.core.assignment()}

    # -- records -----------------------------------------------------------------------
    def _raise_group_error(self) -> None:
        """A group error (no common assignor, ...) or a listener's exception."""
        if self._member is not None and self._member.error is not None:
            error, self._member.error = self._member.error, None
            raise error

    @contextlib.contextmanager
    def _polling(self) -> Iterator[None]:
        """max.poll.interval.ms is timed from one getone/getmany to the next."""
        member = self._member
        if member is None:
            yield
            return
        member.poll_begin()  # aiokafka raises nothing for an expired interval
        try:
            yield
        finally:
            member.poll_end()

    async def getone(self, *partitions: Any) -> ConsumerRecord:
        with self._polling():
            while True:
                self._raise_group_error()
                records = await self.core.getmany(1, 1.0)
                if records:
                    return records[0]

    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        self._raise_group_error()
        with self._polling():
            wait_s = timeout_ms / 1000
            records = await self.core.getmany(max_records or self.max_poll_records, wait_s)
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in records:
            out.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        return out

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self.core.closed:
            yield await self.getone()

    # -- positions and offsets ---------------------------------------------------------
    def seek(self, partition: Any, offset: int) -> None:
        self.core.seek(_key(partition), offset)

    async def seek_to_beginning(self, *partitions: Any) -> None:
        self.core.seek_to_beginning([_key(p) for p in partitions] or None)

    async def seek_to_end(self, *partitions: Any) -> None:
        self.core.seek_to_end([_key(p) for p in partitions] or None)

    async def position(self, partition: Any) -> int:
        return await self.core.position(_key(partition))

    def pause(self, *partitions: Any) -> None:
        self.core.pause([_key(p) for p in partitions])

    def resume(self, *partitions: Any) -> None:
        self.core.resume([_key(p) for p in partitions])

    def highwater(self, partition: Any) -> int:
        return self.core.highwater(_key(partition))

    async def committed(self, partition: Any) -> int | None:
        offset = (await self.core.committed([_key(partition)]))[_key(partition)][0]
        return offset if offset >= 0 else None

    async def commit(self, offsets: dict[Any, Any] | None = None) -> None:
        wanted = None
        if offsets is not None:
            wanted = {_key(tp): (o if isinstance(o, int) else o[0]) for tp, o in offsets.items()}
        await self.core.commit(wanted)

    async def beginning_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        found = await self.core.list_offsets({_key(p): EARLIEST for p in partitions})
        return {TopicPartition(t, p): o for (t, p), (o, _ts) in found.items()}

    async def end_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        found = await self.core.list_offsets({_key(p): LATEST for p in partitions})
        return {TopicPartition(t, p): o for (t, p), (o, _ts) in found.items()}

    async def offsets_for_times(self, timestamps: dict[Any, int]) -> dict[TopicPartition, Any]:
        found = await self.core.offsets_for_times({_key(tp): ts for tp, ts in timestamps.items()})
        return {TopicPartition(t, p): v for (t, p), v in found.items()}

    async def topics(self) -> set[str]:
        metadata = await self.core.cluster.refresh(None)
        return set(metadata.topics)

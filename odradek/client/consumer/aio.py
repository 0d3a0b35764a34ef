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

What it hands out and raises is aiokafka's (``aio_types``, ``aio_errors``): records
are ``ConsumerRecord``s built straight from the fetched columns, through
``key_deserializer``/``value_deserializer`` when given (called on None too, as
aiokafka calls them); partitions come back as ``(topic, partition)`` pairs and any
object with ``topic`` and ``partition`` is taken. ``assign`` takes effect at once,
as aiokafka's (not awaited there): the leaders are looked up in the background, and
the next call that needs them waits for that.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from odradek.client._core.aio_errors import (
    CommitFailedError,
    ConsumerStoppedError,
    IllegalOperation,
    IllegalStateError,
    aio_boundary,
    sync_boundary,
)
from odradek.client._core.aio_types import (
    ConsumerRecord,
    OffsetAndTimestamp,
    TopicPartition,
    as_pair,
)
from odradek.client._core.config import ClientConfig
from odradek.client.consumer import offsets as offsets_module
from odradek.client.consumer.core import EARLIEST, LATEST, TP, ConsumerCore
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
    "security_protocol": "security.protocol",
    "ssl_context": "ssl.context",
    # SASL (client/_core/sasl.py): aiokafka's names for PLAIN's and SCRAM's user
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "sasl_oauth_token_provider": "sasl.oauth.token.provider",  # OAUTHBEARER
}
# aiokafka arguments without effect here: ``loop`` and ``api_version`` (aiokafka
# ignores them too), the iterator's ``consumer_timeout_ms``, idle connections (kept
# open until stop()), internal topics (never matched by a pattern here either).
_IGNORED = frozenset(
    {
        "loop",
        "api_version",
        "consumer_timeout_ms",
        "connections_max_idle_ms",
        "exclude_internal_topics",
    }
)
Deserializer = Callable[[bytes | None], Any]


def _key(tp: Any) -> TP:
    return as_pair(tp)


class AIOKafkaConsumer:
    def __init__(
        self,
        *topics: str,
        max_poll_records: int | None = None,
        partition_assignment_strategy: Any = ("roundrobin",),  # aiokafka's default
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        **kwargs: Any,
    ) -> None:
        props: dict[str, Any] = {}
        for name, value in kwargs.items():
            if name in _IGNORED:
                continue
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
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._core: ConsumerCore | None = None
        self._member: GroupMember | None = None
        self._assigning: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def core(self) -> ConsumerCore:
        if self._core is None:
            raise RuntimeError("call start() first")
        return self._core

    @aio_boundary
    async def start(self) -> None:
        self._core = ConsumerCore(self.config)
        self._core.record_type = ConsumerRecord
        if self._core.group_id:
            self._member = GroupMember(self._core)
        await self._core.cluster.refresh()  # one round of the bootstrap servers, as aiokafka
        if self._topics:
            self.subscribe(self._topics)

    async def stop(self) -> None:
        if self._core is None or self._stopped:
            return
        self._stopped = True
        if self._assigning is not None:
            self._assigning.cancel()
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
        if isinstance(topics, str):
            raise TypeError("topics should be a list of topic names, not a string")
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

    def assign(self, partitions: Any) -> asyncio.Task[None]:
        """Assign ``partitions`` now; the returned task (awaiting it is optional, as
        aiokafka's ``assign`` is not awaited) ends once their leaders are known."""
        topics = self.core.set_assignment([_key(tp) for tp in partitions])
        if self._assigning is not None:
            self._assigning.cancel()
        self._assigning = asyncio.ensure_future(self.core.start_fetching(topics))
        return self._assigning

    async def _assigned(self) -> None:
        """Wait for a background ``assign`` to have found the leaders (its error is
        raised here, once)."""
        task = self._assigning
        if task is not None:
            try:
                await asyncio.shield(task)
            finally:
                if task.done():
                    self._assigning = None

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, p in self.core.assignment()}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition ids of ``topic`` if its metadata is known here, else None."""
        info = self.core.cluster.metadata.topics.get(topic)
        return None if info is None else set(info.partitions)

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

    def _check_running(self) -> ConsumerCore:
        if self._stopped:
            raise ConsumerStoppedError()
        return self.core

    def _deserialized(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        keys, values = self._key_deserializer, self._value_deserializer
        if keys is None and values is None:
            return records
        return [ConsumerRecord.deserialized(r, keys, values) for r in records]

    @aio_boundary
    async def getone(self, *partitions: Any) -> ConsumerRecord:
        """The next record (of ``partitions`` when given)."""
        core = self._check_running()
        await self._assigned()
        only = {_key(p) for p in partitions} or None
        with self._polling():
            while True:
                self._raise_group_error()
                records = await core.getmany(1, 1.0, only=only)
                if records:
                    return self._deserialized(records)[0]
                self._check_running()

    @aio_boundary
    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` records (of ``partitions`` when given), waiting up to
        ``timeout_ms`` for the first."""
        core = self._check_running()
        self._raise_group_error()
        await self._assigned()
        only = {_key(p) for p in partitions} or None
        with self._polling():
            wait_s = timeout_ms / 1000
            records = await core.getmany(max_records or self.max_poll_records, wait_s, only=only)
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in self._deserialized(records):
            out.setdefault(TopicPartition(record[0], record[1]), []).append(record)
        return out

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._stopped:
            try:
                yield await self.getone()
            except ConsumerStoppedError:
                return

    # -- positions and offsets ---------------------------------------------------------
    def _assigned_key(self, partition: Any) -> TP:
        """(topic, partition) of an assigned partition, else aiokafka's
        IllegalStateError."""
        key = _key(partition)
        if key not in self.core.assignment():
            raise IllegalStateError(f"Partition {TopicPartition(*key)} is not assigned")
        return key

    @sync_boundary
    def seek(self, partition: Any, offset: int) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("Offset must be a positive integer")
        self.core.seek(self._assigned_key(partition), offset)

    @aio_boundary
    async def seek_to_beginning(self, *partitions: Any) -> None:
        self.core.seek_to_beginning([self._assigned_key(p) for p in partitions] or None)

    @aio_boundary
    async def seek_to_end(self, *partitions: Any) -> None:
        self.core.seek_to_end([self._assigned_key(p) for p in partitions] or None)

    @aio_boundary
    async def seek_to_committed(self, *partitions: Any) -> dict[TopicPartition, int | None]:
        """Seek each partition (all assigned ones when none given) to its committed
        offset, where there is one; returns them."""
        keys = [self._assigned_key(p) for p in partitions] or self.core.assignment()
        found = {}
        for key in keys:
            offset = await self.committed(TopicPartition(*key))
            found[TopicPartition(*key)] = offset
            if offset:
                self.core.seek(key, offset)
        return found

    @aio_boundary
    async def position(self, partition: Any) -> int:
        key = self._assigned_key(partition)
        await self._assigned()
        return await self.core.position(key)

    def pause(self, *partitions: Any) -> None:
        self.core.pause([_key(p) for p in partitions])

    def paused(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, p in self.core.paused()}

    def resume(self, *partitions: Any) -> None:
        self.core.resume([_key(p) for p in partitions])

    def highwater(self, partition: Any) -> int | None:
        """The high watermark from the last fetch of ``partition``, None before one."""
        offset = self.core.highwater(self._assigned_key(partition))
        return offset if offset >= 0 else None

    def last_stable_offset(self, partition: Any) -> int | None:
        """The last stable offset from the last fetch of ``partition``, None before one."""
        offset = self.core.last_stable_offset(self._assigned_key(partition))
        return offset if offset >= 0 else None

    @aio_boundary
    async def committed(self, partition: Any) -> int | None:
        if not self.core.group_id:
            raise IllegalOperation("Requires group_id")
        offset = (await self.core.committed([_key(partition)]))[_key(partition)][0]
        return offset if offset >= 0 else None

    @aio_boundary
    async def commit(self, offsets: dict[Any, Any] | None = None) -> None:
        """Commit ``offsets`` ({partition: offset or (offset, metadata)}) or the
        positions of everything handed out."""
        if not self.core.group_id:
            raise IllegalOperation("Requires group_id")
        wanted = None
        if offsets is not None:
            wanted = {_key(tp): (o if isinstance(o, int) else o[0]) for tp, o in offsets.items()}
        try:
            await self.core.commit(wanted)
        except offsets_module.CommitFailedError as error:
            raise CommitFailedError(error.str()) from error

    @aio_boundary
    async def beginning_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        found = await self.core.list_offsets({_key(p): EARLIEST for p in partitions})
        return {TopicPartition(t, p): o for (t, p), (o, _ts) in found.items()}

    @aio_boundary
    async def end_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        found = await self.core.list_offsets({_key(p): LATEST for p in partitions})
        return {TopicPartition(t, p): o for (t, p), (o, _ts) in found.items()}

    @aio_boundary
    async def offsets_for_times(
        self, timestamps: dict[Any, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset at or after each timestamp (ms), None past the end."""
        found = await self.core.offsets_for_times({_key(tp): ts for tp, ts in timestamps.items()})
        return {
            TopicPartition(t, p): None if v is None else OffsetAndTimestamp(v[0], v[1])
            for (t, p), v in found.items()
        }

    @aio_boundary
    async def topics(self) -> set[str]:
        metadata = await self.core.cluster.refresh(None)
        return set(metadata.topics)


class ConsumerRebalanceListener(abc.ABC):
    """aiokafka's listener base: ``on_partitions_revoked`` before a rebalance takes
    partitions away, ``on_partitions_assigned`` after it gave some; either may be a
    coroutine. Subclassing it is optional: any object with those methods will do."""

    @abc.abstractmethod
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any: ...

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any: ...

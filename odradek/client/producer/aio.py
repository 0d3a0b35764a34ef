"""Asyncio producer shaped like aiokafka's ``AIOKafkaProducer``.

How this works and why: a thin face over ``AsyncProducer`` (core.py). aiokafka's
keyword arguments map to Kafka property names (validated like every other client's),
the default partitioner is aiokafka's murmur2, and ``key_serializer`` /
``value_serializer`` are applied as aiokafka applies them — to every key and value,
None included. What comes back is aiokafka's: ``send`` futures resolve to
``aio_types.RecordMetadata`` (None with ``acks=0``), errors are ``aio_errors``'
classes, ``create_batch``/``send_batch`` build and send one whole batch
(batch_builder.py), and transactions use aiokafka's calls and
``async with producer.transaction():``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from odradek.client._core.aio_errors import aio_boundary, translate
from odradek.client._core.aio_types import RecordMetadata, TopicPartition
from odradek.client._core.config import ClientConfig, ConfigError
from odradek.client.producer.accumulator import ProducerBatch
from odradek.client.producer.batch_builder import BatchBuilder
from odradek.client.producer.core import AsyncProducer, HeadersLike
from odradek.client.producer.partitioner import AIOKAFKA_DEFAULT
from odradek.client.producer.transactions import ConsumerGroupMetadata, OffsetsLike, TxnState

# aiokafka keyword → Kafka property name, where not just ``_`` → ``.``
_AIO_RENAMES = {
    "max_batch_size": "batch.size",
    "enable_idempotence": "enable.idempotence",
    "max_request_size": "max.request.size",
    "compression_type": "compression.type",
    "sasl_plain_username": "sasl.username",  # aiokafka's names (client/_core/sasl.py)
    "sasl_plain_password": "sasl.password",
    "sasl_oauth_token_provider": "sasl.oauth.token.provider",  # OAUTHBEARER
}
_AIO_IGNORED = {"loop", "api_version", "key_serializer", "value_serializer"}


class AIOKafkaProducer:
    """aiokafka-shaped asyncio producer over ``AsyncProducer``."""

    def __init__(self, *, bootstrap_servers: str | list[str] = "localhost", **kwargs: Any) -> None:
        servers = (
            bootstrap_servers if isinstance(bootstrap_servers, str) else ",".join(bootstrap_servers)
        )
        # aiokafka's default partitioner unless one is given (murmur2, as the Java client)
        properties: dict[str, Any] = {"bootstrap.servers": servers, "partitioner": AIOKAFKA_DEFAULT}
        self._key_serializer: Callable[[Any], Any] | None = kwargs.pop("key_serializer", None)
        self._value_serializer: Callable[[Any], Any] | None = kwargs.pop("value_serializer", None)
        for name, value in kwargs.items():
            if name in _AIO_IGNORED:
                continue
            prop = _AIO_RENAMES.get(name, name.replace("_", "."))
            if name == "partitioner" and callable(value):
                prop = "partitioner"
            if prop == "compression.type" and value is None:
                value = "none"
            properties[prop] = value
        try:
            config = ClientConfig(properties, "producer")
        except ConfigError as error:
            raise ConfigError(
                next(
                    (k for k, v in _AIO_RENAMES.items() if v == error.key),
                    error.key.replace(".", "_"),
                ),
                str(error).split(": ", 1)[1],
            ) from None
        self._no_acks = config["acks"] == 0
        self._core = AsyncProducer(config, on_complete=self._report)

    def _report(self, batch: ProducerBatch) -> None:
        """Resolve a finished batch's futures as aiokafka does: RecordMetadata per
        record (one for a whole ``send_batch`` batch, at its first offset, with the
        broker's timestamp: -1 unless LogAppendTime), None with acks=0, or the error."""
        error = batch.error
        if error is not None:
            shaped = translate(error)
            for _, (future, *_rest) in batch.waiters:
                if not future.done():
                    future.set_exception(shaped)
            return
        if self._no_acks:
            for _, (future, *_rest) in batch.waiters:
                if not future.done():
                    future.set_result(None)
            return
        topic, partition, append_time = batch.topic, batch.partition, batch.log_append_time
        tp = TopicPartition(topic, partition)
        base, log_start = batch.base_offset, batch.log_start_offset
        kind = 0 if append_time is None else 1
        for index, (future, timestamp, _key_size, _value_size) in batch.waiters:
            if future.done():
                continue
            if timestamp is None:  # a whole batch (send_batch)
                stamp = -1 if append_time is None else append_time
            else:
                stamp = timestamp if append_time is None else append_time
            future.set_result(
                RecordMetadata(topic, partition, tp, base + index, stamp, kind, log_start)
            )

    @aio_boundary
    async def start(self) -> None:
        """Connect; a transactional producer also gets its producer id and epoch
        (``init_transactions``), as aiokafka's start does."""
        await self._core.start()
        if self._core.transactions is not None:
            try:
                await self._core.init_transactions()
            except BaseException:
                await self._core.close()
                raise

    async def stop(self) -> None:
        await self._core.close()

    # -- transactions (aiokafka's names) ---------------------------------------------
    @aio_boundary
    async def begin_transaction(self) -> None:
        self._core.begin_transaction()

    @aio_boundary
    async def commit_transaction(self) -> None:
        await self._core.commit_transaction()

    @aio_boundary
    async def abort_transaction(self) -> None:
        await self._core.abort_transaction()

    @aio_boundary
    async def send_offsets_to_transaction(
        self, offsets: OffsetsLike, group_id: str | ConsumerGroupMetadata
    ) -> None:
        """``offsets``: {TopicPartition: offset or OffsetAndMetadata}, the next record
        to consume of each partition; committed with the transaction."""
        await self._core.send_offsets_to_transaction(offsets, group_id)

    def transaction(self) -> TransactionContext:
        """``async with producer.transaction():`` begins a transaction, commits it when
        the block ends and aborts it when the block raises (unless the producer
        failed fatally: nothing can be sent any more then, abort included)."""
        return TransactionContext(self._core)

    async def __aenter__(self) -> AIOKafkaProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- sending -----------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersLike = None,
    ) -> asyncio.Future[RecordMetadata | None]:
        """Queue a record; the future resolves once it is acknowledged. (Errors are
        shaped inline, not by ``aio_boundary``: a wrapper coroutine per record costs.)"""
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        try:
            return await self._core.send(topic, value, key, partition, timestamp_ms, headers)  # type: ignore[return-value]
        except asyncio.CancelledError:
            raise
        except Exception as error:
            shaped = translate(error)
            if shaped is error:
                raise
            raise shaped from error

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersLike = None,
    ) -> RecordMetadata | None:
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    def create_batch(self) -> BatchBuilder:
        """An empty batch to fill with ``append`` and send with ``send_batch``; its
        records go through this producer's serializers, its size is bounded by
        ``max_batch_size``."""
        return BatchBuilder(
            self._core.config["batch.size"], self._key_serializer, self._value_serializer
        )

    @aio_boundary
    async def send_batch(
        self, batch: BatchBuilder, topic: str, *, partition: int
    ) -> asyncio.Future[RecordMetadata | None]:
        """Send ``batch`` whole to ``topic``-``partition``; the future resolves to the
        metadata of its first record once it is delivered."""
        future: asyncio.Future[RecordMetadata | None] = await self._core.send_built(
            batch, topic, partition
        )
        return future

    @aio_boundary
    async def flush(self) -> None:
        await self._core.flush()

    @aio_boundary
    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids (its metadata asked for when not known yet)."""
        assert self._core.cluster is not None
        return set(await self._core.cluster.partitions_for(topic))


class TransactionContext:
    """What ``AIOKafkaProducer.transaction()`` returns (an async context manager)."""

    def __init__(self, core: AsyncProducer) -> None:
        self._core = core

    @aio_boundary
    async def __aenter__(self) -> TransactionContext:
        self._core.begin_transaction()
        return self

    @aio_boundary
    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        manager = self._core.transactions
        if exc_type is None:
            await self._core.commit_transaction()
            return
        if manager is not None and manager.txn.state is TxnState.FATAL_ERROR:
            return  # the block's own error says why
        await self._core.abort_transaction()

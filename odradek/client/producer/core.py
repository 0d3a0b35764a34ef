"""The asyncio producer core under both faces (``AIOKafkaProducer`` is in aio.py).

How this works and why: ``AsyncProducer.send`` picks a partition (explicit, a custom
callable, or the configured partitioner: ``partitioner``, librdkafka's names, default
``consistent_random`` as confluent-kafka; ``AIOKafkaProducer`` defaults to aiokafka's
murmur2, see partitioner.py), appends the record to
the ``RecordAccumulator`` and returns a future that the ``Sender`` completes with a
``RecordMetadata`` once the broker acknowledged it (or with the error that ended its
delivery). The blocking ``Producer`` uses the same core without a future per record:
it appends from its own thread (``partition_for`` and the accumulator's ``add`` under
the accumulator's lock) and is told once per finished batch (``on_complete``).

Idempotence is on by default, as in Kafka 3+: it needs acks=all, retries and at most
5 in flight; when those were *chosen* otherwise it is an error, when they were
defaults it is quietly turned off.

With ``transactional.id`` the core has a ``TransactionManager`` (transaction_manager.py)
as the sender's hook, idempotence is required, records may only be sent between
``begin_transaction`` and the end of the transaction, and the transactional calls
(confluent-kafka's and aiokafka's names) are methods of the core and of both faces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.config import ClientConfig, ConfigError
from odradek.client._core.connection import KafkaConnectionError
from odradek.client._core.errors import KafkaError, LocalError
from odradek.client._core.sasl import sasl_credentials
from odradek.client._core.types import RecordMetadata, as_bytes
from odradek.client.producer.accumulator import (
    Header,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from odradek.client.producer.batch_builder import BatchBuilder
from odradek.client.producer.partitioner import (
    LIBRDKAFKA_PARTITIONERS,
    HashPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    as_partitioner,
    librdkafka_partitioner,
)
from odradek.client.producer.sender import (
    INIT_PRODUCER_ID_KEY,
    PRODUCE_KEY,
    Sender,
    TransactionHook,
)
from odradek.client.producer.transaction_manager import TransactionManager
from odradek.client.producer.transaction_requests import TRANSACTION_VERSIONS
from odradek.client.producer.transactions import ConsumerGroupMetadata, OffsetsLike, TxnState
from odradek.records.batch import COMPRESSION_BY_NAME
from odradek.tasks import cancel_and_wait

logger = logging.getLogger(__name__)
PRODUCER_VERSIONS = {PRODUCE_KEY: (3, 11), INIT_PRODUCER_ID_KEY: (0, 4), **TRANSACTION_VERSIONS}
HeadersLike = Iterable[tuple[str, Any]] | Mapping[str, Any] | None
ROUND_ROBIN_PARTITIONERS = ("round_robin", "roundrobin")


def _make_partitioner(setting: Any) -> Partitioner:
    """``partitioner``: a librdkafka name, a Partitioner, or a kafka-python callable."""
    if isinstance(setting, str):
        chosen = librdkafka_partitioner(setting.strip())
        if chosen is not None:
            return chosen
        if setting in ROUND_ROBIN_PARTITIONERS:
            return RoundRobinPartitioner()
        known = ", ".join((*LIBRDKAFKA_PARTITIONERS, *ROUND_ROBIN_PARTITIONERS))
        raise ConfigError("partitioner", f"{setting!r} is not one of {known}")
    try:
        return as_partitioner(setting)
    except TypeError as error:
        raise ConfigError("partitioner", str(error)) from None


def encode_headers(headers: HeadersLike) -> list[Header]:
    """(name, bytes) pairs from a mapping or pairs; values as ``as_bytes`` takes them."""
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(k), as_bytes(v, "header value")) for k, v in items]


def _idempotence(config: ClientConfig) -> bool:
    wanted = config["enable.idempotence"]
    transactional = config["transactional.id"] is not None
    if transactional and not wanted:
        raise ConfigError("enable.idempotence", "must be true when transactional.id is set")
    if not wanted:
        return False
    explicit = "enable.idempotence" in config.explicit or transactional
    conflicts = []
    if config["acks"] != -1:
        conflicts.append(("acks", "must be all"))
    if config["retries"] == 0:
        conflicts.append(("retries", "must be > 0"))
    if conflicts:
        if explicit:
            key, why = conflicts[0]
            raise ConfigError(key, f"{why} when enable.idempotence is true")
        return False
    return True


class AsyncProducer:
    """Producer core; every method runs on one asyncio loop."""

    def __init__(
        self,
        config: ClientConfig | Mapping[str, Any],
        *,
        transactions: TransactionHook | None = None,
        on_complete: Callable[[ProducerBatch], None] | None = None,
    ) -> None:
        """``on_complete(batch)`` replaces the default report (resolving the futures
        ``send`` returned): it is called on the loop for every finished batch, whose
        waiters are then whatever was given to ``add``/``append_record``."""
        if not isinstance(config, ClientConfig):
            config = ClientConfig(config, "producer")
        self.config = config
        self.idempotent = _idempotence(config)
        self._partitioner = _make_partitioner(config["partitioner"])
        if config["sticky.partitioning.linger.ms"] == 0 and isinstance(
            self._partitioner, HashPartitioner
        ):
            self._partitioner.sticky = False  # librdkafka: no stickiness at 0
        self._partition_lists: dict[str, tuple[Any, list[int], list[int]]] = {}
        self.compression = COMPRESSION_BY_NAME[config["compression.type"]]
        self.max_block_s = config["max.block.ms"] / 1000
        transactional_id = config["transactional.id"]
        if transactions is None and transactional_id is not None:
            if not isinstance(transactional_id, str) or not transactional_id:
                raise ConfigError("transactional.id", "expected a non-empty string")
            transactions = TransactionManager(
                transactional_id,
                transaction_timeout_ms=config["transaction.timeout.ms"],
                retry_backoff_ms=config["retry.backoff.ms"],
                retry_backoff_max_ms=config["retry.backoff.max.ms"],
            )
        self._transactions = transactions
        self.transactions = transactions if isinstance(transactions, TransactionManager) else None
        self._on_complete = on_complete or self._resolve_futures
        self.cluster: Cluster | None = None
        self.accumulator: RecordAccumulator | None = None
        self.sender: Sender | None = None
        self._task: asyncio.Task[None] | None = None
        self._first_refresh: asyncio.Task[None] | None = None

    async def start(self, on_unreachable: Callable[[BaseException], None] | None = None) -> None:
        """Connect and start the sender. With ``on_unreachable``, no reachable broker is
        reported to it instead of raised, and the producer starts anyway."""
        config = self.config
        self.cluster = Cluster(
            config["bootstrap.servers"],
            client_id=config["client.id"],
            request_timeout_ms=config["request.timeout.ms"],
            retry_backoff_ms=config["retry.backoff.ms"],
            metadata_max_age_ms=config["metadata.max.age.ms"],
            ssl_context=config.ssl_context,
            client_versions=PRODUCER_VERSIONS,
            sasl=sasl_credentials(config),
        )
        self.accumulator = RecordAccumulator(
            batch_size=config["batch.size"],
            linger_ms=config["linger.ms"],
            buffer_memory=config["buffer.memory"],
            max_block_ms=config["max.block.ms"],
            delivery_timeout_ms=config["delivery.timeout.ms"],
            on_batch_closed=self._partitioner.on_new_batch,
            on_complete=self._on_complete,
        )
        self.sender = Sender(
            self.cluster,
            self.accumulator,
            acks=config["acks"],
            idempotent=self.idempotent,
            compression=self.compression,
            max_in_flight=config["max.in.flight.requests.per.connection"],
            retries=config["retries"],
            request_timeout_ms=config["request.timeout.ms"],
            retry_backoff_ms=config["retry.backoff.ms"],
            retry_backoff_max_ms=config["retry.backoff.max.ms"],
            max_request_size=config["max.request.size"],
            transactions=self._transactions,
        )
        if self.transactions is not None:
            self.transactions.attach(self.cluster, self.accumulator, self.sender)
        loop = asyncio.get_running_loop()
        if on_unreachable is None:
            await asyncio.wait_for(self.cluster.refresh(), self.max_block_s)
        else:
            # confluent-kafka's way: construct at once, report an unreachable cluster,
            # keep trying; records wait for metadata until they time out
            self.cluster.on_unreachable = on_unreachable
            self._first_refresh = loop.create_task(self._refresh_or_report(on_unreachable))
        self._task = loop.create_task(self.sender.run())

    async def _refresh_or_report(self, on_unreachable: Callable[[BaseException], None]) -> None:
        assert self.cluster is not None
        try:
            await asyncio.wait_for(self.cluster.refresh(), self.max_block_s)
        except TimeoutError as error:  # no answer (an unreachable one is reported
            on_unreachable(error)  # by the cluster)
        except (KafkaConnectionError, KafkaError, OSError) as error:
            logger.debug("first metadata refresh failed: %s", error)

    def _check_running(self) -> tuple[Cluster, RecordAccumulator]:
        if self.cluster is None or self.accumulator is None or self._task is None:
            raise RuntimeError("producer is not started")
        if self.accumulator.closing:
            raise RuntimeError("producer is closed")
        if self._task.done():
            raise RuntimeError(f"producer sender stopped: {self._task.exception()!r}")
        return self.cluster, self.accumulator

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersLike = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves when it is acknowledged."""
        cluster, accumulator = self._check_running()
        if self.transactions is not None:
            self.transactions.check_send()
        key_bytes = as_bytes(key, "key")
        value_bytes = as_bytes(value, "value")
        header_list = encode_headers(headers)
        if not timestamp_ms:
            timestamp_ms = time.time_ns() // 1_000_000
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        waiter = (
            future,
            timestamp_ms,
            -1 if key_bytes is None else len(key_bytes),
            -1 if value_bytes is None else len(value_bytes),
        )
        if cluster.metadata.topics.get(topic) is not None:
            # The usual case, without awaiting anything: metadata known, space free.
            size = record_size(key_bytes, value_bytes, header_list)
            with accumulator.lock:
                chosen = self.partition_for(topic, key_bytes, partition)
                wake = None
                if chosen is not None and accumulator.try_reserve(size):
                    wake = accumulator.add(
                        topic,
                        chosen,
                        key_bytes,
                        value_bytes,
                        timestamp_ms,
                        header_list,
                        waiter,
                        size,
                    )
            if wake is not None:
                if wake:
                    accumulator.wakeup.set()
                return future
        await self.append_record(
            topic, key_bytes, value_bytes, partition, timestamp_ms, header_list, waiter
        )
        return future

    async def append_record(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: int,
        headers: list[Header],
        waiter: Any,
        reserved: int | None = None,
    ) -> None:
        """On the loop: wait for the topic's metadata if needed, pick the partition and
        append; ``reserved`` bytes of buffer.memory were already taken by the caller
        (else this waits for space, at most max.block.ms)."""
        _, accumulator = self._check_running()
        await self.wait_metadata(topic)
        with accumulator.lock:
            chosen = self.partition_for(topic, key, partition)
            if chosen is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, topic)
            if reserved is not None:
                wake = accumulator.add(
                    topic, chosen, key, value, timestamp, headers, waiter, reserved
                )
        if reserved is None:
            await accumulator.append(topic, chosen, key, value, timestamp, headers, waiter)
        elif wake:
            accumulator.wakeup.set()

    async def send_built(self, builder: BatchBuilder, topic: str, partition: int) -> Any:
        """Queue a batch the application built (aiokafka's ``send_batch``) for
        ``topic``-``partition``; the returned future resolves when it is delivered."""
        _, accumulator = self._check_running()
        if self.transactions is not None:
            self.transactions.check_send()
        await self.wait_metadata(topic)
        with accumulator.lock:
            chosen = self.partition_for(topic, None, partition)
        assert chosen is not None  # the metadata is known now
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        deadline = time.monotonic() + accumulator.delivery_timeout_s
        # One waiter for the whole batch, its timestamp None: the faces' reports tell
        # it from a record's by that.
        waiter = (future, None, -1, -1)
        await accumulator.append_batch(builder.to_batch(topic, chosen, deadline, waiter))
        return future

    async def wait_metadata(self, topic: str, limit_s: float | None = None) -> None:
        """Until ``topic``'s metadata is known (at most ``limit_s``, default
        max.block.ms)."""
        cluster, _ = self._check_running()
        limit = self.max_block_s if limit_s is None else limit_s
        if cluster.metadata.topics.get(topic) is None:
            # Like the Java producer's metadata wait: retriable failures (no broker
            # reachable yet, leader not available) are retried up to max.block.ms.
            await asyncio.wait_for(
                cluster.with_retry(
                    lambda: cluster.partitions_for(topic, allow_create=True),
                    deadline_s=limit,
                ),
                limit,
            )

    def partition_for(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        """The partition a record goes to; None while the topic's metadata is unknown.

        Hold the accumulator's lock: the partitioner's state is shared with the sender
        (``on_new_batch``) and, in the blocking producer, with the caller's thread.
        """
        assert self.cluster is not None
        known = self.cluster.metadata.topics.get(topic)
        if known is None:
            return None
        partitions = known.partitions
        if partition is None or partition < 0:
            return self._partition(topic, key, partitions)
        if partition not in partitions:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition}")
        return partition

    def _partition(self, topic: str, key: bytes | None, partitions: Mapping[int, Any]) -> int:
        # Sorted ids and the available ones, cached per metadata mapping (the Cluster
        # replaces the mapping on refresh, so identity is a valid cache key).
        cached = self._partition_lists.get(topic)
        if cached is None or cached[0] is not partitions:
            ids = sorted(partitions)
            available = [p for p in ids if partitions[p].leader >= 0]
            cached = (partitions, ids, available)
            self._partition_lists[topic] = cached
        return self._partitioner.partition(topic, key, cached[1], cached[2])

    @staticmethod
    def _resolve_futures(batch: ProducerBatch) -> None:
        """The default report: each waiter is (future, timestamp, key size, value size)."""
        error = batch.error
        append_time = batch.log_append_time
        base = batch.base_offset
        for index, (future, timestamp, key_size, value_size) in batch.waiters:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
                continue
            future.set_result(
                RecordMetadata(
                    batch.topic,
                    batch.partition,
                    base + index if base >= 0 else -1,
                    timestamp if append_time is None else append_time,
                    0 if append_time is None else 1,
                    key_size,
                    value_size,
                )
            )

    async def flush(self, timeout: float | None = None) -> bool:
        """Send everything queued now and wait for it; False if the timeout passed."""
        _, accumulator = self._check_running()
        accumulator.flushing += 1
        accumulator.wakeup.set()
        try:
            await asyncio.wait_for(accumulator.wait_empty(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            accumulator.flushing -= 1

    def __len__(self) -> int:
        return self.accumulator.records_pending if self.accumulator else 0

    # -- transactions (the calls of transaction_manager.TransactionManager) -------------
    def _manager(self) -> TransactionManager:
        self._check_running()
        if self.transactions is None:
            raise KafkaError(
                LocalError.not_configured, "the producer has no transactional.id configured"
            )
        return self.transactions

    async def init_transactions(self, timeout: float | None = None) -> None:
        await self._manager().init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._manager().begin_transaction()

    async def commit_transaction(self, timeout: float | None = None) -> None:
        await self._manager().commit_transaction(timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        await self._manager().abort_transaction(timeout)

    async def send_offsets_to_transaction(
        self,
        offsets: OffsetsLike,
        group: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        await self._manager().send_offsets_to_transaction(offsets, group, timeout)

    async def _end_open_transaction(self, timeout: float | None) -> None:
        """Closing inside a transaction aborts it (as the Java client does); what is
        still queued then cannot be sent outside a transaction and fails."""
        assert self.transactions is not None and self.accumulator is not None
        if self.transactions.txn.state in (
            TxnState.IN_TRANSACTION,
            TxnState.ABORTABLE_ERROR,
            TxnState.ABORTING,
        ):
            with contextlib.suppress(Exception):
                await self.transactions.abort_transaction(timeout)
        if self.transactions.txn.state is not TxnState.COMMITTING:
            closed = KafkaError(LocalError.purge_queue, "producer closed outside a transaction")
            for batch in self.accumulator.take_all():
                self.accumulator.complete(batch, error=closed)

    async def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (up to ``timeout``), then stop and disconnect."""
        if self.accumulator is None or self.accumulator.closing:
            return
        if self._first_refresh is not None:
            with contextlib.suppress(Exception):
                await cancel_and_wait(self._first_refresh)
        if self.transactions is not None:
            await self._end_open_transaction(timeout)
        self.accumulator.closing = True
        self.accumulator.wakeup.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            except TimeoutError:
                self._task.cancel()
            except Exception:  # the sender's failure was reported per record
                pass
        if self.transactions is not None:
            await self.transactions.close()
        if self.sender is not None:
            await self.sender.close()
            failed = RuntimeError("producer closed before delivery")
            for batch in self.accumulator.all_batches():
                self.accumulator.complete(batch, error=failed)
        if self.cluster is not None:
            await self.cluster.close()

"""The producer's sender: drains ready batches into Produce requests per leader.

How this works and why: one task loops over the accumulator's ready partitions,
groups their head batches by leader and sends one Produce request per leader, with at
most ``max.in.flight.requests.per.connection`` outstanding per connection (requests
are pipelined; the broker answers in order). Per-partition order holds because a
partition whose batch failed is *blocked*: nothing more of it is sent until all its
in-flight batches have answered, then the failed ones go back to the front of its
queue with their original sequence numbers. Without idempotence a partition has at
most one batch in flight.

Idempotence (``ProducerIdState``): the producer gets an id and epoch from
InitProducerId, and every batch carries a per-partition sequence assigned when first
sent. OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID on the first unacknowledged
batch of a partition (or a batch failing for good, which leaves a gap) means the
broker and client disagree: the sender stops sending, waits for in-flight requests,
bumps the epoch with a new InitProducerId and renumbers every queued batch from 0 —
as the Java client does.

Transactions (``TransactionHook``, filled by ``transaction_manager.TransactionManager``):
the hook says which partitions may be sent (``sendable``: only those the transaction
coordinator has added), is told once per loop to add the new ones
(``after_ready``) and hears of every batch that failed for good
(``on_batch_failed``: the transaction must abort). A transactional producer never
asks for a producer id or bumps its epoch itself — the transaction manager does, at
its coordinator — and a sequence error inside a transaction fails the batch (the
transaction aborts, and the abort bumps the epoch).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import KafkaConnectionError, request_entity
from odradek.client._core.errors import KafkaError, LocalError, error_code, is_retriable
from odradek.client.producer.accumulator import ProducerBatch, RecordAccumulator

logger = logging.getLogger(__name__)

PRODUCE_KEY: Final = 0
INIT_PRODUCER_ID_KEY: Final = 22
SEQUENCE_ERRORS: Final = frozenset(
    {ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id}
)
_EPOCH_ZERO = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# librdkafka's _MSG_TIMED_OUT: a record not acknowledged within delivery.timeout.ms
# (message.timeout.ms)
MSG_TIMED_OUT = "Local: Message timed out (delivery.timeout.ms)"


class TransactionHook:
    """Seam for the transactional producer (``transaction_manager.TransactionManager``).

    The sender asks it for the ``transactional_id`` of Produce requests, whether a
    partition's batches may be sent now (``sendable``, called under the accumulator's
    lock: no I/O, no accumulator calls), lets it start AddPartitionsToTxn once per
    loop (``after_ready``) and tells it of batches that failed for good. The default
    hook is non-transactional.
    """

    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000

    def sendable(self, tp: tuple[str, int]) -> bool:
        return True

    def after_ready(self) -> None:
        return None

    def on_batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        return None

    def queued_error(self) -> BaseException | None:
        """Not None when queued batches can no longer be sent (the transaction is
        aborting or failed): the sender fails them with this error."""
        return None

    async def before_send(self, batches: list[ProducerBatch]) -> None:
        return None


@dataclass(slots=True)
class PartitionState:
    in_flight: int = 0
    next_sequence: int = 0  # sequence of the next new batch
    acked_next: int = 0  # sequence after the last acknowledged batch
    blocked: bool = False
    failed: list[ProducerBatch] = field(default_factory=list)


class Sender:
    def __init__(
        self,
        cluster: Cluster,
        accumulator: RecordAccumulator,
        *,
        acks: int,
        idempotent: bool,
        compression: int,
        max_in_flight: int,
        retries: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        max_request_size: int,
        transactions: TransactionHook | None = None,
    ) -> None:
        self.cluster = cluster
        self.accumulator = accumulator
        self.acks = acks
        self.idempotent = idempotent
        self.compression = compression
        self.max_in_flight = max_in_flight
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.backoff_s = retry_backoff_ms / 1000
        self.backoff_max_s = retry_backoff_max_ms / 1000
        self.max_request_size = max_request_size
        self.transactions = transactions or TransactionHook()
        self.producer_id = -1
        self.producer_epoch = -1
        self.need_epoch_bump = False
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.in_flight_by_node: dict[int, int] = {}
        self._init_failing = False  # InitProducerId failed last time (logged once)
        self.requests: set[asyncio.Task[None]] = set()
        self._refresh_task: asyncio.Task[Any] | None = None
        self.fatal: BaseException | None = None

    # -- producer id ---------------------------------------------------------------
    async def init_producer_id(self) -> None:
        async def attempt() -> Any:
            connection = await self.cluster.any_connection()
            version = connection.version_for(INIT_PRODUCER_ID_KEY)
            bump = version >= 3 and self.producer_id >= 0
            request = request_entity(
                INIT_PRODUCER_ID_KEY,
                version,
                transactional_id=self.transactions.transactional_id,
                transaction_timeout=datetime.timedelta(
                    milliseconds=self.transactions.transaction_timeout_ms
                ),
                producer_id=self.producer_id if bump else -1,
                producer_epoch=self.producer_epoch if bump else -1,
            )
            response = await connection.send(request)
            if response.error_code != ErrorCode.none:
                raise KafkaError(response.error_code, "InitProducerId")
            return response

        response = await self.cluster.with_retry(attempt, deadline_s=self.request_timeout_ms / 1000)
        self.producer_id = response.producer_id
        self.producer_epoch = response.producer_epoch
        logger.debug("producer id %d epoch %d", self.producer_id, self.producer_epoch)

    def reset_producer_state(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch (from the transaction manager): every partition's
        sequence starts again at 0, queued batches are renumbered when sent."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.need_epoch_bump = False
        for state in self.partitions.values():
            state.next_sequence = 0
            state.acked_next = 0
        for batch in self.accumulator.all_batches():
            batch.set_producer_state(-1, -1, -1)
        self.accumulator.wakeup.set()

    async def _bump_epoch(self) -> None:
        """Every in-flight request has answered: new epoch, renumber queued batches."""
        await self.init_producer_id()
        self.need_epoch_bump = False
        for state in self.partitions.values():
            state.next_sequence = 0
            state.acked_next = 0
        for batch in self.accumulator.all_batches():
            batch.set_producer_state(-1, -1, -1)

    # -- main loop -----------------------------------------------------------------
    async def run(self) -> None:
        accumulator = self.accumulator
        while True:
            accumulator.wakeup.clear()
            now = time.monotonic()
            for batch in accumulator.expired(now):
                self._fail(batch, KafkaError(LocalError.msg_timed_out, MSG_TIMED_OUT))
            dropped = self.transactions.queued_error()
            if dropped is not None:
                for batch in accumulator.take_all():
                    self._fail(batch, dropped)
            if accumulator.closing and not accumulator.has_queued() and not self.requests:
                return
            next_check = now + 1.0
            waiting = self.idempotent and (self.producer_id < 0 or self.need_epoch_bump)
            if waiting and self.transactions.transactional_id is not None:
                pass  # the transaction manager gets the id, and bumps the epoch on abort
            elif waiting:
                # the producer id is asked for once there is something to send: an
                # idle producer (no broker up, say) does not retry, and closes at once
                if not self.requests and accumulator.has_queued():
                    try:
                        await self._bump_epoch()
                    except (KafkaError, KafkaConnectionError) as error:
                        # once per outage, not at every retry
                        log = logger.debug if self._init_failing else logger.warning
                        self._init_failing = True
                        log("InitProducerId failed: %s", error)
                        await asyncio.sleep(self.backoff_s)
                    else:
                        self._init_failing = False
                    continue
            else:
                ready, next_check = accumulator.ready(now, self._sendable)
                if ready:
                    self._send_ready(ready)
                self.transactions.after_ready()
            timeout = max(0.0, next_check - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(accumulator.wakeup.wait(), timeout)

    def _sendable(self, tp: tuple[str, int]) -> bool:
        if not self.transactions.sendable(tp):
            return False
        state = self.partitions.get(tp)
        if state is None:
            return True
        if state.blocked:
            return False
        return state.in_flight < (self.max_in_flight if self.idempotent else 1)

    def _send_ready(self, ready: list[tuple[str, int]]) -> None:
        by_node: dict[int, list[tuple[str, int]]] = {}
        unknown = False
        for tp in ready:
            info = self.cluster.metadata.topics.get(tp[0])
            partition = info.partitions.get(tp[1]) if info else None
            if partition is None or partition.leader < 0:
                unknown = True
                continue
            by_node.setdefault(partition.leader, []).append(tp)
        if unknown:
            self._refresh_metadata()
        for node, tps in by_node.items():
            if self.in_flight_by_node.get(node, 0) >= self.max_in_flight:
                continue
            batches = self.accumulator.take(tps, self.max_request_size)
            for batch in batches:
                state = self.partitions.setdefault(batch.tp, PartitionState())
                if self.idempotent and batch.base_sequence < 0:
                    batch.set_producer_state(
                        self.producer_id, self.producer_epoch, state.next_sequence
                    )
                    state.next_sequence = (state.next_sequence + batch.count) % 2**31
                state.in_flight += 1
                batch.attempts += 1
            self.in_flight_by_node[node] = self.in_flight_by_node.get(node, 0) + 1
            task = asyncio.get_running_loop().create_task(self._produce(node, batches))
            self.requests.add(task)

    def _refresh_metadata(self) -> None:
        if self._refresh_task is None or self._refresh_task.done():

            async def refresh() -> None:
                with contextlib.suppress(KafkaError, KafkaConnectionError):
                    await self.cluster.refresh()
                self.accumulator.wakeup.set()

            self._refresh_task = asyncio.get_running_loop().create_task(refresh())

    # -- one request ---------------------------------------------------------------
    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        results: dict[tuple[str, int], Any] = {}
        error: BaseException | None = None
        try:
            await self.transactions.before_send(batches)
            connection = await self.cluster.connection(node)
            version = connection.version_for(PRODUCE_KEY)
            topics: dict[str, list[Any]] = {}
            for batch in batches:
                topics.setdefault(batch.topic, []).append(
                    request_entity(
                        PRODUCE_KEY,
                        version,
                        "PartitionProduceData",
                        index=batch.partition,
                        records=batch.payload(
                            self.compression, self.transactions.transactional_id is not None
                        ),
                    )
                )
            request = request_entity(
                PRODUCE_KEY,
                version,
                transactional_id=self.transactions.transactional_id,
                acks=self.acks,
                timeout=datetime.timedelta(milliseconds=self.request_timeout_ms),
                topic_data=tuple(
                    request_entity(
                        PRODUCE_KEY,
                        version,
                        "TopicProduceData",
                        name=name,
                        partition_data=tuple(data),
                    )
                    for name, data in topics.items()
                ),
            )
            response = await connection.send(request, expect_response=self.acks != 0)
            if response is not None:
                for topic in response.responses:
                    for p in topic.partition_responses:
                        results[(topic.name, p.index)] = p
        except (KafkaError, KafkaConnectionError) as exc:
            error = exc
        except Exception as exc:  # a bug or an unsupported broker: fail, never hang
            logger.exception("produce request failed")
            error = exc
        finally:
            self.in_flight_by_node[node] -= 1
            task = asyncio.current_task()
            if task is not None:
                self.requests.discard(task)
        for batch in batches:
            if error is not None:
                self._handle_error(batch, error)
            elif self.acks == 0:
                self._complete(batch, -1, None)
            else:
                result = results.get(batch.tp)
                if result is None:
                    self._handle_error(
                        batch, KafkaError(ErrorCode.unknown_server_error, "partition not answered")
                    )
                elif result.error_code == ErrorCode.none:
                    append_time = result.log_append_time
                    batch.log_start_offset = result.log_start_offset
                    self._complete(
                        batch,
                        result.base_offset,
                        None
                        if append_time is None or append_time.timestamp() < 0
                        else int(append_time.timestamp() * 1000),
                    )
                else:
                    self._handle_error(
                        batch, KafkaError(result.error_code, result.error_message or "")
                    )
        self.accumulator.wakeup.set()

    def _complete(self, batch: ProducerBatch, base_offset: int, append_time: int | None) -> None:
        state = self.partitions[batch.tp]
        state.in_flight -= 1
        if batch.base_sequence >= 0:
            state.acked_next = (batch.base_sequence + batch.count) % 2**31
        self.accumulator.complete(batch, base_offset, append_time)
        self._maybe_unblock(batch.tp, state)

    def _handle_error(self, batch: ProducerBatch, error: BaseException) -> None:
        state = self.partitions[batch.tp]
        state.in_flight -= 1
        code = error_code(error)
        if code == ErrorCode.duplicate_sequence_number:
            # already written by an earlier attempt whose answer was lost
            self._complete_duplicate(batch, state)
            return
        retriable = is_retriable(error)
        if code in SEQUENCE_ERRORS and self.idempotent:
            # The broker and we disagree about this partition's sequences: a new epoch
            # renumbers from 0. Kafka marks both errors non-retriable, yet as in the Java
            # client only the first unacknowledged batch's OUT_OF_ORDER means that batch
            # is lost; a later batch's merely reports the gap left in front of it, and
            # UNKNOWN_PRODUCER_ID means the broker dropped our state (KIP-360). Both go
            # again under the new epoch.
            self.need_epoch_bump = True
            if code == ErrorCode.unknown_producer_id or batch.base_sequence != state.acked_next:
                retriable = True
            if self.transactions.transactional_id is not None:
                retriable = False  # the transaction aborts; the abort bumps the epoch
        if (
            retriable
            and batch.attempts <= self.retries
            and time.monotonic() < batch.deadline
            and self.fatal is None
        ):
            if code is None or code != ErrorCode.out_of_order_sequence_number:
                self._refresh_metadata()
            state.blocked = True
            state.failed.append(batch)
        else:
            if code in SEQUENCE_ERRORS:
                self.need_epoch_bump = True
            elif self.idempotent and batch.base_sequence >= 0:
                self.need_epoch_bump = True  # its sequences are now a gap
            self.transactions.on_batch_failed(batch, error)
            self.accumulator.complete(batch, error=error)
        self._maybe_unblock(batch.tp, state)

    def _complete_duplicate(self, batch: ProducerBatch, state: PartitionState) -> None:
        state.in_flight += 1
        self._complete(batch, -1, None)

    def _maybe_unblock(self, tp: tuple[str, int], state: PartitionState) -> None:
        if state.blocked and state.in_flight == 0:
            failed, state.failed = state.failed, []
            state.blocked = False
            attempts = max(b.attempts for b in failed) if failed else 1
            backoff = min(self.backoff_s * 2 ** (attempts - 1), self.backoff_max_s)
            self.accumulator.requeue(failed, time.monotonic() + backoff)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if self.idempotent and batch.base_sequence >= 0:
            self.need_epoch_bump = True
        self.transactions.on_batch_failed(batch, error)
        self.accumulator.complete(batch, error=error)

    async def close(self) -> None:
        for task in list(self.requests):
            task.cancel()
        if self._refresh_task is not None:
            self._refresh_task.cancel()

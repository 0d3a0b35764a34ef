"""The transactional producer's I/O: coordinator requests around ``TransactionState``.

How this works and why: ``TransactionManager`` is the ``TransactionHook`` the sender
consults. The sender asks ``sendable(tp)`` before draining a partition — a partition
not yet in the transaction is held back and becomes *pending* — and calls
``after_ready()`` once per loop, which starts one AddPartitionsToTxn for every pending
partition at once (while one is in flight, new partitions wait for the next). When it
answers, the sender is woken and the held batches go out, transactional, with the
producer id and epoch from InitProducerId. A batch that fails for good inside a
transaction makes it abortable (fenced: fatal) through ``on_batch_failed``.

The calls (``init_transactions``, ``commit_transaction``, ...) each run as one task
on the loop. A caller's timeout does not cancel it: the call raises a retriable
``_TIMED_OUT`` and calling the same method again resumes waiting for the same task,
as librdkafka does; a different transactional call meanwhile is ``_CONFLICT``.

- init: FindCoordinator(key_type=1) then InitProducerId(transactional.id,
  transaction.timeout.ms) at the coordinator; the new epoch restarts every
  partition's sequence at 0.
- commit: flush, wait until every record is acknowledged (or the transaction became
  abortable), then EndTxn(commit) — skipped when the coordinator never heard of the
  transaction.
- abort: drop queued batches (their records fail with ``_PURGE_QUEUE``, abortable),
  wait for in-flight requests and for an AddPartitionsToTxn in flight, EndTxn(abort);
  when a dropped or failed batch left a sequence gap, InitProducerId again for a new
  epoch (KIP-360) so the next transaction starts clean.
- send_offsets_to_transaction: AddOffsetsToTxn(group) at the transaction coordinator,
  then TxnOffsetCommit at the *group* coordinator with the consumer's generation,
  member id and instance id, so a zombie member's offsets are refused.

Coordinator errors are retried with backoff (COORDINATOR_NOT_AVAILABLE and
NOT_COORDINATOR find the coordinator again first); see ``transactions.classify``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import (
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
)
from odradek.client._core.errors import KafkaError, LocalError, error_code
from odradek.client.producer import transaction_requests as txn_requests
from odradek.client.producer.accumulator import ProducerBatch
from odradek.client.producer.sender import TransactionHook
from odradek.client.producer.transactions import (
    ConsumerGroupMetadata,
    ErrorClass,
    OffsetsLike,
    TransactionState,
    TxnState,
    abortable_error,
    as_transaction_error,
    classify,
    classify_produce,
    fatal_error,
    parse_offsets,
    purged_error,
    state_error,
    worst_error,
)

if TYPE_CHECKING:
    from odradek.client._core.cluster import Cluster
    from odradek.client.producer.accumulator import RecordAccumulator
    from odradek.client.producer.sender import Sender

logger = logging.getLogger(__name__)

TXN_KEY_TYPE: Final = 1
GROUP_KEY_TYPE: Final = 0
CONCURRENT_BACKOFF_S: Final = 0.02  # CONCURRENT_TRANSACTIONS clears fast (markers written)
T = TypeVar("T")


class _Retry(Exception):
    """One attempt failed retriably; ``refind`` asks for the coordinator again."""

    def __init__(self, reason: str, refind: bool = False, backoff: float | None = None) -> None:
        super().__init__(reason)
        self.refind = refind
        self.backoff = backoff


class TransactionManager(TransactionHook):
    """The transactional id's state and its coordinator requests (one asyncio loop)."""

    def __init__(
        self,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        self.transactional_id = transactional_id  # the hook's: Produce requests carry it
        self.txn_id: str = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.txn = TransactionState(transactional_id)
        self.backoff_s = retry_backoff_ms / 1000
        self.backoff_max_s = max(retry_backoff_max_ms, retry_backoff_ms) / 1000
        self.cluster: Cluster | None = None
        self.accumulator: RecordAccumulator | None = None
        self.sender: Sender | None = None
        self.coordinator_id: int | None = None
        self._add_task: asyncio.Task[None] | None = None
        self._operation: tuple[str, asyncio.Task[Any]] | None = None
        self._changed = asyncio.Event()  # set when the state turns abortable or fatal
        # told once, on the loop, when the producer turns fatal (the blocking face's
        # poll() raises it then, as confluent-kafka's does)
        self.on_fatal: Callable[[KafkaError], None] | None = None

    def attach(self, cluster: Cluster, accumulator: RecordAccumulator, sender: Sender) -> None:
        self.cluster, self.accumulator, self.sender = cluster, accumulator, sender

    # -- the sender's hook ---------------------------------------------------------------
    def sendable(self, tp: tuple[str, int]) -> bool:
        return self.txn.sendable(tp)

    def after_ready(self) -> None:
        if self.txn.pending and (self._add_task is None or self._add_task.done()):
            tps = self.txn.take_pending()
            if tps:
                self._add_task = asyncio.get_running_loop().create_task(self._add_partitions(tps))

    def on_batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        code = error_code(error)
        if code == LocalError.purge_queue:
            return  # dropped by abort_transaction itself
        where = f"{batch.topic}-{batch.partition}"
        if classify_produce(code) is ErrorClass.FATAL:
            self._set_fatal(as_transaction_error(error, ErrorClass.FATAL, f"produce to {where}"))
        else:
            self._set_abortable(
                as_transaction_error(error, ErrorClass.ABORTABLE, f"produce to {where}")
            )

    def queued_error(self) -> BaseException | None:
        state = self.txn.state
        if state is TxnState.ABORTING:
            return purged_error()
        if state is TxnState.READY:
            return state_error("record produced outside a transaction")
        if state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            return self.txn.error
        return None

    def check_send(self) -> None:
        """Records may only be produced inside a transaction (librdkafka: _STATE)."""
        state = self.txn.state
        if state is TxnState.IN_TRANSACTION:
            return
        self.txn.check(TxnState.IN_TRANSACTION, what="produce outside a transaction")

    def _set_abortable(self, error: KafkaError) -> None:
        self.txn.set_abortable(error)
        self._changed.set()

    def _set_fatal(self, error: KafkaError) -> None:
        first = self.txn.state is not TxnState.FATAL_ERROR
        self.txn.set_fatal(error)
        self._changed.set()
        if first and self.on_fatal is not None:
            self.on_fatal(error)

    # -- running the calls ---------------------------------------------------------------
    async def _run(
        self, name: str, start: Callable[[], Coroutine[Any, Any, T]], timeout: float | None
    ) -> T:
        """Run (or resume waiting for) the call ``name``; ``start`` checks the state and
        returns the work's coroutine."""
        current = self._operation
        if current is not None and current[0] != name and current[1].done():
            # a call that finished after its caller's timeout, never resumed
            if not current[1].cancelled():
                current[1].exception()
            current = self._operation = None
        if current is not None:
            if current[0] != name:
                raise KafkaError(
                    LocalError.conflict, f"{current[0]} is in progress", retriable=True
                )
            task = current[1]
        else:
            task = asyncio.get_running_loop().create_task(start())
            self._operation = (name, task)
        try:
            result: T = await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            message = f"{name} timed out (call it again to go on waiting)"
            raise KafkaError(LocalError.timed_out, message, retriable=True) from None
        finally:
            if task.done() and self._operation is not None and self._operation[1] is task:
                self._operation = None
        return result

    async def init_transactions(self, timeout: float | None = None) -> None:
        def start() -> Coroutine[Any, Any, None]:
            self.txn.check(TxnState.UNINITIALIZED, what="init_transactions")
            self.txn.transition(TxnState.INITIALIZING)
            return self._initialize()

        await self._run("init_transactions", start, timeout)

    def begin_transaction(self) -> None:
        current = self._operation
        if current is not None and not current[1].done():
            raise KafkaError(LocalError.conflict, f"{current[0]} is in progress", retriable=True)
        self.txn.begin()
        self._changed.clear()
        if current is not None:
            # a call that finished after its caller's timeout: a new transaction's
            # commit must not resume it
            self._operation = None
            if not current[1].cancelled():
                current[1].exception()

    async def commit_transaction(self, timeout: float | None = None) -> None:
        def start() -> Coroutine[Any, Any, None]:
            self.txn.start_commit()
            return self._commit()

        await self._run("commit_transaction", start, timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        def start() -> Coroutine[Any, Any, None]:
            self.txn.start_abort()
            return self._abort()

        await self._run("abort_transaction", start, timeout)

    async def send_offsets_to_transaction(
        self,
        offsets: OffsetsLike,
        group: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        metadata = (
            group if isinstance(group, ConsumerGroupMetadata) else ConsumerGroupMetadata(group)
        )
        if not isinstance(metadata.group_id, str) or not metadata.group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "send_offsets_to_transaction: group id")
        parsed = parse_offsets(offsets)

        def start() -> Coroutine[Any, Any, None]:
            self.txn.check(TxnState.IN_TRANSACTION, what="send_offsets_to_transaction")
            return self._send_offsets(parsed, metadata)

        if not parsed:  # nothing consumed: nothing to add (librdkafka's no-op)
            self.txn.check(TxnState.IN_TRANSACTION, what="send_offsets_to_transaction")
            return

        name = "send_offsets_to_transaction"
        await self._run(name, start, timeout)

    # -- the work ----------------------------------------------------------------------
    async def _initialize(self) -> None:
        await self._init_producer_id()
        self.txn.transition(TxnState.READY)

    async def _init_producer_id(self) -> None:
        sender = self.sender
        assert sender is not None

        async def attempt(connection: BrokerConnection) -> Any:
            version = connection.version_for(txn_requests.INIT_PRODUCER_ID_KEY)
            response = await connection.send(
                txn_requests.init_producer_id(
                    version,
                    self.txn_id,
                    self.transaction_timeout_ms,
                    sender.producer_id,
                    sender.producer_epoch,
                )
            )
            self._check(response.error_code, "InitProducerId", fatal_only=True)
            return response

        response = await self._with_coordinator(attempt, "InitProducerId")
        sender.reset_producer_state(response.producer_id, response.producer_epoch)
        logger.debug(
            "transactional id %s: producer id %d epoch %d",
            self.txn_id,
            response.producer_id,
            response.producer_epoch,
        )

    async def _commit(self) -> None:
        accumulator = self.accumulator
        assert accumulator is not None
        accumulator.flushing += 1
        accumulator.wakeup.set()
        try:
            await self._wait_delivered()
        finally:
            accumulator.flushing -= 1
        if self.txn.state is not TxnState.COMMITTING:
            assert self.txn.error is not None
            raise self.txn.error
        await self._wait_adding()
        if self.txn.has_content:
            try:
                await self._end_txn(commit=True)
            except KafkaError as error:
                if error.txn_requires_abort():
                    self._set_abortable(error)
                raise
        self.txn.completed()

    async def _wait_delivered(self) -> None:
        """Until every record is acknowledged or failed, or the state turns abortable."""
        accumulator = self.accumulator
        assert accumulator is not None
        empty = asyncio.ensure_future(accumulator.wait_empty())
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({empty, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            empty.cancel()
            changed.cancel()

    async def _wait_adding(self) -> None:
        task = self._add_task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    async def _abort(self) -> None:
        sender, accumulator = self.sender, self.accumulator
        assert sender is not None and accumulator is not None
        purged = purged_error()
        while True:
            for batch in accumulator.take_all():
                if batch.base_sequence >= 0:
                    sender.need_epoch_bump = True  # its sequences are a gap now
                accumulator.complete(batch, error=purged)
            if not sender.requests:
                break
            await asyncio.wait(set(sender.requests))
        await self._wait_adding()
        if self.txn.has_content and self.txn.state is not TxnState.FATAL_ERROR:
            await self._end_txn(commit=False)
        if sender.need_epoch_bump:
            self.txn.transition(TxnState.INITIALIZING)
            await self._init_producer_id()
        self.txn.completed()
        accumulator.wakeup.set()

    async def _end_txn(self, commit: bool) -> None:
        sender = self.sender
        assert sender is not None
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"

        async def attempt(connection: BrokerConnection) -> None:
            version = connection.version_for(txn_requests.END_TXN_KEY)
            response = await connection.send(
                txn_requests.end_txn(
                    version,
                    self.txn_id,
                    sender.producer_id,
                    sender.producer_epoch,
                    commit,
                )
            )
            self._check(response.error_code, what, fatal_only=not commit)

        await self._with_coordinator(attempt, what)

    async def _add_partitions(self, tps: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for ``tps`` until each is added or failed for good."""
        sender, accumulator = self.sender, self.accumulator
        assert sender is not None and accumulator is not None
        left = list(tps)

        async def attempt(connection: BrokerConnection) -> None:
            nonlocal left
            version = connection.version_for(txn_requests.ADD_PARTITIONS_TO_TXN_KEY)
            response = await connection.send(
                txn_requests.add_partitions(
                    version,
                    self.txn_id,
                    sender.producer_id,
                    sender.producer_epoch,
                    left,
                )
            )
            codes = txn_requests.add_partitions_errors(response)
            added = [tp for tp in left if codes.get(tp, ErrorCode.none) == ErrorCode.none]
            self.txn.partitions_added(added)
            left = [tp for tp in left if tp not in added]
            if added:
                accumulator.wakeup.set()
            if not left:
                return
            self._check(
                worst_error({codes[tp] for tp in left}), "AddPartitionsToTxn", fatal_only=False
            )

        try:
            await self._with_coordinator(attempt, "AddPartitionsToTxn", while_in_txn=True)
        except KafkaError as error:
            if not (error.fatal() or error.txn_requires_abort()):
                error = abortable_error(error.code(), f"AddPartitionsToTxn: {error.str()}")
            if error.fatal():
                self._set_fatal(error)
            else:
                self._set_abortable(error)
        except Exception as error:  # never leave the sender waiting on a dead task
            logger.exception("AddPartitionsToTxn failed")
            self._set_abortable(abortable_error(ErrorCode.unknown_server_error, repr(error)))
        finally:
            self.txn.partitions_failed(left, retry=False)
            if self.txn.pending:
                accumulator.wakeup.set()  # partitions that arrived meanwhile: next request

    async def _send_offsets(
        self,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        group: ConsumerGroupMetadata,
    ) -> None:
        sender = self.sender
        assert sender is not None

        async def add_offsets(connection: BrokerConnection) -> None:
            version = connection.version_for(txn_requests.ADD_OFFSETS_TO_TXN_KEY)
            response = await connection.send(
                txn_requests.add_offsets(
                    version,
                    self.txn_id,
                    sender.producer_id,
                    sender.producer_epoch,
                    group.group_id,
                )
            )
            self._check(response.error_code, "AddOffsetsToTxn", fatal_only=False)

        try:
            await self._with_coordinator(add_offsets, "AddOffsetsToTxn")
            self.txn.offsets_added = True
            if offsets:
                await self._txn_offset_commit(offsets, group)
        except KafkaError as error:
            if error.fatal():
                self._set_fatal(error)
            else:
                if not error.txn_requires_abort():
                    error = abortable_error(error.code(), error.str())
                self._set_abortable(error)
            raise error from None

    async def _txn_offset_commit(
        self,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        group: ConsumerGroupMetadata,
    ) -> None:
        sender = self.sender
        assert sender is not None
        left = dict(offsets)

        async def attempt(connection: BrokerConnection) -> None:
            nonlocal left
            version = connection.version_for(txn_requests.TXN_OFFSET_COMMIT_KEY)
            response = await connection.send(
                txn_requests.txn_offset_commit(
                    version,
                    self.txn_id,
                    sender.producer_id,
                    sender.producer_epoch,
                    group,
                    left,
                )
            )
            codes = txn_requests.txn_offset_commit_errors(response)
            left = {
                tp: value
                for tp, value in left.items()
                if codes.get(tp, ErrorCode.unknown_server_error) != ErrorCode.none
            }
            if left:
                worst = worst_error({codes.get(tp, ErrorCode.unknown_server_error) for tp in left})
                self._check(worst, "TxnOffsetCommit", fatal_only=False)

        await self._with_coordinator(
            attempt, "TxnOffsetCommit", key=group.group_id, key_type=GROUP_KEY_TYPE
        )

    # -- coordinators ------------------------------------------------------------------
    def _check(self, code: ErrorCode, what: str, *, fatal_only: bool) -> None:
        """Raise for an error answer: ``_Retry`` for the retried classes, else the
        classified KafkaError (abortable ones fatal when ``fatal_only``)."""
        if code == ErrorCode.none:
            return
        kind = classify(code)
        if kind is ErrorClass.REFIND:
            raise _Retry(f"{what}: {code.name}", refind=True)
        if kind is ErrorClass.RETRY:
            backoff = CONCURRENT_BACKOFF_S if code == ErrorCode.concurrent_transactions else None
            raise _Retry(f"{what}: {code.name}", backoff=backoff)
        if kind is ErrorClass.ABORTABLE and not fatal_only:
            raise abortable_error(code, what)
        raise fatal_error(code, what)

    async def _find_coordinator(self, key: str, key_type: int) -> int:
        cluster = self.cluster
        assert cluster is not None
        connection = await cluster.any_connection()
        version = connection.version_for(txn_requests.FIND_COORDINATOR_KEY)
        response = await connection.send(txn_requests.find_coordinator(version, key, key_type))
        if response.error_code != ErrorCode.none:
            self._check(response.error_code, f"FindCoordinator({key})", fatal_only=True)
        return int(response.node_id)

    async def _with_coordinator(
        self,
        attempt: Callable[[BrokerConnection], Awaitable[T]],
        what: str,
        *,
        key: str | None = None,
        key_type: int = TXN_KEY_TYPE,
        while_in_txn: bool = False,
    ) -> T:
        """``attempt`` at the coordinator of ``key`` (the transactional id by default),
        retried with backoff on ``_Retry`` and lost connections. A fatal error also
        makes the producer fatal. ``while_in_txn``: give up (``_Retry`` re-raised as
        an abortable error) once the transaction is no longer in progress."""
        cluster = self.cluster
        assert cluster is not None
        transactional = key is None
        lookup = self.txn_id if key is None else key
        node: int | None = self.coordinator_id if transactional else None
        backoff = self.backoff_s
        while True:
            delay: float | None = None
            try:
                if node is None:
                    node = await self._find_coordinator(lookup, key_type)
                    if transactional:
                        self.coordinator_id = node
                connection = await cluster.connection(node)
                return await attempt(connection)
            except _Retry as retry:
                logger.debug("%s: %s, retrying", what, retry)
                if retry.refind:
                    node = None
                    if transactional:
                        self.coordinator_id = None
                delay = retry.backoff
                failure: BaseException = retry
            except KafkaConnectionError as lost:
                logger.debug("%s: %s, retrying", what, lost)
                node = None
                if transactional:
                    self.coordinator_id = None
                failure = lost
            except KafkaError as error:
                if error.fatal():
                    self._set_fatal(error)
                raise
            except UnsupportedVersionError as error:
                fatal = fatal_error(ErrorCode.unsupported_version, f"{what}: {error}")
                self._set_fatal(fatal)
                raise fatal from None
            if while_in_txn and not self.txn.in_transaction:
                raise abortable_error(ErrorCode.unknown_server_error, f"{what}: {failure}")
            if self.txn.state is TxnState.FATAL_ERROR and self.txn.error is not None:
                raise self.txn.error
            await asyncio.sleep(delay if delay is not None else backoff)
            if delay is None:
                backoff = min(backoff * 2, self.backoff_max_s)

    async def close(self) -> None:
        for task in (self._add_task, self._operation[1] if self._operation else None):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

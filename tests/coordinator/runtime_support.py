"""Fakes for the coordinator runtime's tests: a partition writer whose appends, high
watermark and failures the test controls, and a shard that records what it is told."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from odradek.coordinator.group.loader import Damage, ReplayBatch
from odradek.coordinator.partition_writer import PartitionWriteError
from odradek.coordinator.runtime import CoordinatorError, CoordinatorResult
from odradek.records.codec import Record, decode_batch, encode_batch, encode_end_txn_marker

TopicPartition = tuple[str, int]


class FakeLog:
    def __init__(self) -> None:
        self.batches: list[list[Record]] = []  # ReplayBatch for transactional ones
        self.high_watermark = 0

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1][-1].offset + 1 if self.batches else 0


class FakeWriter:
    """``auto_hw``: the HW follows each append (one replica); otherwise the test moves it.
    ``hold``: appends wait for the test to release them (``release``), in order.
    ``fail``: the next appends raise PartitionWriteError with this code."""

    def __init__(self, *, auto_hw: bool = True) -> None:
        self.logs: dict[TopicPartition, FakeLog] = {}
        self.auto_hw = auto_hw
        self.hold = False
        self.held: list[asyncio.Future[None]] = []
        self.fail: str | None = None
        self.appended: list[tuple[TopicPartition, list[Record]]] = []
        self.reads: list[tuple[TopicPartition, int, int | None]] = []
        # The epoch each replica leads in; unset: ahead of any epoch a test loads in.
        self.leader_epochs: dict[TopicPartition, int] = {}
        self._hw_moved = asyncio.Event()

    def log(self, tp: TopicPartition) -> FakeLog:
        return self.logs.setdefault(tp, FakeLog())

    def write_directly(self, tp: TopicPartition, *pairs: tuple[bytes, bytes | None]) -> None:
        """Records some earlier leader wrote (the HW is not moved)."""
        log = self.log(tp)
        start = log.log_end_offset
        log.batches.append([Record(start + i, 0, k, v) for i, (k, v) in enumerate(pairs)])

    def set_high_watermark(self, tp: TopicPartition, offset: int) -> None:
        self.log(tp).high_watermark = offset
        self._hw_moved.set()
        self._hw_moved = asyncio.Event()

    def release(self) -> None:
        held, self.held = self.held, []
        for future in held:
            if not future.done():
                future.set_result(None)

    async def append(self, tp: TopicPartition, records: bytes) -> int:
        if self.fail is not None:
            raise PartitionWriteError(self.fail)
        batch = decode_batch(records)
        decoded = batch.records
        header = batch.header
        if self.hold:
            gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.held.append(gate)
            await gate
            if self.fail is not None:
                raise PartitionWriteError(self.fail)
        log = self.log(tp)
        start = log.log_end_offset
        stored = [replace(r, offset=start + i) for i, r in enumerate(decoded)]
        if header.is_transactional:
            stored = ReplayBatch(stored, header.producer_id, True, header.is_control)
        log.batches.append(stored)
        self.appended.append((tp, decoded))
        if self.auto_hw:
            self.set_high_watermark(tp, log.log_end_offset)
        return log.log_end_offset - 1

    async def append_marker(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> int:
        marker = encode_end_txn_marker(commit, coordinator_epoch)
        batch = encode_batch(
            [marker],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
            is_control=True,
        )
        return await self.append(tp, batch)

    def read(
        self, tp: TopicPartition, start: int, end: int | None = None
    ) -> Iterator[list[Record] | Damage]:
        self.reads.append((tp, start, end))
        log = self.log(tp)
        stop = log.high_watermark if end is None else end
        for batch in list(log.batches):
            kept = [r for r in batch if start <= r.offset < stop]
            if kept and isinstance(batch, ReplayBatch):
                yield ReplayBatch(kept, batch.producer_id, batch.transactional, batch.control)
            elif kept:
                yield kept

    def leader_epoch(self, tp: TopicPartition) -> int:
        return self.leader_epochs.get(tp, 1 << 30)

    def log_end_offset(self, tp: TopicPartition) -> int:
        return self.log(tp).log_end_offset

    def high_watermark(self, tp: TopicPartition) -> int:
        return self.log(tp).high_watermark

    async def wait_for_high_watermark(self, tp: TopicPartition, offset: int) -> None:
        while self.log(tp).high_watermark < offset:
            await self._hw_moved.wait()


class RecordingShard:
    """Keeps key -> value as replayed or applied; a deadline the test sets."""

    def __init__(self, partition: int, clock_now: list[int]) -> None:
        self.partition = partition
        self.now = clock_now
        self.state: dict[bytes, bytes | None] = {}
        self.replayed: list[int] = []
        self.loaded = 0
        self.unloaded = 0
        self.deadline: int | None = None
        self.ticks: list[int] = []

    def replay(self, record: Record) -> None:
        assert record.key is not None
        self.replayed.append(record.offset)
        self.state[record.key] = record.value

    def on_loaded(self) -> None:
        self.loaded += 1

    def on_unloaded(self) -> None:
        self.unloaded += 1

    def next_deadline_ms(self) -> int | None:
        return self.deadline

    def tick(self, now_ms: int) -> CoordinatorResult[None]:
        self.ticks.append(now_ms)
        self.deadline = None
        return self.put(b"tick", str(now_ms).encode(), None)

    def put(self, key: bytes, value: bytes | None, response: Any) -> CoordinatorResult[Any]:
        """A write that sets ``key`` only once appended (rolled back: nothing changes)."""
        old = self.state.get(key)

        def apply() -> None:
            self.state[key] = value

        def rollback(error: CoordinatorError) -> None:
            assert self.state.get(key) == old
            raise error

        return CoordinatorResult(response, [(key, value)], apply, rollback)

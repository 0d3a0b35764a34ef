"""Purgatories: produces waiting for the high watermark, fetches waiting for data.

How this works and why (seeds/000 "延迟操作", seeds/003 ACK 应答): a request that cannot
be answered at once parks a waiter on the partitions it waits for, and the partition
completes it when its state moves — the asyncio loop only awaits the waiter:

- ``DelayedProduces``: acks=all produces keyed by the offset the high watermark must
  pass (the batch's last offset + 1). When the HW reaches it, the waiter gets "NONE",
  or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below ``min.insync.replicas``
  after the append (Kafka checks the committed ISR at that moment); when the partition
  stops leading, NOT_LEADER_OR_FOLLOWER. Timeouts are the caller's: it stops waiting
  and ``discard``s the waiter, answering REQUEST_TIMED_OUT.
- ``DelayedDeleteRecords``: DeleteRecords waits until every live replica's log start
  offset has passed the requested offset (Kafka's low watermark), so a follower never
  keeps records the leader reported deleted; completed with the low watermark, or
  failed like a produce when leadership moves.
- ``FetchWatchers``: two waiter sets per partition, because consumers and followers
  wait for different things — consumers read below the HW and so wake when it advances;
  followers read to the log end and so wake on an append. One waiter of a fetch that
  spans partitions is parked on each, and the first wake-up makes it read again.
- ``HighWatermarkWaiters``: whoever needs the HW to reach an offset and nothing else —
  a coordinator's load, which serves only once the HW has passed what it replayed
  (coordinator/runtime.py). Completed with "NONE" when the HW reaches the offset (the
  ISR's size does not matter: the records are committed either way), failed with the
  error when the partition stops leading, so the load is woken by the advance itself
  instead of re-reading the HW on a timer.

Waiters are anything with ``done()`` and ``set_result`` (an ``asyncio.Future`` in the
server); this module does no I/O and knows no event loop, so tests drive it directly.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Protocol, TypeVar

T_contra = TypeVar("T_contra", contravariant=True)


class Waiter(Protocol[T_contra]):
    def done(self) -> bool: ...

    def set_result(self, result: T_contra, /) -> None: ...


class _OffsetWaiters:
    """Waiters of one partition, each for the HW to reach an offset, in offset order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Waiter[str]]] = []
        self._order = itertools.count()  # ties broken by arrival, never by waiter

    def __len__(self) -> int:
        return sum(1 for _, _, waiter in self._heap if not waiter.done())

    def add(self, offset: int, waiter: Waiter[str]) -> None:
        heapq.heappush(self._heap, (offset, next(self._order), waiter))

    def _complete(self, high_watermark: int, result: str) -> int:
        """Answer ``result`` to every waiter whose offset is <= ``high_watermark``."""
        completed = 0
        while self._heap and self._heap[0][0] <= high_watermark:
            _, _, waiter = heapq.heappop(self._heap)
            if not waiter.done():
                waiter.set_result(result)
                completed += 1
        return completed

    def fail_all(self, error: str) -> None:
        heap, self._heap = self._heap, []
        for _, _, waiter in heap:
            if not waiter.done():
                waiter.set_result(error)

    def discard(self, waiter: Waiter[str]) -> None:
        """A waiter whose owner went away (a produce timed out, a load was cancelled)."""
        kept = [entry for entry in self._heap if entry[2] is not waiter]
        if len(kept) != len(self._heap):
            heapq.heapify(kept)
            self._heap = kept


class DelayedProduces(_OffsetWaiters):
    """acks=all produces of one partition, completed in order of required offset."""

    def complete_up_to(self, high_watermark: int, isr_size: int, min_insync: int) -> int:
        """Answer every produce whose required offset is <= ``high_watermark``."""
        error = "NONE" if isr_size >= min_insync else "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
        return self._complete(high_watermark, error)


class HighWatermarkWaiters(_OffsetWaiters):
    """Waiters for "the HW is at least this offset" on one partition (a coordinator's
    load): the ISR's size does not matter, the records are committed either way."""

    def complete_up_to(self, high_watermark: int) -> int:
        """Answer "NONE" to every waiter whose offset is <= ``high_watermark``."""
        return self._complete(high_watermark, "NONE")


class DelayedDeleteRecords:
    """DeleteRecords of one partition waiting for the replicas' log start offsets."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, Waiter[int | str]]] = []

    def __len__(self) -> int:
        return sum(1 for _, waiter in self._waiting if not waiter.done())

    def add(self, required_offset: int, waiter: Waiter[int | str]) -> None:
        self._waiting.append((required_offset, waiter))

    def complete_up_to(self, low_watermark: int) -> None:
        """Answer (with ``low_watermark``) every request whose offset it reached."""
        still = []
        for required, waiter in self._waiting:
            if required <= low_watermark:
                if not waiter.done():
                    waiter.set_result(low_watermark)
            else:
                still.append((required, waiter))
        self._waiting = still

    def fail_all(self, error: str) -> None:
        waiting, self._waiting = self._waiting, []
        for _, waiter in waiting:
            if not waiter.done():
                waiter.set_result(error)

    def discard(self, waiter: Waiter[int | str]) -> None:
        self._waiting = [entry for entry in self._waiting if entry[1] is not waiter]


class FetchWatchers:
    """Parked fetches of one partition: consumers (HW advance), followers (log end)."""

    def __init__(self) -> None:
        self.consumers: set[Waiter[None]] = set()
        self.followers: set[Waiter[None]] = set()

    def watch(self, waiter: Waiter[None], *, follower: bool) -> None:
        (self.followers if follower else self.consumers).add(waiter)

    def discard(self, waiter: Waiter[None]) -> None:
        self.consumers.discard(waiter)
        self.followers.discard(waiter)

    def on_high_watermark(self) -> None:
        _wake(self.consumers)

    def on_log_end(self) -> None:
        _wake(self.followers)

    def wake_all(self) -> None:
        """The partition changed role or went away: every parked fetch reads again."""
        _wake(self.consumers)
        _wake(self.followers)


def _wake(waiters: set[Waiter[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
    waiters.clear()

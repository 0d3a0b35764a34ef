"""Transactions in one partition log: open and unreplicated ones, markers, aborted lists.

How this works and why (KIP-98): a transactional producer's batches carry the
transactional flag; its first one after the previous marker opens a transaction (the
producer state remembers its first offset, ``current_txn_first_offset``), and a marker
— a control batch of one record, COMMIT or ABORT, written by the transaction
coordinator through ``Log.append_marker`` or replicated — completes it. Consumers
reading committed data may only see offsets below the *last stable offset*: the first
offset of the oldest transaction that is not finished, and not beyond the high
watermark. A transaction still counts as unfinished after its marker until the high
watermark passes the marker (Kafka's "unreplicated transactions"): a marker that is
not yet replicated may still be truncated away by a leader change.

``TransactionTracker`` keeps that per log, fed with every batch the log appends or
replays (``apply``). It derives openings and completions from the producer state it
updates, so there is one rule for what opens and ends a transaction (producer_state.
``_apply``). It holds sorted lists of first offsets — open transactions, and completed
ones whose marker is at or past the high watermark — so the first unstable offset is
the head of two lists, and a deque of completed transactions in marker order, so a
high watermark move drops them from the front. An ABORT that completes a transaction
appends an ``AbortedTxn`` to the ``.txnindex`` of the segment holding the marker
(txn_index.py), with the last stable offset right after it: the first offset of the
oldest other open transaction, else the marker's offset + 1.

After a load or a truncation the tracker is rebuilt from the producer state (open
transactions from the snapshot, then the replay after it). Completed transactions
whose marker lies before the replay start are not known to be unreplicated any more:
as in Kafka, only those the replay sees are (``known_from`` says where it started).
``rebuild_txn_indexes`` rebuilds the ``.txnindex`` files of the segments recovery
re-read, replaying from the producer state at the first of them.

Concurrency: owned by the log's event loop, like the log.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from odradek.records.batch import BatchHeader
from odradek.records.codec import (
    decode_batch,
    decode_end_txn_marker,
    encode_batch,
    encode_end_txn_marker,
)
from odradek.records.errors import CorruptRecordError
from odradek.storage.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError
from odradek.storage.producer_state import ProducerEntry, ProducerStateManager
from odradek.storage.txn_index import AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from odradek.storage.log import Log
    from odradek.storage.segment import LogSegment

logger = logging.getLogger(__name__)


class Marker(NamedTuple):
    """What an end-transaction marker says."""

    commit: bool
    coordinator_epoch: int


MarkerOf = Callable[[BatchHeader], Marker | None]
IndexFor = Callable[[int], TransactionIndex]


def no_markers(header: BatchHeader) -> Marker | None:
    return None


class TransactionTracker:
    """Open and not-yet-replicated transactions of one log, by first offset."""

    def __init__(self) -> None:
        self._open: list[int] = []  # first offsets of open transactions, sorted
        self._unreplicated: list[int] = []  # first offsets of completed ones, marker >= HW
        self._completed: deque[tuple[int, int]] = deque()  # (marker, first), marker order
        self._high_watermark = 0
        self.known_from = 0  # completions before this offset were not replayed

    @property
    def first_unstable_offset(self) -> int | None:
        heads = [lst[0] for lst in (self._open, self._unreplicated) if lst]
        return min(heads) if heads else None

    @property
    def open_first_offsets(self) -> list[int]:
        return list(self._open)

    def reset(self, producers: Iterable[ProducerEntry], known_from: int) -> None:
        """Start over from a producer state (after a load or truncation)."""
        self._open = sorted(
            e.current_txn_first_offset for e in producers if e.current_txn_first_offset >= 0
        )
        self._unreplicated.clear()
        self._completed.clear()
        self.known_from = known_from

    def on_high_watermark(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the HW are stable now."""
        self._high_watermark = high_watermark
        while self._completed and self._completed[0][0] < high_watermark:
            _, first = self._completed.popleft()
            _remove(self._unreplicated, first)

    def apply(
        self,
        state: ProducerStateManager,
        headers: Iterable[BatchHeader],
        end_offset: int,
        marker_of: MarkerOf = no_markers,
        index_for: IndexFor | None = None,
    ) -> None:
        """Apply appended (or replayed) batches to the producer state and the tracker.

        ``marker_of`` decodes a control batch; ``index_for(offset)`` is the transaction
        index of the segment holding ``offset`` (None: replaying batches whose entries
        are already indexed).
        """
        staged: dict[int, ProducerEntry] = {}
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            before = staged.get(producer_id) or state.producers.get(producer_id)
            first = before.current_txn_first_offset if before is not None else -1
            marker = marker_of(header) if header.is_control else None
            coordinator_epoch = marker.coordinator_epoch if marker is not None else None
            after = state.stage(header, staged, coordinator_epoch)
            if first < 0 and after.current_txn_first_offset >= 0:
                bisect.insort(self._open, after.current_txn_first_offset)
            elif first >= 0 and after.current_txn_first_offset < 0:
                self._complete(producer_id, first, header.base_offset, marker, index_for)
        state.commit(staged, end_offset)

    def _complete(
        self,
        producer_id: int,
        first: int,
        marker_offset: int,
        marker: Marker | None,
        index_for: IndexFor | None,
    ) -> None:
        _remove(self._open, first)
        if marker is not None and not marker.commit and index_for is not None:
            stable = self._open[0] if self._open else marker_offset + 1
            index_for(marker_offset).append(AbortedTxn(producer_id, first, marker_offset, stable))
        if marker_offset >= self._high_watermark:
            bisect.insort(self._unreplicated, first)
            self._completed.append((marker_offset, first))


def _remove(values: list[int], value: int) -> None:
    index = bisect.bisect_left(values, value)
    if index < len(values) and values[index] == value:
        del values[index]


# -- markers --------------------------------------------------------------------------


def marker_batch(
    state: ProducerStateManager,
    producer_id: int,
    producer_epoch: int,
    marker: Marker,
    base_offset: int,
    leader_epoch: int,
    timestamp: int,
) -> bytes:
    """The control batch of a COMMIT/ABORT marker, after the fencing checks.

    InvalidProducerEpochError for an epoch older than the producer's;
    TransactionCoordinatorFencedError for a coordinator epoch older than the one the
    producer's last marker carried.
    """
    commit, coordinator_epoch = marker
    entry = state.producers.get(producer_id)
    if entry is not None:
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} epoch {producer_epoch} is older than "
                f"its current epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )
    record = encode_end_txn_marker(
        commit, coordinator_epoch, offset=base_offset, timestamp=timestamp
    )
    return encode_batch(
        [record],
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )


def decode_marker(data: bytes | memoryview, position: int = 0) -> Marker | None:
    """The marker in the control batch at ``position``; None if it is another control
    record. CorruptRecordError if the batch cannot be decoded."""
    batch = decode_batch(data, position, verify_crc=False)
    if not batch.records:
        raise CorruptRecordError(f"control batch at offset {batch.header.base_offset} is empty")
    key = batch.records[0].key
    if key is None or len(key) < 4 or key[2:4] not in (b"\x00\x00", b"\x00\x01"):
        return None  # not COMMIT/ABORT (a newer control type)
    return Marker(*decode_end_txn_marker(batch.records[0]))


def markers_in(view: memoryview, headers: Iterable[BatchHeader]) -> MarkerOf:
    """The markers of an append's control batches (decoded before the append, so a bad
    one refuses it whole), as a ``marker_of`` for ``TransactionTracker.apply``."""
    markers = {
        h.base_offset: decode_marker(view, h.position)
        for h in headers
        if h.is_control and h.producer_id >= 0
    }
    return lambda header: markers.get(header.base_offset)


def disk_marker_of(log: Log) -> MarkerOf:
    """Decodes control batches from the log's files (replays; markers are rare)."""

    def marker_of(header: BatchHeader) -> Marker | None:
        segment = log.segment_for(header.base_offset)
        assert segment is not None
        try:
            return decode_marker(os.pread(segment.fd, header.size, header.position))
        except CorruptRecordError as error:
            logger.warning("%s: undecodable marker: %s", log.name, error)
            return None

    return marker_of


# -- reads and recovery -------------------------------------------------------------


def collect_aborted(
    segments: Sequence[LogSegment], start_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start, upper bound), from ``segments`` in order
    (the first holding ``start``); stops at the first entry that proves completeness."""
    found: list[AbortedTxn] = []
    for segment in segments:
        if segment.txn_index.collect(start_offset, upper_bound_offset, found):
            break
    return found


def rebuild_txn_indexes(log: Log, from_offset: int) -> None:
    """Rebuild the ``.txnindex`` of every segment holding offsets >= ``from_offset``.

    The producer state at the first such segment (newest snapshot at or below it, then a
    replay) says which transactions were open; the batches after it say which ended.
    """
    start = max(from_offset, log.log_start_offset)
    segments = [s for s in log.segments if s.next_offset > start or s.base_offset >= start]
    for segment in segments:
        segment.txn_index.reset()
    if not segments:
        return
    start = max(segments[0].base_offset, log.log_start_offset)
    state = ProducerStateManager(log.directory, files=log.files)
    state.load_latest_snapshot(start)
    if state.map_end_offset < log.log_start_offset:
        state.reset(log.log_start_offset)
    tracker = TransactionTracker()
    tracker.reset(state.producers.values(), state.map_end_offset)
    marker_of = disk_marker_of(log)
    tracker.apply(state, log.iter_headers(state.map_end_offset, start), start, marker_of)

    def index_for(offset: int) -> TransactionIndex:
        segment = log.segment_for(offset)
        assert segment is not None
        return segment.txn_index

    tracker.apply(state, log.iter_headers(start), log.log_end_offset, marker_of, index_for)

"""Reading a ``__consumer_offsets`` partition back for the coordinator, damage and all.

How this works and why (seeds/000 故障恢复): on becoming a partition's leader the
coordinator replays every batch of it into groups and committed offsets. Recovery
checks only what lies above the recovery point, so a batch below it can still be
damaged (a bad disk, an edited file). A damaged batch must neither stop the load
(the partition's groups would answer COORDINATOR_LOAD_IN_PROGRESS forever) nor be
half-used; ``scan`` yields each batch's records, or a ``Damage`` saying where and why
a batch could not be read, and goes on with the next readable batch:

- a batch whose header walks correctly but which fails its CRC or whose records do
  not decode is skipped whole;
- a header that cannot be read (bad magic, a length running past the segment) hides
  where the next batch starts: the scan resumes at the next batch start the offset
  index knows (an entry every ``index.interval.bytes``), or at the next segment.

Later batches are used, unlike Kafka's loader, which stops at the first error: new
commits are appended after the damage, so a loader that stopped there would make
every commit acknowledged since this start invisible after the next one. What a
skipped batch held falls back to the values committed before it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from odradek.records.codec import Record, decode_batch
from odradek.records.errors import CorruptRecordError
from odradek.storage.log import Log
from odradek.storage.segment import LogSegment


class ReplayBatch(list[Record]):
    """One batch's records, with the header fields a transactional replay needs: a
    transactional batch's records count only once its producer's COMMIT marker (a
    control batch) is replayed, and an ABORT marker drops them."""

    __slots__ = ("control", "producer_id", "transactional")

    def __init__(
        self, records: list[Record], producer_id: int, transactional: bool, control: bool
    ) -> None:
        super().__init__(records)
        self.producer_id = producer_id
        self.transactional = transactional
        self.control = control


@dataclass(frozen=True, slots=True)
class Damage:
    """A stretch of a segment that could not be replayed."""

    path: str
    position: int
    reason: str
    skipped_to: int | None  # where reading went on in this segment; None: next segment

    def describe(self) -> str:
        where = (
            f"reading goes on at position {self.skipped_to}"
            if self.skipped_to is not None
            else "the rest of this segment is skipped"
        )
        return f"{self.path} position {self.position}: {self.reason}; {where}"


def scan(log: Log, start_offset: int, end_offset: int) -> Iterator[list[Record] | Damage]:
    """The records of each batch holding offsets in [start_offset, end_offset), in order
    (each a ``ReplayBatch``), with a ``Damage`` in place of each part that cannot be read."""
    for segment in list(log.segments):
        if segment.base_offset >= end_offset:
            return
        if segment.next_offset <= start_offset:
            continue
        done = yield from _scan_segment(segment, start_offset, end_offset)
        if done:
            return


def _scan_segment(
    segment: LogSegment, start_offset: int, end_offset: int
) -> Generator[list[Record] | Damage, None, bool]:
    """Yields as ``scan``; returns True once a batch at or past ``end_offset`` is seen."""
    position, last_good = 0, segment.base_offset - 1
    end = segment.size
    while position < end:
        headers = segment.iter_headers(position, end)
        try:
            for header in headers:
                position = header.position + header.size
                if header.base_offset >= end_offset:
                    return True
                if header.last_offset < start_offset:
                    last_good = header.last_offset
                    continue
                data = os.pread(segment.fd, header.size, header.position)
                try:
                    records = decode_batch(data).records
                except CorruptRecordError as error:
                    yield Damage(
                        str(segment.log_path),
                        header.position,
                        f"batch of offsets {header.base_offset}-{header.last_offset} "
                        f"unreadable ({_reason(error, segment)})",
                        position,
                    )
                    continue
                last_good = header.last_offset
                yield ReplayBatch(
                    records, header.producer_id, header.is_transactional, header.is_control
                )
            return False
        except CorruptRecordError as error:
            failed = position
            resume = _next_indexed_position(segment, last_good, failed)
            yield Damage(str(segment.log_path), failed, _reason(error, segment), resume)
            if resume is None:
                return False
            position = resume
    return False


# Errors of the batch decoder say where the batch was in *its* buffer (0): dropped.
_WHERE = re.compile(
    r"^batch at (position \d+ \(base offset -?\d+\)|base offset -?\d+ \(position \d+\)):? "
)


def _reason(error: CorruptRecordError, segment: LogSegment) -> str:
    text = str(error).removeprefix(f"{segment.log_path}: ")
    return _WHERE.sub("", text)


def _next_indexed_position(segment: LogSegment, last_good: int, failed: int) -> int | None:
    """The first batch start the offset index knows beyond ``failed``, if any.

    Index entries map a batch's last offset to its position, both increasing, so the
    position ``lookup(o)`` gives grows with ``o``: search the smallest ``o`` whose entry
    lies beyond ``failed``.
    """
    index = segment.offset_index

    def position_for(offset: int) -> int:
        return index.lookup(offset)[1]  # 0 below the first entry

    low, high = last_good + 1, max(segment.next_offset, last_good + 1)
    if position_for(high) <= failed:
        return None
    while low < high:
        middle = (low + high) // 2
        if position_for(middle) > failed:
            high = middle
        else:
            low = middle + 1
    return position_for(low)

"""``odradek dump-log`` for ``.index`` and ``.timeindex`` files: print or verify.

Entries are printed as absolute offsets. With ``--verify-index-only`` the entries and
the sibling ``.log``'s batch headers are walked together in one forward pass (both
are sorted), so verification costs one scan of the headers and no per-batch memory.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from odradek.cli.dump_common import (
    InvalidBatch,
    Target,
    TornTail,
    Window,
    open_regular,
    scan_headers,
    tail_text,
)
from odradek.records.batch import NO_TIMESTAMP, BatchHeader
from odradek.storage.index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from odradek.storage.segment import LOG_SUFFIX

# Index bytes read at a time: a whole number of entries of either kind (96 KiB).
INDEX_CHUNK_BYTES: Final = OFFSET_ENTRY_SIZE * TIME_ENTRY_SIZE * 1024
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
assert _OFFSET_ENTRY.size == OFFSET_ENTRY_SIZE and _TIME_ENTRY.size == TIME_ENTRY_SIZE


@contextmanager
def _index_entries(target: Target, entry: struct.Struct) -> Iterator[Iterator[tuple[int, ...]]]:
    """Open an index file; the iterator yields its entries a chunk at a time."""
    with open_regular(target.path) as (fd, size):
        yield _iter_entries(fd, size, entry)


def _iter_entries(fd: int, size: int, entry: struct.Struct) -> Iterator[tuple[int, ...]]:
    """Entries of ``size`` bytes of index; TornTail for a partial last entry."""
    whole = size - size % entry.size
    position = 0
    while position < whole:
        data = os.pread(fd, min(INDEX_CHUNK_BYTES, whole - position), position)
        usable = len(data) - len(data) % entry.size
        if not usable:
            break  # the file shrank under us
        yield from entry.iter_unpack(data[:usable])
        position += usable
    if whole < size:
        raise TornTail(whole, size - whole)


def dump_offset_index(target: Target) -> bool:
    return _dump_index(target, _OFFSET_ENTRY, _OffsetIndexCheck)


def dump_time_index(target: Target) -> bool:
    return _dump_index(target, _TIME_ENTRY, _TimeIndexCheck)


def _dump_index(target: Target, entry: struct.Struct, check_type: type[_IndexCheck]) -> bool:
    base_offset = target.base_offset
    if target.options.verify_only:
        return _verify_index(target, entry, check_type(base_offset))
    show = _offset_entry_text if entry is _OFFSET_ENTRY else _time_entry_text
    with _index_entries(target, entry) as entries:
        target.emit(f"Dumping {target.path}")
        try:
            for fields in entries:
                target.emit(show(base_offset, fields))
        except TornTail as tail:
            target.emit(tail_text(target, tail))
            return False
    return True


def _offset_entry_text(base_offset: int, fields: tuple[int, ...]) -> str:
    relative_offset, position = fields
    return f"offset: {base_offset + relative_offset} position: {position}"


def _time_entry_text(base_offset: int, fields: tuple[int, ...]) -> str:
    timestamp, relative_offset = fields
    return f"timestamp: {timestamp} offset: {base_offset + relative_offset}"


def _verify_index(target: Target, entry: struct.Struct, check: _IndexCheck) -> bool:
    log_path = target.sibling(LOG_SUFFIX)
    with open_regular(log_path) as (fd, size), _index_entries(target, entry) as entries:
        target.emit(f"Dumping {target.path}")
        walker = _HeaderWalker(Window(fd), size)
        count, problems = 0, 0
        try:
            for fields in entries:
                count += 1
                problem = check.entry(fields, walker)
                if problem is not None:
                    problems += 1
                    target.emit(problem)
        except TornTail as tail:
            problems += 1
            target.emit(tail_text(target, tail))
        if walker.damage is not None:
            problems += 1
            target.emit(f"{log_path}: {walker.damage}; later entries could not be checked")
    verdict = {0: "no mismatches", 1: "1 mismatch"}.get(problems, f"{problems} mismatches")
    noun = "entry" if count == 1 else "entries"
    target.emit(f"Verified {count} index {noun} against {log_path.name}: {verdict}")
    return not problems


class _HeaderWalker:
    """A forward-only walk over a log's batch headers, with the max timestamp so far."""

    def __init__(self, window: Window, size: int) -> None:
        self._headers = scan_headers(window, size)
        self.size = size
        self.current: BatchHeader | None = None
        self.max_timestamp = NO_TIMESTAMP  # over every batch up to and including current
        self.done = False
        self.damage: str | None = None

    def _advance(self) -> bool:
        if self.done:
            return False
        try:
            header = next(self._headers, None)
        except InvalidBatch as invalid:
            header, self.damage = None, f"invalid batch at position {invalid.position}: {invalid}"
        except TornTail as tail:
            header = None
            self.damage = f"{tail.length} invalid bytes at the end (position {tail.position})"
        if header is None:
            self.done = True
            return False
        self.current = header
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        return True

    def at_position(self, position: int) -> BatchHeader | None:
        """The batch starting exactly at ``position``, if one does (never moves back)."""
        while self.current is None or self.current.position < position:
            if not self._advance():
                return None
        return self.current if self.current.position == position else None

    def holding(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` (never moves back)."""
        while self.current is None or self.current.last_offset < offset:
            if not self._advance():
                return None
        return self.current


class _IndexCheck:
    """Checks one index entry at a time against the log; returns a problem or None."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.previous: tuple[int, int] | None = None

    def entry(self, fields: tuple[int, ...], walker: _HeaderWalker) -> str | None:
        raise NotImplementedError


class _OffsetIndexCheck(_IndexCheck):
    """(o, p): the batch starting at position p has last offset o; both strictly rise."""

    def entry(self, fields: tuple[int, ...], walker: _HeaderWalker) -> str | None:
        offset, position = self.base_offset + fields[0], fields[1]
        previous, self.previous = self.previous, (offset, position)
        if previous is not None and (offset <= previous[0] or position <= previous[1]):
            self.previous = previous  # keep checking order against the last good entry
            return (
                f"Index entry offset {offset} position {position} does not follow "
                f"offset {previous[0]} position {previous[1]}"
            )
        if offset < self.base_offset:
            return f"Index offset {offset} is below the segment's base offset {self.base_offset}"
        header = walker.at_position(position)
        if header is None:
            return _missing_batch_text(offset, position, walker)
        if header.last_offset != offset:
            return (
                f"Index offset {offset} points to position {position} but the batch "
                f"there has last offset {header.last_offset}"
            )
        return None


def _missing_batch_text(offset: int, position: int, walker: _HeaderWalker) -> str:
    if walker.damage is not None:
        return f"Index offset {offset} points to position {position}, past the log's damage"
    if position >= walker.size:
        return (
            f"Index offset {offset} points to position {position}, past the end of "
            f"the log ({walker.size} bytes)"
        )
    return f"Index offset {offset} points to position {position}, which is not a batch start"


class _TimeIndexCheck(_IndexCheck):
    """(t, o): t is the largest timestamp of the batches up to the one holding o.

    The segment writes (max timestamp so far, last offset of the batch that set it),
    so timestamps strictly rise and offsets never fall.
    """

    def entry(self, fields: tuple[int, ...], walker: _HeaderWalker) -> str | None:
        timestamp, offset = fields[0], self.base_offset + fields[1]
        previous, self.previous = self.previous, (timestamp, offset)
        if previous is not None and (timestamp <= previous[0] or offset < previous[1]):
            self.previous = previous
            return (
                f"Time index entry timestamp {timestamp} offset {offset} does not follow "
                f"timestamp {previous[0]} offset {previous[1]}"
            )
        if offset < self.base_offset:
            return (
                f"Time index offset {offset} is below the segment's base offset {self.base_offset}"
            )
        if walker.holding(offset) is None:
            where = "past the log's damage" if walker.damage else "past the last offset in the log"
            return f"Time index offset {offset} (timestamp {timestamp}) is {where}"
        if walker.max_timestamp != timestamp:
            return (
                f"Time index timestamp {timestamp} for offset {offset} but the largest "
                f"timestamp up to the batch holding it is {walker.max_timestamp}"
            )
        return None

"""Transaction index of one log segment (``.txnindex``): the aborted transactions.

How this works and why: a consumer reading with isolation_level=read_committed gets,
with each fetch, the list of aborted transactions whose data overlaps what it reads,
so it can drop their records (KIP-98). Finding them by scanning batches for ABORT
markers on every fetch would cost a read of the log; instead, whenever an ABORT marker
completes a transaction that wrote data, the log appends one entry to the
``.txnindex`` of the segment the marker lands in. A fetch reads these small files
from the segment holding its start offset on, and stops at the first entry that proves
no later segment can hold an aborted transaction starting below its upper bound (see
``collect``).

On-disk format (Kafka's, big-endian), 34 bytes per entry, in marker-offset order::

    version int16 (= 0) | producerId int64 | firstOffset int64 | lastOffset int64
    | lastStableOffset int64

``firstOffset`` is the transaction's first batch, ``lastOffset`` its ABORT marker,
``lastStableOffset`` the log's last stable offset once the marker was appended (the
first offset of the oldest other transaction still open then, else ``lastOffset + 1``).
The file is named ``<base offset, 20 digits>.txnindex`` and, as in Kafka, created only
when the segment gets its first entry: most segments never have one.

The index is derived data, like the offset index: recovery rebuilds it for every
segment it re-reads (from the producer state at the segment's start and the markers
in its batches). A file whose size is not a multiple of 34 (a write torn by a crash)
has the partial entry cut off at load, and an entry with an unknown version ends the
file there. Truncation drops the entries whose ``lastOffset`` is at or past the
truncation offset; the file is renamed and deleted with its segment.

Concurrency: owned by the log's event loop. Entries are kept in memory (a segment has
few) and written with ``pwrite`` as they are added; a write that fails (full disk)
stays pending and is retried by ``write_pending`` (flush, roll, close). ``fsync`` only
syncs the descriptor, so it may run on the flush worker thread like the segment's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

TXN_INDEX_SUFFIX: Final = ".txnindex"
TXN_ENTRY_SIZE: Final = 34
TXN_INDEX_VERSION: Final = 0

_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == TXN_ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, first data offset, ABORT marker offset,
    and the last stable offset right after the marker was appended."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            TXN_INDEX_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


def decode_entries(data: bytes) -> tuple[list[AbortedTxn], int]:
    """Whole, version-0 entries from the start of ``data``; also how many bytes they take.

    A partial trailing entry (a torn write) or an entry with another version ends the
    list: what follows it is not trusted.
    """
    entries = []
    position = 0
    while position + TXN_ENTRY_SIZE <= len(data):
        version, producer_id, first, last, stable = _ENTRY.unpack_from(data, position)
        if version != TXN_INDEX_VERSION:
            break
        entries.append(AbortedTxn(producer_id, first, last, stable))
        position += TXN_ENTRY_SIZE
    return entries, position


class TransactionIndex:
    """The aborted transactions whose ABORT marker lies in one segment."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd = -1
        self._written = 0  # entries already in the file
        if path.exists():
            self._fd = os.open(path, os.O_RDWR)
            size = os.fstat(self._fd).st_size
            self.entries, valid = decode_entries(os.pread(self._fd, size, 0))
            if valid != size:  # torn tail or garbage: cut it off
                os.ftruncate(self._fd, valid)
            self._written = len(self.entries)

    @property
    def exists(self) -> bool:
        return self._fd >= 0

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry (markers arrive in offset order); the file is created if needed."""
        assert not self.entries or entry.last_offset > self.entries[-1].last_offset
        self.entries.append(entry)
        with contextlib.suppress(OSError):  # retried by write_pending (flush, close)
            self.write_pending()

    def write_pending(self) -> None:
        if self._written == len(self.entries):
            return
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        data = b"".join(e.encode() for e in self.entries[self._written :])
        written = os.pwrite(self._fd, data, self._written * TXN_ENTRY_SIZE)
        if written != len(data):
            raise OSError(errno.ENOSPC, f"short write to {self.path}")
        self._written = len(self.entries)

    def collect(self, start_offset: int, upper_bound_offset: int, into: list[AbortedTxn]) -> bool:
        """Add the entries overlapping [start, upper bound) to ``into``; True when complete.

        Complete means an entry's last stable offset reaches the upper bound: when that
        marker was written every transaction starting below the bound had ended, so no
        later segment holds another one that overlaps.
        """
        for entry in self.entries:
            if entry.last_offset >= start_offset and entry.first_offset < upper_bound_offset:
                into.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        if self._fd >= 0:
            os.ftruncate(self._fd, min(self._written, keep) * TXN_ENTRY_SIZE)
        self._written = min(self._written, keep)

    def reset(self) -> None:
        """Forget every entry and remove the file (recovery rebuilds it)."""
        self.close()
        self.path.unlink(missing_ok=True)
        self.entries.clear()
        self._written = 0

    def fsync(self) -> None:
        """fsync the descriptor only (any thread); ``write_pending`` first, on the loop."""
        fd = self._fd
        if fd >= 0:
            os.fsync(fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.write_pending()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def abandon(self) -> None:
        """Close without writing anything (tests simulating a killed process)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def read_txn_index(path: Path) -> list[AbortedTxn]:
    """The whole entries of a ``.txnindex`` file (tools, tests)."""
    return decode_entries(path.read_bytes())[0]

"""Sparse offset and time indexes of one log segment (``.index`` and ``.timeindex``).

How this works and why: an index is a sorted list of fixed-size entries, so a lookup
is a binary search. Entries live in memory in two ``array`` columns (a few bytes per
entry, no per-entry Python objects) and are appended to the file in batches: new
entries wait in ``_pending`` until ``write_pending()`` (called on flush, roll, close and
whenever ``PENDING_ENTRIES_MAX`` accumulate). The file is therefore always a *prefix*
of the true index; an index is derived data, and recovery rebuilds it from the
``.log`` for every segment past the recovery point, so a lagging file is never wrong,
only short. Loading validates the file (whole entries, strictly increasing keys,
positions inside the log) and raises ``IndexCorruptError`` so the caller rebuilds.

On-disk formats (Kafka's, big-endian):

- ``.index``: entries of ``relativeOffset int32, position int32`` (8 bytes);
  relativeOffset = offset - segment base offset. An entry (o, p) means "the batch
  starting at file position p has its last offset at o".
- ``.timeindex``: entries of ``timestamp int64, relativeOffset int32`` (12 bytes);
  (t, o) means "t is the largest timestamp of all records up to offset o".

Concurrency: owned by the event loop that owns the log; not thread-safe.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import struct
from array import array
from pathlib import Path
from typing import Final

from odradek.storage.errors import StorageError

OFFSET_ENTRY_SIZE: Final = 8
TIME_ENTRY_SIZE: Final = 12
# Bound on entries held in memory before they are written: 512 entries cover
# 2 MiB of log at the default index.interval.bytes and cost one small write.
PENDING_ENTRIES_MAX: Final = 512

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(StorageError):
    """An index file that does not match its log; the caller rebuilds it."""


class _IndexFile:
    """Shared file handling: open/append/truncate/fsync of a fixed-entry-size file."""

    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        assert max_entries >= 1
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._pending = bytearray()
        self._pending_count = 0
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._file_entries = 0  # entries already written to the file

    def _read_file(self) -> bytes:
        size = os.fstat(self._fd).st_size
        if size % self.entry_size:
            raise IndexCorruptError(
                f"{self.path}: size {size} is not a multiple of {self.entry_size}"
            )
        return os.pread(self._fd, size, 0)

    def _stage(self, entry: bytes) -> None:
        self._pending += entry
        self._pending_count += 1
        if self._pending_count >= PENDING_ENTRIES_MAX:
            # Disk full or failing: the entries stay staged and the append that staged
            # them stands (its data is written); flush, roll or close write them.
            with contextlib.suppress(OSError):
                self.write_pending()

    def write_pending(self) -> None:
        """Append staged entries to the file (page cache; ``fsync`` makes them durable)."""
        if not self._pending:
            return
        written = os.pwrite(self._fd, self._pending, self._file_entries * self.entry_size)
        if written != len(self._pending):  # a full disk: retried from the same place
            raise OSError(errno.ENOSPC, f"short write to {self.path}")
        self._file_entries += self._pending_count
        self._pending.clear()
        self._pending_count = 0

    def _truncate_file(self, entries: int) -> None:
        self._pending.clear()
        self._pending_count = 0
        os.ftruncate(self._fd, entries * self.entry_size)
        self._file_entries = entries

    def fsync(self) -> None:
        """fsync the descriptor only; call ``write_pending`` first, on the owning loop."""
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            self.write_pending()
            os.close(self._fd)
            self._fd = -1

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    """Sparse map offset → file position of the batch holding it."""

    entry_size = OFFSET_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._offsets = array("q")  # absolute offsets (int64 avoids re-adding base on lookup)
        self._positions = array("q")

    def load(self, log_size: int) -> None:
        """Read and validate the file; IndexCorruptError if it cannot belong to the log."""
        data = self._read_file()
        offsets, positions = array("q"), array("q")
        last_offset, last_position = self.base_offset - 1, -1
        for relative, position in _OFFSET_ENTRY.iter_unpack(data):
            offset = self.base_offset + relative
            if relative < 0 or offset <= last_offset or position <= last_position:
                raise IndexCorruptError(f"{self.path}: entries not strictly increasing at {offset}")
            if position >= log_size:
                raise IndexCorruptError(
                    f"{self.path}: position {position} beyond log size {log_size}"
                )
            offsets.append(offset)
            positions.append(position)
            last_offset, last_position = offset, position
        self._offsets, self._positions = offsets, positions
        self._file_entries = len(offsets)

    @property
    def entries(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_offset(self) -> int:
        return self._offsets[-1] if self._offsets else self.base_offset

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        assert 0 <= relative <= 0x7FFFFFFF
        assert not self._offsets or (offset > self._offsets[-1] and position > self._positions[-1])
        self._offsets.append(offset)
        self._positions.append(position)
        self._pending += _OFFSET_ENTRY.pack(relative, position)
        self._pending_count += 1
        if self._pending_count >= PENDING_ENTRIES_MAX:
            # Disk full or failing: the entries stay staged and the append that staged
            # them stands (its data is written); flush, roll or close write them.
            with contextlib.suppress(OSError):
                self.write_pending()

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= ``offset``, or (base_offset, 0)."""
        index = bisect.bisect_right(self._offsets, offset) - 1
        if index < 0:
            return self.base_offset, 0
        return self._offsets[index], self._positions[index]

    def lookup_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 when none)."""
        index = bisect.bisect_right(self._positions, position) - 1
        return self._positions[index] if index >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset)
        self._drop_from(keep)

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry whose batch starts at or beyond ``position``."""
        keep = bisect.bisect_left(self._positions, position)
        self._drop_from(keep)

    def _drop_from(self, keep: int) -> None:
        if keep >= len(self._offsets):
            return
        del self._offsets[keep:]
        del self._positions[keep:]
        self.write_pending()
        self._truncate_file(keep)

    def reset(self) -> None:
        self._drop_from(0)
        self._truncate_file(0)


class TimeIndex(_IndexFile):
    """Sparse map max timestamp so far → offset; timestamps strictly increase."""

    entry_size = TIME_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._timestamps = array("q")
        self._offsets = array("q")

    def load(self, next_offset: int) -> None:
        """Read and validate; ``next_offset`` is one past the segment's last offset."""
        data = self._read_file()
        timestamps, offsets = array("q"), array("q")
        last_timestamp, last_offset = None, self.base_offset - 1
        for timestamp, relative in _TIME_ENTRY.iter_unpack(data):
            offset = self.base_offset + relative
            if (last_timestamp is not None and timestamp <= last_timestamp) or offset < last_offset:
                raise IndexCorruptError(f"{self.path}: entries not increasing at {timestamp}")
            if relative < 0 or offset >= next_offset:
                raise IndexCorruptError(f"{self.path}: offset {offset} outside the segment")
            timestamps.append(timestamp)
            offsets.append(offset)
            last_timestamp, last_offset = timestamp, offset
        self._timestamps, self._offsets = timestamps, offsets
        self._file_entries = len(offsets)

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int] | None:
        if not self._timestamps:
            return None
        return self._timestamps[-1], self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if it raises the largest timestamp indexed so far."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if self._offsets and offset < self._offsets[-1]:
            return
        if not skip_full_check and self.is_full:
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        self._stage(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry with a timestamp strictly below ``timestamp``.

        Every record at or before that offset has a smaller timestamp, so a search for
        the first record with timestamp >= ``timestamp`` may start after it. Returns
        the segment base offset when no entry qualifies.
        """
        index = bisect.bisect_left(self._timestamps, timestamp) - 1
        return self._offsets[index] if index >= 0 else self.base_offset

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at offsets >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset)
        if keep >= len(self._offsets):
            return
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self.write_pending()
        self._truncate_file(keep)

    def reset(self) -> None:
        del self._timestamps[:]
        del self._offsets[:]
        self._truncate_file(0)

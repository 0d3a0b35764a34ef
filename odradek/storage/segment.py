"""LogSegment: one ``.log`` file of whole record batches plus its two sparse indexes.

How this works and why: a segment is an append-only file of v2 batches whose offsets
start at ``base_offset`` (the 20-digit file name). Appends go to the page cache with a
single ``pwritev`` per append (the batch bytes are never copied into a new buffer);
every ``index.interval.bytes`` of log an ``.index`` entry (last offset of a batch →
its position) and, when the largest timestamp grows, a ``.timeindex`` entry are
added. Lookups binary-search the index and then walk batch headers (61-byte reads)
from the entry found, so their cost depends on the index interval, not the segment
size. Reads return a byte range ``(fd, position, length)`` for ``os.sendfile``;
nothing is read into Python on the fetch path.

Files: ``<base>.log``, ``<base>.index``, ``<base>.timeindex`` (formats in index.py)
and, once the segment holds an ABORT marker, ``<base>.txnindex`` (txn_index.py);
a segment being deleted has ``.deleted`` appended to each name, and its descriptor
stays open until the delete delay passes so in-flight sendfile ranges stay valid.

Concurrency: owned by one event loop; ``fsync`` may run on a worker thread because
it only syncs descriptors.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from odradek.records.batch import (
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    compute_crc,
    unpack_header,
)
from odradek.records.errors import CorruptRecordError
from odradek.records.file_range import FileRange
from odradek.storage.errors import CommittedDataCorruptError, StorageError
from odradek.storage.index import (
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    IndexCorruptError,
    OffsetIndex,
    TimeIndex,
)
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
DELETED_SUFFIX: Final = ".deleted"
# Header scans read this much at a time: several small batches per read, and a
# large batch costs one read per header rather than per byte.
SCAN_CHUNK_BYTES: Final = 8 * 1024
# pwritev takes at most this many buffers per call (POSIX IOV_MAX; 1024 on Linux).
IOV_MAX: Final = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
# Recovery reads the log in chunks of this size (plus any batch larger than it).
RECOVERY_CHUNK_BYTES: Final = 4 * 1024 * 1024


class BatchMeta(NamedTuple):
    """What a segment needs to know about each appended batch."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


@dataclass(slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    batches: int
    corruption: str | None


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        scan_chunk_bytes: int = SCAN_CHUNK_BYTES,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        # Appended to every file name: ``.cleaned`` while the cleaner writes a segment,
        # ``.swap`` while it is swapped in (cleaner/swap.py); "" for a live segment.
        self.suffix = suffix
        # How much header scans read at once: a parameter so tests can put the
        # boundaries of these reads anywhere (inside headers, at batch ends).
        self.scan_chunk_bytes = scan_chunk_bytes
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX + suffix)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX + suffix),
            base_offset,
            max(1, max_index_bytes // OFFSET_ENTRY_SIZE),
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset,
            max(1, max_index_bytes // TIME_ENTRY_SIZE),
        )
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX + suffix)
        )
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        # Timestamp of the first batch (segment.ms counts from it, as Kafka does).
        self.first_batch_timestamp: int | None = None
        self.bytes_since_last_index_entry = 0
        self.deleted = False

    # -- loading ------------------------------------------------------------------
    def load(self) -> None:
        """Open a segment that was shut down cleanly: trust its indexes after checks.

        Raises IndexCorruptError if either index does not fit the log; the caller
        then calls ``recover``.
        """
        self.offset_index.load(self.size)
        last_indexed_offset, position = self.offset_index.lookup(2**63 - 1)
        last_header = None
        for header in self.iter_headers(position):
            # An entry (o, p) means "the batch at p ends at o": check the last one.
            if (
                last_header is None
                and self.offset_index.entries
                and header.last_offset != last_indexed_offset
            ):
                raise IndexCorruptError(
                    f"{self.log_path}: index entry {last_indexed_offset} points at a "
                    f"batch ending at {header.last_offset}"
                )
            last_header = header
        if last_header is None:
            if self.size:
                raise IndexCorruptError(f"{self.log_path}: no batch at indexed position")
            self.next_offset = self.base_offset
        else:
            self.next_offset = last_header.next_offset
        if self.offset_index.entries and last_indexed_offset >= self.next_offset:
            raise IndexCorruptError(f"{self.log_path}: index points past the log end")
        self.time_index.load(self.next_offset)
        entry = self.time_index.last_entry
        if entry is None and self.size:
            raise IndexCorruptError(f"{self.log_path}: empty time index for a non-empty log")
        if entry is not None:
            self.max_timestamp, self.offset_of_max_timestamp = entry
        self.first_batch_timestamp = self._first_batch_timestamp()
        self.bytes_since_last_index_entry = self.size - position

    def _first_batch_timestamp(self) -> int | None:
        for header in self.iter_headers(0):
            return header.max_timestamp
        return None

    def recover(
        self,
        on_batch: Callable[[BatchHeader], None] | None = None,
        next_segment_base: int | None = None,
        chunk_bytes: int = RECOVERY_CHUNK_BYTES,
        committed_offset: int = 0,
    ) -> RecoveryResult:
        """Re-validate every batch, rebuild both indexes, cut a torn or corrupt tail.

        Batches must have valid length, magic and CRC and strictly increasing
        offsets starting at or after the base offset, within int32 of it and below
        ``next_segment_base`` (baseOffset is outside the CRC, so a flipped bit there
        is only caught by these bounds). If the valid batches end below
        ``committed_offset`` (data known to have been flushed), nothing is cut:
        CommittedDataCorruptError names the file and position instead. The transaction
        index is removed: the log rebuilds it from the producer state (log_loader.py).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self.bytes_since_last_index_entry = 0
        file_size = os.fstat(self.fd).st_size
        position, batches, corruption = 0, 0, None
        try:
            for header, valid in self._scan_full(file_size, chunk_bytes):
                if not valid:
                    raise CorruptRecordError(
                        f"batch at position {header.position} fails its CRC32C check"
                    )
                if header.base_offset < self.next_offset or header.last_offset_delta < 0:
                    raise CorruptRecordError(
                        f"batch at position {header.position} has offset {header.base_offset} "
                        f"below the segment's next offset {self.next_offset}"
                    )
                if header.last_offset - self.base_offset > 0x7FFFFFFF or (
                    next_segment_base is not None and header.last_offset >= next_segment_base
                ):
                    raise CorruptRecordError(
                        f"batch at position {header.position} has offsets up to "
                        f"{header.last_offset}, outside the segment"
                    )
                self._index_batch(
                    BatchMeta(
                        header.base_offset, header.last_offset, header.max_timestamp, header.size
                    ),
                    position,
                )
                self.next_offset = header.next_offset
                position += header.size
                batches += 1
                if on_batch is not None:
                    on_batch(header)
        except CorruptRecordError as error:
            corruption = str(error)
            if self.next_offset < committed_offset:
                raise CommittedDataCorruptError(self.log_path, position, corruption) from None
        truncated = file_size - position
        if truncated:
            os.ftruncate(self.fd, position)
        self.size = position
        if self.size:  # an empty segment has no timestamp to index
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
        return RecoveryResult(position, truncated, batches, corruption)

    def _scan_full(
        self, file_size: int, chunk_bytes: int = RECOVERY_CHUNK_BYTES
    ) -> Iterator[tuple[BatchHeader, bool]]:
        """Yield (header, crc_ok) for every batch, reading whole batches in big chunks.

        ``chunk_bytes`` is a parameter so tests can put chunk boundaries anywhere,
        including inside headers and batches larger than a chunk. The CRC is checked
        at the batch's position in the chunk that holds it whole, which after a
        re-read is 0, not where its header was found in the previous chunk.
        """
        position = 0
        chunk, chunk_start = b"", 0
        while position < file_size:
            relative = position - chunk_start
            if len(chunk) - relative < HEADER_SIZE:
                chunk = os.pread(self.fd, max(chunk_bytes, HEADER_SIZE), position)
                chunk_start, relative = position, 0
            header = unpack_header(chunk, relative, file_position=position)
            if position + header.size > file_size:  # before reading a garbled length
                raise CorruptRecordError(
                    f"batch at position {position} declares {header.size} bytes "
                    f"but only {file_size - position} remain in the file"
                )
            if relative + header.size > len(chunk):
                chunk = os.pread(self.fd, max(chunk_bytes, header.size), position)
                chunk_start, relative = position, 0
                if header.size > len(chunk):
                    raise CorruptRecordError(
                        f"batch at position {position} declares {header.size} bytes "
                        f"but only {len(chunk)} remain in the file"
                    )
            valid = compute_crc(chunk, relative, header.size) == header.crc
            header.position = position
            yield header, valid
            position += header.size

    # -- appends ------------------------------------------------------------------
    def append(
        self, batches: list[BatchMeta], buffers: list[bytes | memoryview], size: int
    ) -> None:
        """Write ``buffers`` (whole batches, ``size`` bytes) at the end of the log."""
        assert batches and batches[0].base_offset >= self.next_offset
        self._write_all(buffers, size)
        position = self.size
        for meta in batches:
            self._index_batch(meta, position)
            position += meta.size
        self.size = position
        self.next_offset = batches[-1].last_offset + 1

    def _write_all(self, buffers: list[bytes | memoryview], size: int) -> None:
        try:
            if len(buffers) <= IOV_MAX:  # one call: every append of a produce request
                written = os.pwritev(self.fd, buffers, self.size)
                if written == size:
                    return
            position = self.size
            for first in range(0, len(buffers), IOV_MAX):
                group = buffers[first : first + IOV_MAX]
                expected = sum(len(b) for b in group) if len(buffers) > IOV_MAX else size
                written = os.pwritev(self.fd, group, position)
                if written != expected:  # short write (rare): finish it byte-wise
                    rest = b"".join(bytes(b) for b in group)[written:]
                    while rest:
                        count = os.pwrite(self.fd, rest, position + expected - len(rest))
                        rest = rest[count:]
                position += expected
        except OSError as error:
            os.ftruncate(self.fd, self.size)  # never leave half a batch behind
            raise StorageError(f"write to {self.log_path} failed: {error}") from error

    def _index_batch(self, meta: BatchMeta, position: int) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = meta.max_timestamp
        if meta.max_timestamp > self.max_timestamp:
            self.max_timestamp = meta.max_timestamp
            self.offset_of_max_timestamp = meta.last_offset
        # A full index takes no more entries (segment.index.bytes is a hard limit: one
        # request of several batches may fill it mid-append; the next append rolls).
        if (
            self.bytes_since_last_index_entry > self.index_interval_bytes
            and not self.offset_index.is_full
        ):
            self.offset_index.append(meta.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += meta.size

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    # -- reads --------------------------------------------------------------------
    def iter_headers(self, position: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches from ``position`` (a batch start) up to ``end``."""
        end = self.size if end is None else end
        chunk, chunk_start = b"", position
        while position < end:
            relative = position - chunk_start
            if len(chunk) - relative < HEADER_SIZE:
                chunk = os.pread(self.fd, max(self.scan_chunk_bytes, HEADER_SIZE), position)
                chunk_start, relative = position, 0
            header = unpack_header(chunk, relative, file_position=position)
            if position + header.size > end:
                raise CorruptRecordError(
                    f"{self.log_path}: batch at position {position} runs past {end}"
                )
            header.position = position
            yield header
            position += header.size

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= ``offset``, if any."""
        _, position = self.offset_index.lookup(offset)
        for header in self.iter_headers(max(position, start_position)):
            if header.last_offset >= offset:
                return header
        return None

    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> FileRange | None:
        """Whole batches from the one holding ``start_offset``, below ``max_offset``.

        Returns None if no batch here ends at or after ``start_offset``. The range
        holds only batches whose last offset is < ``max_offset`` (the HW or LSO
        bound), fits in ``max_bytes`` unless ``min_one_batch`` lets a single oversized
        first batch through (KIP-74), and always ends on a batch boundary.
        """
        found = self.read_with_first(start_offset, max_bytes, max_offset, min_one_batch)
        return found[0] if found is not None else None

    def read_with_first(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[FileRange, BatchHeader] | None:
        """``read`` plus the header of the first batch (so callers need no second lookup)."""
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        start = first.position
        limit = self.size
        if max_offset is not None and max_offset < self.next_offset:
            bound = self.translate_offset(max_offset, start)
            if bound is not None:
                limit = bound.position
        if limit <= start:
            return FileRange(self.fd, start, 0), first
        if first.size > max_bytes:
            return FileRange(self.fd, start, first.size if min_one_batch else 0), first
        target_end = start + max_bytes
        if target_end >= limit:
            return FileRange(self.fd, start, limit - start), first
        end = max(self.offset_index.lookup_position(target_end), start)
        for header in self.iter_headers(end, limit):
            if header.position + header.size > target_end:
                break
            end = header.position + header.size
        return FileRange(self.fd, start, end - start), first

    def read_bytes(self, file_range: FileRange) -> bytes:
        return os.pread(self.fd, file_range.length, file_range.position)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record >= ``start_offset`` with ts >= ``timestamp``.

        A batch whose records would expand past ``STORED_EXPANSION`` times its size (a
        compression bomb a ``producer``-compression topic stored unopened) is not
        opened, and one whose records do not decode is not trusted: the answer is its
        first offset, which skips no record.
        """
        from odradek.records.codec import iter_records
        from odradek.records.compression import STORED_EXPANSION, ExpansionLimitError

        if self.max_timestamp < timestamp:
            return None
        indexed = max(self.time_index.lookup_before(timestamp), start_offset)
        _, position = self.offset_index.lookup(indexed)
        for header in self.iter_headers(position):
            if header.last_offset < start_offset or header.max_timestamp < timestamp:
                continue
            data = os.pread(self.fd, header.size, header.position)
            header.position = 0
            try:
                for record in iter_records(data, header, STORED_EXPANSION * header.size):
                    if record.offset >= start_offset and record.timestamp >= timestamp:
                        return record.offset, record.timestamp
            except (ExpansionLimitError, CorruptRecordError):
                return max(header.base_offset, start_offset), header.max_timestamp
        return None

    # -- truncation, flushing, lifecycle --------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed."""
        header = self.translate_offset(offset)
        if header is None:
            return 0
        position = header.position
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self._reload_tail_state()
        return removed

    def _reload_tail_state(self) -> None:
        """Recompute next offset and max timestamp after a truncation (a rare path)."""
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        for header in self.iter_headers(0):
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = header.max_timestamp
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.next_offset = header.next_offset
        _, indexed_position = self.offset_index.lookup(2**63 - 1)
        self.bytes_since_last_index_entry = self.size - indexed_position if self.size else 0

    def on_become_inactive(self) -> None:
        """Called on roll: make the time index end with the segment's max timestamp."""
        if self.size:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def write_indexes(self) -> None:
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.txn_index.write_pending()

    def fsync(self) -> None:
        """Make the log and both indexes durable (may run on a worker thread).

        Staged index entries must have been written first (``write_indexes``, on the
        loop), because only the descriptors are touched here.
        """
        os.fsync(self.fd)
        self.offset_index.fsync()
        self.time_index.fsync()
        self.txn_index.fsync()

    def close(self) -> None:
        if self.fd < 0:
            return
        if not self.deleted and self.size:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        os.close(self.fd)
        self.fd = -1

    def rename_to_deleted(self) -> None:
        """First step of deletion: the files leave the log's name space, fds stay open."""
        self.write_indexes()
        self.deleted = True
        deleted_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.rename(self.log_path, deleted_log)
        self.log_path = deleted_log
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def rename_suffix(self, suffix: str) -> None:
        """Rename every file from the current suffix to ``suffix`` (the cleaner's swap:
        ``.cleaned`` -> ``.swap`` -> ""); the log file last, as recovery keys on it."""

        def renamed(path: Path) -> Path:
            stem = path.name[: len(path.name) - len(self.suffix)] if self.suffix else path.name
            return path.with_name(stem + suffix)

        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(renamed(index.path))
        target = renamed(self.log_path)
        os.rename(self.log_path, target)
        self.log_path = target
        self.suffix = suffix

    def delete_files(self) -> None:
        """Close and unlink (the second step, after ``file.delete.delay.ms``)."""
        self.deleted = True
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.path.unlink(missing_ok=True)
        self.time_index.path.unlink(missing_ok=True)
        self.txn_index.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size}, "
            f"path={self.log_path})"
        )

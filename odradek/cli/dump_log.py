"""``odradek dump-log``: print what is on disk in segments, indexes and state files.

How this works and why: when a partition misbehaves the first question is what the
files really hold. Like Kafka's DumpLogSegments, this command reads them directly
instead of opening the log, because opening recovers: it would truncate a torn tail
and rebuild indexes, hiding exactly what we want to see. Nothing here ever writes.

Each FILE is dispatched on its name: ``.log``, ``.index``, ``.timeindex``,
``.snapshot`` or ``leader-epoch-checkpoint`` (a trailing ``.deleted`` is allowed).

- ``.log`` files are read batch by batch through a read-ahead window of
  ``READ_CHUNK_BYTES``, so memory is bounded by one chunk (or one batch, when a batch
  is larger and its records are printed) whatever the segment's size; the CRC of a
  larger batch is computed chunk by chunk. The dump of a file stops at the first bad
  batch (bad magic or length, CRC mismatch, offsets going backwards, undecodable
  records), the point where recovery would cut the log, with a line naming its position.
- ``.index`` and ``.timeindex`` files print their entries, or with
  ``--verify-index-only`` are checked against the sibling ``.log``: the entries and
  the log's batch headers are walked together in one forward pass (both are sorted),
  so verification costs one scan of the headers and no per-batch memory.
- snapshots and the epoch checkpoint are small and decoded by the storage layer.

Exit status: 0 when every file was read and valid, 1 otherwise (a problem with one
file is reported on one line and the next file is still dumped), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import stat
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

from crc32c import crc32c

from odradek.cli import offsets_decoder
from odradek.storage.batch import (
    COMPRESSION_NAMES,
    CRC_START,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    MAGIC_POSITION,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    compute_crc,
    unpack_header,
)
from odradek.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from odradek.storage.errors import CorruptRecordError, StorageError
from odradek.storage.index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from odradek.storage.producer_state import SNAPSHOT_SUFFIX, ProducerEntry, read_snapshot
from odradek.storage.records import (
    ABORT_MARKER,
    COMMIT_MARKER,
    Record,
    decode_control_record,
    decode_end_txn_marker,
    iter_records,
)
from odradek.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
)

if TYPE_CHECKING:
    from odradek.cli.main import Subparsers

NAME: Final = "dump-log"
# Read-ahead for .log files: many small batches per read, and the most a dump holds
# in memory unless it prints the records of a larger batch.
READ_CHUNK_BYTES: Final = 1024 * 1024
# Index bytes read at a time: a whole number of entries of either kind (96 KiB).
INDEX_CHUNK_BYTES: Final = OFFSET_ENTRY_SIZE * TIME_ENTRY_SIZE * 1024
SEQUENCE_MODULUS: Final = 2**31
# Kafka's ControlRecordType ids; only ABORT and COMMIT have a value we decode.
CONTROL_TYPE_NAMES: Final = {
    ABORT_MARKER: "ABORT",
    COMMIT_MARKER: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
assert _OFFSET_ENTRY.size == OFFSET_ENTRY_SIZE and _TIME_ENTRY.size == TIME_ENTRY_SIZE
_BATCH_LENGTH = struct.Struct(">i")
_MAGIC = struct.Struct(">b")
_BATCH_LENGTH_POSITION: Final = 8
# records.py names the batch by its position in the buffer it was given, which is
# not the file position; the dump says the file position itself.
_RECORDS_ERROR_PREFIX = re.compile(r"^batch at base offset -?\d+ \(position \d+\): ")


@dataclass(frozen=True, slots=True)
class Options:
    print_data: bool = False
    verify_only: bool = False
    max_bytes: int | None = None
    offsets_decoder: bool = False  # decode keys/values as __consumer_offsets records


class DumpError(Exception):
    """A file that cannot be dumped at all; reported on one line on stderr."""


class _InvalidBatch(Exception):
    """The batch at ``position`` is damaged; the dump of this file stops there."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


class _TornTail(Exception):
    """The last ``length`` bytes from ``position`` are too short for their batch."""

    def __init__(self, position: int, length: int) -> None:
        super().__init__(f"{length} bytes at position {position}")
        self.position = position
        self.length = length


# -- command line ----------------------------------------------------------------


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="print the contents of log segments, indexes, snapshots and checkpoints",
        description="Print the contents of .log, .index, .timeindex and .snapshot files "
        "and leader-epoch-checkpoint files, like Kafka's DumpLogSegments. Exit status "
        "is 1 if any file is missing or holds invalid data.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print every record of every batch, with its key and value",
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check .index/.timeindex entries against the sibling .log instead of printing them",
    )
    parser.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode records as __consumer_offsets commits and group metadata "
        "(automatic for files under a __consumer_offsets-N directory)",
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive_int,
        metavar="N",
        help="read only the batches that lie within the first N bytes of each .log file",
    )
    parser.set_defaults(run=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    options = Options(
        args.print_data_log, args.verify_index_only, args.max_bytes, args.offsets_decoder
    )
    for stream in (sys.stdout, sys.stderr):  # odd file names or terminals never crash a dump
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    status = 0
    for path in args.files:
        if not dump_file(path, options, sys.stdout, sys.stderr):
            status = 1
    return status


def dump_file(path: Path, options: Options, out: TextIO, err: TextIO) -> bool:
    """Dump one file to ``out``; False if it is unreadable or holds invalid data."""
    try:
        dumper, stem = _classify(path)
        return dumper(_Target(path, stem, options, out))
    except DumpError as error:
        print(f"odradek {NAME}: error: {error}", file=err)
    except StorageError as error:  # a damaged snapshot or checkpoint
        print(f"odradek {NAME}: error: {_storage_error_text(path, error)}", file=err)
    except OSError as error:
        print(f"odradek {NAME}: error: {_os_error_text(path, error)}", file=err)
    return False


def _storage_error_text(path: Path, error: StorageError) -> str:
    text = str(error)
    return text if str(path) in text else f"{path}: {text}"  # most already name the file


def _os_error_text(path: Path, error: OSError) -> str:
    where = error.filename if error.filename is not None else path
    return f"{where}: {error.strerror or error}"


@dataclass(frozen=True, slots=True)
class _Target:
    path: Path
    stem: str  # the name without its suffix (and without .deleted)
    options: Options
    out: TextIO

    def emit(self, line: str) -> None:
        print(line, file=self.out)

    def sibling(self, suffix: str) -> Path:
        trailer = DELETED_SUFFIX if self.path.name.endswith(DELETED_SUFFIX) else ""
        return self.path.with_name(self.stem + suffix + trailer)

    @property
    def base_offset(self) -> int:
        if not (self.stem.isascii() and self.stem.isdigit()):
            raise DumpError(f"{self.path}: the file name does not start with a base offset")
        return int(self.stem)


_Dumper = Callable[[_Target], bool]


def _classify(path: Path) -> tuple[_Dumper, str]:
    name = path.name.removesuffix(DELETED_SUFFIX)
    if name == LEADER_EPOCH_CHECKPOINT:
        return _dump_epoch_checkpoint, name
    dumpers: dict[str, _Dumper] = {
        LOG_SUFFIX: _dump_log,
        INDEX_SUFFIX: _dump_offset_index,
        TIME_INDEX_SUFFIX: _dump_time_index,
        SNAPSHOT_SUFFIX: _dump_snapshot,
    }
    stem, dot, suffix = name.rpartition(".")
    dumper = dumpers.get(dot + suffix)
    if not stem or dumper is None:
        raise DumpError(
            f"{path}: unknown file type (expected .log, .index, .timeindex, .snapshot "
            f"or {LEADER_EPOCH_CHECKPOINT})"
        )
    return dumper, stem


@contextmanager
def _open_regular(path: Path) -> Iterator[tuple[int, int]]:
    """(descriptor, size) of a regular file opened read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DumpError(f"{path}: not a regular file")
        yield fd, info.st_size
    finally:
        os.close(fd)


# -- .log ------------------------------------------------------------------------


class _Window:
    """Read-ahead over a file: hands out byte ranges, re-reading only on a miss."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._chunk = b""
        self._start = 0

    def view(self, position: int, length: int) -> tuple[bytes, int]:
        """``(buffer, start)``: ``buffer[start:start + length]`` is the file's range."""
        relative = position - self._start
        if relative < 0 or relative + length > len(self._chunk):
            self._chunk = os.pread(self.fd, max(READ_CHUNK_BYTES, length), position)
            self._start, relative = position, 0
        return self._chunk, relative


def _dump_log(target: _Target) -> bool:
    base_offset = target.base_offset
    with _open_regular(target.path) as (fd, size):
        target.emit(f"Dumping {target.path}")
        target.emit(f"Log starting offset: {base_offset}")
        limit = size if target.options.max_bytes is None else min(size, target.options.max_bytes)
        try:
            _dump_batches(target, _Window(fd), base_offset, limit)
        except _InvalidBatch as invalid:
            target.emit(f"Found invalid batch at position {invalid.position}: {invalid.reason}")
            return False
        except _TornTail as tail:
            if limit < size:
                return True  # --max-bytes cut the batch off, the file may well be fine
            target.emit(_tail_text(target, tail))
            return False
    return True


def _dump_batches(target: _Target, window: _Window, base_offset: int, limit: int) -> None:
    next_offset = base_offset
    for header in _scan_headers(window, limit):
        crc = _batch_crc(window, header)
        target.emit(_batch_line(header, crc == header.crc))
        if crc != header.crc:
            raise _InvalidBatch(
                header.position, f"CRC32C mismatch: stored {header.crc}, computed {crc}"
            )
        _check_offsets(header, next_offset)
        if target.options.print_data:
            _dump_records(target, window, header)
        next_offset = header.next_offset


def _scan_headers(window: _Window, limit: int) -> Iterator[BatchHeader]:
    """Headers (absolute positions) of the batches that fit below ``limit``.

    Raises _InvalidBatch for a header that cannot be a v2 batch and _TornTail when
    the bytes left are too few for the header or for the batch it declares.
    """
    position = 0
    while position < limit:
        remaining = limit - position
        if remaining < HEADER_SIZE:
            raise _TornTail(position, remaining)
        buffer, start = window.view(position, HEADER_SIZE)
        if len(buffer) - start < HEADER_SIZE:  # the file shrank while we read it
            raise _TornTail(position, len(buffer) - start)
        _check_header_fields(buffer, start, position)
        header = unpack_header(buffer, start)
        if header.size > remaining:
            raise _TornTail(position, remaining)
        header.position = position
        yield header
        position += header.size


def _check_header_fields(buffer: bytes, start: int, position: int) -> None:
    """The checks ``unpack_header`` makes, reported with the file position."""
    (magic,) = _MAGIC.unpack_from(buffer, start + MAGIC_POSITION)
    if magic != MAGIC_V2:
        raise _InvalidBatch(position, f"magic is {magic}; only v2 batches are supported")
    (length,) = _BATCH_LENGTH.unpack_from(buffer, start + _BATCH_LENGTH_POSITION)
    if length < MIN_BATCH_LENGTH:
        raise _InvalidBatch(position, f"batch length {length} is below the minimum")


def _batch_crc(window: _Window, header: BatchHeader) -> int:
    """CRC32C of the batch's ``attributes..end``; large batches are read in chunks."""
    if header.size <= READ_CHUNK_BYTES:
        buffer, start = window.view(header.position, header.size)
        return compute_crc(buffer, start, header.size)
    value = 0
    position, end = header.position + CRC_START, header.position + header.size
    while position < end:
        data = os.pread(window.fd, min(READ_CHUNK_BYTES, end - position), position)
        if not data:
            break  # the file shrank under us: the CRC cannot match
        value = crc32c(data, value)
        position += len(data)
    return value


def _check_offsets(header: BatchHeader, next_offset: int) -> None:
    if header.last_offset_delta < 0:
        raise _InvalidBatch(
            header.position, f"negative last offset delta {header.last_offset_delta}"
        )
    if header.base_offset < next_offset:
        raise _InvalidBatch(
            header.position,
            f"base offset {header.base_offset} is below the next expected offset {next_offset}",
        )


def _dump_records(target: _Target, window: _Window, header: BatchHeader) -> None:
    buffer, start = window.view(header.position, header.size)
    local = unpack_header(buffer, start)  # the same header, positioned in ``buffer``
    try:
        decode_offsets = target.options.offsets_decoder or target.path.parent.name.startswith(
            offsets_decoder.OFFSETS_TOPIC_PREFIX
        )
        for record in iter_records(buffer, local):
            target.emit(_record_line(record, local, decode_offsets))
    except CorruptRecordError as error:
        reason = _RECORDS_ERROR_PREFIX.sub("", str(error))
        raise _InvalidBatch(header.position, reason) from None


def _batch_line(header: BatchHeader, crc_ok: bool) -> str:
    codec = COMPRESSION_NAMES.get(header.compression, f"unknown({header.compression})")
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {header.position} "
        f"{_timestamp_label(header)}: {header.max_timestamp} size: {header.size} "
        f"magic: {header.magic} compresscodec: {codec} crc: {header.crc} "
        f"isvalid: {_bool(crc_ok)}"
    )


def _record_line(record: Record, header: BatchHeader, decode_offsets: bool = False) -> str:
    header_keys = ",".join(h.key for h in record.headers)
    line = (
        f"| offset: {record.offset} {_timestamp_label(header)}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
        f"sequence: {_record_sequence(header, record.offset)} headerKeys: [{header_keys}]"
    )
    if header.is_control:
        return f"{line} {_control_text(record)}"
    if decode_offsets:
        key, payload = offsets_decoder.describe(record.key, record.value)
        return f"{line} key: {key} payload: {payload}"
    return f"{line} key: {_text(record.key)} payload: {_text(record.value)}"


def _control_text(record: Record) -> str:
    _, control_type = decode_control_record(record)
    if control_type in (ABORT_MARKER, COMMIT_MARKER):
        commit, coordinator_epoch = decode_end_txn_marker(record)
        marker = CONTROL_TYPE_NAMES[COMMIT_MARKER if commit else ABORT_MARKER]
        return f"endTxnMarker: {marker} coordinatorEpoch: {coordinator_epoch}"
    return f"controlType: {CONTROL_TYPE_NAMES.get(control_type, 'UNKNOWN')}({control_type})"


def _record_sequence(header: BatchHeader, offset: int) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + offset - header.base_offset) % SEQUENCE_MODULUS


def _timestamp_label(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


# -- .index and .timeindex ---------------------------------------------------------


@contextmanager
def _index_entries(target: _Target, entry: struct.Struct) -> Iterator[Iterator[tuple[int, ...]]]:
    """Open an index file; the iterator yields its entries a chunk at a time."""
    with _open_regular(target.path) as (fd, size):
        yield _iter_entries(fd, size, entry)


def _iter_entries(fd: int, size: int, entry: struct.Struct) -> Iterator[tuple[int, ...]]:
    """Entries of ``size`` bytes of index; _TornTail for a partial last entry."""
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
        raise _TornTail(whole, size - whole)


def _dump_offset_index(target: _Target) -> bool:
    return _dump_index(target, _OFFSET_ENTRY, _OffsetIndexCheck)


def _dump_time_index(target: _Target) -> bool:
    return _dump_index(target, _TIME_ENTRY, _TimeIndexCheck)


def _dump_index(target: _Target, entry: struct.Struct, check_type: type[_IndexCheck]) -> bool:
    base_offset = target.base_offset
    if target.options.verify_only:
        return _verify_index(target, entry, check_type(base_offset))
    show = _offset_entry_text if entry is _OFFSET_ENTRY else _time_entry_text
    with _index_entries(target, entry) as entries:
        target.emit(f"Dumping {target.path}")
        try:
            for fields in entries:
                target.emit(show(base_offset, fields))
        except _TornTail as tail:
            target.emit(_tail_text(target, tail))
            return False
    return True


def _offset_entry_text(base_offset: int, fields: tuple[int, ...]) -> str:
    relative_offset, position = fields
    return f"offset: {base_offset + relative_offset} position: {position}"


def _time_entry_text(base_offset: int, fields: tuple[int, ...]) -> str:
    timestamp, relative_offset = fields
    return f"timestamp: {timestamp} offset: {base_offset + relative_offset}"


def _tail_text(target: _Target, tail: _TornTail) -> str:
    return (
        f"Found {tail.length} invalid bytes at the end of {target.path} (position {tail.position})"
    )


def _verify_index(target: _Target, entry: struct.Struct, check: _IndexCheck) -> bool:
    log_path = target.sibling(LOG_SUFFIX)
    with _open_regular(log_path) as (fd, size), _index_entries(target, entry) as entries:
        target.emit(f"Dumping {target.path}")
        walker = _HeaderWalker(_Window(fd), size)
        count, problems = 0, 0
        try:
            for fields in entries:
                count += 1
                problem = check.entry(fields, walker)
                if problem is not None:
                    problems += 1
                    target.emit(problem)
        except _TornTail as tail:
            problems += 1
            target.emit(_tail_text(target, tail))
        if walker.damage is not None:
            problems += 1
            target.emit(f"{log_path}: {walker.damage}; later entries could not be checked")
    verdict = {0: "no mismatches", 1: "1 mismatch"}.get(problems, f"{problems} mismatches")
    noun = "entry" if count == 1 else "entries"
    target.emit(f"Verified {count} index {noun} against {log_path.name}: {verdict}")
    return not problems


class _HeaderWalker:
    """A forward-only walk over a log's batch headers, with the max timestamp so far."""

    def __init__(self, window: _Window, size: int) -> None:
        self._headers = _scan_headers(window, size)
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
        except _InvalidBatch as invalid:
            header, self.damage = None, f"invalid batch at position {invalid.position}: {invalid}"
        except _TornTail as tail:
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


# -- .snapshot and leader-epoch-checkpoint ------------------------------------------


def _dump_snapshot(target: _Target) -> bool:
    with _open_regular(target.path):
        pass  # a missing or irregular file is reported like any other
    producers = read_snapshot(target.path)  # SnapshotCorruptError: one line
    target.emit(f"Dumping {target.path}")
    for producer in producers:
        target.emit(_producer_line(producer))
    return True


def _producer_line(producer: ProducerEntry) -> str:
    batches = ", ".join(
        f"{b.first_seq}-{b.last_seq}@{b.first_offset}-{b.last_offset}" for b in producer.batches
    )
    return (
        f"producerId: {producer.producer_id} producerEpoch: {producer.epoch} "
        f"coordinatorEpoch: {producer.coordinator_epoch} "
        f"currentTxnFirstOffset: {producer.current_txn_first_offset} "
        f"lastTimestamp: {producer.last_timestamp} batches: [{batches}]"
    )


def _dump_epoch_checkpoint(target: _Target) -> bool:
    with _open_regular(target.path):
        pass  # a missing or odd file is an error here; the cache would treat it as empty
    entries = LeaderEpochCache(target.path).entries  # CheckpointError: one line
    target.emit(f"Dumping {target.path}")
    for entry in entries:
        target.emit(f"epoch: {entry.epoch} startOffset: {entry.start_offset}")
    return True

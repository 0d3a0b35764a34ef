"""Shared pieces of ``odradek dump-log``: options, errors, and reading files safely.

A dump never opens a log (opening recovers and would hide damage); it reads files with
``pread`` through ``Window``, a read-ahead of ``READ_CHUNK_BYTES``, and walks batch
headers with ``scan_headers``, which reports damage as ``InvalidBatch`` (the batch
cannot be a v2 batch) or ``TornTail`` (too few bytes left for what the header
declares), the two places where recovery would cut a log.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from crc32c import crc32c

from odradek.records.batch import (
    CRC_START,
    HEADER_SIZE,
    MAGIC_POSITION,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    BatchHeader,
    compute_crc,
    unpack_header,
)
from odradek.storage.segment import DELETED_SUFFIX

# Read-ahead for .log files: many small batches per read, and the most a dump holds
# in memory unless it prints the records of a larger batch.
READ_CHUNK_BYTES: Final = 1024 * 1024
_BATCH_LENGTH = struct.Struct(">i")
_MAGIC = struct.Struct(">b")
_BATCH_LENGTH_POSITION: Final = 8


@dataclass(frozen=True, slots=True)
class Options:
    print_data: bool = False
    verify_only: bool = False
    max_bytes: int | None = None
    offsets_decoder: bool = False  # decode keys/values as __consumer_offsets records
    metadata_decoder: bool = False  # decode keys/values as __cluster_metadata records
    transaction_decoder: bool = False  # decode keys/values as __transaction_state records


class DumpError(Exception):
    """A file that cannot be dumped at all; reported on one line on stderr."""


class InvalidBatch(Exception):
    """The batch at ``position`` is damaged; the dump of this file stops there."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


class TornTail(Exception):
    """The last ``length`` bytes from ``position`` are too short for their batch."""

    def __init__(self, position: int, length: int) -> None:
        super().__init__(f"{length} bytes at position {position}")
        self.position = position
        self.length = length


@dataclass(frozen=True, slots=True)
class Target:
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


@contextmanager
def open_regular(path: Path) -> Iterator[tuple[int, int]]:
    """(descriptor, size) of a regular file opened read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DumpError(f"{path}: not a regular file")
        yield fd, info.st_size
    finally:
        os.close(fd)


class Window:
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


def scan_headers(window: Window, limit: int) -> Iterator[BatchHeader]:
    """Headers (absolute positions) of the batches that fit below ``limit``.

    Raises InvalidBatch for a header that cannot be a v2 batch and TornTail when
    the bytes left are too few for the header or for the batch it declares.
    """
    position = 0
    while position < limit:
        remaining = limit - position
        if remaining < HEADER_SIZE:
            raise TornTail(position, remaining)
        buffer, start = window.view(position, HEADER_SIZE)
        if len(buffer) - start < HEADER_SIZE:  # the file shrank while we read it
            raise TornTail(position, len(buffer) - start)
        check_header_fields(buffer, start, position)
        header = unpack_header(buffer, start)
        if header.size > remaining:
            raise TornTail(position, remaining)
        header.position = position
        yield header
        position += header.size


def check_header_fields(buffer: bytes, start: int, position: int) -> None:
    """The checks ``unpack_header`` makes, reported with the file position."""
    (magic,) = _MAGIC.unpack_from(buffer, start + MAGIC_POSITION)
    if magic != MAGIC_V2:
        raise InvalidBatch(position, f"magic is {magic}; only v2 batches are supported")
    (length,) = _BATCH_LENGTH.unpack_from(buffer, start + _BATCH_LENGTH_POSITION)
    if length < MIN_BATCH_LENGTH:
        raise InvalidBatch(position, f"batch length {length} is below the minimum")


def batch_crc(window: Window, header: BatchHeader) -> int:
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


def tail_text(target: Target, tail: TornTail) -> str:
    return (
        f"Found {tail.length} invalid bytes at the end of {target.path} (position {tail.position})"
    )

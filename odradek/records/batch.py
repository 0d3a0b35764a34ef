"""Record batch (magic v2) header view: parse, validate and stamp without re-encoding.

How this works and why: the produce path must not decode records (ARCHITECTURE.md,
"batches stay bytes"). Everything the broker needs to know about a batch is in its
fixed 61-byte header, so this module reads that header with one ``struct`` call,
checks the CRC32C over ``attributes..end`` with the C ``crc32c`` extension, and
overwrites ``baseOffset`` and ``partitionLeaderEpoch`` in place. Those two fields lie
before the CRC range, which is why stamping them never requires a new CRC.

Layout (all big-endian; offsets in bytes from the start of the batch)::

    0  baseOffset            int64
    8  batchLength           int32   bytes that follow this field (total = 12 + batchLength)
    12 partitionLeaderEpoch  int32
    16 magic                 int8    = 2
    17 crc                   uint32  CRC32C of bytes [21, end)
    21 attributes            int16   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                     5 control, 6 delete horizon
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordCount           int32
    61 records ...

The full record codec (varints, headers, compression) lives in ``records.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

from crc32c import crc32c

from odradek.records.errors import CorruptRecordError

HEADER_SIZE: Final = 61
# batchLength counts everything after itself; the smallest legal batch is a header.
LOG_OVERHEAD: Final = 12
MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
MAGIC_V2: Final = 2
CRC_START: Final = 21
MAGIC_POSITION: Final = 16
ATTRIBUTES_POSITION: Final = 21
MAX_TIMESTAMP_POSITION: Final = 35

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
DELETE_HORIZON_MASK: Final = 0x40

NO_COMPRESSION: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4
COMPRESSION_NAMES: Final = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
COMPRESSION_BY_NAME: Final = {name: code for code, name in COMPRESSION_NAMES.items()}

CREATE_TIME: Final = 0
LOG_APPEND_TIME: Final = 1

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
NO_TIMESTAMP: Final = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_OFFSET_AND_EPOCH = struct.Struct(">q4xi")  # baseOffset, (length skipped), leaderEpoch
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_ATTRS_UINT32 = struct.Struct(">hI")  # used to rewrite attributes + crc together


class BatchHeader:
    """The 61-byte header of one v2 batch, parsed. ``position`` is where it starts."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    def __init__(self, fields: tuple[int, ...], position: int) -> None:
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = fields
        self.position = position

    # -- derived values -------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at 2**31 like Kafka's."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000

    def __repr__(self) -> str:
        return (
            f"BatchHeader(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.record_count}, size={self.size}, epoch={self.partition_leader_epoch}, "
            f"attributes={self.attributes:#x}, max_timestamp={self.max_timestamp}, "
            f"producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
            f"base_sequence={self.base_sequence}, position={self.position})"
        )


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at ``position``; checks it is complete and magic v2, not the CRC.

    Raises CorruptRecordError when the bytes cannot be a v2 batch header or the
    declared length runs past the end of ``buf``.
    """
    header = unpack_header(buf, position)
    if position + header.size > len(buf):
        raise CorruptRecordError(
            f"batch at position {position} declares {header.size} bytes "
            f"but only {len(buf) - position} remain"
        )
    return header


def unpack_header(
    buf: bytes | bytearray | memoryview, position: int = 0, *, file_position: int | None = None
) -> BatchHeader:
    """Like ``parse_header`` but only the 61 header bytes need to be in ``buf``.

    For scanning files a chunk at a time, where the rest of the batch is elsewhere;
    ``file_position`` (where ``buf[position]`` lies in the file) is what errors report.
    """
    where = position if file_position is None else file_position
    if len(buf) - position < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header at position {where} truncated: "
            f"{len(buf) - position} of {HEADER_SIZE} bytes"
        )
    header = BatchHeader(_HEADER.unpack_from(buf, position), position)
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(
            f"batch at position {where} has magic {header.magic}; only v2 is supported"
        )
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at position {where} declares length {header.batch_length} "
            f"< minimum {MIN_BATCH_LENGTH}"
        )
    return header


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC32C of ``attributes..end`` of the batch at ``position`` of ``size`` bytes."""
    view = memoryview(buf)
    return crc32c(view[position + CRC_START : position + size])


def check_batch(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse and fully validate (length, magic, CRC) the batch at ``position``.

    This is on the produce path for every batch, hence written flat rather than
    as parse_header plus a compute_crc comparison.
    """
    header = unpack_header(buf, position)
    end = position + header.batch_length + LOG_OVERHEAD
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {position} declares {end - position} bytes "
            f"but only {len(buf) - position} remain"
        )
    if crc32c(memoryview(buf)[position + CRC_START : end]) != header.crc:
        raise CorruptRecordError(
            f"batch at position {position} (base offset {header.base_offset}) "
            f"fails its CRC32C check"
        )
    return header


def iter_batches(
    buf: bytes | bytearray | memoryview, verify_crc: bool = True
) -> Iterator[BatchHeader]:
    """Yield the header of every batch in ``buf``; the batches must fill it exactly."""
    position = 0
    end = len(buf)
    check = check_batch if verify_crc else parse_header
    while position < end:
        header = check(buf, position)
        yield header
        position += header.batch_length + LOG_OVERHEAD


def stamp(buf: bytearray | memoryview, position: int, base_offset: int, leader_epoch: int) -> None:
    """Overwrite baseOffset and partitionLeaderEpoch in place (outside the CRC range)."""
    _INT64.pack_into(buf, position, base_offset)
    _INT32.pack_into(buf, position + 12, leader_epoch)


def stamped_prefix(header: BatchHeader, base_offset: int, leader_epoch: int) -> bytes:
    """The first 16 bytes of the batch with a new base offset and leader epoch.

    Lets the append path write ``prefix + original[16:]`` with ``os.writev`` instead
    of copying a (possibly megabyte-sized) batch just to change 12 bytes.
    """
    return _PREFIX.pack(base_offset, header.batch_length, leader_epoch)


def set_log_append_time(buf: bytearray, position: int, size: int, timestamp_ms: int) -> None:
    """Mark a batch LogAppendTime with ``timestamp_ms`` as its max timestamp; fixes the CRC.

    For LogAppendTime batches readers take every record's timestamp from the batch's
    max timestamp, so the records themselves stay untouched.
    """
    attributes = struct.unpack_from(">h", buf, position + ATTRIBUTES_POSITION)[0]
    struct.pack_into(">h", buf, position + ATTRIBUTES_POSITION, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_POSITION, timestamp_ms)
    struct.pack_into(">I", buf, position + 17, compute_crc(buf, position, size))

"""Record-batch compression codecs (gzip, snappy, lz4, zstd) on top of ``cramjam``.

How this works and why: a v2 batch compresses its whole records section with the
codec named in bits 0-2 of its attributes. ``cramjam`` (Rust, releases the GIL)
does the actual work; this module only pins down the *container* each Kafka client
expects, because that is where clients differ:

* gzip: a plain gzip stream.
* snappy: the Java client writes snappy-java's "xerial" framing (an 8-byte magic,
  two int32 versions, then ``[int32 length][raw snappy block]`` chunks of at most
  32 KiB of input each); librdkafka and others may send one bare raw snappy block.
  ``decompress`` accepts both by looking for the magic; ``compress`` writes xerial
  framing, the form every client can read.
* lz4: the standard LZ4 frame format. The Java client rejects frames whose blocks are
  linked ("dependent block stream is unsupported"), and cramjam's one-shot
  ``lz4.compress`` links them, so ``compress`` uses the streaming ``Compressor``
  with independent blocks (which is also several times faster) and no content
  checksum (the batch CRC already covers the bytes). Any valid frame decodes:
  with or without content size, block or content checksums.
* zstd: a zstd frame (level 3, Kafka's default). Frames without a content size in
  their header, as streaming compressors write, decode as well.

Everything that goes wrong while decompressing peer-supplied bytes becomes a
``CorruptRecordError``; no cramjam exception escapes ``decompress``.

Bounded decompression (``decompress(..., limit=n)``, a batch the broker must open
on a client's behalf): a 64 KiB zstd frame can stand for gigabytes, so the output
never grows past ``limit`` bytes. Each codec stops at the bound instead of reading
everything: snappy declares every block's length up front (a varint before each raw
block), so the total is checked before anything is allocated; gzip, lz4 and zstd
decode with ``decompress_into`` into a fixed buffer, which cramjam fills and then
stops ("failed to write whole buffer"). Past the bound: ``ExpansionLimitError``
(MESSAGE_TOO_LARGE). The first buffer is a 4 MiB scratch bytearray kept per
thread (ordinary batches fit, decoded as fast as unbounded, then copied out); if
the output does not fit, decompression starts again into an anonymous memory map
of ``limit + 1`` bytes. A map, not a bytearray: only the pages the output reaches
become memory, where a bytearray is zeroed in full while holding the GIL (10-20 ms
per 64 MiB, stalling the event loop of a broker that decompresses on a worker
thread), and unmapping gives the memory straight back to the system. Bounds over
``_MAP_AT_ONCE`` map less first and double, so address space stays modest too.
"""

from __future__ import annotations

import mmap
import struct
import threading
from typing import Any, Final, TypeAlias

import cramjam

from odradek.records.batch import COMPRESSION_NAMES, GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD
from odradek.records.errors import CorruptRecordError, RecordTooLargeError

Buf: TypeAlias = bytes | bytearray | memoryview

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
XERIAL_VERSION: Final = 1
XERIAL_COMPATIBLE_VERSION: Final = 1
XERIAL_BLOCK_SIZE: Final = 32 * 1024
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_HEADER_SIZE: Final = _XERIAL_HEADER.size  # 16
_BLOCK_LENGTH = struct.Struct(">i")

ZSTD_DEFAULT_LEVEL: Final = 3
GZIP_DEFAULT_LEVEL: Final = 6

_LZ4_FEED: Final = 1 << 20  # bytes per slice fed to the lz4 compressor

# Bounds up to this are mapped at once; larger ones start at a multiple of the input
# size (record data compresses 2-10x) and double.
_MAP_AT_ONCE: Final = 1 << 30
_FIRST_GUESS_RATIO: Final = 8
# The first try decodes into a per-thread scratch bytearray of this size and copies
# the output out: a fresh map (or a fresh 4 MiB bytearray) costs a page fault per
# 4 KiB written, 3.5 ms per MiB on the VM this was measured on, which doubled the
# cost of converting an ordinary 1 MiB batch; the scratch's pages stay touched.
_SMALL_MAX: Final = 4 << 20
# How far the broker opens a batch it stored unopened (ListOffsets by timestamp), as
# a multiple of the batch's size: 64, as for recompression (log_validator).
STORED_EXPANSION: Final = 64
# cramjam's message when the output buffer is full and more output remains.
_BUFFER_FULL: Final = "failed to write whole buffer"


class ExpansionLimitError(RecordTooLargeError):
    """Compressed data that expands past the bound its caller allowed."""

    def __init__(self, codec: int, limit: int) -> None:
        super().__init__(
            f"{COMPRESSION_NAMES.get(codec, codec)} data expands to more than {limit} bytes"
        )
        self.limit = limit


def _check_codec(codec: int) -> None:
    if codec not in COMPRESSION_NAMES:
        raise CorruptRecordError(
            f"unknown compression codec {codec} (attributes bits 0-2 must be 0-4: "
            "none, gzip, snappy, lz4, zstd)"
        )


def compress(codec: int, data: Buf, level: int | None = None) -> bytes:
    """Compress ``data`` with Kafka codec ``codec`` (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).

    ``level`` overrides the codec's default level (ignored by none and snappy).
    """
    if codec == NO_COMPRESSION:
        return bytes(data)
    if codec == GZIP:
        gzip_level = GZIP_DEFAULT_LEVEL if level is None else level
        return bytes(cramjam.gzip.compress(data, level=gzip_level))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        options = {} if level is None else {"level": level}
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False, **options)
        # The streaming compressor only takes ``bytes``: other buffers go in slices,
        # so a large section is not copied whole.
        if isinstance(data, bytes):
            compressor.compress(data)
        else:
            view = memoryview(data).cast("B")
            for start in range(0, len(view), _LZ4_FEED):
                compressor.compress(bytes(view[start : start + _LZ4_FEED]))
        return bytes(compressor.finish())
    if codec == ZSTD:
        zstd_level = ZSTD_DEFAULT_LEVEL if level is None else level
        return bytes(cramjam.zstd.compress(data, level=zstd_level))
    _check_codec(codec)
    raise AssertionError("unreachable")  # pragma: no cover


def decompress(codec: int, data: Buf, limit: int | None = None) -> bytes:
    """Inverse of ``compress``; raises CorruptRecordError on any malformed input.

    With ``limit``, output longer than ``limit`` bytes raises ExpansionLimitError
    and no more than about ``limit`` bytes are ever allocated for it.
    """
    if limit is not None:
        out = decompress_bounded(codec, data, limit)
        return out if isinstance(out, bytes) else bytes(out)
    if codec == NO_COMPRESSION:
        return bytes(data)
    _check_codec(codec)
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decompress(data)
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam.DecompressionError, MemoryError, ...: all bad input
        raise CorruptRecordError(f"{COMPRESSION_NAMES[codec]} decompression failed: {exc}") from exc


def decompress_bounded(codec: int, data: Buf, limit: int) -> bytes | memoryview:
    """``decompress`` into at most ``limit`` bytes: bytes, or a read-only view of a map.

    Raises ExpansionLimitError when the output would be longer than ``limit``, and
    CorruptRecordError for malformed input; memory stays within about ``limit``.
    Uncompressed ``data`` comes back as a view of itself.
    """
    if limit < 0:
        raise ValueError(f"negative limit {limit}")
    if codec == NO_COMPRESSION:
        if len(data) > limit:
            raise ExpansionLimitError(codec, limit)
        return memoryview(data).toreadonly()
    _check_codec(codec)
    try:
        if codec == SNAPPY:
            return _snappy_decompress_bounded(memoryview(data).cast("B"), limit)
        into = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec].decompress_into
        return _decompress_growing(into, codec, data, limit)
    except (CorruptRecordError, ExpansionLimitError):
        raise
    except MemoryError as exc:
        raise ExpansionLimitError(codec, limit) from exc
    except Exception as exc:  # cramjam.DecompressionError, ...: bad input
        raise CorruptRecordError(f"{COMPRESSION_NAMES[codec]} decompression failed: {exc}") from exc


def _decompress_growing(into: Any, codec: int, data: Buf, limit: int) -> bytes | memoryview:
    """Decode into a buffer that grows until the output fits or passes ``limit``.

    First this thread's scratch bytearray (what ordinary batches fit in, memory
    already touched; the output is copied out), then a map of the whole bound.
    """
    scratch = _scratch()
    window = memoryview(scratch)[: min(len(scratch), limit + 1)]
    size = _into(into, data, window)
    if size < len(window) or (size == len(window) and size <= limit):
        return bytes(window[:size])
    if len(window) > limit:
        raise ExpansionLimitError(codec, limit)
    capacity = limit + 1
    if capacity > _MAP_AT_ONCE:
        capacity = max(2 * len(window), _FIRST_GUESS_RATIO * len(data))
    while True:
        mapped = _buffer(capacity)
        size = _into(into, data, mapped)
        if size < capacity or (size == capacity and capacity <= limit):
            return memoryview(mapped)[:size].toreadonly()
        mapped.close()  # unmapped before the bigger buffer is mapped
        if capacity > limit:
            raise ExpansionLimitError(codec, limit)
        capacity = min(limit + 1, capacity * 2)


_local = threading.local()


def _scratch() -> bytearray:
    """This thread's reusable first-try output buffer (``_SMALL_MAX`` bytes)."""
    scratch: bytearray | None = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = bytearray(_SMALL_MAX)
    return scratch


def _into(into: Any, data: Buf, out: memoryview | mmap.mmap) -> int:
    """Bytes ``into`` wrote to ``out``, or ``len(out) + 1`` if more did not fit."""
    try:
        return int(into(data, out))
    except cramjam.DecompressionError as exc:
        if _BUFFER_FULL not in str(exc):
            raise
        return len(out) + 1


def _buffer(size: int) -> mmap.mmap:
    """``size`` zero bytes of anonymous memory (pages are touched only when written)."""
    try:
        return mmap.mmap(-1, max(size, 1))
    except OSError as exc:  # ENOMEM: address space (RLIMIT_AS) or overcommit refused
        raise MemoryError(f"cannot map {size} bytes: {exc}") from exc


# -- snappy ---------------------------------------------------------------------


def _xerial_compress(data: Buf) -> bytes:
    view = memoryview(data).cast("B")
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_COMPATIBLE_VERSION))
    compress_raw = cramjam.snappy.compress_raw
    pack_length = _BLOCK_LENGTH.pack
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        out += pack_length(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: Buf) -> bytes:
    view = memoryview(data).cast("B")
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    return _xerial_decompress(view)


def _xerial_decompress(view: memoryview) -> bytes:
    """Decode xerial framing; a repeated stream header (concatenated streams) is skipped."""
    decompress_raw = cramjam.snappy.decompress_raw
    return b"".join([decompress_raw(block) for block in _xerial_blocks(view)])


def _snappy_decompress_bounded(view: memoryview, limit: int) -> memoryview:
    """Raw or xerial snappy; every block's declared length is summed before allocating."""
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        blocks = [view]
    else:
        blocks = _xerial_blocks(view)
    raw_len = cramjam.snappy.decompress_raw_len
    total = 0
    lengths = []
    for block in blocks:
        length = raw_len(block)
        lengths.append(length)
        total += length
        if total > limit:
            raise ExpansionLimitError(SNAPPY, limit)
    out: bytearray | mmap.mmap = bytearray(total) if total <= _SMALL_MAX else _buffer(total)
    target = memoryview(out)
    position = 0
    into = cramjam.snappy.decompress_raw_into
    for block, length in zip(blocks, lengths, strict=True):
        written = into(block, target[position : position + length])
        if written != length:
            raise CorruptRecordError(
                f"snappy block declares {length} bytes but decodes to {written}"
            )
        position += length
    return target[:total].toreadonly()


def _xerial_blocks(view: memoryview) -> list[memoryview]:
    """The raw snappy blocks of a xerial stream (repeated stream headers skipped)."""
    end = len(view)
    if end < _XERIAL_HEADER_SIZE:
        raise CorruptRecordError(f"xerial snappy header truncated: {end} of 16 bytes")
    blocks = []
    position = _XERIAL_HEADER_SIZE
    while position < end:
        if view[position : position + len(XERIAL_MAGIC)] == XERIAL_MAGIC:
            if end - position < _XERIAL_HEADER_SIZE:
                raise CorruptRecordError(f"xerial snappy header at byte {position} truncated")
            position += _XERIAL_HEADER_SIZE
            continue
        if end - position < 4:
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {position}")
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += 4
        if length < 0 or length > end - position:
            raise CorruptRecordError(
                f"xerial snappy block at byte {position - 4} declares {length} bytes "
                f"but {end - position} remain"
            )
        blocks.append(view[position : position + length])
        position += length
    return blocks

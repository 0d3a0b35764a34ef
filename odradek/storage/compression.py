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
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

import cramjam

from odradek.storage.batch import COMPRESSION_NAMES, GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD
from odradek.storage.errors import CorruptRecordError

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
        # The streaming compressor only takes ``bytes``.
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == ZSTD:
        zstd_level = ZSTD_DEFAULT_LEVEL if level is None else level
        return bytes(cramjam.zstd.compress(data, level=zstd_level))
    _check_codec(codec)
    raise AssertionError("unreachable")  # pragma: no cover


def decompress(codec: int, data: Buf) -> bytes:
    """Inverse of ``compress``; raises CorruptRecordError on any malformed input."""
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
    end = len(view)
    if end < _XERIAL_HEADER_SIZE:
        raise CorruptRecordError(f"xerial snappy header truncated: {end} of 16 bytes")
    decompress_raw = cramjam.snappy.decompress_raw
    parts = []
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
        parts.append(decompress_raw(view[position : position + length]))
        position += length
    return b"".join(parts)

"""Compressed payloads that expand enormously, and batches framed around any payload.

A bomb is built from one compressed unit repeated: gzip members and zstd frames may be
concatenated (every decoder reads them all), so a few KiB stand for hundreds of MiB
without the test ever holding the expanded bytes.
"""

from __future__ import annotations

import struct

import cramjam
from crc32c import crc32c

from odradek.records.batch import GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD
from odradek.records.compression import compress

UNIT = 8 << 20  # bytes of zeros per repeated unit

_PREFIX = struct.Struct(">qiibI")
_COVERED = struct.Struct(">hiqqqhii")


def bomb(codec: int, expanded: int) -> bytes:
    """``codec`` data that decompresses to ``expanded`` zero bytes (a multiple of UNIT)."""
    assert expanded % UNIT == 0
    repeats = expanded // UNIT
    if codec in (GZIP, ZSTD, LZ4):
        return compress(codec, bytes(UNIT)) * repeats
    if codec == SNAPPY:
        # xerial: one header, then [length][raw block] chunks of 32 KiB of zeros each.
        block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
        chunk = struct.pack(">i", len(block)) + block
        return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + chunk * (expanded // (32 * 1024))
    raise ValueError(f"no bomb for codec {codec}")


def raw_batch(
    payload: bytes,
    codec: int,
    record_count: int = 1,
    *,
    timestamp: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch whose records section is ``payload`` as given (already compressed).

    ``timestamp`` -1 means the current time would be checked: pass the broker-side
    clock's value (or any recent time) for CreateTime topics.
    """
    assert codec in (NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD)
    covered = _COVERED.pack(
        codec,
        record_count - 1,
        timestamp,
        timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c(payload, crc32c(covered))
    length = 4 + 1 + 4 + len(covered) + len(payload)
    return _PREFIX.pack(0, length, -1, 2, crc) + covered + payload

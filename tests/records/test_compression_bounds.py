"""Bounded decompression: output never past the limit, bombs refused, bad input typed.

What a broker opens on a client's behalf goes through ``decompress_bounded``; these
tests pin that each codec stops at the bound (measured with tracemalloc: the buffers
are Python objects), accepts exactly what fits, and turns any malformed stream into a
CorruptRecordError rather than a cramjam exception or a crash.
"""

from __future__ import annotations

import gc
import os
import struct
from pathlib import Path

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records.batch import GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD
from odradek.records.compression import (
    ExpansionLimitError,
    compress,
    decompress,
    decompress_bounded,
)
from odradek.records.errors import CorruptRecordError, RecordTooLargeError
from tests.support.bombs import bomb

CODECS = [NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]


def _payload(size: int, seed: int) -> bytes:
    """Half random, half repeated: compressible but not trivially."""
    rnd = os.urandom(size // 2) if seed % 2 else bytes(range(256)) * (size // 512 + 1)
    return (rnd + b"kafka record " * (size // 13 + 1))[:size]


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    size=st.integers(0, 300_000),
    slack=st.integers(-3, 3),
    seed=st.integers(0, 1),
)
def test_accepts_exactly_what_fits(codec: int, size: int, slack: int, seed: int) -> None:
    data = _payload(size, seed)
    packed = compress(codec, data)
    limit = max(size + slack, 0)
    if size <= limit:
        out = decompress_bounded(codec, packed, limit)
        assert out == data
        assert decompress(codec, packed, limit=limit) == data
    else:
        with pytest.raises(ExpansionLimitError):
            decompress_bounded(codec, packed, limit)


@settings(max_examples=60, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED), size=st.integers(1, 200_000), limit=st.integers(0, 1 << 20)
)
def test_any_limit_any_size(codec: int, size: int, limit: int) -> None:
    data = b"z" * size
    packed = compress(codec, data)
    if size <= limit:
        assert decompress_bounded(codec, packed, limit) == data
    else:
        with pytest.raises(ExpansionLimitError):
            decompress_bounded(codec, packed, limit)


def _peak_rss_reset() -> None:
    """Reset this process's VmHWM to its current RSS (Linux: clear_refs value 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_bomb_stops_at_the_bound(codec: int) -> None:
    """512 MiB of zeros (a few KiB of input for gzip/zstd) against a 16 MiB bound.

    Measured as the growth of the process's peak RSS (the buffers are memory maps,
    which tracemalloc does not see): at most the bound and the input, with slack.
    """
    packed = bomb(codec, 512 << 20 if codec in (GZIP, ZSTD) else 128 << 20)
    limit = 16 << 20
    gc.collect()
    _peak_rss_reset()
    before = _status("VmRSS")
    with pytest.raises(ExpansionLimitError) as caught:
        decompress_bounded(codec, packed, limit)
    growth = _status("VmHWM") - before
    assert growth < 2 * limit + len(packed), f"peak RSS grew {growth} bytes, bound {limit}"
    assert isinstance(caught.value, RecordTooLargeError)
    assert caught.value.code == "MESSAGE_TOO_LARGE"


def test_snappy_declared_lengths_are_summed_before_allocating() -> None:
    """A raw block declaring 4 GiB is refused from its preamble, not by trying."""
    lying = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    with pytest.raises(ExpansionLimitError):
        decompress_bounded(SNAPPY, lying, 1 << 20)
    # the same lie within the bound is corrupt input, not an allocation of 4 GiB
    with pytest.raises(CorruptRecordError):
        decompress_bounded(SNAPPY, b"\x80\x08" + b"\x00" * 10, 1 << 20)
    # xerial: blocks that each fit but together do not
    block = bytes(cramjam.snappy.compress_raw(bytes(30_000)))
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    xerial += (struct.pack(">i", len(block)) + block) * 4
    assert decompress_bounded(SNAPPY, xerial, 120_000) == bytes(120_000)
    with pytest.raises(ExpansionLimitError):
        decompress_bounded(SNAPPY, xerial, 119_999)


def test_other_clients_framings_decode_within_bounds() -> None:
    """zstd frames without a content size, lz4 frames with one and linked blocks."""
    data = _payload(200_000, 1)
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    linked = lz4.frame.compress(data, store_size=True, block_linked=True, content_checksum=True)
    gzipped = bytes(cramjam.gzip.compress(data[:1000])) + bytes(cramjam.gzip.compress(data[1000:]))
    for codec, packed in ((ZSTD, no_size), (LZ4, linked), (GZIP, gzipped)):
        assert decompress_bounded(codec, packed, len(data)) == data
        with pytest.raises(ExpansionLimitError):
            decompress_bounded(codec, packed, len(data) - 1)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_input_is_corrupt(codec: int) -> None:
    packed = compress(codec, _payload(50_000, 1))
    for cut in (1, 5, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress_bounded(codec, packed[:cut], 1 << 20)


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from(CODECS), garbage=st.binary(max_size=2000), limit=st.integers(0, 1 << 16)
)
def test_garbage_is_corrupt_or_bounded_never_a_crash(
    codec: int, garbage: bytes, limit: int
) -> None:
    try:
        out = decompress_bounded(codec, garbage, limit)
    except (CorruptRecordError, ExpansionLimitError):
        return
    assert len(out) <= limit


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.data())
def test_flipped_bytes_are_corrupt_or_bounded(codec: int, data: st.DataObject) -> None:
    packed = bytearray(compress(codec, _payload(20_000, 0)))
    position = data.draw(st.integers(0, len(packed) - 1))
    packed[position] ^= data.draw(st.integers(1, 255))
    try:
        out = decompress_bounded(codec, packed, 20_000)
    except (CorruptRecordError, ExpansionLimitError):
        return
    assert len(out) <= 20_000

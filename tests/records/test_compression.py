"""Tests for odradek.records.compression: round trips, wire formats, corrupt input."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records.batch import GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD
from odradek.records.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    compress,
    decompress,
)
from odradek.records.errors import CorruptRecordError

CODECS = [NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]
PAYLOADS = [
    b"",
    b"x",
    b"hello kafka " * 100,
    os.urandom(5000),
    bytes(range(256)) * 600,  # 150 KiB: several snappy blocks, several lz4 blocks
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip(codec: int, payload: bytes) -> None:
    packed = compress(codec, payload)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == payload
    # Every accepted input type gives the same answer.
    assert decompress(codec, memoryview(packed)) == payload
    assert decompress(codec, bytearray(packed)) == payload
    assert decompress(codec, compress(codec, bytearray(payload))) == payload
    assert decompress(codec, compress(codec, memoryview(payload))) == payload


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from(CODECS), payload=st.binary(max_size=3000))
def test_round_trip_property(codec: int, payload: bytes) -> None:
    assert decompress(codec, compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec {codec}"):
        decompress(codec, b"abc")
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        compress(codec, b"abc")


# (b"\x00" is not here: it is a valid raw snappy encoding of b"".)
@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(
    "garbage", [b"", b"garbage garbage", XERIAL_MAGIC, b"\x28\xb5\x2f\xfd\x00"]
)
def test_garbage_raises_corrupt(codec: int, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError, match=r"decompression failed|xerial"):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_known_garbage_is_rejected(codec: int) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\xff\xfe this is not a compressed stream")


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.data())
def test_mangled_stream_never_leaks_other_exceptions(codec: int, data: st.DataObject) -> None:
    packed = bytearray(compress(codec, b"some record bytes " * 50))
    if data.draw(st.booleans(), label="truncate"):
        packed = packed[: data.draw(st.integers(0, len(packed) - 1), label="length")]
    else:
        position = data.draw(st.integers(0, len(packed) - 1), label="position")
        packed[position] ^= data.draw(st.integers(1, 255), label="mask")
    with contextlib.suppress(CorruptRecordError):
        decompress(codec, bytes(packed))


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("payload", PAYLOADS[1:], ids=lambda p: f"{len(p)}B")
def test_truncated_stream_is_corrupt(codec: int, payload: bytes) -> None:
    packed = compress(codec, payload)
    for length in {0, 1, len(packed) // 2, len(packed) - 1}:
        # A truncated xerial stream may end exactly on a block boundary and decode
        # to a prefix; the batch decoder's record count catches that case.
        try:
            result = decompress(codec, packed[:length])
        except CorruptRecordError:
            continue
        assert codec == SNAPPY and payload.startswith(result) and len(result) < len(payload)


# -- gzip -----------------------------------------------------------------------


def test_gzip_reads_stdlib_gzip() -> None:
    payload = b"interop " * 500
    assert decompress(GZIP, gzip.compress(payload)) == payload
    assert gzip.decompress(compress(GZIP, payload)) == payload


# -- snappy ---------------------------------------------------------------------


def _xerial(*blocks: bytes) -> bytes:
    out = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        out += struct.pack(">i", len(block)) + block
    return out


def test_snappy_known_answer() -> None:
    # Raw snappy: varint uncompressed length 5, literal tag ((5-1) << 2), literal bytes.
    raw = b"\x05\x10hello"
    assert decompress(SNAPPY, raw) == b"hello"
    assert decompress(SNAPPY, _xerial(raw)) == b"hello"
    assert decompress(SNAPPY, _xerial(raw, raw)) == b"hellohello"


def test_snappy_compress_writes_xerial() -> None:
    packed = compress(SNAPPY, b"payload")
    assert packed.startswith(XERIAL_MAGIC)
    assert struct.unpack_from(">ii", packed, 8) == (1, 1)
    (length,) = struct.unpack_from(">i", packed, 16)
    assert len(packed) == 20 + length
    assert bytes(cramjam.snappy.decompress_raw(packed[20:])) == b"payload"


def test_snappy_decodes_raw_and_xerial_from_cramjam() -> None:
    payload = b"abc" * 1000
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(payload))) == payload
    assert decompress(SNAPPY, _xerial(bytes(cramjam.snappy.compress_raw(payload)))) == payload


def test_snappy_large_payload_spans_blocks() -> None:
    payload = os.urandom(3 * XERIAL_BLOCK_SIZE + 123)
    packed = compress(SNAPPY, payload)
    position, blocks = 16, []
    while position < len(packed):
        (length,) = struct.unpack_from(">i", packed, position)
        blocks.append(
            bytes(cramjam.snappy.decompress_raw(packed[position + 4 : position + 4 + length]))
        )
        position += 4 + length
    assert position == len(packed)
    assert [len(b) for b in blocks] == [XERIAL_BLOCK_SIZE] * 3 + [123]
    assert b"".join(blocks) == payload
    assert decompress(SNAPPY, packed) == payload


def test_snappy_concatenated_xerial_streams() -> None:
    first, second = compress(SNAPPY, b"first "), compress(SNAPPY, b"second")
    assert decompress(SNAPPY, first + second) == b"first second"


def test_snappy_header_only_is_empty() -> None:
    assert decompress(SNAPPY, _xerial()) == b""
    assert compress(SNAPPY, b"") == _xerial()


@pytest.mark.parametrize(
    "stream",
    [
        XERIAL_MAGIC + b"\x00\x00\x00\x01",  # header truncated
        _xerial() + b"\x00\x00",  # block length truncated
        _xerial() + struct.pack(">i", 100) + b"\x05\x10hello",  # block past the end
        _xerial() + struct.pack(">i", -1) + b"\x05\x10hello",  # negative block length
        _xerial(b"\x05\x10hel"),  # truncated raw block
        _xerial(b"\x05\x10hello") + XERIAL_MAGIC,  # second header truncated
    ],
)
def test_snappy_bad_xerial(stream: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(SNAPPY, stream)


# -- lz4 ------------------------------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, written from the xxHash specification (LZ4 frames checksum with it)."""
    length, position = len(data), 0
    if length >= 16:
        lanes = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while position + 16 <= length:
            for i, word in enumerate(struct.unpack_from("<4I", data, position)):
                lanes[i] = (_rotl((lanes[i] + word * _P2) & _M32, 13) * _P1) & _M32
            position += 16
        acc = _rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)
    else:
        acc = seed + _P5
    acc = (acc + length) & _M32
    while position + 4 <= length:
        (word,) = struct.unpack_from("<I", data, position)
        acc = (_rotl((acc + word * _P3) & _M32, 17) * _P4) & _M32
        position += 4
    while position < length:
        acc = (_rotl((acc + data[position] * _P5) & _M32, 11) * _P1) & _M32
        position += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


def test_xxh32_reference_values() -> None:
    assert xxh32(b"") == 0x02CC5D05
    # cramjam's own frames carry header and block checksums; check ours agree.
    frame = bytes(cramjam.lz4.compress(b"abcdefghijklmnopqrstuvwxyz" * 40))
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF


def lz4_frame(
    data: bytes,
    *,
    content_size: bool,
    block_checksum: bool,
    content_checksum: bool,
    compressed_blocks: bool,
) -> bytes:
    """Build an LZ4 frame by hand (independent 64 KiB blocks)."""
    flg = 0x40 | 0x20 | (block_checksum << 4) | (content_size << 3) | (content_checksum << 2)
    descriptor = bytes([flg, 0x40]) + (struct.pack("<Q", len(data)) if content_size else b"")
    out = struct.pack("<I", 0x184D2204) + descriptor + bytes([(xxh32(descriptor) >> 8) & 0xFF])
    for start in range(0, len(data), 65536):
        chunk = data[start : start + 65536]
        if compressed_blocks:
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
            out += struct.pack("<I", len(block)) + block
        else:
            block = chunk
            out += struct.pack("<I", len(block) | 0x80000000) + block
        if block_checksum:
            out += struct.pack("<I", xxh32(block))
    out += struct.pack("<I", 0)
    if content_checksum:
        out += struct.pack("<I", xxh32(data))
    return out


@pytest.mark.parametrize("content_size", [False, True])
@pytest.mark.parametrize("block_checksum", [False, True])
@pytest.mark.parametrize("content_checksum", [False, True])
@pytest.mark.parametrize("compressed_blocks", [False, True])
def test_lz4_hand_built_frames(
    content_size: bool, block_checksum: bool, content_checksum: bool, compressed_blocks: bool
) -> None:
    payload = (b"lz4 frame payload " * 5000)[:70000] + os.urandom(100)  # two blocks
    frame = lz4_frame(
        payload,
        content_size=content_size,
        block_checksum=block_checksum,
        content_checksum=content_checksum,
        compressed_blocks=compressed_blocks,
    )
    assert decompress(LZ4, frame) == payload


def test_lz4_hand_built_frame_bad_checksum() -> None:
    frame = bytearray(
        lz4_frame(
            b"abc" * 100,
            content_size=False,
            block_checksum=False,
            content_checksum=True,
            compressed_blocks=False,
        )
    )
    frame[-1] ^= 0x01
    with pytest.raises(CorruptRecordError):
        decompress(LZ4, bytes(frame))


def test_lz4_output_is_java_compatible() -> None:
    """Kafka's Java client only accepts frames with independent blocks."""
    frame = compress(LZ4, os.urandom(1000) * 200)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg = frame[4]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF


def test_lz4_reads_cramjam_one_shot_frames() -> None:
    payload = os.urandom(1000) * 200
    assert decompress(LZ4, bytes(cramjam.lz4.compress(payload))) == payload


# -- zstd -----------------------------------------------------------------------


def test_zstd_streaming_frame_without_content_size() -> None:
    payload = b"streamed zstd " * 5000
    compressor = cramjam.zstd.Compressor()
    compressor.compress(payload[:1000])
    head = bytes(compressor.flush())
    compressor.compress(payload[1000:])
    frame = head + bytes(compressor.finish())
    # Frame header descriptor: bits 7-6 = content size flag, bit 5 = single segment.
    # 0 and 0 means the frame does not say how large its content is.
    assert frame[:4] == b"\x28\xb5\x2f\xfd"
    assert frame[4] & 0xE0 == 0
    assert decompress(ZSTD, frame) == payload


def test_zstd_one_shot_frame_has_content_size() -> None:
    frame = compress(ZSTD, b"x" * 1000)
    assert frame[4] & 0xC0 or frame[4] & 0x20  # content size present
    assert decompress(ZSTD, frame) == b"x" * 1000


def test_zstd_concatenated_frames() -> None:
    assert decompress(ZSTD, compress(ZSTD, b"one ") + compress(ZSTD, b"two")) == b"one two"

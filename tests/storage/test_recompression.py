"""Recompression for topics whose compression.type is not ``producer``.

The converted batch keeps every record, header field and producer field; what cannot
fit ``max.message.bytes`` after conversion is refused with MESSAGE_TOO_LARGE and
nothing is written; records that do not match their header are INVALID_RECORD.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import batch as b
from odradek.records.codec import (
    Record,
    append_record,
    decode_batch,
    decode_batches,
    encode_batch,
)
from odradek.records.compression import compress
from odradek.records.errors import CorruptRecordError, RecordTooLargeError
from odradek.storage.errors import InvalidRecordError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.log_validator import (
    check_record_framing,
    conversion,
    convert_for_append,
    expansion_limit,
)
from tests.support.bombs import bomb, raw_batch

from .conftest import FakeClock, make_batch

NOW = 1_700_000_000_000


def new_log(tmp_path: Path, clock: FakeClock, **config: object) -> Log:
    log, _ = open_log(tmp_path / "t-0", LogConfig(**config), clock=clock)  # type: ignore[arg-type]
    return log


def section(count: int, value: bytes = b"v", *, deltas: list[int] | None = None) -> bytes:
    out = bytearray()
    for index in range(count):
        append_record(out, (deltas or list(range(count)))[index], 0, b"k", value)
    return bytes(out)


@pytest.mark.parametrize("source", [b.NO_COMPRESSION, b.GZIP, b.SNAPPY, b.LZ4, b.ZSTD])
@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_conversion_keeps_records_and_fields(
    tmp_path: Path, clock: FakeClock, source: int, target: str
) -> None:
    log = new_log(tmp_path, clock, compression_type=target)
    batch = make_batch(
        50,
        timestamp=clock(),
        compression=source,
        producer_id=9,
        producer_epoch=2,
        base_sequence=0,
    )
    original = decode_batch(batch)
    info = log.append_as_leader(batch, 3)
    assert (info.first_offset, info.last_offset) == (0, 49)
    (stored,) = decode_batches(b"".join(log.read_batches(0)))
    codec = b.COMPRESSION_BY_NAME[target.replace("uncompressed", "none")]
    assert stored.header.compression == codec
    assert stored.records == original.records
    for field in ("producer_id", "producer_epoch", "base_sequence", "max_timestamp"):
        assert getattr(stored.header, field) == getattr(original.header, field)


def test_limit_rule() -> None:
    config = LogConfig(max_message_bytes=1_000_061)
    assert expansion_limit(config, b.NO_COMPRESSION) == 1_000_000
    assert expansion_limit(config, b.SNAPPY) == 22_000_000
    for codec in (b.GZIP, b.LZ4, b.ZSTD):
        assert expansion_limit(config, codec) == 64_000_000


def test_uncompressed_target_refuses_what_cannot_fit_and_stores_nothing(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The 20 KB gzip request that became a 21 MB uncompressed batch."""
    log = new_log(tmp_path, clock, compression_type="uncompressed")
    big = make_batch(1, timestamp=clock(), size=21_000_000, compression=b.GZIP)
    assert len(big) < 100_000
    with pytest.raises(RecordTooLargeError) as caught:
        log.append_as_leader(big, 0)
    assert caught.value.code == "MESSAGE_TOO_LARGE"
    assert log.log_end_offset == 0 and log.size == 0
    # exactly at the limit is fine
    room = log.config.max_message_bytes - b.HEADER_SIZE
    overhead = len(section(1, b"x" * room)) - room
    records = section(1, b"x" * (room - overhead))
    assert len(records) == room
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(raw_batch(compress(b.GZIP, records + b"x"), b.GZIP), 0)
    fits = raw_batch(compress(b.GZIP, records), b.GZIP, timestamp=clock())
    log.append_as_leader(fits, 0)
    assert next(log.iter_headers(0)).size == log.config.max_message_bytes


def test_result_over_max_message_bytes_is_refused_after_conversion(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Within the expansion bound, but lz4 (64 KiB window) cannot do what zstd did.

    A 100 KB random block repeated ten times: zstd finds the repeats (~100 KB), lz4
    cannot (~1 MB): the converted batch is over max.message.bytes, as in the 9 MB lz4
    batch of the report.
    """
    log = new_log(tmp_path, clock, compression_type="lz4", max_message_bytes=300_000)
    value = os.urandom(100_000) * 10
    batch = encode_batch([Record(0, clock(), None, value)], compression=b.ZSTD)
    assert len(batch) < 300_000 and len(value) < expansion_limit(log.config, b.LZ4)
    with pytest.raises(RecordTooLargeError, match=r"recompressed to lz4 is \d+ bytes"):
        log.append_as_leader(batch, 0)
    assert log.log_end_offset == 0 and log.size == 0


BOMBS = {b.GZIP: 512 << 20, b.ZSTD: 512 << 20, b.LZ4: 128 << 20, b.SNAPPY: 16 << 20}


@pytest.mark.parametrize("codec", list(BOMBS))
@pytest.mark.parametrize("target", ["uncompressed", "zstd", "gzip"])
def test_bombs_are_refused(tmp_path: Path, clock: FakeClock, codec: int, target: str) -> None:
    """Zeros are no records: a bomb is either past the bound or INVALID_RECORD.

    Snappy cannot expand past 21x, so within the 64x bound of a compressing target a
    snappy bomb is opened (16 MiB at most) and refused for what it holds.
    """
    if b.COMPRESSION_NAMES[codec] == target:
        pytest.skip("same codec: nothing to convert")
    log = new_log(tmp_path, clock, compression_type=target)
    packed = bomb(codec, BOMBS[codec])
    assert len(packed) < log.config.max_message_bytes - b.HEADER_SIZE
    batch = raw_batch(packed, codec, timestamp=clock())
    if BOMBS[codec] > expansion_limit(log.config, log._target_codec or 0):
        with pytest.raises(RecordTooLargeError, match="expands past the bound"):
            log.append_as_leader(batch, 0)
    else:
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(batch, 0)
    assert log.log_end_offset == 0


def test_record_count_precheck(tmp_path: Path, clock: FakeClock) -> None:
    """Two billion records cannot be 7 bytes each within the bound: refused unopened."""
    config = LogConfig(compression_type="zstd", max_message_bytes=100_000)
    batch = raw_batch(b"not even gzip", b.GZIP, record_count=2**31 - 1, timestamp=NOW)
    with pytest.raises(RecordTooLargeError, match="at least 7 bytes each"):
        convert_for_append(batch, config, b.ZSTD, NOW, name="t-0")


@pytest.mark.parametrize(
    ("records", "count", "message"),
    [
        (section(3), 4, "declares 4 records but the batch holds 3"),
        (section(3), 2, "follow the 2 records"),
        (section(3, deltas=[0, 2, 3]), 3, "record 1 has offset delta 2"),
        (section(3)[:-1], 3, "record 2 has bad length"),
        (b"\x02\x00", 1, "record 0 has bad length 1"),
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 1, "varint longer"),
    ],
)
def test_records_must_match_their_header(records: bytes, count: int, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        check_record_framing(records, count)
    config = LogConfig(compression_type="lz4")
    batch = raw_batch(compress(b.GZIP, records), b.GZIP, record_count=count, timestamp=NOW)
    with pytest.raises(InvalidRecordError):
        convert_for_append(batch, config, b.LZ4, NOW, name="t-0")


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 50), cut=st.integers(0, 400), flip=st.integers(0, 400))
def test_damaged_sections_never_crash(count: int, cut: int, flip: int) -> None:
    data = bytearray(section(count, b"value"))
    del data[len(data) - min(cut, len(data)) :][: cut % 3]
    if data:
        data[flip % len(data)] ^= 0x80
    with contextlib.suppress(InvalidRecordError):
        check_record_framing(data, count)


def test_corrupt_stream_is_corrupt_message(clock: FakeClock) -> None:
    config = LogConfig(compression_type="zstd")
    batch = raw_batch(compress(b.GZIP, section(5))[:-8], b.GZIP, record_count=5, timestamp=NOW)
    with pytest.raises(CorruptRecordError, match="gzip decompression failed"):
        convert_for_append(batch, config, b.ZSTD, NOW, name="t-0")


def test_conversion_is_offered_only_when_needed() -> None:
    gzip_batch = make_batch(2, compression=b.GZIP)
    assert conversion(gzip_batch, LogConfig(), NOW, name="t-0") is None  # producer
    assert conversion(gzip_batch, LogConfig(compression_type="gzip"), NOW, name="t-0") is None
    plain = make_batch(2)
    assert conversion(plain, LogConfig(compression_type="uncompressed"), NOW, name="t-0") is None
    convert = conversion(gzip_batch, LogConfig(compression_type="zstd"), NOW, name="t-0")
    assert convert is not None
    converted = convert()
    assert decode_batch(converted).header.compression == b.ZSTD


def test_a_large_compressible_batch_converts(tmp_path: Path, clock: FakeClock) -> None:
    """Within the bound and past the 4 MiB first try: 40,000 JSON-like records, 24 MB
    uncompressed in a gzip batch under 1 MiB, are stored in zstd, every record kept."""
    log = new_log(tmp_path, clock, compression_type="zstd")
    template = b'{"user": %d, "event": "page_view", "path": "/products/%d", "pad": "%s"}'
    values = [template % (i, i % 97, b"x" * 500) for i in range(40_000)]
    records = [Record(i, clock(), b"user-%d" % (i % 1000), v) for i, v in enumerate(values)]
    batch = encode_batch(records, compression=b.GZIP)
    assert len(batch) < log.config.max_message_bytes
    assert sum(map(len, values)) > 20_000_000
    log.append_as_leader(batch, 0)
    (stored,) = decode_batches(b"".join(log.read_batches(0)))
    assert stored.header.compression == b.ZSTD
    assert [r.value for r in stored.records] == values

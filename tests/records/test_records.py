"""Tests for odradek.records.codec: round trips, known answers, corrupt input."""

from __future__ import annotations

import struct
from itertools import accumulate

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial.readers import read_signed_varint, read_signed_varlong

from odradek.records.batch import (
    CREATE_TIME,
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NO_COMPRESSION,
    SNAPPY,
    ZSTD,
    check_batch,
    parse_header,
)
from odradek.records.codec import (
    ABORT_MARKER,
    COMMIT_MARKER,
    SMALL_VARINT_LIMIT,
    DecodedBatch,
    Header,
    Record,
    _put_varint,
    append_record,
    decode_batch,
    decode_batches,
    decode_control_record,
    decode_end_txn_marker,
    decode_record_columns,
    encode_batch,
    encode_end_txn_marker,
    frame_batch,
    iter_records,
    new_records,
)
from odradek.records.compression import compress, decompress
from odradek.records.errors import CorruptRecordError

CODECS = [NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD]
INT64_MAX = 2**63 - 1

# -- helpers --------------------------------------------------------------------


def zz(value: int) -> bytes:
    """Zigzag varint, written independently of the module under test."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = unsigned & 0x7F
        unsigned >>= 7
        if unsigned:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def with_section(
    batch: bytes,
    section: bytes,
    *,
    attributes: int | None = None,
    record_count: int | None = None,
) -> bytes:
    """Replace the records section (and optionally attributes/count); fix length and CRC."""
    out = bytearray(batch[:61]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    if attributes is not None:
        struct.pack_into(">h", out, 21, attributes)
    if record_count is not None:
        struct.pack_into(">i", out, 57, record_count)
    struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return bytes(out)


def raw_section(batch: bytes) -> bytes:
    """The uncompressed records section of an encoded batch."""
    return decompress(parse_header(batch).compression, batch[61:])


def decodes_or_corrupt(buf: bytes) -> None:
    """Decoding may fail, but only with CorruptRecordError."""
    try:
        decoded = decode_batch(buf)
    except CorruptRecordError:
        return
    assert all(isinstance(record, Record) for record in decoded.records)
    assert len(decoded.records) == decoded.header.record_count


# -- strategies -----------------------------------------------------------------

optional_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(
    st.builds(Header, st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
).map(tuple)
# Any int64 timestamps whose pairwise differences still fit in an int64 delta.
timestamps = st.integers(-(2**62), 2**62 - 1) | st.integers(1_600_000_000_000, 1_800_000_000_000)


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 8) -> tuple[int, list[Record]]:
    base_offset = draw(st.integers(0, 2**62))
    count = draw(st.integers(1, max_size))
    first = draw(st.integers(0, 3))  # compaction can remove the record at base_offset
    gaps = draw(st.lists(st.integers(1, 1000), min_size=count - 1, max_size=count - 1))
    offsets = [base_offset + offset for offset in accumulate([first, *gaps])]
    records = [
        Record(offset, draw(timestamps), draw(optional_bytes), draw(optional_bytes), draw(headers))
        for offset in offsets
    ]
    return base_offset, records


@st.composite
def batch_options(draw: st.DrawFn) -> dict[str, object]:
    timestamp_type = draw(st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))
    return {
        "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
        "compression": draw(st.sampled_from(CODECS)),
        "timestamp_type": timestamp_type,
        "producer_id": draw(st.integers(-1, INT64_MAX)),
        "producer_epoch": draw(st.integers(-1, 2**15 - 1)),
        "base_sequence": draw(st.integers(-1, 2**31 - 1)),
        "is_transactional": draw(st.booleans()),
        "is_control": draw(st.booleans()),
        "max_timestamp": (
            draw(st.none() | timestamps) if timestamp_type == CREATE_TIME else draw(timestamps)
        ),
    }


@st.composite
def encoded_batches(draw: st.DrawFn) -> bytes:
    base_offset, records = draw(record_lists(max_size=4))
    return encode_batch(records, base_offset=base_offset, compression=draw(st.sampled_from(CODECS)))


# -- round trips ----------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(record_lists(), batch_options())
def test_round_trip(batch: tuple[int, list[Record]], options: dict) -> None:
    base_offset, records = batch
    encoded = encode_batch(records, base_offset=base_offset, **options)
    header = check_batch(encoded)
    assert header.size == len(encoded)

    decoded = decode_batch(encoded)
    assert decoded.header.crc == header.crc
    max_timestamp = options["max_timestamp"]
    if max_timestamp is None:
        max_timestamp = max(record.timestamp for record in records)
    if options["timestamp_type"] == LOG_APPEND_TIME:
        expected = [Record(r.offset, max_timestamp, r.key, r.value, r.headers) for r in records]
    else:
        expected = records
    assert decoded.records == expected

    h = decoded.header
    assert h.base_offset == base_offset
    assert h.last_offset == records[-1].offset
    assert h.record_count == len(records)
    assert h.base_timestamp == records[0].timestamp
    assert h.max_timestamp == max_timestamp
    assert h.partition_leader_epoch == options["partition_leader_epoch"]
    assert h.compression == options["compression"]
    assert h.timestamp_type == options["timestamp_type"]
    assert h.producer_id == options["producer_id"]
    assert h.producer_epoch == options["producer_epoch"]
    assert h.base_sequence == options["base_sequence"]
    assert h.is_transactional == options["is_transactional"]
    assert h.is_control == options["is_control"]

    # Other buffer types and non-zero positions decode the same.
    assert decode_batch(bytearray(encoded)).records == expected
    assert decode_batch(memoryview(encoded)).records == expected
    padded = b"\x00" * 7 + encoded
    assert decode_batch(padded, 7).records == expected
    assert list(iter_records(bytearray(padded), parse_header(padded, 7))) == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), INT64_MAX))
def test_varint_writer_matches_kio(value: int) -> None:
    out = bytearray()
    _put_varint(out, value)
    assert bytes(out) == zz(value)
    assert read_signed_varlong(bytes(out), 0) == (value, len(out))
    if -(2**31) <= value < 2**31:
        assert read_signed_varint(bytes(out), 0) == (value, len(out))


def test_large_batch_round_trip_every_codec() -> None:
    records = [
        Record(i, 1_700_000_000_000 + i, b"key-%d" % i, b"value " * (i % 50), ())
        for i in range(2000)
    ]
    for codec in CODECS:
        encoded = encode_batch(records, compression=codec)
        assert decode_batch(encoded).records == records


def test_decode_batches() -> None:
    first = encode_batch(new_records([b"a", b"b"], timestamp=1), base_offset=0)
    second = encode_batch(new_records([b"c"], base_offset=2, timestamp=2), base_offset=2)
    batches = list(decode_batches(first + second))
    assert all(isinstance(batch, DecodedBatch) for batch in batches)
    assert [[r.value for r in b.records] for b in batches] == [[b"a", b"b"], [b"c"]]
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2]
    with pytest.raises(CorruptRecordError):
        list(decode_batches(first + second[:-1]))


def test_new_records() -> None:
    records = new_records(
        [b"v", (b"k", None), (None, b"x", [("h", b"1"), Header("g", None)])],
        base_offset=10,
        timestamp=5,
    )
    assert records == [
        Record(10, 5, None, b"v"),
        Record(11, 5, b"k", None),
        Record(12, 5, None, b"x", (Header("h", b"1"), Header("g", None))),
    ]
    assert new_records([b"now"])[0].timestamp > 1_600_000_000_000


@settings(max_examples=150, deadline=None)
@given(record_lists(), batch_options())
def test_record_columns_hold_every_field(batch: tuple[int, list[Record]], options: dict) -> None:
    """The columns the consumer builds its records from: one entry per record each."""
    base_offset, records = batch
    encoded = encode_batch(records, base_offset=base_offset, **options)
    offsets, timestamps, keys, values, headers = decode_record_columns(
        encoded, parse_header(encoded)
    )
    assert offsets == [r.offset for r in records]
    if options["timestamp_type"] == LOG_APPEND_TIME:
        assert set(timestamps) == {parse_header(encoded).max_timestamp}
    else:
        assert timestamps == [r.timestamp for r in records]
    assert keys == [r.key for r in records]
    assert values == [r.value for r in records]
    assert headers == [tuple((h.key, h.value) for h in r.headers) for r in records]
    assert all(type(h) is tuple for h in headers)


def reference_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
) -> bytes:
    """One record in Kafka's layout, built with this file's own varint writer."""

    def field(data: bytes | None) -> bytes:
        return zz(-1) if data is None else zz(len(data)) + data

    body = b"\x00" + zz(timestamp_delta) + zz(offset_delta) + field(key) + field(value)
    body += zz(len(headers)) + b"".join(field(k.encode()) + field(v) for k, v in headers)
    return zz(len(body)) + body


# sizes on both sides of one- and two-byte varints and of the encoder's look-up table
edge_sizes = st.sampled_from([0, 1, 63, 64, 8190, 8191, 8192, 8193, 20_000])


@settings(max_examples=200, deadline=None)
@given(
    offset_delta=st.integers(0, 2**31 - 1) | st.sampled_from([0, 63, 64, 8191, 8192]),
    timestamp_delta=st.integers(-(2**62), 2**62) | st.sampled_from([-2, -1, 0, 8191, 8192]),
    key=st.none() | st.binary(max_size=70) | edge_sizes.map(lambda n: b"k" * n),
    value=st.none() | st.binary(max_size=70) | edge_sizes.map(lambda n: b"v" * n),
    headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=9)), max_size=3),
)
def test_append_record_matches_reference(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
) -> None:
    out = bytearray(b"before")
    size = append_record(out, offset_delta, timestamp_delta, key, value, headers)
    expected = reference_record(offset_delta, timestamp_delta, key, value, headers)
    assert bytes(out) == b"before" + expected
    assert size == len(expected)


def test_records_appended_one_by_one_frame_into_a_valid_batch() -> None:
    """The producer's path: append_record per record, frame_batch when sent."""
    section = bytearray()
    values = [b"x" * n for n in (0, 5, SMALL_VARINT_LIMIT, 300)]
    for index, value in enumerate(values):
        append_record(section, index, index * 3 - 1, None if index == 2 else b"k", value)
    for codec in CODECS:
        batch = frame_batch(
            section,
            record_count=4,
            last_offset_delta=3,
            base_timestamp=1000,
            max_timestamp=1008,
            compression=codec,
            producer_id=7,
            producer_epoch=1,
            base_sequence=10,
        )
        decoded = decode_batch(batch)
        assert [r.value for r in decoded.records] == values
        assert [r.timestamp for r in decoded.records] == [999, 1002, 1005, 1008]
        assert [r.key for r in decoded.records] == [b"k", b"k", None, b"k"]
        header = decoded.header
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 10)
        assert header.last_sequence == 13 and header.compression == codec


# -- known answers --------------------------------------------------------------


def hand_built_batch(section: bytes, *, count: int, last_offset_delta: int, max_ts: int) -> bytes:
    covered = (
        struct.pack(">hiqqqhii", 0, last_offset_delta, 1000, max_ts, -1, -1, -1, count) + section
    )
    return struct.pack(">qiibI", 0, 49 + len(section), 3, 2, crc32c(covered)) + covered


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_known_answer_single_record() -> None:
    # length 8, attributes 0, timestampDelta 0, offsetDelta 0, key "k", value "v", 0 headers
    section = b"\x10" + b"\x00" + b"\x00" + b"\x00" + b"\x02k" + b"\x02v" + b"\x00"
    batch = hand_built_batch(section, count=1, last_offset_delta=0, max_ts=1000)
    decoded = decode_batch(batch)
    assert decoded.records == [Record(0, 1000, b"k", b"v", ())]
    assert decoded.header.partition_leader_epoch == 3
    assert encode_batch([Record(0, 1000, b"k", b"v")], partition_leader_epoch=3) == batch


def test_known_answer_negative_delta_nulls_and_header() -> None:
    first = b"\x10" + b"\x00\x00\x00" + b"\x02k\x02v\x00"
    # attributes 0, timestampDelta -1, offsetDelta 2, null key, empty value,
    # one header "h" with a null value.
    body = b"\x00" + b"\x01" + b"\x04" + b"\x01" + b"\x00" + b"\x02" + b"\x02h\x01"
    second = zz(len(body)) + body
    batch = hand_built_batch(first + second, count=2, last_offset_delta=2, max_ts=1000)
    records = [Record(0, 1000, b"k", b"v"), Record(2, 999, None, b"", (Header("h", None),))]
    assert decode_batch(batch).records == records
    assert encode_batch(records, partition_leader_epoch=3) == batch


def test_known_answer_multibyte_varint() -> None:
    encoded = encode_batch([Record(0, 0, None, b"x" * 300)])
    section = encoded[61:]
    # length = 1 + 1 + 1 + 1 + 2 + 300 + 1 = 307 -> zigzag 614 = 0xE6 0x04
    assert section[:2] == b"\xe6\x04"
    assert section[6:8] == b"\xd8\x04"  # value length 300 -> zigzag 600


def test_log_append_time_uses_max_timestamp() -> None:
    encoded = encode_batch(
        [Record(0, 1, None, b"a"), Record(1, 2, None, b"b")],
        timestamp_type=LOG_APPEND_TIME,
        max_timestamp=99,
    )
    assert [r.timestamp for r in decode_batch(encoded).records] == [99, 99]


# -- control records ------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker_round_trip(commit: bool) -> None:
    marker = encode_end_txn_marker(commit, 7, offset=42, timestamp=1234)
    assert marker.key == struct.pack(">hh", 0, COMMIT_MARKER if commit else ABORT_MARKER)
    assert marker.value == struct.pack(">hi", 0, 7)
    encoded = encode_batch(
        [marker],
        base_offset=42,
        producer_id=9,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
    )
    decoded = decode_batch(encoded)
    assert decoded.header.is_control and decoded.header.is_transactional
    (record,) = decoded.records
    assert decode_control_record(record) == (0, COMMIT_MARKER if commit else ABORT_MARKER)
    assert decode_end_txn_marker(record) == (commit, 7)


@pytest.mark.parametrize(
    ("key", "value"),
    [(None, b"\x00\x00\x00\x00\x00\x07"), (b"\x00\x00", None), (b"\xff\xff\x00\x01", None)],
)
def test_bad_control_records(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        decode_control_record(Record(0, 0, key, value))


def test_bad_end_txn_markers() -> None:
    with pytest.raises(CorruptRecordError, match="short value"):
        decode_end_txn_marker(Record(0, 0, b"\x00\x00\x00\x01", b"\x00"))
    with pytest.raises(CorruptRecordError, match="not a marker"):
        decode_end_txn_marker(Record(0, 0, b"\x00\x00\x00\x05", b"\x00\x00\x00\x00\x00\x00"))


# -- encoder argument checks ----------------------------------------------------


@pytest.mark.parametrize(
    ("records", "kwargs"),
    [
        ([], {}),
        ([Record(1, 0, None, None), Record(1, 0, None, None)], {}),
        ([Record(2, 0, None, None), Record(1, 0, None, None)], {}),
        ([Record(4, 0, None, None)], {"base_offset": 5}),
        ([Record(2**31, 0, None, None)], {}),
        ([Record(0, 0, None, None)], {"compression": 5}),
        ([Record(0, 0, None, None)], {"timestamp_type": 2}),
        ([Record(0, 0, None, None)], {"producer_epoch": 2**15}),
        ([Record(-(2**63) - 1, 0, None, None)], {"base_offset": -(2**63) - 1}),
        ([Record(0, -(2**63), None, None), Record(1, INT64_MAX, None, None)], {}),
    ],
)
def test_encode_rejects(records: list[Record], kwargs: dict) -> None:
    with pytest.raises(ValueError):
        encode_batch(records, **kwargs)


# -- corrupt input --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(encoded_batches(), st.data())
def test_flipped_byte_in_crc_range_is_caught(encoded: bytes, data: st.DataObject) -> None:
    position = data.draw(st.integers(17, len(encoded) - 1), label="position")
    mask = data.draw(st.integers(1, 255), label="mask")
    mangled = bytearray(encoded)
    mangled[position] ^= mask
    with pytest.raises(CorruptRecordError):
        check_batch(mangled)
    with pytest.raises(CorruptRecordError):
        decode_batch(bytes(mangled))


@pytest.mark.parametrize("codec", CODECS)
def test_truncation_at_every_length(codec: int) -> None:
    records = [
        Record(0, 10, b"key", b"value", (Header("h", b"x"),)),
        Record(1, 9, None, b"v" * 200, ()),
    ]
    encoded = encode_batch(records, compression=codec)
    for length in range(len(encoded)):
        with pytest.raises(CorruptRecordError):
            decode_batch(encoded[:length])
        with pytest.raises(CorruptRecordError):
            decode_batch(encoded[:length], verify_crc=False)


@settings(max_examples=150, deadline=None)
@given(encoded_batches(), st.data())
def test_truncated_records_section_with_valid_crc(encoded: bytes, data: st.DataObject) -> None:
    """Cut the records section (compressed or not), fix length and CRC: still corrupt."""
    section = encoded[61:]
    cut = data.draw(st.integers(0, len(section) - 1), label="cut")
    with pytest.raises(CorruptRecordError):
        decode_batch(with_section(encoded, section[:cut]))
    raw = raw_section(encoded)
    codec = parse_header(encoded).compression
    raw_cut = data.draw(st.integers(0, len(raw) - 1), label="raw_cut")
    with pytest.raises(CorruptRecordError):
        decode_batch(with_section(encoded, compress(codec, raw[:raw_cut])))


@settings(max_examples=200, deadline=None)
@given(
    section=st.binary(max_size=80),
    attributes=st.integers(0, 0x7F),
    count=st.integers(-2, 6),
)
def test_random_section_with_valid_crc(section: bytes, attributes: int, count: int) -> None:
    template = encode_batch([Record(0, 0, None, b"x")])
    decodes_or_corrupt(with_section(template, section, attributes=attributes, record_count=count))


@settings(max_examples=200, deadline=None)
@given(encoded_batches(), st.data())
def test_mangled_records_with_valid_crc(encoded: bytes, data: st.DataObject) -> None:
    """Flip bytes in the uncompressed records, recompress, fix the CRC: never a stray error."""
    codec = parse_header(encoded).compression
    raw = bytearray(raw_section(encoded))
    for _ in range(data.draw(st.integers(1, 3), label="flips")):
        position = data.draw(st.integers(0, len(raw) - 1), label="position")
        raw[position] ^= data.draw(st.integers(1, 255), label="mask")
    if data.draw(st.booleans(), label="insert"):
        position = data.draw(st.integers(0, len(raw)), label="insert_at")
        raw[position:position] = data.draw(st.binary(min_size=1, max_size=6), label="inserted")
    count = data.draw(st.none() | st.integers(-1, 6), label="count")
    decodes_or_corrupt(with_section(encoded, compress(codec, bytes(raw)), record_count=count))


@settings(max_examples=100, deadline=None)
@given(encoded_batches(), st.data())
def test_mangled_compressed_bytes_with_valid_crc(encoded: bytes, data: st.DataObject) -> None:
    section = bytearray(encoded[61:])
    position = data.draw(st.integers(0, len(section) - 1), label="position")
    section[position] ^= data.draw(st.integers(1, 255), label="mask")
    decodes_or_corrupt(with_section(encoded, bytes(section)))


def _single(body: bytes, count: int = 1) -> bytes:
    template = encode_batch([Record(0, 0, None, b"x")])
    return with_section(template, zz(len(body)) + body, record_count=count)


@pytest.mark.parametrize(
    ("buf", "message"),
    [
        (_single(b"\x00\x00\x00\x03\x00\x00"), "bad key length -2"),
        (_single(b"\x00\x00\x00\x01\x03\x00"), "bad value length -2"),
        (_single(b"\x00\x00\x00\x01\x04\x00"), "bad value length 2"),
        (_single(b"\x00\x00\x00\x01\x01\x01"), "bad header count -1"),
        (_single(b"\x00\x00\x00\x01\x01\x02\x01\x01"), "bad key length -1"),
        (_single(b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"), "not UTF-8"),
        (_single(b"\x00\x00\x00\x01\x01\x02\x02h\x03\x00"), "bad value length -2"),
        (_single(b"\x00\x00\x00\x01\x01\x00\x00"), "fields end"),
        (_single(b"\x00\x00\x00\x01\x01\x02\x02h\x01\x00"), "headers end"),
        (_single(b"\x00\x00\x00\x01\x01\x00", count=2), "only 1 records fit"),
        (_single(b"\x00\x00\x00\x01\x01\x00", count=0), "left after"),
        (_single(b"\x00\x00\x00\x01\x01\x00", count=-1), "negative record count"),
        (_single(b"\x00\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00"), "malformed"),
        (_single(b"\x00\x00\x80\x80\x80\x80\x80\x00\x01\x01\x00"), "malformed"),
    ],
)
def test_specific_corruptions(buf: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message) as info:
        decode_batch(buf)
    assert "base offset 0" in str(info.value)


def test_bad_record_length() -> None:
    template = encode_batch([Record(0, 0, None, b"x")])
    for section in (zz(-1) + b"\x00" * 6, zz(100) + b"\x00" * 6, b"\x80", b""):
        with pytest.raises(CorruptRecordError):
            decode_batch(with_section(template, section))


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_bad_compressed_section_names_base_offset(codec: int) -> None:
    template = encode_batch([Record(7, 0, None, b"x")], base_offset=7, compression=codec)
    with pytest.raises(CorruptRecordError, match="base offset 7") as info:
        decode_batch(with_section(template, b"\xff\xfe not compressed"))
    assert "decompression failed" in str(info.value)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_batch(codec: int) -> None:
    template = encode_batch([Record(0, 0, None, b"x")])
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        decode_batch(with_section(template, template[61:], attributes=codec))

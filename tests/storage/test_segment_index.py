"""Segment and index unit tests: lookups against a linear scan, read bounds, rolls.

Every lookup the indexes accelerate (offset → batch position, timestamp → first
record) is compared with the answer of a plain scan over the decoded records, for
random batch layouts and index intervals, both on the live segment, after a clean
close + load, and after a rebuild (``recover``).
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.batch import NO_COMPRESSION, parse_header
from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.storage.index import OffsetIndex
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.segment import BatchMeta, LogSegment

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


# -- helpers ------------------------------------------------------------------------


def build_segment(
    directory: Path,
    layout: list[tuple[int, list[int], int]],
    *,
    base: int = 0,
    interval: int = 0,
    max_index_bytes: int = 10_485_760,
) -> tuple[LogSegment, list[bytes]]:
    """A segment holding one batch per ``(count, timestamps, value_size)`` in layout."""
    segment = LogSegment(
        directory,
        base,
        index_interval_bytes=interval,
        max_index_bytes=max_index_bytes,
        created_ms=T0,
    )
    batches = []
    offset = base
    for count, timestamps, value_size in layout:
        records = [
            Record(offset + i, timestamps[i], f"k{offset + i}".encode(), b"x" * value_size)
            for i in range(count)
        ]
        data = encode_batch(records, base_offset=offset, partition_leader_epoch=0)
        header = parse_header(data)
        segment.append(
            [BatchMeta(offset, header.last_offset, header.max_timestamp, header.size)],
            [data],
            len(data),
        )
        batches.append(data)
        offset += count
    return segment, batches


def reopen_segment(segment: LogSegment, *, interval: int, max_index_bytes: int = 10_485_760):
    segment.close()
    again = LogSegment(
        segment.directory,
        segment.base_offset,
        index_interval_bytes=interval,
        max_index_bytes=max_index_bytes,
        created_ms=T0,
    )
    return again


def scan_records(batches: list[bytes]) -> list[Record]:
    return [r for b in decode_batches(b"".join(batches)) for r in b.records]


def batch_spans(batches: list[bytes]) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, position, size) of each batch."""
    spans, position = [], 0
    for data in batches:
        header = parse_header(data)
        spans.append((header.base_offset, header.last_offset, position, header.size))
        position += header.size
    return spans


def expected_first_at_or_after(
    records: list[Record], timestamp: int, start_offset: int
) -> tuple[int, int] | None:
    for record in records:
        if record.offset >= start_offset and record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None


def check_index_entries(segment: LogSegment, batches: list[bytes]) -> None:
    """Every offset index entry (o, p): the batch at p ends at o; time entries are sound."""
    spans = {position: last for _, last, position, _ in batch_spans(batches)}
    index = segment.offset_index
    for offset, position in zip(index._offsets, index._positions, strict=True):
        assert spans.get(position) == offset
    records = scan_records(batches)
    time_index = segment.time_index
    for timestamp, offset in zip(time_index._timestamps, time_index._offsets, strict=True):
        # "t is the largest timestamp of all records up to offset o" (and o has it).
        up_to = [r.timestamp for r in records if r.offset <= offset]
        assert max(up_to) <= timestamp
        assert max(r.timestamp for r in records) >= timestamp


def check_lookups(segment: LogSegment, batches: list[bytes], base: int) -> None:
    spans = batch_spans(batches)
    records = scan_records(batches)
    end = spans[-1][1] + 1 if spans else base
    assert segment.next_offset == end
    assert segment.size == sum(len(b) for b in batches)
    for offset in range(base - 1, end + 2):
        header = segment.translate_offset(offset)
        containing = [s for s in spans if s[1] >= offset]
        if not containing:
            assert header is None
        else:
            assert header is not None
            assert (header.base_offset, header.position) == (containing[0][0], containing[0][2])
    timestamps = sorted({r.timestamp for r in records})
    probes = {T0 - 10, *timestamps, *(t + 1 for t in timestamps), *(t - 1 for t in timestamps)}
    starts = {base, base + 1, (base + end) // 2, end - 1}
    for timestamp in probes:
        for start in starts:
            assert segment.find_offset_by_timestamp(timestamp, start) == (
                expected_first_at_or_after(records, timestamp, start)
            ), (timestamp, start)
    if records:
        assert segment.max_timestamp == max(r.timestamp for r in records)
    check_index_entries(segment, batches)


layouts = st.lists(
    st.integers(min_value=1, max_value=4).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.integers(T0 - 50, T0 + 50), min_size=n, max_size=n),
            st.integers(min_value=0, max_value=120),
        )
    ),
    min_size=0,
    max_size=25,
)


# -- index and time index lookups ---------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=layouts,
    interval=st.integers(min_value=0, max_value=400),
    base=st.sampled_from([0, 17, 1_000_000]),
)
def test_lookups_agree_with_a_linear_scan(layout, interval: int, base: int) -> None:
    directory = Path(tempfile.mkdtemp())
    try:
        segment, batches = build_segment(directory, layout, base=base, interval=interval)
        check_lookups(segment, batches, base)
        live_offsets = list(segment.offset_index._offsets)
        live_times = list(segment.time_index._timestamps)

        # Clean close, then load: the same answers from the files.
        segment = reopen_segment(segment, interval=interval)
        segment.load()
        check_lookups(segment, batches, base)
        assert list(segment.offset_index._offsets) == live_offsets

        # A rebuild from the log produces the same offset index entries.
        segment.offset_index.reset()
        segment.time_index.reset()
        result = segment.recover()
        assert result.corruption is None and result.batches == len(batches)
        assert list(segment.offset_index._offsets) == live_offsets
        assert list(segment.time_index._timestamps)[: len(live_times)] == live_times
        check_lookups(segment, batches, base)
        segment.close()
    finally:
        shutil.rmtree(directory)


def test_equal_and_non_monotonic_timestamps(tmp_path: Path) -> None:
    # Timestamps go up, back down and repeat, within and across batches.
    layout = [
        (3, [T0 + 5, T0 + 5, T0 + 1], 10),
        (2, [T0 + 3, T0 + 9], 10),
        (1, [T0 + 9], 10),
        (3, [T0 + 2, T0 + 2, T0 + 2], 10),
        (2, [T0 + 12, T0 + 4], 10),
    ]
    segment, batches = build_segment(tmp_path, layout, interval=0)
    check_lookups(segment, batches, 0)
    assert segment.find_offset_by_timestamp(T0 + 9, 0) == (4, T0 + 9)
    assert segment.find_offset_by_timestamp(T0 + 9, 5) == (5, T0 + 9)
    assert segment.find_offset_by_timestamp(T0 + 2, 6) == (6, T0 + 2)
    assert segment.find_offset_by_timestamp(T0 + 10, 0) == (9, T0 + 12)
    assert segment.find_offset_by_timestamp(T0 + 13, 0) is None
    segment.close()


def test_offset_index_lookup_unit(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 100, 10)
    assert index.lookup(150) == (100, 0)
    for offset, position in [(103, 50), (110, 300), (111, 400)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(103) == (103, 50)
    assert index.lookup(109) == (103, 50)
    assert index.lookup(10**9) == (111, 400)
    assert index.lookup_position(299) == 50
    assert index.lookup_position(300) == 300
    index.truncate_to(110)
    assert index.entries == 1 and index.lookup(200) == (103, 50)
    index.close()
    assert os.path.getsize(tmp_path / "x.index") == 8


# -- segment.read boundaries --------------------------------------------------------


def read_bases(segment: LogSegment, *args) -> list[int]:
    file_range = segment.read(*args)
    if file_range is None:
        return []
    data = os.pread(file_range.fd, file_range.length, file_range.position)
    return [b.header.base_offset for b in decode_batches(data)]


def test_segment_read_boundaries(tmp_path: Path) -> None:
    # Five batches: offsets 0-1, 2-3, 4-5, 6-7, 8-9.
    layout = [(2, [T0, T0], 30)] * 5
    segment, batches = build_segment(tmp_path, layout, interval=0)
    sizes = [len(b) for b in batches]
    assert len(set(sizes)) == 1
    size = sizes[0]

    # max_bytes smaller than the first batch.
    assert read_bases(segment, 0, size - 1, None, True) == [0]
    file_range = segment.read(0, size - 1, None, False)
    assert file_range is not None and file_range.length == 0
    assert read_bases(segment, 3, 1, None, True) == [2]
    # Exact fits, and one byte short of the next batch.
    assert read_bases(segment, 0, size, None, True) == [0]
    assert read_bases(segment, 0, 2 * size, None, True) == [0, 2]
    assert read_bases(segment, 0, 3 * size - 1, None, True) == [0, 2]
    assert read_bases(segment, 0, 5 * size, None, True) == [0, 2, 4, 6, 8]
    assert read_bases(segment, 0, 10**6, None, True) == [0, 2, 4, 6, 8]
    # The read starts with the batch holding the offset.
    assert read_bases(segment, 5, 10**6, None, True) == [4, 6, 8]
    # max_offset (exclusive) cutting in the middle of a batch, or on a boundary.
    assert read_bases(segment, 0, 10**6, 5, True) == [0, 2]
    assert read_bases(segment, 0, 10**6, 6, True) == [0, 2, 4]
    assert read_bases(segment, 0, 10**6, 10, True) == [0, 2, 4, 6, 8]
    assert read_bases(segment, 4, 10**6, 5, True) == []
    assert read_bases(segment, 4, 1, 5, True) == []  # min_one_batch never passes max_offset
    assert read_bases(segment, 3, 2 * size, 8, True) == [2, 4]
    # Past the end.
    assert segment.read(10, 10**6, None, True) is None
    segment.close()


@settings(max_examples=100, deadline=None)
@given(
    layout=layouts.filter(bool),
    interval=st.integers(min_value=0, max_value=300),
    data=st.data(),
)
def test_segment_read_matches_model(layout, interval: int, data) -> None:
    directory = Path(tempfile.mkdtemp())
    try:
        segment, batches = build_segment(directory, layout, interval=interval)
        spans = batch_spans(batches)
        end = spans[-1][1] + 1
        for _ in range(20):
            offset = data.draw(st.integers(0, end))
            max_bytes = data.draw(st.integers(1, segment.size + 10))
            max_offset = data.draw(st.one_of(st.none(), st.integers(0, end + 1)))
            min_one = data.draw(st.booleans())
            expected: list[int] = []
            containing = [s for s in spans if s[1] >= offset]
            total = 0
            for i, (first, last, _, size) in enumerate(containing):
                if max_offset is not None and last >= max_offset:
                    break
                if total + size > max_bytes and not (i == 0 and min_one):
                    break
                expected.append(first)
                total += size
                if i == 0 and size > max_bytes:
                    break
            assert read_bases(segment, offset, max_bytes, max_offset, min_one) == expected
        segment.close()
    finally:
        shutil.rmtree(directory)


# -- rolls ------------------------------------------------------------------------


def record_batch(count: int, timestamp: int, value_size: int = 20, **kwargs) -> bytes:
    records = [Record(i, timestamp, None, b"v" * value_size) for i in range(count)]
    return encode_batch(records, compression=NO_COMPRESSION, **kwargs)


def new_log(directory: Path, clock: Clock, **config) -> Log:
    base = LogConfig(retention_ms=-1)
    log, _ = open_log(directory, replace(base, **config), clock=clock)
    return log


def test_segment_bytes_roll(tmp_path: Path) -> None:
    clock = Clock()
    size = len(record_batch(1, T0))
    log = new_log(tmp_path / "t-0", clock, segment_bytes=3 * size)
    for _ in range(10):
        log.append_as_leader(record_batch(1, T0), 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size <= 3 * size for s in log.segments)
    # A batch bigger than segment.bytes still goes in (alone, in a new segment).
    big = record_batch(1, T0, value_size=4 * size)
    log.append_as_leader(big, 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9, 10]
    log.append_as_leader(record_batch(1, T0), 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9, 10, 11]
    log.close()


def test_index_full_rolls(tmp_path: Path) -> None:
    clock = Clock()
    # 24 bytes: 3 offset entries, 2 time entries per segment.
    log = new_log(tmp_path / "t-0", clock, segment_index_bytes=24, index_interval_bytes=0)
    for i in range(30):
        log.append_as_leader(record_batch(1, T0 + i), 0)
    segments = log.segments
    assert len(segments) > 5
    for segment in segments:
        assert segment.offset_index.entries <= 3
        assert segment.time_index.entries <= 2 + 1  # +1: the final entry at roll
    for segment in segments[:-1]:
        assert segment.indexes_full
    # Every record is still found.
    data = b"".join(log.read_batches(0))
    assert [r.offset for b in decode_batches(data) for r in b.records] == list(range(30))
    log.close()
    log2, stats = open_log(tmp_path / "t-0", replace(log.config), clock=clock, clean_shutdown=True)
    assert stats.recovered_segments == 0
    assert [s.base_offset for s in log2.segments] == [s.base_offset for s in segments]
    for offset in range(30):
        assert log2.offset_for_timestamp(T0 + offset) == (offset, T0 + offset)
    log2.close()


def test_segment_ms_roll_uses_record_time_then_wall_time(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path / "t-0", clock, segment_ms=1000)
    log.append_as_leader(record_batch(1, T0 - 5000), 0)
    log.append_as_leader(record_batch(1, T0 - 4000), 0)  # 1000 ms after the first: no roll
    assert len(log.segments) == 1
    log.append_as_leader(record_batch(1, T0 - 3999), 0)  # 1001 ms: roll
    assert [s.base_offset for s in log.segments] == [0, 2]
    # Wall clock alone does not roll a segment whose records carry timestamps.
    clock.now_ms += 10_000
    log.append_as_leader(record_batch(1, T0 - 3900), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    # Without timestamps (-1), the segment's creation time counts.
    log2 = new_log(tmp_path / "t-1", clock, segment_ms=1000)
    log2.append_as_leader(record_batch(1, -1), 0)
    clock.now_ms += 1000
    log2.append_as_leader(record_batch(1, -1), 0)
    assert len(log2.segments) == 1
    clock.now_ms += 1
    log2.append_as_leader(record_batch(1, -1), 0)
    assert [s.base_offset for s in log2.segments] == [0, 2]
    log.close()
    log2.close()


def test_segment_jitter_shortens_segment_ms(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path / "t-0", clock, segment_ms=1000, segment_jitter_ms=500)
    log.append_as_leader(record_batch(1, T0), 0)
    log.append_as_leader(record_batch(1, T0 + 500), 0)
    assert len(log.segments) == 1
    log.append_as_leader(record_batch(1, T0 + 501), 0)
    assert len(log.segments) == 2
    log.close()


# -- damaged indexes on a clean load -------------------------------------------------


def _clean_log(directory: Path, clock: Clock) -> tuple[list[int], list[Record]]:
    log = new_log(directory, clock, segment_bytes=2000, index_interval_bytes=100)
    for i in range(60):
        log.append_as_leader(record_batch(1 + i % 3, T0 + (i * 7) % 50, value_size=i % 40), i // 20)
    bases = [s.base_offset for s in log.segments]
    data = b"".join(log.read_batches(0))
    log.close()
    return bases, [r for b in decode_batches(data) for r in b.records]


def _garble_random(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(0, len(data), 3):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _append_junk(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(b"\x01\x02\x03")


def _mid_batch_entry(path: Path) -> None:
    data = bytearray(path.read_bytes())
    relative, position = struct.unpack_from(">ii", data, len(data) - 8)
    struct.pack_into(">ii", data, len(data) - 8, relative, position + 1)
    path.write_bytes(bytes(data))


def _wrong_offset_entry(path: Path) -> None:
    data = bytearray(path.read_bytes())
    relative, position = struct.unpack_from(">ii", data, len(data) - 8)
    previous = struct.unpack_from(">i", data, len(data) - 16)[0] if len(data) >= 16 else -1
    assert relative - 1 > previous
    struct.pack_into(">ii", data, len(data) - 8, relative - 1, position)
    path.write_bytes(bytes(data))


def _entry_beyond_log(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(struct.pack(">ii", 10**6, 10**8))


def _time_entry_beyond_segment(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(struct.pack(">qi", T0 + 10**6, 10**6))


@pytest.mark.parametrize(
    ("suffix", "damage"),
    [
        (".index", _garble_random),
        (".index", _append_junk),
        (".index", _mid_batch_entry),
        (".index", _wrong_offset_entry),
        (".index", _entry_beyond_log),
        (".index", lambda p: p.unlink()),
        (".timeindex", _garble_random),
        (".timeindex", _append_junk),
        (".timeindex", _time_entry_beyond_segment),
        (".timeindex", lambda p: p.write_bytes(b"")),
    ],
)
def test_damaged_index_on_clean_load_is_rebuilt(tmp_path: Path, suffix: str, damage) -> None:
    clock = Clock()
    directory = tmp_path / "t-0"
    bases, records = _clean_log(directory, clock)
    assert len(bases) >= 3
    victim = directory / f"{bases[1]:020d}{suffix}"
    assert victim.exists() and victim.stat().st_size > 0
    damage(victim)
    log, stats = open_log(
        directory,
        LogConfig(retention_ms=-1, segment_bytes=2000, index_interval_bytes=100),
        clock=clock,
        clean_shutdown=True,
    )
    assert stats.recovered_segments == 1
    assert [s.base_offset for s in log.segments] == bases
    assert log.log_end_offset == records[-1].offset + 1
    for record in records:
        header = next(log.iter_headers(record.offset))
        assert header.base_offset <= record.offset <= header.last_offset
        info = log.read(record.offset, 1)
        data = os.pread(info.ranges[0].fd, info.ranges[0].length, info.ranges[0].position)
        assert record in next(decode_batches(data)).records
    for timestamp in range(T0 - 1, T0 + 52):
        assert log.offset_for_timestamp(timestamp) == expected_first_at_or_after(
            records, timestamp, 0
        )
    log.close()


def test_empty_log_reopens_cleanly_without_recovery(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path / "t-0", clock)
    log.close()
    log, stats = open_log(tmp_path / "t-0", LogConfig(retention_ms=-1), clock=clock)
    assert stats.recovered_segments == 0
    log.append_as_leader(record_batch(2, T0), 0)
    log.roll()
    log.close()
    log, stats = open_log(tmp_path / "t-0", LogConfig(retention_ms=-1), clock=clock)
    assert stats.recovered_segments == 0
    assert log.log_end_offset == 2 and [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_multi_batch_request_never_overfills_the_index(tmp_path: Path) -> None:
    clock = Clock()
    # 24 bytes: room for 3 offset entries; each request carries 6 batches.
    log = new_log(tmp_path / "t-0", clock, segment_index_bytes=24, index_interval_bytes=0)
    for i in range(12):
        request = b"".join(record_batch(1, T0 + 6 * i + j) for j in range(6))
        log.append_as_leader(request, 0)
    for segment in log.segments:
        assert segment.offset_index.entries <= segment.offset_index.max_entries
    log.close()
    for path in (tmp_path / "t-0").glob("*.index"):
        assert path.stat().st_size <= 24
    log, stats = open_log(tmp_path / "t-0", log.config, clock=clock)
    assert stats.recovered_segments == 0
    for offset in range(72):
        info = log.read(offset, 1)
        r = info.ranges[0]
        batch = next(decode_batches(os.pread(r.fd, r.length, r.position)))
        assert batch.header.base_offset == offset
    log.close()


def test_garbled_batch_length_is_not_read_into_memory(tmp_path: Path, monkeypatch) -> None:
    clock = Clock()
    directory = tmp_path / "t-0"
    log = new_log(directory, clock)
    for i in range(5):
        log.append_as_leader(record_batch(2, T0 + i), 0)
    sizes = [len(b) for b in log.read_batches(0)]
    log.close()
    path = directory / f"{0:020d}.log"
    with open(path, "r+b") as handle:  # the third batch claims to be ~2 GiB long
        handle.seek(sum(sizes[:2]) + 8)
        handle.write(struct.pack(">i", 0x7FFFFFF0))
    requested: list[int] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        requested.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", pread)
    log, stats = open_log(directory, LogConfig(retention_ms=-1), clock=clock, clean_shutdown=False)
    assert max(requested) <= 4 * 1024 * 1024 + 100
    assert stats.corruption is not None
    assert log.log_end_offset == 4 and log.size == sum(sizes[:2])
    log.close()

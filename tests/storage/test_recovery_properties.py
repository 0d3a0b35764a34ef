"""Segment recovery for any batch size and any read boundary.

Recovery reads a segment in ``chunk_bytes`` chunks and header scans (lookups, reads,
clean loads) in ``scan_chunk_bytes`` chunks. Before 7607b5f a valid batch straddling a
recovery chunk's end failed its CRC check (the CRC was computed at the header's place
in the previous chunk, not in the chunk re-read to hold the batch), so a log longer
than 4 MiB was cut at the first such batch and acknowledged records were lost. These
tests draw batch sizes (header-only batches of exactly 61 bytes, small ones, and ones
larger than a chunk) and chunk sizes so that the chunk ends fall everywhere: inside
headers, exactly at batch ends, in the middle of batches. Whatever the boundaries,
every valid batch is kept, and after a torn or damaged tail exactly the batches before
the damage are kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.batch import HEADER_SIZE, stamp, unpack_header
from odradek.records.codec import Record, encode_batch, frame_batch
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.segment import RECOVERY_CHUNK_BYTES, LogSegment
from tests.storage.test_recovery import (
    Clock,
    TmpDir,
    _opened,
    abandon,
    check_log,
    make_config,
    workloads,
    write_workload,
)

T0 = 1_700_000_000_000
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Bytes of a batch outside the CRC's reach (baseOffset, partitionLeaderEpoch); the
# broker rewrites them, so a flip there is only caught by offset bounds.
UNPROTECTED = set(range(0, 8)) | set(range(12, 16))


def make_batch(base_offset: int, value_size: int, records: int) -> bytes:
    """A batch at ``base_offset``; ``records == 0`` gives a header-only batch (61 bytes)."""
    if records == 0:
        return frame_batch(
            b"",
            record_count=0,
            last_offset_delta=0,
            base_timestamp=T0,
            max_timestamp=T0,
            base_offset=base_offset,
        )
    return encode_batch(
        [
            Record(base_offset + i, T0 + base_offset + i, b"k", b"v" * value_size)
            for i in range(records)
        ],
        base_offset=base_offset,
    )


class Segment:
    """A segment file written byte for byte, and what each batch is."""

    def __init__(self, base: int, shapes: list[tuple[int, int]]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="odradek-recovery-props-"))
        self.directory = self.root / "t-0"
        self.directory.mkdir()
        self.base = base
        self.batches: list[tuple[int, int, int, bytes]] = []  # base, last, position, bytes
        offset, position = base, 0
        for value_size, records in shapes:
            data = make_batch(offset, value_size, records)
            last = offset + max(records, 1) - 1
            self.batches.append((offset, last, position, data))
            offset, position = last + 1, position + len(data)
        self.data = b"".join(b[3] for b in self.batches)
        self.path = self.directory / f"{base:020d}.log"
        self.path.write_bytes(self.data)
        self.opened: list[LogSegment] = []

    def open(self, interval: int, scan_chunk: int) -> LogSegment:
        segment = LogSegment(
            self.directory,
            self.base,
            index_interval_bytes=interval,
            max_index_bytes=10 * 2**20,
            created_ms=T0,
            scan_chunk_bytes=scan_chunk,
        )
        self.opened.append(segment)
        return segment

    def ends(self) -> list[int]:
        return [position + len(data) for _, _, position, data in self.batches]

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, *exc: object) -> None:
        for segment in self.opened:
            segment.close()
        shutil.rmtree(self.root)


def check_segment(segment: LogSegment, kept: list[tuple[int, int, int, bytes]], base: int) -> None:
    """The segment holds exactly ``kept`` and every lookup finds each batch."""
    size = sum(len(b[3]) for b in kept)
    assert segment.size == size
    assert os.fstat(segment.fd).st_size == size
    assert segment.next_offset == (kept[-1][1] + 1 if kept else base)
    assert [(h.base_offset, h.position) for h in segment.iter_headers(0)] == [
        (b[0], b[2]) for b in kept
    ]
    for first, last, position, data in kept:
        for offset in {first, last}:
            header = segment.translate_offset(offset)
            assert header is not None
            assert (header.base_offset, header.position) == (first, position)
            found = segment.read_with_first(offset, len(data), None, True)
            assert found is not None
            assert segment.read_bytes(found[0]) == data
    if kept:
        assert segment.translate_offset(kept[-1][1] + 1) is None


# A shape is (value size, record count): header-only batches, small ones, and ones
# far larger than the smallest chunks drawn below.
shapes = st.lists(
    st.one_of(
        st.just((0, 0)),
        st.tuples(st.integers(0, 200), st.integers(1, 3)),
        st.tuples(st.integers(200, 6000), st.integers(1, 2)),
    ),
    min_size=1,
    max_size=30,
)


def draw_chunk(data: st.DataObject, segment: Segment, label: str) -> int:
    """A chunk size that puts a chunk end at an interesting place, or anywhere."""
    ends = segment.ends()
    starts = [0, *ends[:-1]]
    interesting = sorted(
        {
            end - start + delta
            for start in starts[:4]
            for end in ends
            for delta in (-HEADER_SIZE, -HEADER_SIZE + 1, -30, -1, 0, 1, 17, HEADER_SIZE - 1)
            if end - start + delta > 0
        }
    )
    return data.draw(
        st.one_of(
            st.integers(1, 256),
            st.integers(1, len(segment.data) + 2 * HEADER_SIZE),
            st.sampled_from(interesting),
        ),
        label=label,
    )


@SETTINGS
@given(
    shapes=shapes,
    base=st.sampled_from([0, 1, 5000, 2**40]),
    interval=st.integers(0, 5000),
    data=st.data(),
)
def test_recovery_keeps_every_valid_batch(shapes, base: int, interval: int, data):
    with Segment(base, shapes) as written:
        chunk = draw_chunk(data, written, "chunk_bytes")
        scan_chunk = draw_chunk(data, written, "scan_chunk_bytes")
        segment = written.open(interval, scan_chunk)
        result = segment.recover(chunk_bytes=chunk)
        assert result.corruption is None
        assert (result.batches, result.valid_bytes, result.truncated_bytes) == (
            len(written.batches),
            len(written.data),
            0,
        )
        assert written.path.read_bytes() == written.data
        check_segment(segment, written.batches, base)
        # Index entries are as sparse as the interval asks, and a clean load of what
        # recovery rebuilt trusts them and finds the same batches.
        entries = segment.offset_index.entries
        assert entries <= len(written.data) // (interval + 1) + 1
        segment.close()
        reloaded = written.open(interval, scan_chunk)
        reloaded.load()
        check_segment(reloaded, written.batches, base)


@SETTINGS
@given(
    shapes=shapes,
    damage=st.sampled_from(["cut", "flip", "zeros", "garbage"]),
    interval=st.integers(0, 5000),
    data=st.data(),
)
def test_recovery_keeps_exactly_the_batches_before_a_damaged_tail(
    shapes, damage: str, interval: int, data
):
    with Segment(0, shapes) as written:
        batches = written.batches
        if damage == "cut":
            cut = data.draw(st.integers(0, len(written.data) - 1), label="cut")
            os.truncate(written.path, cut)
            kept = [b for b in batches if b[2] + len(b[3]) <= cut]
        elif damage == "flip":
            victim = data.draw(st.integers(0, len(batches) - 1), label="victim")
            _, _, position, batch = batches[victim]
            protected = [i for i in range(len(batch)) if i not in UNPROTECTED]
            byte = position + data.draw(st.sampled_from(protected), label="byte")
            mask = data.draw(st.integers(1, 255), label="mask")
            damaged = bytearray(written.data)
            damaged[byte] ^= mask
            written.path.write_bytes(bytes(damaged))
            kept = batches[:victim]
        else:
            length = data.draw(st.integers(1, 3 * HEADER_SIZE), label="tail")
            tail = bytes(length) if damage == "zeros" else data.draw(st.binary(min_size=length))
            with open(written.path, "ab") as handle:
                handle.write(tail)
            kept = batches
        chunk = draw_chunk(data, written, "chunk_bytes")
        segment = written.open(interval, draw_chunk(data, written, "scan_chunk_bytes"))
        result = segment.recover(chunk_bytes=chunk)
        assert result.batches == len(kept)
        assert result.valid_bytes == sum(len(b[3]) for b in kept)
        if kept != batches or damage in ("zeros", "garbage"):
            assert result.corruption is not None or damage == "cut"
        check_segment(segment, kept, 0)


def test_batch_straddling_a_chunk_end_is_valid():
    """The smallest case of the 7607b5f bug: the second batch crosses the first chunk's end."""
    with Segment(0, [(3000, 1)] * 3) as written:
        segment = written.open(4096, 100)
        result = segment.recover(chunk_bytes=4000)
        assert result.corruption is None
        check_segment(segment, written.batches, 0)


def test_recovery_with_errors_reports_file_positions():
    """A corrupt batch's error names its position in the file, not in a chunk."""
    with Segment(0, [(100, 1)] * 50) as written:
        _, _, position, _ = written.batches[37]
        damaged = bytearray(written.data)
        damaged[position + 16] = 7  # magic
        written.path.write_bytes(bytes(damaged))
        segment = written.open(4096, 500)
        result = segment.recover(chunk_bytes=1000)
        assert result.batches == 37
        assert result.corruption is not None
        assert f"position {position} " in result.corruption
        assert unpack_header(written.data, position).base_offset == 37


def test_tens_of_megabytes_at_the_default_chunk_size(tmp_path: Path):
    """A 12 MiB segment of ~4 KiB batches (straddling every 4 MiB chunk end) recovers whole.

    This is what a kill -9 with more than 4 MiB unflushed in one partition recovers;
    before 7607b5f it was cut at the first 4 MiB boundary.
    """
    directory = tmp_path / "t-0"
    template = bytearray(make_batch(0, 4000, 1))
    count = 3 * RECOVERY_CHUNK_BYTES // len(template) + 7
    directory.mkdir()
    with open(directory / f"{0:020d}.log", "wb") as handle:
        for offset in range(count):
            stamp(template, 0, offset, 0)
            handle.write(template)
    config = LogConfig(retention_ms=-1)  # 1 GiB segments, 4 KiB index interval
    log, stats = open_log(directory, config, recovery_point=0, clean_shutdown=False)
    try:
        assert stats.corruption is None
        assert stats.bytes_truncated == 0
        assert stats.batches_recovered == count
        assert log.log_end_offset == count
        assert log.size == count * len(template)
        for offset in (0, count // 3, count // 2, count - 1):
            info = log.read(offset, 1)
            assert info.first_batch_offset == offset
    finally:
        log.close()
    assert os.path.getsize(directory / f"{0:020d}.log") == count * len(template)


# -- whole logs: several segments, producers, epochs, compression --------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=workloads,
    chunk=st.one_of(st.integers(1, 300), st.integers(300, 3000)),
    cut_fraction=st.floats(0, 1),
)
def test_log_recovery_at_any_chunk_size_keeps_the_valid_prefix(
    workload, chunk: int, cut_fraction: float
):
    """The workload of test_recovery.py, reopened after a crash with tiny recovery chunks."""
    clock = Clock()
    config = make_config(workload["segment_bytes"], workload["interval"])
    with TmpDir() as directory:
        log, written = write_workload(directory, config, workload["seed"], workload["count"], clock)
        bases = [s.base_offset for s in log.segments]
        abandon(log)
        path = directory / f"{bases[-1]:020d}.log"
        cut = int(path.stat().st_size * cut_fraction)
        os.truncate(path, cut)
        last = len(bases) - 1
        prefix = [w for w in written if w.segment < last or w.position + len(w.disk_bytes) <= cut]
        log, stats = open_log(
            directory,
            config,
            recovery_point=0,
            clean_shutdown=False,
            clock=clock,
            recovery_chunk_bytes=chunk,
        )
        _opened.append(log)
        assert stats.batches_recovered == len(prefix)
        check_log(log, prefix, clock)
        log.close()

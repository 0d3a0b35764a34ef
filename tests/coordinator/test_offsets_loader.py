"""loader.scan, the coordinator's reader of a ``__consumer_offsets`` partition: every
readable batch once, in order, and a Damage (file, position, where reading went on)
for each part that is not, wherever it lies."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.coordinator.group.loader import Damage, scan
from odradek.records.batch import HEADER_SIZE
from odradek.records.codec import Record, encode_batch
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.support.damage import flip

MAGIC_AT = 16
VALUE = b"v" * 100  # ~190-byte batches: an index entry every ~22 batches at 4 KiB


def log_of(tmp_path: Path, batches: int, **config: int) -> Log:
    log, _ = open_log(tmp_path / "__consumer_offsets-0", LogConfig(**config))  # type: ignore[arg-type]
    for i in range(batches):
        log.append_as_leader(encode_batch([Record(0, 1_000, b"k%d" % i, VALUE)]), 0)
    log.high_watermark = log.log_end_offset
    return log


def positions(log: Log) -> list[tuple[Path, int, int]]:
    """(segment file, position, base offset) of every batch."""
    return [
        (segment.log_path, header.position, header.base_offset)
        for segment in log.segments
        for header in segment.iter_headers()
    ]


def read(log: Log, start: int = 0, end: int | None = None) -> tuple[list[int], list[Damage]]:
    offsets, damage = [], []
    for item in scan(log, start, log.high_watermark if end is None else end):
        if isinstance(item, Damage):
            damage.append(item)
        else:
            offsets.extend(r.offset for r in item)
    return offsets, damage


def test_undamaged_log_reads_whole_and_respects_bounds(tmp_path: Path) -> None:
    log = log_of(tmp_path, 100, segment_bytes=5_000)
    assert len(log.segments) > 3
    assert read(log) == (list(range(100)), [])
    assert read(log, 37, 61) == (list(range(37, 61)), [])


@pytest.mark.parametrize("victim", [0, 13, 99])
def test_batch_failing_its_crc_is_skipped_alone(tmp_path: Path, victim: int) -> None:
    log = log_of(tmp_path, 100)
    batches = positions(log)
    path, position, _ = batches[victim]
    flip(path, position + HEADER_SIZE + 5)
    offsets, damage = read(log)
    assert offsets == [o for o in range(100) if o != victim]
    (only,) = damage
    assert (only.path, only.position) == (str(path), position)
    assert "CRC32C" in only.reason and f"offsets {victim}-{victim}" in only.reason
    following = batches[victim + 1][1] if victim + 1 < len(batches) else log.segments[0].size
    assert only.skipped_to == following


def test_unreadable_header_resumes_at_the_next_indexed_batch(tmp_path: Path) -> None:
    log = log_of(tmp_path, 100)
    batches = positions(log)
    path, position, _ = batches[5]
    flip(path, position + MAGIC_AT)
    offsets, damage = read(log)
    (only,) = damage
    assert (only.position, "magic" in only.reason) == (position, True)
    assert only.skipped_to is not None
    resumed = next(i for i, (_, p, _) in enumerate(batches) if p == only.skipped_to)
    assert 5 < resumed < 50  # the first index entry after the damage, not the end
    assert offsets == [*range(5), *range(resumed, 100)]


def test_unreadable_header_past_the_last_index_entry_skips_to_the_next_segment(
    tmp_path: Path,
) -> None:
    log = log_of(tmp_path, 60, segment_bytes=6_000)
    first = log.segments[0]
    assert len(log.segments) >= 2
    in_first = [(p, o) for path, p, o in positions(log) if path == first.log_path]
    position, offset = in_first[-1]  # after the segment's last index entry
    flip(first.log_path, position + MAGIC_AT)
    offsets, damage = read(log)
    (only,) = damage
    assert only.skipped_to is None and only.position == position
    assert offsets == [o for o in range(60) if o != offset]

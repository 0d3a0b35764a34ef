"""The cleaner's swap survives a crash at every step: recovery (cleaner/swap.py's
``complete_swaps``, run by the loader) finishes a swap whose ``.log.swap`` exists and
rolls back one that does not, so no latest value is lost, no offset is doubled and
no ``.cleaned``/``.swap`` file is left behind."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.storage.cleaner.clean import CleanJob, clean_log_now
from odradek.storage.cleaner.manager import log_to_clean
from odradek.storage.cleaner.swap import SimulatedCrash, complete_swaps, replace_segments
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.segment import LogSegment

from .conftest import FakeClock

Row = tuple[int, bytes | None, bytes | None]
multi_segment_groups: list[int] = []  # the largest group of each example


def close_fds(segment: LogSegment) -> None:
    for fd in (segment.fd, segment.offset_index._fd, segment.time_index._fd):
        if fd >= 0:
            os.close(fd)
    segment.fd = segment.offset_index._fd = segment.time_index._fd = -1
    segment.txn_index.abandon()


def abandon(log: Log, *extra: LogSegment) -> None:
    """Drop a log like a killed process: close descriptors, write nothing."""
    for segment in [*log.segments, *(s for _, s in log.pending_deletions), *extra]:
        close_fds(segment)
    log.closed = True


def rows(data: bytes) -> list[Row]:
    return [
        (r.offset, r.key, r.value)
        for batch in decode_batches(data)
        if not batch.header.is_control
        for r in batch.records
    ]


def contents(log: Log) -> list[Row]:
    return [row for data in log.read_batches(log.log_start_offset) for row in rows(data)]


def build(path: Path, clock: FakeClock, keys: list[int], segment_bytes: int) -> list[Row]:
    """Two halves of writes with a clean between, so the crashing clean finds small
    cleaned segments and groups several of them into one."""
    config = LogConfig(cleanup_policy="compact", segment_bytes=segment_bytes)
    log, _ = open_log(path, config, clock=clock)
    written: list[Row] = []
    half = len(keys) // 2
    for index, key in enumerate(keys):
        value = b"value-%d-" % index + b"x" * (index % 50)
        written.append((log.log_end_offset, b"k%d" % key, value))
        log.append_as_leader(encode_batch([Record(0, clock.now_ms, b"k%d" % key, value)]), 0)
        if index == half:
            log.roll()
            log.high_watermark = log.log_end_offset
            clean_log_now(log)
    log.roll()
    log.close()
    return written


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.lists(st.integers(0, 8), min_size=5, max_size=150),
    segment_bytes=st.integers(400, 4000),
    crash_group=st.integers(0, 5),
    step=st.sampled_from(["cleaning", "swap", "delete", "rename"]),
)
def test_a_crash_at_any_step_of_a_swap_loses_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    keys: list[int],
    segment_bytes: int,
    crash_group: int,
    step: str,
) -> None:
    clock = FakeClock()
    path = tmp_path_factory.mktemp("swap") / "t-0"
    written = build(path, clock, keys, segment_bytes)
    config = LogConfig(cleanup_policy="compact", segment_bytes=segment_bytes)
    log, _ = open_log(path, config, clock=clock)
    log.high_watermark = log.log_end_offset
    before = contents(log)
    todo = log_to_clean(("t", 0), log, None, clock.now_ms, None)
    job = CleanJob.prepare(
        todo,
        dedupe_entries=10_000,
        now_ms=clock.now_ms,
        max_bytes_per_second=float("inf"),
        abort=threading.Event(),
    )
    end = job.build_map()
    groups = job.groups(end)
    crash_at = min(crash_group, len(groups) - 1)
    multi_segment_groups.append(max(len(g) for g in groups))
    cleaned_rows: list[Row] = []
    group_range = (0, 0)
    leftover: list[LogSegment] = []
    for number, group in enumerate(groups):
        result = job.clean_group(group)
        assert result.cleaned is not None
        if number < crash_at:
            assert job.install(result)
            continue
        cleaned_rows = rows(result.cleaned.log_path.read_bytes())
        group_range = (group[0].base_offset, group[-1].next_offset)
        leftover = [result.cleaned]
        if step != "cleaning":
            with pytest.raises(SimulatedCrash):
                replace_segments(
                    log.local, result.cleaned, [s.segment for s in group], crash_after=step
                )
            leftover += [s.segment for s in group]
        break
    job.close()
    abandon(log, *leftover)

    reopened, _ = open_log(path, config, clock=clock, clean_shutdown=False)
    reopened.high_watermark = reopened.log_end_offset
    after = contents(reopened)
    offsets = [row[0] for row in after]
    assert offsets == sorted(set(offsets)), "an offset doubled or out of order"
    assert set(after) <= set(written), "a record that was never written"
    latest = {key: (offset, value) for offset, key, value in written}
    assert {key: (offset, value) for offset, key, value in after} == latest
    in_group = [row for row in after if group_range[0] <= row[0] < group_range[1]]
    before_in_group = [r for r in before if group_range[0] <= r[0] < group_range[1]]
    if step == "cleaning":
        assert in_group == before_in_group
    elif cleaned_rows:
        assert in_group == cleaned_rows
    else:
        # An empty swap file says nothing of the range it replaced (as in Kafka): only
        # the segment at its base goes; later ones of the group stay, uncleaned.
        assert set(in_group) <= set(before_in_group)
    names = [p.name for p in path.iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
    reopened.close()


def test_the_crash_examples_swapped_groups_of_several_segments() -> None:
    # Runs after the property test (file order): without such groups a swap that
    # left the group's later segments behind would go unnoticed.
    assert not multi_segment_groups or max(multi_segment_groups) > 1


def test_swap_of_an_empty_cleaned_segment_replaces_only_its_base(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    for base in (0, 10):
        (directory / f"{base:020d}.log").write_bytes(b"")
    (directory / f"{0:020d}.log.swap").write_bytes(b"")
    (directory / f"{0:020d}.index.swap").write_bytes(b"")
    (directory / f"{5:020d}.log.cleaned").write_bytes(b"junk")
    assert complete_swaps(directory) == 1
    assert sorted(p.name for p in directory.iterdir()) == [
        f"{0:020d}.log",
        f"{10:020d}.log",
    ]

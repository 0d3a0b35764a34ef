"""DiskRaftLog against MemoryRaftLog, after crashes, and at 100,000 records.

* A hypothesis state machine runs one random sequence of appends (leader and follower,
  1–5 offsets per entry, control entries, non-decreasing epochs), truncations,
  flushes, snapshot trims (``delete_before``), snapshot installs (``reset_to``), reads
  and clean close-and-reopen against both logs and compares every answer, including
  the bytes each read returns. It runs with the metadata log's real config and with
  tiny segments and index intervals, so rolls, index lookups and segment deletions
  fall inside the sequences.
* Crash tests: a child process appends and is SIGKILLed without flushing; a torn
  write is modelled by cutting the segment file inside the last batch. The reopened
  log is a whole-batch prefix of what was written and its epoch cache agrees.
* A size test appends 10,000 batches of 10 records, and prints the reopen times after
  a clean close and after an unclean stop (no timing assertions).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from odradek.raft.control_records import decode_leader_change, encode_leader_change
from odradek.raft.disk_log import METADATA_RAFT_LOG_CONFIG, DiskRaftLog
from odradek.raft.log import LogEntry, MemoryRaftLog, SnapshotId
from odradek.records.batch import stamp
from odradek.records.codec import Record, encode_batch
from odradek.storage.log_config import LogConfig

TINY_CONFIG = LogConfig(
    retention_ms=-1,
    retention_bytes=-1,
    segment_bytes=300,
    index_interval_bytes=60,
    segment_index_bytes=48,  # six index entries fill an index: rolls by index too
)
READ_ALL_BYTES = 1 << 30


def data_batch(count: int, tag: str, *, offset: int = 0, epoch: int = -1) -> bytes:
    """A batch of ``count`` records; stamped with ``offset``/``epoch`` for a follower."""
    records = [Record(offset + index, 0, None, f"{tag}/{index}".encode()) for index in range(count)]
    return encode_batch(records, base_offset=offset, partition_leader_epoch=epoch)


def control_batch(leader_id: int, *, offset: int = 0, epoch: int = -1) -> bytes:
    payload = bytearray(
        encode_leader_change(
            leader_id, frozenset({1, 2, 3}), frozenset({leader_id}), timestamp_ms=0
        )
    )
    if epoch >= 0:
        stamp(payload, 0, offset, epoch)
    return bytes(payload)


class RaftLogComparison(RuleBasedStateMachine):
    config: LogConfig = METADATA_RAFT_LOG_CONFIG

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="disk-raft-log-"))
        self.disk = DiskRaftLog.open(self.directory, self.config)
        self.memory = MemoryRaftLog(stamp_batches=True)
        self.serial = 0
        self.max_epoch = 0

    def teardown(self) -> None:
        self.disk.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # --- helpers ------------------------------------------------------------------------

    def boundaries(self) -> list[int]:
        """Every entry boundary of the model, start and end included."""
        memory = self.memory
        offsets = [entry.offset for entry in memory.read(memory.start_offset, READ_ALL_BYTES)]
        return [*offsets, memory.end_offset] if offsets[-1:] != [memory.end_offset] else offsets

    # --- rules --------------------------------------------------------------------------

    @rule(
        leader=st.booleans(),
        counts=st.lists(st.integers(1, 5), min_size=1, max_size=4),
        epoch_bump=st.sampled_from((0, 0, 0, 1, 2)),
        control_first=st.booleans(),
    )
    def append(self, leader: bool, counts: list[int], epoch_bump: int, control_first: bool) -> None:
        epoch = max(self.memory.last_fetched_epoch + epoch_bump, 1)
        self.max_epoch = max(self.max_epoch, epoch)
        offset = self.memory.end_offset
        entries = []
        for index, count in enumerate(counts):
            self.serial += 1
            stamp_offset, stamp_epoch = (-1, -1) if leader else (offset, epoch)
            if index == 0 and control_first:
                count = 1
                payload = control_batch(self.serial % 3 + 1, offset=offset, epoch=stamp_epoch)
                entries.append(LogEntry(offset, epoch, payload, control=True, count=1))
            else:
                payload = data_batch(
                    count, f"b{self.serial}", offset=max(stamp_offset, 0), epoch=stamp_epoch
                )
                entries.append(LogEntry(offset, epoch, payload, count=count))
            offset += count
        self.memory.append(entries, leader=leader)
        self.disk.append(entries, leader=leader)

    @rule(
        leader=st.booleans(),
        counts=st.lists(st.integers(1, 5), min_size=4, max_size=12),
        epoch_bump=st.sampled_from((0, 0, 1)),
    )
    def append_many(self, leader: bool, counts: list[int], epoch_bump: int) -> None:
        """Appends outweigh the rules that shrink the log, so logs grow over segments."""
        self.append(leader, counts, epoch_bump, control_first=False)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(self.boundaries()), label="truncate to")
        self.memory.truncate_to(target)
        self.disk.truncate_to(target)

    @rule()
    def flush(self) -> None:
        self.memory.flush()
        self.disk.flush()

    @rule()
    def split_flush(self) -> None:
        pending = self.disk.prepare_flush()
        pending.fsync()
        self.disk.mark_flushed(pending)
        self.memory.flush()

    @precondition(lambda self: self.memory.end_offset > self.memory.start_offset)
    @rule(data=st.data())
    def delete_before(self, data: st.DataObject) -> None:
        candidates = [b for b in self.boundaries() if b > self.memory.start_offset]
        end = data.draw(st.sampled_from(candidates), label="snapshot end")
        snapshot = SnapshotId(end_offset=end, epoch=self.memory.epoch_at(end - 1))
        self.memory.delete_before(snapshot)
        self.disk.delete_before(snapshot)

    @rule(beyond=st.integers(0, 30), epoch_bump=st.integers(0, 2))
    def reset_to(self, beyond: int, epoch_bump: int) -> None:
        snapshot = SnapshotId(
            end_offset=self.memory.end_offset + beyond,
            epoch=self.memory.last_fetched_epoch + epoch_bump,
        )
        self.max_epoch = max(self.max_epoch, snapshot.epoch)
        self.memory.reset_to(snapshot)
        self.disk.reset_to(snapshot)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        start = data.draw(st.sampled_from(self.boundaries()), label="read from")
        # max_bytes at, just below and just above the size of the first n entries, where
        # an off-by-one in the size accounting shows.
        sizes = [0]
        for entry in self.memory.read(start, READ_ALL_BYTES):
            sizes.append(sizes[-1] + entry.size_bytes)
        near = data.draw(st.sampled_from(sizes), label="entries' size")
        max_bytes = max(1, near + data.draw(st.integers(-1, 1), label="plus"))
        assert self.disk.read(start, max_bytes) == self.memory.read(start, max_bytes)
        # Bounded by an entry boundary at or after start (as poll_committed bounds by the
        # high watermark): nothing at or past it comes back, on either log.
        bound = data.draw(
            st.sampled_from([b for b in self.boundaries() if b >= start]), label="max offset"
        )
        bounded = self.disk.read(start, max_bytes, max_offset=bound)
        assert bounded == self.memory.read(start, max_bytes, max_offset=bound)
        assert all(entry.next_offset <= bound for entry in bounded)
        assert bounded == [e for e in self.disk.read(start, max_bytes) if e.offset < bound]

    @rule(clean=st.booleans())
    def close_and_reopen(self, clean: bool) -> None:
        self.disk.close()
        self.memory.flush()  # close() flushes
        self.disk = DiskRaftLog.open(self.directory, self.config, clean_shutdown=clean)

    # --- the comparison after every step ---------------------------------------------

    @invariant()
    def same_answers(self) -> None:
        disk, memory = self.disk, self.memory
        assert (disk.start_offset, disk.start_epoch, disk.end_offset) == (
            memory.start_offset,
            memory.start_epoch,
            memory.end_offset,
        )
        assert disk.last_fetched_epoch == memory.last_fetched_epoch
        assert disk.flushed_offset == memory.flushed_offset
        for epoch in range(self.max_epoch + 2):
            assert disk.end_offset_for_epoch(epoch) == memory.end_offset_for_epoch(epoch), epoch
        for offset in range(memory.start_offset - 1, memory.end_offset):
            if offset >= 0:
                assert disk.epoch_at(offset) == memory.epoch_at(offset), offset
        for offset in range(memory.start_offset, memory.end_offset + 1):
            assert disk.is_boundary(offset) == memory.is_boundary(offset), offset
        everything = disk.read(disk.start_offset, READ_ALL_BYTES)
        assert everything == memory.read(memory.start_offset, READ_ALL_BYTES)


class TinySegmentsComparison(RaftLogComparison):
    config = TINY_CONFIG


COMPARISON_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
RaftLogComparison.TestCase.settings = COMPARISON_SETTINGS
TinySegmentsComparison.TestCase.settings = COMPARISON_SETTINGS
test_disk_log_matches_memory_log = RaftLogComparison.TestCase
test_disk_log_matches_memory_log_tiny_segments = TinySegmentsComparison.TestCase


# --- unit checks -------------------------------------------------------------------------


def test_leader_append_stamps_offset_and_epoch_and_reads_back_a_control_batch(
    tmp_path: Path,
) -> None:
    log = DiskRaftLog.open(tmp_path / "m")
    log.append([LogEntry(0, 4, control_batch(2), control=True)], leader=True)
    log.append([LogEntry(1, 4, data_batch(3, "x"), count=3)], leader=True)
    control, data = log.read(0, READ_ALL_BYTES)
    assert (control.offset, control.epoch, control.control, control.count) == (0, 4, True, 1)
    assert decode_leader_change(control.payload).leader_id == 2
    assert (data.offset, data.epoch, data.count, data.next_offset) == (1, 4, 3, 4)
    assert data.payload[:8] == (1).to_bytes(8, "big")
    assert log.epoch_at(3) == 4 and not log.is_boundary(2) and log.is_boundary(4)
    log.close()


def test_a_leader_batch_that_disagrees_with_its_entry_is_refused(tmp_path: Path) -> None:
    log = DiskRaftLog.open(tmp_path / "m")
    with pytest.raises(ValueError, match="3 records"):
        log.append([LogEntry(0, 1, data_batch(3, "x"), count=2)], leader=True)
    assert log.end_offset == 0 and log.end_offset_for_epoch(1) is not None
    assert log.storage_log.epoch_cache.entries == []  # the write-ahead epoch was undone
    log.close()


def test_reads_inside_an_entry_are_a_bug(tmp_path: Path) -> None:
    log = DiskRaftLog.open(tmp_path / "m")
    log.append([LogEntry(0, 1, data_batch(3, "x"), count=3)], leader=True)
    with pytest.raises(AssertionError, match="inside an entry"):
        log.read(1, 100)
    with pytest.raises(AssertionError, match="inside an entry"):
        log.truncate_to(2)
    log.close()


def test_a_truncation_during_a_split_flush_voids_it(tmp_path: Path) -> None:
    """The adapter fsyncs on a worker thread; if the log was cut (and refilled) in the
    meantime, the fsync's target names bytes it never synced."""
    log = DiskRaftLog.open(tmp_path / "m")
    log.append([LogEntry(0, 1, data_batch(2, "a"), count=2)], leader=True)
    log.flush()
    log.append([LogEntry(2, 1, data_batch(3, "b"), count=3)], leader=True)
    pending = log.prepare_flush()
    log.truncate_to(2)
    log.append([LogEntry(2, 2, data_batch(4, "c"), count=4)], leader=True)
    pending.fsync()
    log.mark_flushed(pending)
    assert log.flushed_offset == 2
    log.flush()
    assert log.flushed_offset == 6
    log.close()


def test_interrupted_reset_is_finished_on_reopen(tmp_path: Path) -> None:
    """reset_to writes the new start before wiping: a crash in between leaves the old
    entries (older epochs) behind the new start, and opening wipes them."""
    directory = tmp_path / "m"
    log = DiskRaftLog.open(directory)
    log.append([LogEntry(0, 1, data_batch(5, "old"), count=5)], leader=True)
    log.append([LogEntry(5, 1, data_batch(5, "old"), count=5)], leader=True)
    log._write_start(5, 3)  # the reset's first step; then the crash
    log.flush()
    log.storage_log.close()
    reopened = DiskRaftLog.open(directory)
    assert (reopened.start_offset, reopened.start_epoch, reopened.end_offset) == (5, 3, 5)
    assert reopened.read(5, 100) == [] and reopened.end_offset_for_epoch(3) is not None
    reopened.close()


# --- crashes ------------------------------------------------------------------------------

CHILD = """
import os, signal, sys
from pathlib import Path
from odradek.raft.disk_log import DiskRaftLog
from tests.raft.test_disk_log import crash_plan
log = DiskRaftLog.open(Path(sys.argv[1]))
for index, entry in enumerate(crash_plan()):
    log.append([entry], leader=True)
    if index == 20:
        log.flush()
print(log.flushed_offset, log.end_offset, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def crash_plan() -> list[LogEntry]:
    """40 entries of 1-5 offsets; the epoch goes up every 7 entries, and the last entry
    starts a new epoch (so a torn last batch takes an epoch-cache entry with it)."""
    entries = []
    offset = 0
    for index in range(40):
        count = index % 5 + 1
        epoch = 1 + index // 7 + (1 if index == 39 else 0)
        entries.append(LogEntry(offset, epoch, data_batch(count, f"c{index}"), count=count))
        offset += count
    return entries


def _model_of(prefix: list[LogEntry]) -> MemoryRaftLog:
    model = MemoryRaftLog(stamp_batches=True)
    model.append(prefix, leader=True)
    model.flush()
    return model


def _killed_child(directory: Path) -> tuple[int, int]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    flushed, end = map(int, result.stdout.split())
    return flushed, end


def _check_prefix(log: DiskRaftLog, plan: list[LogEntry], end: int) -> None:
    prefix = [entry for entry in plan if entry.next_offset <= end]
    assert log.end_offset == end == (prefix[-1].next_offset if prefix else 0)
    assert log.flushed_offset == end  # what recovery kept is durable now
    model = _model_of(prefix)
    assert log.read(0, READ_ALL_BYTES) == model.read(0, READ_ALL_BYTES)
    for epoch in range(10):
        assert log.end_offset_for_epoch(epoch) == model.end_offset_for_epoch(epoch)
    assert log.last_fetched_epoch == model.last_fetched_epoch


def test_sigkill_without_flush_keeps_every_whole_batch(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    flushed, end = _killed_child(directory)
    assert flushed < end  # the kill came with unflushed entries
    log = DiskRaftLog.open(directory, recovery_point=flushed)
    _check_prefix(log, crash_plan(), end)  # SIGKILL: the page cache kept them all
    log.close()


def test_torn_last_batch_is_cut_and_the_epoch_cache_follows(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    flushed, end = _killed_child(directory)
    plan = crash_plan()
    assert end == plan[-1].next_offset
    segment = max(directory.glob("*.log"))
    last = plan[-1]
    # The power cut wrote only part of the last batch (a new epoch's first).
    os.truncate(segment, segment.stat().st_size - len(last.payload) // 2)
    log = DiskRaftLog.open(directory, recovery_point=flushed)
    _check_prefix(log, plan, last.offset)
    assert log.last_fetched_epoch == plan[-2].epoch < last.epoch
    log.close()


# --- size ---------------------------------------------------------------------------------

SIZE_BATCHES = 10_000
RECORDS_PER_BATCH = 10


def test_100k_records_reopen_clean_and_unclean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "m"
    log = DiskRaftLog.open(directory)
    started = time.monotonic()
    payload = data_batch(RECORDS_PER_BATCH, "metadata-record-value-of-some-length")
    for index in range(SIZE_BATCHES):
        offset = index * RECORDS_PER_BATCH
        epoch = 1 + index // 2_500
        log.append([LogEntry(offset, epoch, payload, count=RECORDS_PER_BATCH)], leader=True)
    log.flush()
    appended_s = time.monotonic() - started
    end = SIZE_BATCHES * RECORDS_PER_BATCH
    assert log.end_offset == end
    size_bytes = log.storage_log.size
    log.close()

    started = time.monotonic()
    clean = DiskRaftLog.open(directory, recovery_point=end, clean_shutdown=True)
    clean_s = time.monotonic() - started
    assert (clean.end_offset, clean.flushed_offset, clean.last_fetched_epoch) == (end, end, 4)
    assert clean.end_offset_for_epoch(2) is not None
    assert clean.read(end - RECORDS_PER_BATCH, 1)[0].offset == end - RECORDS_PER_BATCH
    # An unclean stop: the process dies without close() (nothing more flushed or written).
    clean.storage_log.active_segment.close()

    started = time.monotonic()
    unclean = DiskRaftLog.open(directory)  # recovery point 0: every batch re-checked
    unclean_s = time.monotonic() - started
    assert (unclean.end_offset, unclean.flushed_offset) == (end, end)
    assert unclean.load_stats is not None and unclean.load_stats.batches_recovered == SIZE_BATCHES
    first = unclean.read(0, 1)[0]
    assert (first.offset, first.count, first.epoch) == (0, RECORDS_PER_BATCH, 1)
    unclean.close()
    with capsys.disabled():
        print(
            f"\n{end} records in {SIZE_BATCHES} batches ({size_bytes / 2**20:.1f} MiB): "
            f"appended+flushed in {appended_s:.2f} s, reopened clean in {clean_s * 1000:.0f} ms,"
            f" after an unclean stop in {unclean_s * 1000:.0f} ms"
        )

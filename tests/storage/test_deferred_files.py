"""DeferredFiles: the ordered queue of a log's small-file writes, and crashes around it.

The queue is driven by hand (a ``submit`` that never runs the drain; the test applies
operations one at a time with ``apply_next``), so a "crash" can stop it after any
operation, or half-way through one (a ``.tmp`` written, not renamed). The properties:
whatever was applied, a log reopened after the crash has the producer state and the
leader epochs its batches say — a snapshot that never landed only means a longer
replay, and an epoch checkpoint a queued truncation never reached is trimmed or
rebuilt — and the queue lands the last state of every file, in order.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.codec import Record, encode_batch
from odradek.storage import deferred_files
from odradek.storage.deferred_files import DeferredFiles
from odradek.storage.epoch_cache import LeaderEpochCache
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.producer_state import snapshot_path
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

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class HeldWorker:
    """A ``submit`` that keeps the drain: the test applies the queue itself."""

    def __init__(self) -> None:
        self.submitted: list[Callable[[], None]] = []

    def __call__(self, fn: Callable[[], None]) -> object:
        self.submitted.append(fn)
        return None


def crash_files(files: DeferredFiles, applied: int, torn: bool) -> None:
    """Apply the first ``applied`` queued operations; the rest die with the process.

    ``torn``: the next write got as far as its ``.tmp`` file (half of it).
    """
    for _ in range(applied):
        if not files.apply_next():
            return
    queued = files.queued()
    if torn and queued and queued[0][1] is not None:
        path, data = queued[0]
        assert data is not None
        path.with_name(path.name + ".tmp").write_bytes(data[: len(data) // 2])


# -- the queue itself ------------------------------------------------------------------


def test_operations_land_in_order_and_last_write_wins(tmp_path: Path) -> None:
    worker = HeldWorker()
    files = DeferredFiles(worker)
    a, b = tmp_path / "a", tmp_path / "b"
    files.write(a, b"1")
    files.write(b, b"x")
    files.write(a, b"2")
    files.unlink(b)
    files.write(a, b"3")  # "2" is not the newest operation: queued after it
    assert len(worker.submitted) == 1  # one drain for the whole burst
    assert files.planned() == {a: b"3", b: None}
    assert not a.exists() and not b.exists()
    assert files.apply_next()
    assert a.read_bytes() == b"1"
    assert files.apply_next()
    assert b.read_bytes() == b"x"
    while files.apply_next():
        pass
    assert a.read_bytes() == b"3" and not b.exists()
    assert files.pending == 0 and files.planned() == {}
    assert files.wait(files.last_seq, timeout=0)


def test_a_rewrite_of_the_newest_queued_file_replaces_it(tmp_path: Path) -> None:
    files = DeferredFiles(HeldWorker())
    path = tmp_path / "leader-epoch-checkpoint"
    for n in range(5):
        files.write(path, str(n).encode())
    assert files.pending == 1  # five truncations, one fsync
    files.apply_next()
    assert path.read_bytes() == b"4"


def test_write_now_supersedes_queued_writes_of_the_same_file(tmp_path: Path) -> None:
    files = DeferredFiles(HeldWorker())
    epoch, snap = tmp_path / "leader-epoch-checkpoint", tmp_path / "00000000000000000010.snapshot"
    files.write(epoch, b"old")
    files.write(snap, b"S")
    files.write(epoch, b"older-than-now")
    files.write_now(epoch, b"now")
    assert epoch.read_bytes() == b"now"
    assert files.queued() == [(snap, b"S")]  # the stale epoch writes are gone
    while files.apply_next():
        pass
    assert epoch.read_bytes() == b"now" and snap.read_bytes() == b"S"


def test_write_now_waits_for_the_running_write_of_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write already on the worker must not land after (over) the synchronous one."""
    path = tmp_path / "leader-epoch-checkpoint"
    started, release = threading.Event(), threading.Event()
    original = deferred_files.write_durably

    def slow(target: Path, data: bytes) -> None:
        if data == b"queued":
            started.set()
            release.wait(5)
        original(target, data)

    monkeypatch.setattr(deferred_files, "write_durably", slow)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        files = DeferredFiles(pool.submit)
        files.write(path, b"queued")
        assert started.wait(5)
        done = threading.Event()

        def sync() -> None:
            files.write_now(path, b"sync")
            done.set()

        waiter = threading.Thread(target=sync)
        waiter.start()
        assert not done.wait(0.2)  # blocked behind the running write
        release.set()
        waiter.join(5)
        assert done.is_set()
        assert files.drain(5)
    assert path.read_bytes() == b"sync"


def test_a_failed_write_is_counted_and_the_queue_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = DeferredFiles(HeldWorker())
    files.write(tmp_path / "missing-dir" / "x.snapshot", b"lost")
    files.write(tmp_path / "y.snapshot", b"kept")
    while files.apply_next():
        pass
    assert files.failures == 1
    assert (tmp_path / "y.snapshot").read_bytes() == b"kept"
    assert "deferred write" in caplog.text


def test_threads_drain_many_logs_in_order(tmp_path: Path) -> None:
    """On a real pool: each log's last write wins, whatever the interleaving."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        queues = [DeferredFiles(pool.submit) for _ in range(8)]
        rng = random.Random(5)
        last: dict[Path, bytes | None] = {}
        for step in range(400):
            index = rng.randrange(len(queues))
            path = tmp_path / f"log{index}-{rng.randrange(3)}"
            if rng.random() < 0.2:
                queues[index].unlink(path)
                last[path] = None
            else:
                data = f"{step}".encode()
                queues[index].write(path, data)
                last[path] = data
        for files in queues:
            assert files.drain(10)
    for path, expected in last.items():
        assert (path.read_bytes() if path.exists() else None) == expected


def test_without_a_worker_every_operation_is_applied_at_once(tmp_path: Path) -> None:
    files = DeferredFiles()
    files.write(tmp_path / "a", b"1")
    assert (tmp_path / "a").read_bytes() == b"1" and files.pending == 0
    files.unlink(tmp_path / "a")
    assert not (tmp_path / "a").exists()


# -- the log on top of it ----------------------------------------------------------


def held_log(directory: Path, config: LogConfig, clock: Clock) -> tuple[Log, HeldWorker]:
    worker = HeldWorker()
    log, _ = open_log(directory, config, clock=clock, background=worker)
    _opened.append(log)
    return log, worker


def test_a_roll_queues_its_snapshot_and_the_loop_reads_it_back(tmp_path: Path) -> None:
    clock = Clock()
    log, _ = held_log(tmp_path / "t-0", make_config(400, 0), clock)
    for seq in range(0, 40, 2):
        log.append_as_leader(
            encode_batch(
                [Record(i, clock(), b"k", b"v" * 40) for i in range(2)],
                producer_id=9,
                producer_epoch=0,
                base_sequence=seq,
            ),
            0,
        )
    assert len(log.segments) > 2
    queued = [path for path, data in log.files.queued() if path.suffix == ".snapshot"]
    assert queued and not any(path.exists() for path in queued)  # nothing on disk yet
    # The loop sees the queued snapshots: a truncation reloads from one of them.
    state = log.producer_state
    offsets = state.snapshot_offsets()
    assert offsets == sorted(int(path.stem) for path in queued)
    cut = log.segments[2].base_offset
    log.truncate_to(cut)
    assert state.snapshot_offsets() == [o for o in offsets if o <= cut]
    assert state.producers[9].last_seq == cut - 1
    # Whatever the queue still holds, draining it leaves exactly those snapshots.
    while log.files.apply_next():
        pass
    on_disk = sorted(int(p.stem) for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert on_disk == [o for o in offsets if o <= cut]
    assert snapshot_path(tmp_path / "t-0", cut).exists()
    log.files._submit = None
    log.close()


@SETTINGS
@given(workload=workloads, data=st.data())
def test_crash_between_roll_and_snapshot_landing(workload, data) -> None:
    """Kill the process with any number of roll snapshots still queued (or one torn)."""
    clock = Clock()
    with TmpDir() as directory:
        config = make_config(workload["segment_bytes"], workload["interval"])
        worker = HeldWorker()
        log, written = write_workload(
            directory, config, workload["seed"], workload["count"], clock, background=worker
        )
        pending = log.files.pending
        applied = data.draw(st.integers(0, pending), label="operations applied")
        torn = data.draw(st.booleans(), label="next write torn")
        crash_files(log.files, applied, torn)
        abandon(log)
        reopened, _ = open_log(directory, config, clock=clock, clean_shutdown=False)
        _opened.append(reopened)
        check_log(reopened, written, clock)


def epochs_from_batches(log: Log) -> list[tuple[int, int]]:
    """What the epoch cache must hold: each epoch's first batch, from the log start."""
    entries: list[tuple[int, int]] = []
    for header in log.iter_headers(log.log_start_offset):
        epoch = header.partition_leader_epoch
        if epoch >= 0 and (not entries or epoch > entries[-1][0]):
            entries.append((epoch, max(header.base_offset, log.log_start_offset)))
    return entries


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
        st.tuples(st.just("start"), st.floats(0, 1), st.just(0)),
        st.tuples(st.just("flush"), st.just(0.0), st.just(0)),
        st.tuples(st.just("checkpoint"), st.just(0.0), st.just(0)),
        st.tuples(st.just("drain"), st.just(0.0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@SETTINGS
@given(ops=operations, segment_bytes=st.integers(250, 900), data=st.data())
def test_crash_with_queued_epoch_checkpoints_recovers_the_batches_epochs(
    ops, segment_bytes, data
) -> None:
    """Truncations (follower reconciliation), DeleteRecords and retention queue the
    epoch checkpoint; appends after a truncation may carry epochs below the dropped
    ones (a follower refetching the leader's older epoch). A crash anywhere in the
    queue, with the recovery point from the last checkpoint (stale after a
    truncation, as on disk), reopens with the epochs the batches say."""
    clock = Clock()
    with TmpDir() as directory:
        config = make_config(segment_bytes, 0)
        log, _ = held_log(directory, config, clock)
        checkpointed_recovery_point = 0
        producer_seq = 0
        for kind, amount, extra in ops:
            if kind == "append":
                latest = log.epoch_cache.latest_epoch
                epoch = (latest if latest is not None else 0) + int(amount)
                # Half the batches from an idempotent producer: its state is checked too.
                idempotent = extra % 2 == 0
                batch = encode_batch(
                    [Record(i, clock(), b"k", b"v" * 50) for i in range(extra)],
                    producer_id=5 if idempotent else -1,
                    producer_epoch=0 if idempotent else -1,
                    base_sequence=producer_seq if idempotent else -1,
                )
                log.append_as_leader(batch, epoch)
                if idempotent:
                    producer_seq += extra
                log.high_watermark = log.log_end_offset
            elif kind == "truncate" and log.log_end_offset > log.log_start_offset:
                span = log.log_end_offset - log.log_start_offset
                log.truncate_to(log.log_start_offset + int(amount * span))
                log.high_watermark = log.log_end_offset
                known = log.producer_state.producers.get(5)
                producer_seq = known.last_seq + 1 if known else 0
            elif kind == "start":
                span = log.high_watermark - log.log_start_offset
                log.increment_log_start_offset(log.log_start_offset + int(amount * span))
                log.delete_old_segments()
            elif kind == "flush":
                while log.files.apply_next():  # the held worker: flush waits for it
                    pass
                log.flush()
            elif kind == "checkpoint":
                checkpointed_recovery_point = log.recovery_point
            elif kind == "drain":
                while log.files.apply_next():
                    pass
        expected_epochs = epochs_from_batches(log)
        applied = data.draw(st.integers(0, log.files.pending), label="operations applied")
        torn = data.draw(st.booleans(), label="next write torn")
        crash_files(log.files, applied, torn)
        start, end = log.log_start_offset, log.log_end_offset
        live = log.producer_state.producers.get(5)
        abandon(log)
        reopened, _ = open_log(
            directory,
            config,
            clock=clock,
            clean_shutdown=False,
            recovery_point=checkpointed_recovery_point,
            log_start_offset=start,
        )
        _opened.append(reopened)
        assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)
        cache = [(e.epoch, e.start_offset) for e in reopened.epoch_cache.entries]
        assert cache == expected_epochs
        # The producer's entry holds its newest batches as the log has them (a
        # snapshot missing or older than the crash only makes the replay longer, one
        # from before a truncation must not be loaded); with none of its batches
        # left, it is remembered as it was or not at all.
        entry = reopened.producer_state.producers.get(5)
        in_log = [
            (h.base_sequence, h.last_sequence, h.base_offset, h.last_offset)
            for h in reopened.iter_headers(start)
            if h.producer_id == 5
        ]
        if in_log:
            assert entry is not None
            held = [
                (b.first_seq, b.last_seq, b.first_offset, b.last_offset)
                for b in entry.batches
                if b.last_offset >= start
            ]
            assert held == in_log[-5:]
        else:
            assert entry is None or (live is not None and entry.last_seq == live.last_seq)


def _next_sequence(log: Log) -> int:
    """The producer 5's next sequence from the batches left in the log."""
    last = -1
    for header in log.iter_headers(log.log_start_offset):
        if header.producer_id == 5:
            last = header.last_sequence
    return last + 1


def test_clean_close_drains_the_queue(tmp_path: Path) -> None:
    clock = Clock()
    directory = tmp_path / "t-0"
    log, _ = held_log(directory, make_config(300, 0), clock)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # Hand the held queue to a real worker before closing: close waits for it.
        log.files._submit = pool.submit
        for _ in range(20):
            log.append_as_leader(encode_batch([Record(0, clock(), b"k", b"v" * 60)]), 1)
        log.truncate_to(log.segments[1].base_offset)
        pool.submit(log.files._drain)
        log.close()
        assert log.files.pending == 0
    reopened, _ = open_log(directory, make_config(300, 0), clock=clock)
    _opened.append(reopened)
    cache = LeaderEpochCache(directory / "leader-epoch-checkpoint")
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(1, 0)]
    reopened.close()


def test_stale_epoch_entry_below_the_recovered_segments_is_caught(tmp_path: Path) -> None:
    """The case the property may not draw: a follower had epoch 3 from offset 20,
    flushed and checkpointed its recovery point past it, truncated to 20 (the new
    leader never had epoch 3) and refetched the leader's epoch-1 batches from there;
    killed before the truncated checkpoint landed. The segment holding 20 is below the
    recovery point (not re-read), so only the check of each entry against its batch
    sees that epoch 3 is gone."""
    clock = Clock()
    directory = tmp_path / "t-0"
    config = make_config(300, 0)
    log, _ = held_log(directory, config, clock)

    def append(epoch: int, count: int) -> None:
        for _ in range(count):
            log.append_as_leader(encode_batch([Record(0, clock(), b"k", b"v" * 60)]), epoch)

    append(1, 20)
    append(3, 10)
    while log.files.apply_next():
        pass
    log.flush()
    recovery_point = log.recovery_point
    assert recovery_point == 30
    log.truncate_to(20)
    append(1, 15)
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == [(1, 0)]
    assert log.files.pending  # the truncated checkpoint, not on disk
    first_recovered = log.segment_for(recovery_point)
    assert first_recovered is not None and first_recovered.base_offset > 20
    abandon(log)
    reopened, _ = open_log(
        directory, config, clock=clock, clean_shutdown=False, recovery_point=recovery_point
    )
    _opened.append(reopened)
    assert [(e.epoch, e.start_offset) for e in reopened.epoch_cache.entries] == [(1, 0)]
    assert reopened.end_offset_for_epoch(1) == (1, 35)
    reopened.close()


def test_unsynced_writes_wait_for_sync_unsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot is written without fsync (whole or absent after a kill: the rename is
    atomic) and fsynced by the next flush; a deleted one is skipped."""
    synced: list[int] = []
    real_fsync = deferred_files.os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(deferred_files.os, "fsync", counting_fsync)
    files = DeferredFiles(HeldWorker())
    kept, gone = tmp_path / "00000000000000000010.snapshot", tmp_path / "20.snapshot"
    files.write(kept, b"S10", sync=False)
    files.write(gone, b"S20", sync=False)
    files.unlink(gone)
    while files.apply_next():
        pass
    assert kept.read_bytes() == b"S10" and not gone.exists()
    assert synced == []  # nothing fsynced on the worker
    files.sync_unsynced()
    assert len(synced) == 2  # the kept file and its directory
    files.sync_unsynced()
    assert len(synced) == 2  # once


def test_flush_fsyncs_the_snapshots_before_the_recovery_point_moves(tmp_path: Path) -> None:
    clock = Clock()
    log, _ = held_log(tmp_path / "t-0", make_config(300, 0), clock)
    for _ in range(10):
        log.append_as_leader(encode_batch([Record(0, clock(), b"k", b"v" * 60)]), 1)
    assert log.files.pending
    log.files._submit = None  # the held queue is applied by drain's caller below
    while log.files.apply_next():
        pass
    assert log.files._unsynced  # the roll snapshots: written, not yet fsynced
    log.flush()
    assert not log.files._unsynced and log.recovery_point == log.log_end_offset
    log.close()


def test_a_failed_write_without_a_worker_does_not_leave_drain_waiting(tmp_path: Path) -> None:
    """Without a worker (the metadata log) a write happens at once; one that failed (a
    full disk) still counts as done, else the shutdown's flush waited for it for ever
    (a broker on a full disk never exited after SIGTERM)."""
    files = DeferredFiles()
    with pytest.raises(OSError):
        files.write(tmp_path / "no-such-dir" / "snapshot", b"x")
    assert files.drain(timeout=1.0)

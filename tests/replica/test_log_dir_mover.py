"""The log dir mover (AlterReplicaLogDirs): ``plan`` sans-IO, the quota, the
request's answers, and moves that race with appends, truncation, DeleteRecords and
cancellation on real logs in two dirs."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.replica.log_dir_mover import (
    CANCELLED,
    COPYING,
    DONE,
    FINISHING,
    LEGAL_TRANSITIONS,
    AdvanceStart,
    CaughtUp,
    Copy,
    LogDirMove,
    LogDirMover,
    Positions,
    Restart,
    Truncate,
    plan,
)
from odradek.replica.partition import Partition
from odradek.replica.replica_manager import ReplicaManager
from odradek.replica.replication_quota import ReplicationQuota
from odradek.storage.epoch_cache import UNDEFINED_EPOCH
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerSettings
from tests.storage.conftest import FakeClock, make_batch

TP = ("t", 0)
Setup = tuple[LogManager, ReplicaManager, LogDirMover, FakeClock]


def pos(start: int, end: int, epoch: int | None = 1, first_base: int | None = None) -> Positions:
    return Positions(start, end, end, epoch, start if first_base is None else first_base)


# -- plan ---------------------------------------------------------------------------
def test_plan_copies_then_reports_caught_up() -> None:
    assert plan(pos(0, 100), pos(0, 40), (1, 100)) == Copy(40)
    assert plan(pos(0, 100), pos(0, 100), (1, 100)) == CaughtUp()
    assert plan(pos(0, 100), pos(0, 0, None)) == Copy(0)


def test_plan_follows_the_log_start() -> None:
    assert plan(pos(50, 100), pos(0, 60), (1, 100)) == AdvanceStart(50)
    # the future has not reached the new start yet: copy first
    assert plan(pos(50, 100, first_base=45), pos(0, 48), (1, 100)) == Copy(48)
    # nothing in common: start again at the current log start
    assert plan(pos(50, 100), pos(0, 30), (1, 100)) == Restart(50)
    # an empty future waiting inside a batch is where it should be
    assert plan(pos(50, 100, first_base=45), pos(45, 45, None)) == Copy(45)
    assert plan(pos(50, 100, first_base=45), pos(50, 50, None)) == Restart(50)
    # the current log restarted below the future's start (a follower's full truncation)
    assert plan(pos(10, 10, None), pos(40, 60), (UNDEFINED_EPOCH, -1)) == Restart(10)


def test_plan_truncates_what_the_current_log_no_longer_has() -> None:
    # the current log was cut back below the future's end
    assert plan(pos(0, 30), pos(0, 40), (1, 30)) == Truncate(30)
    # same length, but the current log has a new epoch from 25 (the future's 1 ends there)
    assert plan(pos(0, 40, 2), pos(0, 40, 1), (1, 25)) == Truncate(25)
    # the current log never had the future's epoch: back to the largest one it had
    assert plan(pos(0, 40, 4), pos(0, 40, 3), (2, 20)) == Truncate(20)
    assert plan(pos(0, 40, 4), pos(0, 40, 3), (UNDEFINED_EPOCH, -1)) == Restart(0)


@given(
    current_start=st.integers(0, 50),
    current_len=st.integers(0, 50),
    future_start=st.integers(0, 60),
    future_len=st.integers(0, 60),
)
def test_plan_never_copies_past_the_current_log(
    current_start: int, current_len: int, future_start: int, future_len: int
) -> None:
    current = pos(current_start, current_start + current_len)
    future = pos(future_start, future_start + future_len)
    action = plan(current, future, (1, current.end))
    if isinstance(action, Copy):
        assert current.start <= action.offset < current.end or action.offset == future.end
        assert future.start <= current.start
    if isinstance(action, CaughtUp):
        assert future.end == current.end and future.start == current.start
    if isinstance(action, Truncate):
        assert future.start <= action.offset < future.end


def test_the_move_state_machine_has_one_table() -> None:
    move = LogDirMove(TP, Path("/d"))
    assert move.state is COPYING
    move._transition(FINISHING)
    move._transition(COPYING)  # fell behind during the flush
    move._transition(FINISHING)
    move._transition(DONE)
    assert LEGAL_TRANSITIONS[DONE] == frozenset()
    with pytest.raises(AssertionError):
        move._transition(CANCELLED)


# -- on real logs ---------------------------------------------------------------------
@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    clock = FakeClock()
    a, b = tmp_path / "a", tmp_path / "b"
    lm = LogManager(
        [a, b], LogConfig(segment_bytes=3_000), settings=LogManagerSettings(), clock=clock
    )
    lm.startup()
    lm.preferred_dirs[TP] = a
    log = lm.get_or_create_log(*TP)
    replicas = ReplicaManager(1, lm)
    replicas.partitions[TP] = Partition("t", 0, "x", log, 1)
    mover = LogDirMover(lm, replicas, clock=clock, chunk_bytes=600)
    yield lm, replicas, mover, clock
    lm.shutdown()


def step(mover: LogDirMover, times: int = 1) -> None:
    async def go() -> None:
        for _ in range(times):
            await mover.run_once()

    asyncio.run(go())


def append(log: Log, batches: int, epoch: int = 1) -> None:
    for _ in range(batches):
        log.append_as_leader(make_batch(3), leader_epoch=epoch)
    log.high_watermark = log.log_end_offset


def test_request_answers(setup: Setup, tmp_path: Path) -> None:
    lm, replicas, mover, _ = setup
    b = str(tmp_path / "b")
    assert mover.alter("t", 0, str(tmp_path / "elsewhere")) == "LOG_DIR_NOT_FOUND"
    assert mover.alter("t", 0, "b") == "LOG_DIR_NOT_FOUND"  # not absolute
    assert mover.alter("t", 0, str(tmp_path / "a")) == "NONE"  # already there
    assert not lm.future_logs
    assert mover.alter("t" * 250, 0, b) == "INVALID_TOPIC_EXCEPTION"
    # not hosted yet: remembered, and the log is created there later
    assert mover.alter("later", 3, b) == "REPLICA_NOT_AVAILABLE"
    assert lm.get_or_create_log("later", 3).directory == tmp_path / "b" / "later-3"
    replicas.offline[("t", 1)] = "disk"
    assert mover.alter("t", 1, b) == "KAFKA_STORAGE_ERROR"
    assert mover.alter("t", 0, b) == "NONE"
    assert lm.futures.dir_of(("t", 0)) == tmp_path / "b"
    # asking for the current dir again cancels the move
    assert mover.alter("t", 0, str(tmp_path / "a")) == "NONE"
    assert not lm.future_logs and mover.finished[TP].state is CANCELLED
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.endswith("-future")]


def test_a_move_finishes_while_appends_continue(setup: Setup) -> None:
    lm, replicas, mover, _ = setup
    log = lm.logs[TP]
    append(log, 40)
    assert mover.alter("t", 0, str(lm.log_dirs[1])) == "NONE"
    rounds = 0
    while TP in mover.moves:
        append(log if lm.logs[TP] is log else lm.logs[TP], 1, epoch=2 + rounds // 10)
        step(mover)
        rounds += 1
        assert rounds < 500
    assert mover.finished[TP].state is DONE
    new = lm.logs[TP]
    assert new is not log and replicas.partitions[TP].log is new
    assert list(new.read_batches(0)) == list(log.read_batches(0))
    assert new.epoch_cache.entries == log.epoch_cache.entries
    append(new, 1, epoch=99)  # the partition writes to the new log
    assert new.log_end_offset == log.log_end_offset + 3


def test_a_current_log_truncated_and_rewritten_during_the_copy(setup: Setup) -> None:
    lm, _, mover, _ = setup
    log = lm.logs[TP]
    append(log, 30, epoch=1)
    mover.alter("t", 0, str(lm.log_dirs[1]))
    step(mover, 6)  # 600 bytes a step: the future holds more than 30 offsets now
    assert lm.future_logs[TP].log_end_offset > 30 and TP in mover.moves
    # a follower's reconciliation: cut back, then the new leader's epoch
    log.truncate_to(30)
    append(log, 5, epoch=4)
    step(mover, 200)
    assert TP not in mover.moves
    new = lm.logs[TP]
    assert list(new.read_batches(0)) == list(log.read_batches(0))
    assert [(e.epoch, e.start_offset) for e in new.epoch_cache.entries] == [(1, 0), (4, 30)]


def test_delete_records_during_the_copy(setup: Setup) -> None:
    lm, _, mover, _ = setup
    log = lm.logs[TP]
    append(log, 30)
    mover.alter("t", 0, str(lm.log_dirs[1]))
    step(mover, 2)
    log.increment_log_start_offset(50)  # past what the future has: it starts again
    step(mover, 200)
    assert TP not in mover.moves
    new = lm.logs[TP]
    assert new.log_start_offset == 50
    assert list(new.read_batches(50)) == list(log.read_batches(50))


def test_a_deleted_partition_ends_its_move(setup: Setup) -> None:
    lm, replicas, mover, _ = setup
    append(lm.logs[TP], 30)
    mover.alter("t", 0, str(lm.log_dirs[1]))
    step(mover, 2)
    replicas._remove(TP)
    step(mover, 2)
    assert not mover.moves and not lm.future_logs and not lm.logs


def test_a_throttled_move_holds_the_rate(setup: Setup) -> None:
    """replica.alter.log.dirs.io.max.bytes.per.second as the broker's alter-log-dirs
    quota (Kafka's windowed rate): no copy while it is exceeded."""
    lm, _, mover, clock = setup
    mover.quota = ReplicationQuota(clock, rate=1000, samples=2, window_ms=1000)
    append(lm.logs[TP], 30)  # ~5.7 kB
    mover.alter("t", 0, str(lm.log_dirs[1]))
    elapsed_ms = 0
    while TP in mover.moves:
        clock.advance(100)
        elapsed_ms += 100
        step(mover)
        if TP in mover.moves:  # two windows measure it: bounded, not exact
            assert mover.moves[TP].copied_bytes <= 2 * elapsed_ms + 1000 + 600
        assert elapsed_ms < 60_000
    assert mover.finished[TP].state is DONE
    assert elapsed_ms >= 3_000


# -- random interleavings ---------------------------------------------------------------
OPS = st.lists(
    st.sampled_from(["append", "epoch", "step", "truncate", "delete_records", "restart_log"]),
    min_size=1,
    max_size=60,
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 2**16))
def test_any_interleaving_ends_with_the_current_log_moved(
    tmp_path_factory: pytest.TempPathFactory, ops: list[str], seed: int
) -> None:
    """Appends (in new epochs too), follower truncations, DeleteRecords and full
    restarts of the current log between mover steps, in any order: once the mover
    has run to the end the partition's log is in the target dir and holds exactly the
    current log's batches, start offset and epochs."""
    rng = random.Random(seed)
    clock = FakeClock()
    root = tmp_path_factory.mktemp("moves")
    lm = LogManager(
        [root / "a", root / "b"],
        LogConfig(segment_bytes=1_500),
        settings=LogManagerSettings(),
        clock=clock,
    )
    lm.startup()
    lm.preferred_dirs[TP] = root / "a"
    log = lm.get_or_create_log(*TP)
    replicas = ReplicaManager(1, lm)
    replicas.partitions[TP] = Partition("t", 0, "x", log, 1)
    mover = LogDirMover(lm, replicas, clock=clock, chunk_bytes=rng.choice([150, 400, 2_000]))
    epoch = 1
    append(log, 5, epoch)
    assert mover.alter("t", 0, str(root / "b")) == "NONE"
    try:
        for op in ops:
            if TP not in mover.moves:
                break  # swapped: what follows goes to the new log, nothing to compare
            current = lm.logs[TP]
            if op == "append":
                append(current, rng.randint(1, 4), epoch)
            elif op == "epoch":
                epoch += 1
                current.epoch_cache.assign(epoch, current.log_end_offset)
            elif op == "step":
                step(mover)
            elif op == "truncate" and current.log_end_offset > current.high_watermark - 6:
                cut = max(current.log_start_offset, current.log_end_offset - rng.randint(1, 9))
                current.truncate_to(cut)
                epoch += 1
            elif op == "delete_records":
                current.high_watermark = current.log_end_offset
                target = rng.randint(current.log_start_offset, current.high_watermark)
                current.increment_log_start_offset(target)
            elif op == "restart_log":
                current.truncate_fully_and_start_at(current.log_end_offset + rng.randint(0, 5))
        for _ in range(2_000):
            if TP not in mover.moves:
                break
            step(mover)
        assert TP not in mover.moves and mover.finished[TP].state is DONE
        final = lm.logs[TP]
        assert final.directory == root / "b" / "t-0"
        assert replicas.partitions[TP].log is final
        before = log if final is not log else None
        assert before is not None
        assert final.log_end_offset == before.log_end_offset
        assert final.log_start_offset == before.log_start_offset
        start = final.log_start_offset
        assert list(final.read_batches(start)) == list(before.read_batches(start))
        assert final.epoch_cache.entries == before.epoch_cache.entries
    finally:
        lm.shutdown()

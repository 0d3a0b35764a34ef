"""Future logs and the log dir swap (AlterReplicaLogDirs): a crash after every step of
the swap, and in the middle of the copy, leaves exactly one authoritative log, with
every batch, epoch, producer and offset of the original; a resumed move finishes."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.replica.log_dir_mover import LogDirMover
from odradek.replica.partition import Partition
from odradek.replica.replica_manager import ReplicaManager
from odradek.storage.future_logs import (
    SWAP_STEPS,
    future_name_fits,
    parse_future_dir_name,
    parse_swap_dir_name,
)
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerSettings

from .conftest import FakeClock, make_batch

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def manager(dirs: list[Path], clock: FakeClock) -> LogManager:
    settings = LogManagerSettings(tick_ms=1)
    baseline = open_fds()
    lm = LogManager(dirs, LogConfig(segment_bytes=2_000), settings=settings, clock=clock)
    lm.baseline_fds = baseline  # type: ignore[attr-defined]
    return lm


def open_fds() -> set[int]:
    """The descriptors open now (not the one that listed them, closed again)."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            os.fstat(int(name))
            fds.add(int(name))
    return fds


def crash(lm: LogManager) -> None:
    """What a kill -9 leaves: files as they are, nothing more written, every file the
    manager opened closed (its locks too) as the process's death would."""
    for fd in sorted(open_fds() - lm.baseline_fds):  # type: ignore[attr-defined]
        os.close(fd)
    lm._lock_fds.clear()


def fill(log: Log, clock: FakeClock, batches: int, *, start_epoch: int = 1) -> None:
    """Batches in two epochs, some from an idempotent producer, an empty epoch at the
    end (a leader that lost the lead before appending), a log start inside a batch."""
    sequence = 0
    for number in range(batches):
        epoch = start_epoch if number < batches // 2 else start_epoch + 2
        if number % 3 == 0:
            data = make_batch(3, producer_id=77, producer_epoch=0, base_sequence=sequence)
            sequence += 3
        else:
            data = make_batch(2, timestamp=clock())
        log.append_as_leader(data, leader_epoch=epoch)
    log.epoch_cache.assign(start_epoch + 4, log.log_end_offset)
    log.high_watermark = log.log_end_offset - 2
    log.increment_log_start_offset(4)  # inside the second batch (offsets 3..4)


def picture(log: Log, *, restarted: bool = True) -> dict[str, object]:
    """Everything a move must carry over. A restart drops an epoch starting at the log
    end (every log's loader does, as Kafka's), so ``restarted`` pictures leave it out."""
    epochs = log.epoch_cache.entries
    if restarted:
        epochs = [e for e in epochs if e.start_offset < log.log_end_offset]
    return {
        "batches": list(log.read_batches(log.log_start_offset)),
        "start": log.log_start_offset,
        "end": log.log_end_offset,
        "hw": log.high_watermark,
        "epochs": [(e.epoch, e.start_offset) for e in epochs],
        "producers": {
            pid: (e.epoch, e.last_seq, [b.last_offset for b in e.batches][-1:])
            for pid, e in log.producer_state.producers.items()
        },
    }


def replicas_for(lm: LogManager, *tps: tuple[str, int]) -> ReplicaManager:
    replicas = ReplicaManager(1, lm)
    for topic, index in tps:
        log = lm.logs[(topic, index)]
        replicas.partitions[(topic, index)] = Partition(topic, index, TOPIC_ID, log, 1)
    return replicas


def copy_until_caught_up(mover: LogDirMover, tp: tuple[str, int]) -> None:
    """Run the COPYING steps (no swap) synchronously."""
    lm = mover.log_manager
    for _ in range(10_000):
        current, future = lm.logs[tp], lm.future_logs[tp]
        action = mover._next(current, future)
        if type(action).__name__ == "CaughtUp":
            return
        mover._apply(current, future, action, 700)
    raise AssertionError("never caught up")


def dirs_named(root: list[Path], name: str) -> list[Path]:
    return [d / name for d in root if (d / name).is_dir()]


def run_mover(mover: LogDirMover, rounds: int = 1_000) -> None:
    async def go() -> None:
        for _ in range(rounds):
            await mover.run_once()
            if not mover.moves:
                return
        raise AssertionError(f"moves left: {mover.moves}")

    asyncio.run(go())


@pytest.mark.parametrize("stop_after", [None, *SWAP_STEPS])
def test_a_crash_at_every_step_of_the_swap_leaves_one_log(
    tmp_path: Path, clock: FakeClock, stop_after: str | None
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    lm = manager([a, b], clock)
    lm.startup()
    lm.preferred_dirs[("t", 0)] = a
    log = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    fill(log, clock, 30)
    before = picture(log)
    mover = LogDirMover(lm, replicas_for(lm, ("t", 0)), clock=clock)
    assert mover.alter("t", 0, str(b)) == "NONE"
    copy_until_caught_up(mover, ("t", 0))
    lm.write_checkpoints()  # the periodic checkpoint
    done: list[str] = []
    if stop_after is not None:
        for step in lm.futures.log_swap("t", 0).steps():
            done.append(step)
            if step == stop_after:
                break
    crash(lm)

    again = manager([a, b], clock)
    again.startup()
    names = [p.name for d in (a, b) for p in d.iterdir() if p.is_dir()]
    assert not [n for n in names if parse_swap_dir_name(n)]
    current = dirs_named([a, b], "t-0")
    assert len(current) == 1, names  # never both, never neither
    moved = "marked" in done
    assert current[0].parent == (b if moved else a)
    assert (("t", 0) in again.future_logs) == (not moved)
    assert picture(again.logs[("t", 0)]) == before
    # a move not swapped yet resumes and finishes
    resumed = LogDirMover(again, replicas_for(again, ("t", 0)), clock=clock)
    run_mover(resumed)
    assert again.log_dir_of("t", 0) == b and not again.future_logs
    assert picture(again.logs[("t", 0)]) == before
    assert resumed.replicas.partitions[("t", 0)].log is again.logs[("t", 0)]
    again.shutdown()
    third = manager([a, b], clock)
    third.startup()
    assert dirs_named([a, b], "t-0") == [b / "t-0"]
    assert picture(third.logs[("t", 0)]) == before
    third.shutdown()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.integers(min_value=6, max_value=40),
    copied=st.integers(min_value=0, max_value=60),
    appended=st.integers(min_value=0, max_value=10),
)
def test_a_crash_in_the_middle_of_the_copy_resumes(
    tmp_path_factory: pytest.TempPathFactory, batches: int, copied: int, appended: int
) -> None:
    """Stop after ``copied`` copy actions, with ``appended`` batches written to the
    current log meanwhile: start-up loads the future log, the move resumes and the
    result is the current log's, byte for byte."""
    clock = FakeClock()
    root = tmp_path_factory.mktemp("move")
    a, b = root / "a", root / "b"
    lm = manager([a, b], clock)
    lm.startup()
    lm.preferred_dirs[("t", 0)] = a
    log = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    fill(log, clock, batches)
    mover = LogDirMover(lm, replicas_for(lm, ("t", 0)), clock=clock)
    assert mover.alter("t", 0, str(b)) == "NONE"
    for number in range(copied):
        current, future = lm.logs[("t", 0)], lm.future_logs[("t", 0)]
        action = mover._next(current, future)
        mover._apply(current, future, action, 500)
        if number < appended:
            log.append_as_leader(make_batch(2, timestamp=clock()), leader_epoch=9)
    log.high_watermark = log.log_end_offset
    lm.write_checkpoints()
    before = picture(log)
    crash(lm)

    again = manager([a, b], clock)
    again.startup()
    assert dirs_named([a, b], "t-0") == [a / "t-0"]
    assert ("t", 0) in again.future_logs
    assert picture(again.logs[("t", 0)]) == before
    resumed = LogDirMover(again, replicas_for(again, ("t", 0)), clock=clock)
    run_mover(resumed)
    assert dirs_named([a, b], "t-0") == [b / "t-0"]
    assert picture(again.logs[("t", 0)]) == before
    again.shutdown()


def test_a_move_without_a_crash_carries_everything_and_keeps_old_reads_valid(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    lm = manager([a, b], clock)
    lm.startup()
    lm.preferred_dirs[("t", 0)] = a
    log = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    fill(log, clock, 30)
    before = picture(log, restarted=False)
    in_flight = log.read(log.log_start_offset, 10_000)  # a fetch response being sent
    expected = [os.pread(r.fd, r.length, r.position) for r in in_flight.ranges]
    replicas = replicas_for(lm, ("t", 0))
    mover = LogDirMover(lm, replicas, clock=clock)
    assert mover.alter("t", 0, str(b)) == "NONE"
    assert mover.alter("t", 0, str(b) + "/") == "NONE"  # already under way
    run_mover(mover)
    moved = lm.logs[("t", 0)]
    assert moved is not log and replicas.partitions[("t", 0)].log is moved
    assert moved.directory == b / "t-0" and lm.log_dir_of("t", 0) == b
    assert picture(moved, restarted=False) == before
    assert (b / "t-0" / "partition.metadata").read_text().endswith(TOPIC_ID + "\n")
    assert not (a / "t-0").exists()
    # the old files stay open for responses in flight until file.delete.delay.ms
    assert [os.pread(r.fd, r.length, r.position) for r in in_flight.ranges] == expected
    clock.advance(LogConfig().file_delete_delay_ms + 1)
    asyncio.run(lm.run_once())
    assert log.closed and not [p for p in a.iterdir() if p.name.startswith("t-0")]
    # appends go to the new log
    moved.append_as_leader(make_batch(2), leader_epoch=7)
    assert moved.log_end_offset == before["end"] + 2  # type: ignore[operator]
    lm.shutdown()


def test_a_future_log_without_its_current_log_is_discarded(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    lm = manager([a, b], clock)
    lm.startup()
    lm.preferred_dirs[("t", 0)] = a
    fill(lm.get_or_create_log("t", 0), clock, 6)
    lm.futures.create("t", 0, b)
    crash(lm)
    for child in a.iterdir():  # the current log went (a delete the crash cut short)
        if child.name == "t-0":
            child.rename(a / "t-0.0123abcd-delete")
    again = manager([a, b], clock)
    again.startup()
    assert not again.logs and not again.future_logs
    leftovers = [p.name for p in b.iterdir() if p.is_dir()]
    assert not [n for n in leftovers if parse_future_dir_name(n)]
    again.shutdown()


def test_deleting_a_partition_deletes_its_future_log_first(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    lm = manager([a, b], clock)
    lm.startup()
    lm.preferred_dirs[("t", 0)] = a
    lm.get_or_create_log("t", 0)
    future = lm.futures.create("t", 0, b)
    assert parse_future_dir_name(future.directory.name) == ("t", 0)
    lm.delete_log("t", 0)
    assert not lm.future_logs and not lm.logs
    assert not [p for d in (a, b) for p in d.iterdir() if p.name.endswith("-future")]
    lm.shutdown()


def test_future_directory_names_must_fit() -> None:
    assert future_name_fits("t" * 200, 0)
    assert not future_name_fits("t" * 249, 0)

"""The LogCleaner as the broker runs it: the dirtiest compacted log first, the
cleaner-offset-checkpoint written and read back after a restart, a log truncated
under a clean left alone, and ``stop`` ending a slow (throttled) clean at once."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from odradek.records.codec import Record, encode_batch
from odradek.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from odradek.storage.cleaner.manager import CleanerSettings, log_to_clean
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager

from .conftest import FakeClock

COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=2048)


def manager(path: Path, clock: FakeClock, **settings: object) -> LogManager:
    lm = LogManager(
        [path],
        LogConfig(),
        clock=clock,
        cleaner=CleanerSettings(**settings),  # type: ignore[arg-type]
    )
    lm.startup({"c": COMPACT, "d": COMPACT})
    return lm


def fill(log: Log, keys: int, rounds: int) -> None:
    for round_ in range(rounds):
        for key in range(keys):
            record = Record(0, log.clock(), b"k%d" % key, b"v%d-" % round_ + b"x" * 60)
            log.append_as_leader(encode_batch([record]), 0)
    log.roll()
    log.high_watermark = log.log_end_offset


def test_dirtiest_first_and_the_checkpoint_survives_a_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    lm = manager(tmp_path, clock)
    logs = {tp: lm.get_or_create_log(*tp) for tp in [("c", 0), ("d", 0), ("p", 0)]}
    for log in logs.values():
        fill(log, keys=5, rounds=20)
    cleaner = lm.cleaner

    async def clean_all() -> list[tuple[str, int]]:
        cleaner._pool = None  # the loop's default executor
        order = []
        while (todo := cleaner.grab_filthiest(clock.now_ms)) is not None:
            assert await cleaner.clean(todo)
            cleaner.in_progress.discard(todo.tp)
            order.append(todo.tp)
        return order

    # cleanup.policy=delete ("p") is never cleaned.
    assert sorted(asyncio.run(clean_all())) == [("c", 0), ("d", 0)]
    # Then "d" gets much dirtier than "c": both are eligible, "d" goes first.
    fill(logs[("c", 0)], keys=5, rounds=10)
    fill(logs[("d", 0)], keys=5, rounds=40)
    ratios = {
        tp: log_to_clean(tp, logs[tp], cleaner.checkpoint_of(tp), clock.now_ms, None)
        for tp in [("c", 0), ("d", 0)]
    }
    assert all(todo.eligible for todo in ratios.values())
    assert ratios[("d", 0)].ratio > ratios[("c", 0)].ratio
    assert asyncio.run(clean_all()) == [("d", 0), ("c", 0)]
    rows = read_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT)
    assert rows == {tp: logs[tp].active_segment.base_offset for tp in [("c", 0), ("d", 0)]}
    lm.shutdown()
    again = manager(tmp_path, clock)
    assert again.cleaner.checkpoint_of(("d", 0)) == rows[("d", 0)]
    assert again.cleaner.grab_filthiest(clock.now_ms) is None
    again.shutdown()


def test_a_log_truncated_during_a_clean_is_left_alone(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    log = lm.get_or_create_log("c", 0)
    fill(log, keys=3, rounds=60)
    before = [bytes(b) for b in log.read_batches(0)]

    async def clean_with_truncation() -> bool:
        todo = lm.cleaner.grab_filthiest(clock.now_ms)
        assert todo is not None
        loop = asyncio.get_running_loop()
        original = loop.run_in_executor

        def truncate_then_run(executor, call, *args):  # type: ignore[no-untyped-def]
            if getattr(call, "__name__", "") == "clean_group":
                log.truncate_to(log.log_end_offset - 1)
            return original(executor, call, *args)

        loop.run_in_executor = truncate_then_run  # type: ignore[method-assign]
        return await lm.cleaner.clean(todo)

    assert asyncio.run(clean_with_truncation()) is False
    assert [bytes(b) for b in log.read_batches(0)] == before[: len(before) - 1]
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.name.endswith(".cleaned")]
    lm.shutdown()


def test_stop_ends_a_throttled_clean_promptly(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock, io_max_bytes_per_second=1000.0, backoff_ms=10)
    log = lm.get_or_create_log("c", 0)
    fill(log, keys=3, rounds=100)  # ~10 KB: ten seconds at 1000 bytes/s

    async def run_then_stop() -> float:
        task = asyncio.create_task(lm.cleaner.run())
        while not lm.cleaner.in_progress:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await lm.cleaner.stop(task)
        return time.monotonic() - started

    assert asyncio.run(run_then_stop()) < 2.0
    assert lm.cleaner.stats.aborted == 1 and lm.cleaner.stats.failed == 0
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.name.endswith(".cleaned")]
    lm.shutdown()


def test_a_damaged_segment_stops_cleaning_that_log_with_one_line(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    lm = manager(tmp_path, clock, backoff_ms=10)
    log = lm.get_or_create_log("c", 0)
    fill(log, keys=3, rounds=60)
    first = log.segments[0]
    with open(first.log_path, "r+b") as file:  # a flipped byte in the first record
        file.seek(70)
        byte = file.read(1)
        file.seek(70)
        file.write(bytes([byte[0] ^ 0xFF]))
    before = first.size

    async def run_until_failed() -> None:
        task = asyncio.create_task(lm.cleaner.run())
        while not lm.cleaner.stats.failed:
            await asyncio.sleep(0.01)
        await lm.cleaner.stop(task)

    with caplog.at_level(logging.ERROR, logger="odradek.storage.cleaner.manager"):
        asyncio.run(run_until_failed())
    assert ("c", 0) in lm.cleaner.uncleanable
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None, errors
    assert "not cleaned again" in errors[0].getMessage()
    assert log.segments[0] is first and first.size == before  # nothing was changed
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.name.endswith(".cleaned")]
    lm.shutdown()


def test_settings_change_while_running(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock, backoff_ms=10_000)
    logs = [lm.get_or_create_log(topic, 0) for topic in ("c", "d")]
    cleaner = lm.cleaner

    async def scenario() -> None:
        task = asyncio.create_task(cleaner.run())
        await asyncio.sleep(0.05)
        assert len([w for w in cleaner._workers if not w.done()]) == 1
        # Two threads now; the sleeping worker wakes with the new backoff.
        cleaner.update_settings(CleanerSettings(threads=2, backoff_ms=10))
        await asyncio.sleep(0.05)
        assert len([w for w in cleaner._workers if not w.done()]) == 2
        for log in logs:
            fill(log, keys=3, rounds=40)
        deadline = asyncio.get_running_loop().time() + 10
        while cleaner.stats.cleans < 2:
            assert asyncio.get_running_loop().time() < deadline, cleaner.stats
            await asyncio.sleep(0.01)
        # Back to one: the second worker ends at its next look.
        cleaner.update_settings(CleanerSettings(threads=1, backoff_ms=10))
        await asyncio.sleep(0.1)
        assert len([w for w in cleaner._workers if not w.done()]) == 1
        await cleaner.stop(task)

    asyncio.run(scenario())
    assert cleaner.stats.failed == 0
    lm.shutdown()

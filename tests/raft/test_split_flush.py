"""The leader's fsync runs on a worker thread while the event loop keeps serving.

A single voter over a real ``DiskRaftLog`` whose segment fsync is held on a gate (a
slow disk): while the fsync is stuck, the loop keeps running (this test's own
coroutine, a DescribeQuorum, a peer's request), the append is not committed and the
high watermark stays at the flushed end; once the fsync finishes the append commits
and the listener gets it. A failed fsync on the worker thread still stops the driver
(every later append fails with RaftStepError).
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from odradek.raft import MemoryElectionStore, MemorySnapshotStore, RaftConfig
from odradek.raft.control_records import leader_change_entry
from odradek.raft.disk_log import DiskRaftLog, PendingFlush
from odradek.raft.driver import RaftDriver, RaftStepError
from odradek.raft.messages import VoteRequest
from odradek.records.codec import Record, encode_batch
from odradek.server.config import QuorumVoter

CONFIG = RaftConfig(append_linger_ms=1)
GATE_TIMEOUT_S = 30


class GatedFsync:
    """PendingFlush.fsync waits on ``gate`` (set: a normal disk) and can fail."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail = False
        self.loop_thread = threading.get_ident()
        self.threads: set[int] = set()
        real = PendingFlush.fsync

        def fsync(pending: PendingFlush) -> None:
            self.threads.add(threading.get_ident())
            self.entered.set()
            assert self.gate.wait(GATE_TIMEOUT_S), "the test never opened the gate"
            if self.fail:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(pending)

        monkeypatch.setattr(PendingFlush, "fsync", fsync)


def single_voter(tmp_path: Path) -> tuple[RaftDriver, DiskRaftLog, list[object]]:
    log = DiskRaftLog.open(tmp_path / "metadata")
    events: list[object] = []
    driver = RaftDriver(
        1,
        [QuorumVoter(1, "127.0.0.1", 1)],
        log,
        MemoryElectionStore(),
        MemorySnapshotStore(),
        CONFIG,
        cluster_id="c",
        listener=events.append,
        node_options={"control_entry": leader_change_entry},
    )
    return driver, log, events


def batch(text: bytes) -> bytes:
    return encode_batch([Record(0, 0, None, text)])


async def until(predicate: object, what: str) -> None:
    for _ in range(2000):
        if callable(predicate) and predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


def test_the_fsync_runs_off_the_loop_and_the_high_watermark_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = GatedFsync(monkeypatch)

    async def scenario() -> None:
        driver, log, events = single_voter(tmp_path)
        driver.start()
        await until(lambda: driver.is_leader and driver.high_watermark > 0, "a leader")
        committed = driver.high_watermark
        disk.gate.clear()
        disk.entered.clear()
        append = asyncio.create_task(driver.append(batch(b"slow-disk")))
        # The fsync is stuck on the worker thread; the loop is not.
        await asyncio.to_thread(disk.entered.wait, GATE_TIMEOUT_S)
        assert disk.entered.is_set()
        for _ in range(20):
            await asyncio.sleep(0.005)
            description, _ = driver.describe_quorum()
            assert description.high_watermark == committed
        vote = VoteRequest(
            cluster_id="c",
            voter_id=1,
            replica_epoch=driver.epoch,
            replica_id=2,
            last_offset_epoch=0,
            last_offset=0,
            pre_vote=True,
        )
        answer = await driver.handle_request(2, vote)  # a peer is served meanwhile
        assert not answer.vote_granted
        assert not append.done()
        assert log.flushed_offset < log.end_offset
        assert driver.high_watermark == committed
        disk.gate.set()
        offset = await asyncio.wait_for(append, GATE_TIMEOUT_S)
        assert driver.high_watermark > offset
        assert log.flushed_offset == log.end_offset
        assert disk.loop_thread not in disk.threads
        await until(lambda: len(events) >= 2, "the append handed to the listener")
        await driver.shutdown()
        log.close()

    asyncio.run(scenario())


def test_a_failed_fsync_on_the_worker_thread_stops_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = GatedFsync(monkeypatch)

    async def scenario() -> None:
        driver, log, _ = single_voter(tmp_path)
        driver.start()
        await until(lambda: driver.is_leader and driver.high_watermark > 0, "a leader")
        disk.fail = True
        with pytest.raises(RaftStepError, match="the metadata log failed"):
            await asyncio.wait_for(driver.append(batch(b"lost")), GATE_TIMEOUT_S)
        with pytest.raises(RaftStepError):
            await driver.append(batch(b"after"))
        await driver.shutdown()
        disk.fail = False
        log.close()

    asyncio.run(scenario())

"""The simulation's data: scenarios, simulated nodes and the in-memory log that counts.

How this works and why: kept apart from the event loop (simulation.py) and the checks
(invariants.py) so both can import them without importing each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from odradek.raft import (
    MemoryElectionStore,
    MemoryRaftLog,
    MemorySnapshotStore,
    RaftNode,
    SnapshotId,
)
from odradek.raft.disk_log import DiskRaftLog
from odradek.raft.log import LogEntry

INITIAL_DIGEST = b"\x00" * 8


class SimulationFailure(AssertionError):
    pass


@dataclass
class Scenario:
    seed: int
    voters: int = 3
    observer: bool = True
    chaos_ms: int = 25_000
    calm_ms: int = 12_000
    drop_probability: float = 0.03
    duplicate_probability: float = 0.02
    reorder_probability: float = 0.05
    crash_interval_ms: tuple[int, int] = (800, 3000)
    client_interval_ms: tuple[int, int] = (20, 150)
    snapshot_interval_ms: tuple[int, int] = (500, 2500)
    # Every node keeps its log in a DiskRaftLog (real v2 batches, files in a temp dir).
    disk: bool = False
    # Nodes do not fsync inside a step: they ask, and the fsync completes a while later
    # (as the driver's worker thread does), with truncations and crashes in between.
    split_flush: bool = False


class CountingLog(MemoryRaftLog):
    """MemoryRaftLog that counts the repairs, to show a run exercised them."""

    def __init__(self) -> None:
        super().__init__()
        self.truncated_entries = 0
        self.snapshot_installs = 0

    def truncate_to(self, offset: int) -> None:
        self.truncated_entries += self.end_offset - offset
        super().truncate_to(offset)

    def reset_to(self, snapshot_id: SnapshotId) -> None:
        self.snapshot_installs += 1
        super().reset_to(snapshot_id)


class CountingDiskLog(DiskRaftLog):
    """DiskRaftLog with CountingLog's counters, ``entry_at`` for the checks, and an
    honest ``crash()``: the files are reopened (recovery runs) and what was not flushed
    is cut, as a power cut would lose it."""

    truncated_entries = 0
    snapshot_installs = 0

    @classmethod
    def create(cls, directory: Path) -> CountingDiskLog:
        log = cls.open(directory)
        assert isinstance(log, CountingDiskLog)
        return log

    def truncate_to(self, offset: int) -> None:
        self.truncated_entries += self.end_offset - offset
        super().truncate_to(offset)

    def reset_to(self, snapshot_id: SnapshotId) -> None:
        self.snapshot_installs += 1
        super().reset_to(snapshot_id)

    def entry_at(self, offset: int) -> LogEntry:
        header = self._header_at(offset)
        assert header is not None, offset
        return self.read(header.base_offset, 1)[0]

    def crash(self) -> None:
        flushed = self.flushed_offset
        for segment in self.storage_log.segments:
            segment.close()  # the process is gone; nothing is flushed or closed cleanly
        reopened = DiskRaftLog.open(self.storage_log.directory)
        # Test-only: the node keeps this object, so it takes over the reopened state.
        counters = (self.truncated_entries, self.snapshot_installs)
        self.__dict__.update(reopened.__dict__)
        self.truncated_entries, self.snapshot_installs = counters
        if self.end_offset > flushed:
            DiskRaftLog.truncate_to(self, flushed)  # the power cut: unflushed bytes lost


def entry_digest(previous: bytes, epoch: int, payload: bytes) -> bytes:
    hasher = hashlib.blake2b(previous, digest_size=8)
    hasher.update(epoch.to_bytes(8, "big"))
    hasher.update(payload)
    return hasher.digest()


@dataclass
class SimNode:
    node_id: int
    clock_offset_ms: float
    clock_rate: float
    log: CountingLog | CountingDiskLog = field(default_factory=CountingLog)
    store: MemoryElectionStore = field(default_factory=MemoryElectionStore)
    snapshots: MemorySnapshotStore = field(default_factory=MemorySnapshotStore)
    raft: RaftNode | None = None
    incarnation: int = 0
    tick_generation: int = 0
    tick_at: float = float("inf")
    # The state machine: next offset to apply and the digest of everything before it.
    applied_offset: int = 0
    digest: bytes = INITIAL_DIGEST
    max_epoch: int = 0
    verified_offset: int = 0  # committed entries below this were checked
    # A stop-the-world pause (GC, VM steal): nothing runs until then, messages queue up,
    # and the clock keeps going, so the node wakes up with every timer expired.
    paused_until: float = 0.0
    # A flush prepared and under way (split_flush runs): completes with a "flushed" event.
    pending_flush: object | None = None

    def local_ms(self, now: float) -> int:
        return int(self.clock_offset_ms + now * self.clock_rate)

    def global_time_of(self, local_ms: int) -> float:
        return (local_ms - self.clock_offset_ms) / self.clock_rate + 1e-6

"""Snapshots of the replicated state (KIP-630): the injected ``SnapshotStore``.

How this works and why: the state machine periodically hands the node a payload that
stands for every committed entry below some offset; the node stores it as snapshot
``(end_offset, epoch)`` (``epoch`` being the epoch of the entry at ``end_offset - 1``) and
may then delete the log below it. A follower that has fallen behind the leader's log
start gets the snapshot's id in the Fetch response and copies it with FetchSnapshot in
chunks: ``begin`` → ``write_chunk`` at increasing positions → ``complete``. Only complete
snapshots are listed; a partial one never survives a restart.

``FileSnapshotStore`` keeps Kafka's layout in the metadata log dir: complete snapshots
are ``<20-digit end offset>-<10-digit epoch>.checkpoint``; one being written is the same
name plus ``.part``, fsynced and renamed when complete, then the directory is fsynced.
Leftover ``.part`` files are deleted when the store opens. The payload is opaque bytes
(Kafka's are record batches; that encoding is the state machine's business).

``MemorySnapshotStore`` is the simulation's: complete snapshots survive a simulated
crash, partial ones do not (``crash()``).

Concurrency: one owner; blocking file I/O per call.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Protocol

from odradek.raft.election_store import fsync_directory
from odradek.raft.log import SnapshotId

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
# Snapshots kept after a new one is made: the newest plus one that a follower may still
# be copying; older ones only cost disk.
SNAPSHOTS_RETAINED = 2


class SnapshotStore(Protocol):
    def list(self) -> list[SnapshotId]:
        """Complete snapshots, oldest first."""
        ...

    def latest(self) -> SnapshotId | None: ...
    def create(self, snapshot_id: SnapshotId, payload: bytes) -> None: ...
    def size(self, snapshot_id: SnapshotId) -> int | None:
        """Bytes of a complete snapshot, None when there is no such snapshot."""
        ...

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes: ...
    def read(self, snapshot_id: SnapshotId) -> bytes: ...
    def begin(self, snapshot_id: SnapshotId) -> None: ...
    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> int:
        """Append ``data`` at ``position`` of a partial snapshot; returns the new length."""
        ...

    def complete(self, snapshot_id: SnapshotId) -> None: ...
    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Delete complete snapshots older than ``snapshot_id`` beyond SNAPSHOTS_RETAINED."""
        ...


class MemorySnapshotStore:
    def __init__(self) -> None:
        self._complete: dict[SnapshotId, bytes] = {}
        self._partial: dict[SnapshotId, bytearray] = {}

    def list(self) -> list[SnapshotId]:
        return sorted(self._complete)

    def latest(self) -> SnapshotId | None:
        return max(self._complete) if self._complete else None

    def create(self, snapshot_id: SnapshotId, payload: bytes) -> None:
        self._complete[snapshot_id] = bytes(payload)

    def size(self, snapshot_id: SnapshotId) -> int | None:
        payload = self._complete.get(snapshot_id)
        return None if payload is None else len(payload)

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        return self._complete[snapshot_id][position : position + max_bytes]

    def read(self, snapshot_id: SnapshotId) -> bytes:
        return self._complete[snapshot_id]

    def begin(self, snapshot_id: SnapshotId) -> None:
        self._partial[snapshot_id] = bytearray()

    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> int:
        partial = self._partial[snapshot_id]
        assert position == len(partial), (position, len(partial))
        partial += data
        return len(partial)

    def complete(self, snapshot_id: SnapshotId) -> None:
        self._complete[snapshot_id] = bytes(self._partial.pop(snapshot_id))

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        older = [other for other in sorted(self._complete) if other < snapshot_id]
        for other in older[: max(0, len(older) - (SNAPSHOTS_RETAINED - 1))]:
            del self._complete[other]

    def crash(self) -> None:
        self._partial.clear()


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


class FileSnapshotStore:
    def __init__(self, log_dir: Path) -> None:
        self._dir = log_dir
        for leftover in log_dir.glob("*" + PARTIAL_SUFFIX):
            leftover.unlink()

    def _path(self, snapshot_id: SnapshotId) -> Path:
        return self._dir / snapshot_file_name(snapshot_id)

    def _partial_path(self, snapshot_id: SnapshotId) -> Path:
        return self._dir / (snapshot_file_name(snapshot_id) + ".part")

    def list(self) -> list[SnapshotId]:
        found = []
        for path in self._dir.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append(SnapshotId(end_offset=int(match[1]), epoch=int(match[2])))
        return sorted(found)

    def latest(self) -> SnapshotId | None:
        snapshots = self.list()
        return snapshots[-1] if snapshots else None

    def create(self, snapshot_id: SnapshotId, payload: bytes) -> None:
        self.begin(snapshot_id)
        self.write_chunk(snapshot_id, 0, payload)
        self.complete(snapshot_id)

    def size(self, snapshot_id: SnapshotId) -> int | None:
        try:
            return self._path(snapshot_id).stat().st_size
        except FileNotFoundError:
            return None

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        with open(self._path(snapshot_id), "rb") as file:
            file.seek(position)
            return file.read(max_bytes)

    def read(self, snapshot_id: SnapshotId) -> bytes:
        return self._path(snapshot_id).read_bytes()

    def begin(self, snapshot_id: SnapshotId) -> None:
        self._partial_path(snapshot_id).write_bytes(b"")

    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> int:
        path = self._partial_path(snapshot_id)
        with open(path, "r+b") as file:
            file.seek(0, os.SEEK_END)
            assert file.tell() == position, (file.tell(), position)
            file.write(data)
            return file.tell()

    def complete(self, snapshot_id: SnapshotId) -> None:
        partial = self._partial_path(snapshot_id)
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, self._path(snapshot_id))
        fsync_directory(self._dir)

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        older = [other for other in self.list() if other < snapshot_id]
        for other in older[: max(0, len(older) - (SNAPSHOTS_RETAINED - 1))]:
            self._path(other).unlink()
        fsync_directory(self._dir)

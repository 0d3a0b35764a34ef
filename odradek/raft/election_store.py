"""Durable election state: the ``quorum-state`` file (and an in-memory twin).

How this works and why: a voter must never vote twice in one epoch and must never go
back to an older epoch, even across a crash, or two leaders could be elected for the
same epoch. So ``QuorumState`` writes ``(epoch, voted_id, leader_id)`` through an
``ElectionStore`` *before* it switches roles in memory. ``FileElectionStore`` keeps it
where Kafka does, in ``<metadata log dir>/quorum-state``, in Kafka's JSON shape::

    {"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

Writes are atomic: ``quorum-state.tmp`` is written and fsynced, renamed over the file,
and the directory is fsynced so the rename is durable. A crash leaves the old or the new
file whole. A damaged file (torn by something else, garbage, wrong types) raises
``QuorumStateError`` naming the file and the problem: the node must not guess its vote.
A missing file means a fresh node (epoch 0, no vote, no leader).

Concurrency: one owner (the node's event loop or thread); each call does its small
blocking I/O from start to end.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 0
# Kafka's quorum-state file is a few hundred bytes; anything far larger is not one.
QUORUM_STATE_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int
    voted_id: int | None = None
    leader_id: int | None = None

    def __post_init__(self) -> None:
        assert self.epoch >= 0, self


class ElectionStore(Protocol):
    def read(self) -> ElectionState: ...
    def write(self, state: ElectionState) -> None: ...


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be trusted (operator must look at it)."""


class MemoryElectionStore:
    """The simulation's store: survives a simulated crash because the test keeps it."""

    def __init__(self) -> None:
        self._state = ElectionState(epoch=0)
        self.writes = 0

    def read(self) -> ElectionState:
        return self._state

    def write(self, state: ElectionState) -> None:
        self._state = state
        self.writes += 1


class FileElectionStore:
    def __init__(self, log_dir: Path, voters: frozenset[int], cluster_id: str = "") -> None:
        self._dir = log_dir
        self._path = log_dir / QUORUM_STATE_FILE
        self._voters = voters
        self._cluster_id = cluster_id

    @property
    def path(self) -> Path:
        return self._path

    def read(self) -> ElectionState:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return ElectionState(epoch=0)
        if len(raw) > QUORUM_STATE_MAX_BYTES:
            raise QuorumStateError(f"{self._path}: {len(raw)} bytes is too large")
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise QuorumStateError(f"{self._path}: not valid JSON ({error})") from None
        if not isinstance(document, dict):
            raise QuorumStateError(f"{self._path}: expected a JSON object")
        version = document.get("data_version")
        if version != DATA_VERSION:
            raise QuorumStateError(f"{self._path}: unsupported data_version {version!r}")
        epoch = _int_field(self._path, document, "leaderEpoch")
        leader_id = _int_field(self._path, document, "leaderId")
        voted_id = _int_field(self._path, document, "votedId")
        if epoch < 0 or leader_id < -1 or voted_id < -1:
            raise QuorumStateError(f"{self._path}: negative epoch or id")
        return ElectionState(
            epoch=epoch,
            voted_id=None if voted_id == -1 else voted_id,
            leader_id=None if leader_id == -1 else leader_id,
        )

    def write(self, state: ElectionState) -> None:
        document = {
            "clusterId": self._cluster_id,
            "leaderId": -1 if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": -1 if state.voted_id is None else state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": voter} for voter in sorted(self._voters)],
            "data_version": DATA_VERSION,
        }
        data = json.dumps(document, separators=(",", ":")).encode("utf-8")
        write_atomically(self._path, data)
        assert self.read() == state, "quorum-state read back differs from what was written"


def _int_field(path: Path, document: dict[str, object], name: str) -> int:
    value = document.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise QuorumStateError(f"{path}: field {name!r} is {value!r}, expected an integer")
    return value


def write_atomically(path: Path, data: bytes) -> None:
    """tmp + fsync + rename + directory fsync: a crash leaves the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""KRaft: the sans-IO consensus core of the metadata quorum (see node.py to start)."""

from odradek.raft.config import RaftConfig
from odradek.raft.election_store import (
    ElectionState,
    ElectionStore,
    FileElectionStore,
    MemoryElectionStore,
    QuorumStateError,
)
from odradek.raft.log import LogEntry, MemoryRaftLog, OffsetAndEpoch, RaftLog, SnapshotId
from odradek.raft.messages import Inbound, Outbound
from odradek.raft.node import (
    BackPressureError,
    CommitEvent,
    CommittedEntries,
    NotLeaderError,
    QuorumDescription,
    RaftNode,
    SnapshotLoaded,
)
from odradek.raft.snapshots import FileSnapshotStore, MemorySnapshotStore, SnapshotStore

__all__ = [
    "BackPressureError",
    "CommitEvent",
    "CommittedEntries",
    "ElectionState",
    "ElectionStore",
    "FileElectionStore",
    "FileSnapshotStore",
    "Inbound",
    "LogEntry",
    "MemoryElectionStore",
    "MemoryRaftLog",
    "MemorySnapshotStore",
    "NotLeaderError",
    "OffsetAndEpoch",
    "Outbound",
    "QuorumDescription",
    "QuorumStateError",
    "RaftConfig",
    "RaftLog",
    "RaftNode",
    "SnapshotId",
    "SnapshotLoaded",
    "SnapshotStore",
]

"""KRaft: the sans-IO consensus core of the metadata quorum (KIP-595, KIP-630, KIP-996).

How this works and why: one ``RaftNode`` per process replicates the metadata log. It
never does I/O on its own: a driver (the asyncio adapter, or tests/raft/simulation.py)
hands it what arrived and when, and sends what it returns::

    node = RaftNode(node_id, voters, log, election_store, snapshot_store, config,
                    random.Random(), now_ms)
    outbound = node.handle(Inbound(source_id, correlation_id, message), now_ms)
    outbound = node.tick(now_ms)              # whenever node.next_deadline_ms() passes
    last = node.append(batch, now_ms, count)  # leader only; last offset of the entry
    events = node.poll_committed()            # CommittedEntries / SnapshotLoaded, in order
    node.create_snapshot(end_offset, payload) # state machine's snapshot; trims the log
    outbound = node.resign(now_ms)            # before shutdown: EndQuorumEpoch
    node.describe_quorum(now_ms)              # DescribeQuorum's partition data

An entry is one record batch taking ``count`` offsets; log.py states the payload
contract (v2 batches, stamped by the leader's log, byte-identical on followers).

Injected: the log (``RaftLog``; ``MemoryRaftLog`` here, ``disk_log.DiskRaftLog`` over
storage.Log and its leader-epoch cache for real), the LeaderChange builder
(``control_entry``; ``control_records.leader_change_entry`` for real batches), the
election state (``FileElectionStore`` writes ``quorum-state``), the snapshots
(``FileSnapshotStore`` writes ``*.checkpoint``), the config
(``RaftConfig.from_properties`` reads ``controller.quorum.*``), a ``random.Random`` and
the clock (``now_ms`` arguments). Modules, one concern each:
messages, config, log, disk_log, control_records, election_store, snapshots, roles,
leader_state, quorum_state (the only place roles change), core (shared helpers),
election, replication, node.
"""

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

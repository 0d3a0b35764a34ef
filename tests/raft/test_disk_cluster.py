"""A quorum on DiskRaftLogs with real batches: multi-offset entries end to end.

Three RaftNodes each keep their log in a ``DiskRaftLog`` and append the production
LeaderChange control batch; the harness delivers messages in memory. Checked: append
returns an entry's last offset, replicas are byte-identical, a node restarts from its
files, a follower installs a snapshot into its disk log (``reset_to``), and a fetch
offset inside an entry is refused rather than read.
"""

from __future__ import annotations

import random
from pathlib import Path

from kio.schema.errors import ErrorCode

from odradek.raft import CommittedEntries, Inbound, LogEntry, MemoryRaftLog, RaftNode
from odradek.raft.control_records import decode_leader_change, leader_change_entry
from odradek.raft.disk_log import DiskRaftLog
from odradek.raft.messages import FetchRequest, FetchResponse
from tests.raft.harness import Cluster
from tests.raft.test_disk_log import READ_ALL_BYTES, data_batch


class DiskCluster(Cluster):
    def __init__(self, voters: list[int], root: Path) -> None:
        super().__init__(voters, first=voters[0])
        self.root = root
        self.disks = {node_id: DiskRaftLog.open(root / str(node_id)) for node_id in voters}

    def restart(self, node_id: int) -> RaftNode:
        member = self.members[node_id]
        member.node = RaftNode(
            node_id,
            self.voters,
            self.disks[node_id],
            member.store,
            member.snapshots,
            member.config,
            random.Random(node_id),
            self.now,
            control_entry=leader_change_entry,
        )
        return member.node

    def crash_and_restart(self, node_id: int) -> RaftNode:
        """The process dies (files stay as written, nothing closed) and starts again."""
        self.disks[node_id].storage_log.active_segment.close()
        self.disks[node_id] = DiskRaftLog.open(self.root / str(node_id))
        return self.restart(node_id)

    def contents(self, node_id: int) -> list[LogEntry]:
        disk = self.disks[node_id]
        return disk.read(disk.start_offset, READ_ALL_BYTES)

    def close(self) -> None:
        for disk in self.disks.values():
            disk.close()


def test_multi_offset_entries_replicate_byte_identical_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    cluster = DiskCluster([1, 2, 3], tmp_path).start()
    cluster.advance(300)
    leader = cluster.node(1)
    assert leader.is_leader
    last_offsets = [
        leader.append(data_batch(count, f"m{count}"), cluster.now, count) for count in (1, 5, 3)
    ]
    assert last_offsets == [1, 6, 9]  # LeaderChange at 0, then 1, 2-6, 7-9
    cluster.advance(500)
    for node_id in (1, 2, 3):
        assert cluster.node(node_id).high_watermark == 10
    assert cluster.contents(2) == cluster.contents(1) == cluster.contents(3)
    control = cluster.contents(2)[0]
    assert control.control and control.epoch == leader.epoch
    message = decode_leader_change(control.payload)
    assert message.leader_id == 1 and [v.voter_id for v in message.voters] == [1, 2, 3]
    assert 1 in [v.voter_id for v in message.granting_voters]
    committed = [
        (entry.offset, entry.count)
        for event in cluster.node(3).poll_committed()
        if isinstance(event, CommittedEntries)
        for entry in event.entries
    ]
    assert committed == [(0, 1), (1, 1), (2, 5), (7, 3)]

    cluster.crash_and_restart(2)
    cluster.advance(300)
    assert cluster.disks[2].end_offset == 10
    assert leader.append(data_batch(2, "after"), cluster.now, 2) == 11
    cluster.advance(500)
    assert cluster.node(2).high_watermark == 12
    assert cluster.contents(2) == cluster.contents(1)
    cluster.close()


def test_follower_installs_a_snapshot_into_its_disk_log(tmp_path: Path) -> None:
    cluster = DiskCluster([1, 2, 3], tmp_path).start()
    cluster.advance(300)
    leader = cluster.node(1)
    cluster.cut(1, 3)
    cluster.cut(2, 3)
    for index in range(8):
        leader.append(data_batch(index % 4 + 1, f"s{index}"), cluster.now, index % 4 + 1)
    cluster.advance(500)
    leader.poll_committed()
    snapshot_id = leader.create_snapshot(leader.high_watermark, b"S" * 300)
    assert cluster.disks[1].start_offset == snapshot_id.end_offset == 21
    cluster.heal()
    cluster.advance(2000)
    follower_log = cluster.disks[3]
    assert (follower_log.start_offset, follower_log.start_epoch) == (21, snapshot_id.epoch)
    assert cluster.node(3).high_watermark == leader.high_watermark
    cluster.close()


def test_a_fetch_offset_inside_an_entry_gets_invalid_request() -> None:
    cluster = Cluster([1, 2, 3], first=1).start()
    cluster.advance(300)
    leader = cluster.node(1)
    assert leader.append(b"three records", cluster.now, 3) == 3  # offsets 1-3
    log = cluster.members[1].log
    assert isinstance(log, MemoryRaftLog) and not log.is_boundary(2)
    request = FetchRequest(
        cluster_id=None,
        replica_id=2,
        replica_epoch=-1,
        current_leader_epoch=leader.epoch,
        fetch_offset=2,
        last_fetched_epoch=leader.epoch,
        log_start_offset=0,
        partition_max_bytes=1000,
    )
    replies = leader.handle(Inbound(2, 99, request), cluster.now)
    response = next(o.message for o in replies if o.correlation_id == 99)
    assert isinstance(response, FetchResponse)
    assert response.error_code == ErrorCode.invalid_request
    assert leader.is_leader and leader.high_watermark <= 1

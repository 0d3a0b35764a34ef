"""The quorum-state file, the snapshot files, the leader's HW rule and the config."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from odradek.raft import (
    FileElectionStore,
    FileSnapshotStore,
    Inbound,
    MemoryRaftLog,
    MemorySnapshotStore,
    QuorumStateError,
    RaftConfig,
    RaftNode,
    SnapshotId,
)
from odradek.raft.config import ConfigError
from odradek.raft.election_store import ElectionState
from odradek.raft.leader_state import LeaderState
from odradek.raft.messages import VoteRequest

VOTERS = frozenset({1, 2, 3})


def test_quorum_state_round_trip_in_kafkas_shape(tmp_path: Path) -> None:
    store = FileElectionStore(tmp_path, VOTERS)
    assert store.read() == ElectionState(0)  # a fresh node
    store.write(ElectionState(7, voted_id=2, leader_id=None))
    document = json.loads((tmp_path / "quorum-state").read_text())
    assert document["leaderEpoch"] == 7
    assert document["votedId"] == 2
    assert document["leaderId"] == -1
    assert document["data_version"] == 0
    assert document["currentVoters"] == [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}]
    assert FileElectionStore(tmp_path, VOTERS).read() == ElectionState(7, 2, None)
    assert not (tmp_path / "quorum-state.tmp").exists()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\xff garbage",
        b'{"leaderId":1,"leaderEpoch":3,"vot',  # torn
        b"[1, 2, 3]",
        b'{"leaderId":1,"leaderEpoch":"3","votedId":-1,"data_version":0}',
        b'{"leaderId":1,"leaderEpoch":3,"votedId":-1,"data_version":9}',
        b'{"leaderId":1,"leaderEpoch":-3,"votedId":-1,"data_version":0}',
        b'{"leaderEpoch":3,"votedId":-1,"data_version":0}',
    ],
)
def test_damaged_quorum_state_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "quorum-state").write_bytes(content)
    with pytest.raises(QuorumStateError, match="quorum-state"):
        FileElectionStore(tmp_path, VOTERS).read()


def test_node_refuses_to_start_on_a_damaged_quorum_state(tmp_path: Path) -> None:
    (tmp_path / "quorum-state").write_bytes(b"{not json")
    with pytest.raises(QuorumStateError):
        RaftNode(
            1,
            VOTERS,
            MemoryRaftLog(),
            FileElectionStore(tmp_path, VOTERS),
            MemorySnapshotStore(),
            RaftConfig(),
            random.Random(0),
            0,
        )


def test_vote_is_on_disk_before_the_response_leaves(tmp_path: Path) -> None:
    store = FileElectionStore(tmp_path, VOTERS)
    node = RaftNode(
        1, VOTERS, MemoryRaftLog(), store, MemorySnapshotStore(), RaftConfig(), random.Random(0), 0
    )
    request = VoteRequest(
        cluster_id=None,
        voter_id=1,
        replica_epoch=4,
        replica_id=3,
        last_offset_epoch=0,
        last_offset=0,
        pre_vote=False,
    )
    replies = node.handle(Inbound(3, 1, request), 0)
    assert any(o.destination_id == 3 for o in replies)
    on_disk = json.loads((tmp_path / "quorum-state").read_text())
    assert (on_disk["leaderEpoch"], on_disk["votedId"]) == (4, 3)


def test_snapshot_files(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path)
    first = SnapshotId(end_offset=10, epoch=2)
    store.create(first, b"0123456789abc")
    assert (tmp_path / "00000000000000000010-0000000002.checkpoint").exists()
    assert store.list() == [first] and store.size(first) == 13
    assert store.read_chunk(first, 4, 3) == b"456"
    second = SnapshotId(end_offset=20, epoch=3)
    store.begin(second)
    assert store.write_chunk(second, 0, b"abc") == 3
    assert store.list() == [first]  # partial snapshots are not listed
    assert FileSnapshotStore(tmp_path).list() == [first]  # and are removed on open
    assert not list(tmp_path.glob("*.part"))
    store.begin(second)
    store.write_chunk(second, 0, b"abc")
    store.write_chunk(second, 3, b"def")
    store.complete(second)
    assert store.latest() == second and store.read(second) == b"abcdef"
    third = SnapshotId(end_offset=30, epoch=3)
    store.create(third, b"x")
    store.delete_before(third)
    assert store.list() == [second, third]  # SNAPSHOTS_RETAINED = 2


def test_leader_high_watermark_waits_for_its_epoch_and_never_goes_back() -> None:
    election = ElectionState(5, 1, 1)
    leader = LeaderState(election, 1, VOTERS, epoch_start_offset=10, elected_ms=0, high_watermark=4)
    # A majority has the old epoch's entries up to 10, but not the LeaderChange at 10.
    leader.record_fetch(2, 10, 11, 1)
    assert not leader.update_high_watermark(11)
    assert leader.high_watermark == 4
    leader.record_fetch(2, 11, 11, 2)
    assert leader.update_high_watermark(11)
    assert leader.high_watermark == 11
    leader.record_fetch(2, 8, 11, 3)  # a delayed, older fetch
    leader.update_high_watermark(11)
    assert leader.high_watermark == 11


def test_config_from_kafka_properties() -> None:
    config = RaftConfig.from_properties(
        {
            "controller.quorum.election.timeout.ms": "1500",
            "controller.quorum.fetch.timeout.ms": " 3000 ",
            "controller.quorum.election.backoff.max.ms": "500",
            "unrelated.key": "x",
        }
    )
    assert (config.election_timeout_ms, config.fetch_timeout_ms) == (1500, 3000)
    assert config.election_backoff_max_ms == 500
    assert RaftConfig().election_timeout_ms == 1000
    assert RaftConfig().fetch_timeout_ms == 2000
    assert RaftConfig().election_backoff_max_ms == 1000
    with pytest.raises(ConfigError):
        RaftConfig.from_properties({"controller.quorum.fetch.timeout.ms": "soon"})
    with pytest.raises(ConfigError):
        RaftConfig(election_timeout_ms=0)

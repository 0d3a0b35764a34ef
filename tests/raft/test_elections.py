"""Vote rules, role transitions and resignation of the KRaft core."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from odradek.raft import (
    Inbound,
    MemoryElectionStore,
    MemoryRaftLog,
    MemorySnapshotStore,
    RaftConfig,
    RaftNode,
)
from odradek.raft.election_store import ElectionState
from odradek.raft.messages import EndQuorumEpochRequest, VoteRequest, VoteResponse
from odradek.raft.quorum_state import QuorumState
from odradek.raft.roles import UnattachedState
from tests.raft.harness import Cluster, entries


def make_node(
    log_epochs: tuple[int, ...] = (), epoch: int = 0, store: MemoryElectionStore | None = None
) -> RaftNode:
    log = MemoryRaftLog()
    log.append(entries(*log_epochs))
    log.flush()
    store = store or MemoryElectionStore()
    if epoch:
        store.write(ElectionState(epoch))
    return RaftNode(
        1, [1, 2, 3], log, store, MemorySnapshotStore(), RaftConfig(), random.Random(0), 0
    )


def vote_request(
    epoch: int,
    candidate: int = 2,
    last_epoch: int = 0,
    end: int = 0,
    pre_vote: bool = False,
    voter: int = 1,
) -> Inbound:
    request = VoteRequest(
        cluster_id=None,
        voter_id=voter,
        replica_epoch=epoch,
        replica_id=candidate,
        last_offset_epoch=last_epoch,
        last_offset=end,
        pre_vote=pre_vote,
    )
    return Inbound(candidate, 7, request)


def answer(node: RaftNode, inbound: Inbound) -> VoteResponse:
    replies = [o for o in node.handle(inbound, 1) if o.correlation_id == 7]
    assert len(replies) == 1
    message = replies[0].message
    assert isinstance(message, VoteResponse)
    return message


def test_vote_is_persisted_before_it_is_granted() -> None:
    store = MemoryElectionStore()
    node = make_node(store=store)
    response = answer(node, vote_request(epoch=1))
    assert response.vote_granted and response.error_code == ErrorCode.none
    assert store.read() == ElectionState(1, voted_id=2)
    assert node.role_name == "Voted"


# Our log ends at offset 5 with epoch 2: (2, 5).
@pytest.mark.parametrize(
    ("last_epoch", "end", "granted"),
    [
        (1, 10, False),  # longer, but an older last epoch
        (2, 4, False),  # same epoch, shorter
        (2, 5, True),  # equal
        (2, 9, True),  # same epoch, longer
        (3, 1, True),  # newer last epoch wins even when shorter
    ],
)
def test_vote_needs_an_up_to_date_log(last_epoch: int, end: int, granted: bool) -> None:
    node = make_node(log_epochs=(1, 1, 2, 2, 2), epoch=2)
    response = answer(node, vote_request(epoch=3, last_epoch=last_epoch, end=end))
    assert response.vote_granted is granted
    assert node.epoch == 3  # the request's epoch is adopted either way


def test_one_vote_per_epoch_even_across_a_restart() -> None:
    store = MemoryElectionStore()
    node = make_node(store=store)
    assert answer(node, vote_request(epoch=1, candidate=2)).vote_granted
    assert not answer(node, vote_request(epoch=1, candidate=3)).vote_granted
    assert answer(node, vote_request(epoch=1, candidate=2)).vote_granted  # idempotent
    restarted = make_node(store=store)
    assert restarted.role_name == "Voted"
    assert not answer(restarted, vote_request(epoch=1, candidate=3)).vote_granted


def test_pre_vote_changes_neither_epoch_nor_vote() -> None:
    store = MemoryElectionStore()
    node = make_node(store=store)
    writes = store.writes
    response = answer(node, vote_request(epoch=1, pre_vote=True))
    assert response.vote_granted
    assert node.epoch == 0 and store.writes == writes
    assert node.role_name == "Unattached"
    # A real vote afterwards is still free.
    assert answer(node, vote_request(epoch=1, candidate=3)).vote_granted


def test_stale_epoch_is_fenced() -> None:
    node = make_node(epoch=4)
    response = answer(node, vote_request(epoch=3))
    assert not response.vote_granted
    assert response.error_code == ErrorCode.fenced_leader_epoch
    assert response.leader_epoch == 4


def test_follower_with_a_live_leader_refuses_pre_votes() -> None:
    cluster = Cluster([1, 2, 3], first=1).start()
    cluster.advance(200)
    assert cluster.leader() is cluster.node(1)
    follower = cluster.node(2)
    assert follower.role_name == "Follower"
    inbound = Inbound(
        3,
        7,
        vote_request(
            epoch=follower.epoch + 1, candidate=3, pre_vote=True, last_epoch=99, end=99
        ).message,
    )
    replies = [o.message for o in follower.handle(inbound, cluster.now) if o.correlation_id == 7]
    assert isinstance(replies[0], VoteResponse) and not replies[0].vote_granted


def test_illegal_transitions_are_assertions() -> None:
    quorum = QuorumState(1, frozenset({1, 2, 3}), MemoryElectionStore())
    quorum.initialize(UnattachedState(ElectionState(0), 0))
    with pytest.raises(AssertionError):
        quorum.to_leader(0, 0, 0)  # Unattached -> Leader skips the election
    quorum.to_prospective(10)
    with pytest.raises(AssertionError):
        quorum.to_resigned(0, (), 0)  # only a leader resigns


def test_store_failure_leaves_the_role_unchanged() -> None:
    class BrokenStore(MemoryElectionStore):
        def write(self, state: ElectionState) -> None:
            raise OSError("disk full")

    node = make_node(store=BrokenStore())
    with pytest.raises(OSError):
        node.handle(vote_request(epoch=1), 1)
    assert node.role_name == "Unattached" and node.epoch == 0


def test_single_voter_leads_and_commits_alone() -> None:
    log = MemoryRaftLog()
    node = RaftNode(
        1, [1], log, MemoryElectionStore(), MemorySnapshotStore(), RaftConfig(), random.Random(0), 0
    )
    node.tick(0)
    assert node.is_leader and node.epoch == 1
    offset = node.append(b"x", 0)
    node.tick(0)
    assert node.high_watermark == 0  # not flushed yet: linger
    node.tick(RaftConfig().append_linger_ms)
    assert node.high_watermark == offset + 1


def test_an_idle_single_voter_has_no_deadline_in_the_past_hours_later() -> None:
    """A lone leader with nothing to flush used to answer ``elected + 1 h``: after an
    hour of leadership that deadline lay in the past for ever, the driver never slept
    again and a `make serve` broker froze (found on a node left running 80 minutes)."""
    node = RaftNode(
        1,
        [1],
        MemoryRaftLog(),
        MemoryElectionStore(),
        MemorySnapshotStore(),
        RaftConfig(),
        random.Random(0),
        0,
    )
    node.tick(0)
    assert node.is_leader
    for now_ms in (0, 3_599_999, 3_600_001, 10 * 3_600_000):
        node.append(b"heartbeat", now_ms)
        node.tick(now_ms + RaftConfig().append_linger_ms)  # flushed: no timer left
        assert node.next_deadline_ms() > now_ms + RaftConfig().append_linger_ms


def test_resign_hands_over_without_waiting_for_the_fetch_timeout() -> None:
    cluster = Cluster([1, 2, 3], first=1).start()
    cluster.advance(200)
    leader = cluster.node(1)
    assert leader.is_leader
    epoch = leader.epoch
    cluster.enqueue(1, leader.resign(cluster.now))
    ends = [o for _, o in cluster.sent if isinstance(o.message, EndQuorumEpochRequest)]
    assert ends and all(o.message.preferred_candidates for o in ends)  # type: ignore[union-attr]
    # Followers have 200 s fetch timeouts, yet a new leader appears within a few ms.
    cluster.advance(50)
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.node_id != 1
    assert new_leader.epoch > epoch
    assert cluster.node(1).role_name == "Follower"


def test_restarted_leader_comes_back_resigned() -> None:
    cluster = Cluster([1, 2, 3], first=1).start()
    cluster.advance(200)
    assert cluster.node(1).is_leader
    restarted = cluster.restart(1)
    assert restarted.role_name == "Resigned"
    assert not restarted.is_leader


def test_leader_behind_a_voters_epoch_steps_down_on_its_pre_vote() -> None:
    # Voter 3 moved to epoch + 1 in an election that failed, while 1 kept leading with 2.
    # 3's pre-votes are refused (1 leads, 2 hears from it), so unless the leader adopts
    # 3's real epoch, 3 would never follow anyone again.
    cluster = Cluster([1, 2, 3], first=1).start()
    cluster.advance(200)
    leader = cluster.node(1)
    epoch = leader.epoch
    stray = Inbound(2, 7, vote_request(epoch=epoch + 1, candidate=2, voter=3).message)
    cluster.node(3).handle(stray, cluster.now)
    assert cluster.node(3).epoch == epoch + 1
    pre_vote = Inbound(3, 8, vote_request(epoch=epoch + 2, candidate=3, pre_vote=True).message)
    cluster.enqueue(1, leader.handle(pre_vote, cluster.now))
    assert leader.epoch == epoch + 1 and not leader.is_leader
    cluster.advance(5_000)
    new_leader = cluster.leader()
    assert new_leader is not None
    for node_id in (1, 2, 3):
        assert cluster.node(node_id).epoch == new_leader.epoch


def test_requests_from_another_cluster_are_refused() -> None:
    node = RaftNode(
        1,
        [1, 2, 3],
        MemoryRaftLog(),
        MemoryElectionStore(),
        MemorySnapshotStore(),
        RaftConfig(),
        random.Random(0),
        0,
        cluster_id="ours",
    )
    request = VoteRequest(
        cluster_id="theirs",
        voter_id=1,
        replica_epoch=1,
        replica_id=2,
        last_offset_epoch=0,
        last_offset=0,
        pre_vote=False,
    )
    replies = [o.message for o in node.handle(Inbound(2, 7, request), 1) if o.correlation_id == 7]
    assert isinstance(replies[0], VoteResponse)
    assert replies[0].error_code == ErrorCode.inconsistent_cluster_id
    assert not replies[0].vote_granted and node.epoch == 0


@pytest.mark.parametrize("leader_id", [7, -1, 1])
def test_end_quorum_epoch_from_a_non_voter_or_itself_changes_nothing(leader_id: int) -> None:
    """Regression (found fuzzing the controller plane): EndQuorumEpoch naming a node that
    is not another voter, with an epoch far in the future, moved the single voter to
    epoch 2^31-1, out of leadership for good (no election can go past that epoch)."""
    node = RaftNode(
        1,
        [1],
        MemoryRaftLog(),
        MemoryElectionStore(),
        MemorySnapshotStore(),
        RaftConfig(),
        random.Random(1),
        0,
        cluster_id="c",
    )
    node.tick(0)
    assert node.is_leader
    epoch = node.epoch
    request = EndQuorumEpochRequest(
        cluster_id="c", leader_id=leader_id, leader_epoch=2**31 - 1, preferred_candidates=(1,)
    )
    (out,) = node.handle(Inbound(leader_id, 5, request), 10)
    assert out.message.error_code == ErrorCode.inconsistent_voter_set
    assert node.is_leader and node.epoch == epoch


def test_a_vote_addressed_to_another_voter_is_an_invalid_voter_key() -> None:
    """KIP-853: Vote and BeginQuorumEpoch (v1+) name the voter they are for; a request
    meant for another voter changes nothing here (-1, from v0, names none)."""
    node = make_node(epoch=3)
    refused = answer(node, vote_request(epoch=4, candidate=2, voter=3))
    assert refused.error_code == ErrorCode.invalid_voter_key and not refused.vote_granted
    assert node.epoch == 3
    unnamed = answer(node, vote_request(epoch=4, candidate=2, voter=-1))
    assert unnamed.error_code == ErrorCode.none and unnamed.vote_granted


def _silent_leader_cluster() -> Cluster:
    """Node 1 leads; 2 and 3 follow with Kafka's default fetch timeout (2 s) and long
    election timeouts, so which of them wins is decided by the timers alone."""
    cluster = Cluster([1, 2, 3], first=1)
    for node_id in (2, 3):
        cluster.members[node_id].config = RaftConfig(
            election_timeout_ms=1000 * node_id, fetch_timeout_ms=2000, request_timeout_ms=100
        )
    cluster.start()
    cluster.advance(200)
    assert cluster.node(1).is_leader
    return cluster


def test_a_leader_elected_after_its_predecessor_went_silent_knows_when_it_last_heard() -> None:
    cluster = _silent_leader_cluster()
    old_epoch = cluster.node(1).epoch
    cluster.advance(1000)  # steady fetching
    cluster.members[1].node = None  # kill -9: nothing more from node 1
    killed_at = cluster.now
    cluster.advance(10_000)
    leader = cluster.leader()
    assert leader is not None and leader.node_id in (2, 3)
    silent = leader.predecessor
    assert silent is not None and (silent.node_id, silent.epoch) == (1, old_epoch)
    # its last fetch answer came before the kill, at most one long-poll wait earlier
    fetch_wait = leader.config.fetch_max_wait_ms
    assert killed_at - fetch_wait - 100 <= silent.last_heard_ms <= killed_at
    assert cluster.node(5 - leader.node_id).predecessor is None  # the follower has none


def test_no_predecessor_after_a_resignation_nor_for_a_leader_that_followed_again() -> None:
    cluster = _silent_leader_cluster()
    cluster.enqueue(1, cluster.node(1).resign(cluster.now))
    cluster.advance(5000)
    leader = cluster.leader()
    assert leader is not None and leader.node_id != 1
    assert leader.predecessor is None  # it said it goes: a controlled hand-over
    # the next silent leader is this one; the winner remembers it, not node 1
    second = leader.node_id
    epoch = leader.epoch
    cluster.members[second].node = None
    cluster.advance(10_000)
    winner = cluster.leader()
    assert winner is not None and winner.node_id != second
    assert winner.predecessor is not None
    assert (winner.predecessor.node_id, winner.predecessor.epoch) == (second, epoch)

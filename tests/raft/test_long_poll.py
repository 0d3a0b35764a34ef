"""The leader's fetch long poll (Kafka's fetch purgatory), sans-IO.

* An idle quorum: each follower's fetch is parked for its max wait, so a follower sends
  about 2 fetches a second (max wait 500 ms), not one per idle interval; no election
  happens (a parked fetch is not a dead leader).
* A commit reaches the followers without waiting for the max wait: the parked fetches
  are released by the append (entries) and again by the high watermark moving.
* A parked fetch is answered at its max wait, by a lost leadership (with the error),
  when the same replica fetches again, and at once when it would tell the replica
  something: a replica that reports a high watermark below the leader's (KIP-1166), a
  fetch whose own arrival moved the high watermark, or max wait 0.
"""

from __future__ import annotations

import dataclasses
import itertools

from kio.schema.errors import ErrorCode

from odradek.raft import Inbound, Outbound, RaftConfig, RaftNode
from odradek.raft.leader_state import MAX_PARKED_FETCHES
from odradek.raft.messages import EndQuorumEpochRequest, FetchRequest, FetchResponse
from tests.raft.harness import Cluster

LONG_POLL = RaftConfig(
    election_timeout_ms=100_000,
    fetch_timeout_ms=200_000,
    request_timeout_ms=2000,
    fetch_max_wait_ms=500,
)
FIRST = RaftConfig(
    election_timeout_ms=10,
    election_backoff_max_ms=10,
    request_timeout_ms=2000,
    fetch_max_wait_ms=500,
)


def idle_cluster() -> tuple[Cluster, RaftNode]:
    cluster = Cluster([1, 2, 3], first=1)
    for member in cluster.members.values():
        member.config = FIRST if member.node_id == 1 else LONG_POLL
    cluster.start()
    cluster.advance(1000)
    leader = cluster.node(1)
    assert leader.is_leader
    assert all(cluster.node(i).high_watermark == leader.high_watermark for i in (2, 3))
    return cluster, leader


def fetches_from(cluster: Cluster, node_id: int, since: int) -> int:
    return sum(
        1
        for source, out in cluster.sent[since:]
        if source == node_id and isinstance(out.message, FetchRequest)
    )


def test_an_idle_quorum_fetches_about_twice_a_second_per_follower() -> None:
    cluster, leader = idle_cluster()
    epoch = leader.epoch
    mark = len(cluster.sent)
    cluster.advance(10_000)
    for follower in (2, 3):
        sent = fetches_from(cluster, follower, mark)
        assert 18 <= sent <= 22, (follower, sent)  # 10 s / 500 ms; it was 200 at 50 ms
        assert cluster.node(follower).role_name == "Follower"
    assert leader.is_leader and leader.epoch == epoch


def test_a_commit_reaches_the_followers_without_waiting_for_max_wait() -> None:
    cluster, leader = idle_cluster()
    last = leader.append(b"change", cluster.now)
    # The leader's own fsync lingers append.linger.ms (25 ms by default); far below the
    # 500 ms max wait the followers' parked fetches would otherwise sit out.
    cluster.advance(LONG_POLL.append_linger_ms + 5)
    assert leader.high_watermark > last
    for follower in (2, 3):
        node = cluster.node(follower)
        assert node.high_watermark == leader.high_watermark, (follower, node.high_watermark)


_CORRELATION_IDS = itertools.count(7000)


def park(leader: RaftNode, now: int, **overrides: int) -> tuple[int, list[Outbound]]:
    """A fetch from observer 9 at the leader's end; the correlation id and the outbox."""
    fields = {
        "replica_id": 9,
        "fetch_offset": leader.log_end_offset,
        "max_wait_ms": 300,
        "high_watermark": leader.high_watermark,
    }
    fields.update(overrides)
    request = FetchRequest(
        cluster_id=None,
        replica_epoch=-1,
        current_leader_epoch=leader.epoch,
        last_fetched_epoch=leader.log.last_fetched_epoch,
        log_start_offset=0,
        partition_max_bytes=1 << 20,
        **fields,
    )
    correlation_id = next(_CORRELATION_IDS)
    out = leader.handle(Inbound(fields["replica_id"], correlation_id, request), now)
    return correlation_id, out


def answer(out: list[Outbound], correlation_id: int) -> FetchResponse | None:
    for message in out:
        if message.correlation_id == correlation_id and isinstance(message.message, FetchResponse):
            return message.message
    return None


def test_a_parked_fetch_is_answered_empty_at_its_max_wait() -> None:
    cluster, leader = idle_cluster()
    now = cluster.now
    correlation_id, out = park(leader, now)
    assert answer(out, correlation_id) is None
    assert leader.next_deadline_ms() <= now + 300
    assert answer(leader.tick(now + 299), correlation_id) is None
    response = answer(leader.tick(now + 300), correlation_id)
    assert response is not None and response.error_code == ErrorCode.none
    assert response.records == () and response.high_watermark == leader.high_watermark


def test_a_parked_fetch_is_released_by_an_append() -> None:
    cluster, leader = idle_cluster()
    correlation_id, _ = park(leader, cluster.now)
    leader.append(b"news", cluster.now)
    response = answer(leader.tick(cluster.now), correlation_id)
    assert response is not None and [e.payload for e in response.records] == [b"news"]


def test_losing_leadership_answers_a_parked_fetch_with_the_error() -> None:
    cluster, leader = idle_cluster()
    correlation_id, _ = park(leader, cluster.now)
    response = answer(leader.resign(cluster.now), correlation_id)
    assert response is not None
    assert response.error_code == ErrorCode.not_leader_or_follower


def test_a_newer_fetch_from_the_same_replica_answers_the_parked_one() -> None:
    cluster, leader = idle_cluster()
    first, _ = park(leader, cluster.now)
    second, out = park(leader, cluster.now, max_wait_ms=301)
    assert first != second
    assert answer(out, first) is not None  # the replica gave up on it
    assert answer(leader.tick(cluster.now + 301), second) is not None


def test_fetches_that_have_news_for_the_replica_are_not_parked() -> None:
    cluster, leader = idle_cluster()
    now = cluster.now
    # KIP-1166: the replica reports a high watermark below the leader's.
    correlation_id, out = park(leader, now, high_watermark=leader.high_watermark - 1)
    assert answer(out, correlation_id) is not None
    # Max wait 0: the fetcher asked not to wait.
    correlation_id, out = park(leader, now, replica_id=10, max_wait_ms=0)
    assert answer(out, correlation_id) is not None
    # Not at the end: there are entries to send.
    leader.append(b"x", now)
    correlation_id, out = park(leader, now, replica_id=11, fetch_offset=leader.log_end_offset - 1)
    response = answer(out, correlation_id)
    assert response is not None and response.records


def test_parked_fetches_are_bounded() -> None:
    cluster, leader = idle_cluster()  # the two followers' fetches are parked already
    parked = 0
    for replica_id in range(100, 100 + MAX_PARKED_FETCHES):
        correlation_id, out = park(leader, cluster.now, replica_id=replica_id)
        if answer(out, correlation_id) is not None:
            break  # no room: answered at once
        parked += 1
    assert parked == MAX_PARKED_FETCHES - 2
    # Every one of them is answered at its max wait.
    released = leader.tick(cluster.now + 300)
    answered = {m.destination_id for m in released if isinstance(m.message, FetchResponse)}
    assert answered >= set(range(100, 100 + parked))


def test_a_resigning_leader_answers_parked_fetches_and_its_successor_takes_over_at_once() -> None:
    cluster, leader = idle_cluster()
    epoch = leader.epoch
    cluster.enqueue(1, leader.resign(cluster.now))
    cluster.advance(50)  # far below any election or fetch timeout of nodes 2 and 3
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.node_id == 2  # first of the successors
    assert new_leader.epoch == epoch + 1
    assert cluster.node(3).leader_id == 2


def test_a_prospective_does_not_go_back_to_a_leader_that_says_it_resigned() -> None:
    """Regression: the resigning leader answers the parked fetches NOT_LEADER_OR_FOLLOWER
    naming itself, in the same step as its EndQuorumEpoch. That answer is no news of a
    live leader: a follower already prospective (the EndQuorumEpoch came first) went back
    to following the old leader, counted it as live, and refused every pre-vote until
    its fetch timeout (the SIGTERM hand-over of tests/server/test_kraft_cluster.py took
    4.5 s instead of well under the 4 s fetch timeout)."""
    cluster, leader = idle_cluster()
    cluster.cut(1, 2)
    cluster.cut(2, 3)
    out = leader.resign(cluster.now)
    end_quorum = next(
        m for m in out if m.destination_id == 2 and isinstance(m.message, EndQuorumEpochRequest)
    )
    not_leader = answer([m for m in out if m.destination_id == 2], _parked_id(out, 2))
    assert not_leader is not None
    assert not_leader.error_code == ErrorCode.not_leader_or_follower
    assert not_leader.current_leader.leader_id == 1
    follower = cluster.node(2)
    follower.handle(Inbound(1, end_quorum.correlation_id, end_quorum.message), cluster.now)
    assert follower.role_name == "Prospective"
    follower.handle(Inbound(1, _parked_id(out, 2), not_leader), cluster.now)
    assert follower.role_name == "Prospective"


def _parked_id(out: list[Outbound], destination_id: int) -> int:
    return next(
        m.correlation_id
        for m in out
        if m.destination_id == destination_id and isinstance(m.message, FetchResponse)
    )


def test_without_a_max_wait_an_idle_follower_backs_off_instead_of_spinning() -> None:
    """fetch max wait 0 (or a leader that answers at once): empty answers that arrive
    early are followed by retry.backoff.ms, not by an immediate refetch."""
    cluster = Cluster([1, 2, 3], first=1)
    no_wait = dataclasses.replace(LONG_POLL, fetch_max_wait_ms=0)
    for member in cluster.members.values():
        member.config = (
            dataclasses.replace(FIRST, fetch_max_wait_ms=0) if member.node_id == 1 else no_wait
        )
    cluster.start()
    cluster.advance(1000)
    assert cluster.node(1).is_leader
    mark = len(cluster.sent)
    cluster.advance(1000)
    sent = fetches_from(cluster, 2, mark)
    assert 0 < sent <= 1000 // no_wait.retry_backoff_ms + 2, sent

"""Fetch validation, diverging-epoch truncation and the high watermark rules."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.raft import Inbound, LogEntry, MemoryRaftLog
from odradek.raft.messages import FetchRequest, FetchResponse
from odradek.raft.node import CommittedEntries
from tests.raft.harness import Cluster, entries


def epochs_of(cluster: Cluster, node_id: int) -> list[int]:
    log = cluster.members[node_id].log
    return [log.entry_at(offset).epoch for offset in range(log.start_offset, log.end_offset)]


def seeded(voters: list[int], logs: dict[int, tuple[int, ...]], epoch: int) -> Cluster:
    cluster = Cluster(voters, first=1, epoch=epoch)
    for node_id, log_epochs in logs.items():
        log = cluster.members[node_id].log
        log.append(entries(*log_epochs))
        log.flush()
    return cluster.start()


def test_follower_drops_an_uncommitted_tail_of_an_old_epoch() -> None:
    # Node 2 holds entries of epoch 2 that never committed; node 1 (the leader to be)
    # holds epoch 3 at those offsets. Node 2 must truncate to the end of epoch 1 (the
    # last epoch both share) and take epoch 3 and 4 from the leader.
    cluster = seeded([1, 2, 3], {1: (1, 1, 1, 3, 3), 2: (1, 1, 1, 2, 2, 2), 3: (1, 1, 1)}, 3)
    cluster.advance(300)
    leader = cluster.node(1)
    assert leader.is_leader and leader.epoch == 4
    assert epochs_of(cluster, 2) == [1, 1, 1, 3, 3, 4]
    assert epochs_of(cluster, 3) == [1, 1, 1, 3, 3, 4]
    assert cluster.members[2].log.entry_at(3).payload == cluster.members[1].log.entry_at(3).payload


def test_truncation_goes_to_the_common_epoch_end_not_to_the_high_watermark() -> None:
    # Follower (1,1,2,2,2) vs leader (1,1,2,2,3,3): they agree up to offset 4; only the
    # follower's last entry goes, although its high watermark is 0.
    cluster = seeded([1, 2, 3], {1: (1, 1, 2, 2, 3, 3), 2: (1, 1, 2, 2, 2), 3: ()}, 3)
    kept = cluster.members[2].log.entry_at(3)
    cluster.advance(300)
    assert cluster.node(1).is_leader
    assert epochs_of(cluster, 2) == [1, 1, 2, 2, 3, 3, 4]
    assert cluster.members[2].log.entry_at(3) is kept  # never removed and refetched


def test_leader_answers_a_divergent_fetch_with_its_epoch_end() -> None:
    cluster = seeded([1, 2, 3], {1: (1, 1, 1, 3, 3)}, 3)
    cluster.advance(300)
    leader = cluster.node(1)
    request = FetchRequest(
        cluster_id=None,
        replica_id=2,
        replica_epoch=-1,
        current_leader_epoch=leader.epoch,
        fetch_offset=6,
        last_fetched_epoch=2,
        log_start_offset=0,
        partition_max_bytes=1000,
    )
    replies = leader.handle(Inbound(2, 99, request), cluster.now)
    response = next(o.message for o in replies if o.correlation_id == 99)
    assert isinstance(response, FetchResponse)
    assert response.error_code == ErrorCode.none
    assert (response.diverging_epoch.epoch, response.diverging_epoch.end_offset) == (1, 3)
    assert response.records == ()


def test_fetch_epoch_errors() -> None:
    cluster = seeded([1, 2, 3], {}, 3)
    cluster.advance(300)
    leader = cluster.node(1)
    follower = cluster.node(2)

    def fetch(node_id: int, epoch: int) -> FetchResponse:
        request = FetchRequest(
            cluster_id=None,
            replica_id=3,
            replica_epoch=-1,
            current_leader_epoch=epoch,
            fetch_offset=0,
            last_fetched_epoch=0,
            log_start_offset=0,
            partition_max_bytes=1000,
        )
        replies = cluster.node(node_id).handle(Inbound(3, 99, request), cluster.now)
        message = next(o.message for o in replies if o.correlation_id == 99)
        assert isinstance(message, FetchResponse)
        return message

    assert fetch(1, leader.epoch - 1).error_code == ErrorCode.fenced_leader_epoch
    assert fetch(1, leader.epoch + 1).error_code == ErrorCode.unknown_leader_epoch
    not_leader = fetch(2, follower.epoch)
    assert not_leader.error_code == ErrorCode.not_leader_or_follower
    assert not_leader.current_leader.leader_id == 1


def test_high_watermark_needs_a_majority_of_voters() -> None:
    cluster = Cluster([1, 2, 3, 4, 5], first=1).start()
    cluster.advance(300)
    leader = cluster.node(1)
    assert leader.is_leader
    committed = leader.high_watermark
    for other in (3, 4, 5):
        cluster.cut(1, other)
    offset = leader.append(b"needs three", cluster.now)
    cluster.advance(500)
    assert leader.high_watermark == committed <= offset  # only 2 of 5 hold it
    cluster.heal()
    cluster.advance(500)
    assert leader.high_watermark == offset + 1


def test_observer_does_not_count_towards_the_high_watermark() -> None:
    cluster = Cluster([1, 2, 3], observers=[4], first=1).start()
    cluster.advance(300)
    leader = cluster.node(1)
    assert leader.is_leader
    cluster.cut(1, 2)
    cluster.cut(1, 3)
    before = leader.high_watermark
    offset = leader.append(b"observed only", cluster.now)
    cluster.advance(500)
    assert cluster.members[4].log.end_offset == offset + 1  # the observer has it
    assert leader.high_watermark == before  # but it does not count
    cluster.heal()
    cluster.advance(500)
    assert leader.high_watermark == offset + 1
    assert cluster.node(4).high_watermark == offset + 1
    assert cluster.node(4).role_name == "Follower"  # observers never campaign
    description = leader.describe_quorum(cluster.now)
    assert [r.replica_id for r in description.current_voters] == [1, 2, 3]
    assert [r.replica_id for r in description.observers] == [4]


def test_high_watermark_waits_for_the_new_epoch() -> None:
    # Entries of an old epoch replicated on a majority are not committed by a new
    # leader until its own LeaderChange entry is replicated too.
    cluster = seeded([1, 2, 3], {1: (1, 1, 2), 2: (1, 1, 2), 3: (1,)}, 2)
    cluster.cut(1, 2)
    cluster.cut(1, 3)
    cluster.advance(5)
    leader = cluster.node(1)
    cluster.heal()
    cluster.advance(300)
    assert leader.is_leader
    assert leader.high_watermark == leader.log_end_offset  # 4: everything, LeaderChange too
    assert epochs_of(cluster, 3) == [1, 1, 2, leader.epoch]


def test_follower_catches_up_from_a_snapshot() -> None:
    cluster = Cluster([1, 2, 3], first=1).start()
    cluster.advance(300)
    leader = cluster.node(1)
    cluster.cut(1, 3)
    cluster.cut(2, 3)
    for index in range(20):
        leader.append(f"r{index}".encode(), cluster.now)
    cluster.advance(500)
    leader.poll_committed()
    snapshot_id = leader.create_snapshot(leader.high_watermark, b"S" * 5000)
    assert cluster.members[1].log.start_offset == snapshot_id.end_offset
    cluster.heal()
    cluster.advance(2000)
    follower = cluster.node(3)
    assert cluster.members[3].snapshots.latest() == snapshot_id
    assert cluster.members[3].log.start_offset == snapshot_id.end_offset
    events = follower.poll_committed()
    assert events[0].payload == b"S" * 5000  # type: ignore[union-attr]
    assert follower.high_watermark == leader.high_watermark


def test_nonsense_fetches_get_invalid_request_not_a_crash() -> None:
    cluster = seeded([1, 2, 3], {1: (1, 1)}, 1)
    cluster.advance(300)
    leader = cluster.node(1)
    assert leader.is_leader
    for replica_id, offset, last_epoch in [(2, -1, 0), (2, 0, -1), (2, 0, 99), (1, 0, 0)]:
        request = FetchRequest(
            cluster_id=None,
            replica_id=replica_id,
            replica_epoch=-1,
            current_leader_epoch=leader.epoch,
            fetch_offset=offset,
            last_fetched_epoch=last_epoch,
            log_start_offset=0,
            partition_max_bytes=1000,
        )
        replies = leader.handle(Inbound(2, 99, request), cluster.now)
        response = next(o.message for o in replies if o.correlation_id == 99)
        assert isinstance(response, FetchResponse)
        assert response.error_code == ErrorCode.invalid_request
    assert leader.is_leader


class ReadSpyLog(MemoryRaftLog):
    """Records the offsets every read hands back, to see what the core asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.returned: list[int] = []

    def read(
        self, start_offset: int, max_bytes: int, *, max_offset: int | None = None
    ) -> list[LogEntry]:
        result = super().read(start_offset, max_bytes, max_offset=max_offset)
        self.returned.extend(entry.offset for entry in result)
        return result


def test_committed_entries_are_read_only_up_to_the_high_watermark() -> None:
    """poll_committed hands the state machine what is committed, and reads nothing else:
    a long uncommitted tail (the followers are cut off) is never read or decoded."""
    cluster = Cluster([1, 2, 3], first=1)
    spy = cluster.members[1].log = ReadSpyLog()
    cluster.start()
    cluster.advance(300)
    leader = cluster.node(1)
    assert leader.is_leader
    committed_end = leader.high_watermark
    assert committed_end > 0  # the LeaderChange, not handed over yet
    cluster.cut(1, 2)
    cluster.cut(1, 3)
    for index in range(200):
        leader.append(f"tail-{index}".encode() * 100, cluster.now)
    cluster.advance(50)
    assert leader.is_leader and leader.high_watermark == committed_end
    spy.returned.clear()
    (event,) = leader.poll_committed()
    assert isinstance(event, CommittedEntries)
    assert [entry.offset for entry in event.entries] == list(range(committed_end))
    assert spy.returned == list(range(committed_end))
    assert leader.poll_committed() == []
    # Healed, the tail commits and is handed over in bounded pieces, each below the HW.
    cluster.heal()
    cluster.advance(300)
    assert leader.high_watermark == leader.log_end_offset
    delivered = []
    while events := leader.poll_committed():
        for event in events:
            assert isinstance(event, CommittedEntries)
            assert event.entries[-1].next_offset <= leader.high_watermark
            delivered.extend(entry.offset for entry in event.entries)
    assert delivered == list(range(committed_end, leader.log_end_offset))
    assert max(spy.returned) < leader.high_watermark


def test_a_new_leader_hides_its_high_watermark_until_its_epoch_commits() -> None:
    # Entries of epoch 1 sit on every log but no node knows they committed (HW 0: the
    # leader that committed them died before telling anyone). Node 1 leads epoch 2; until
    # its LeaderChange commits, its high watermark is not the quorum's: it answers
    # fetches with -1, and its follower must not take a fetch from it as "caught up"
    # (a broker restarting then built its partitions from an image missing committed
    # topics, and set their logs aside as strays).
    cluster = seeded([1, 2, 3], {1: (1, 1, 1), 2: (1, 1, 1), 3: (1, 1, 1)}, 1)
    cluster.cut(1, 3)
    cluster.cut(2, 3)
    leader, follower = cluster.node(1), cluster.node(2)
    request = FetchRequest(
        cluster_id=None,
        replica_id=3,
        replica_epoch=-1,
        current_leader_epoch=2,
        fetch_offset=3,
        last_fetched_epoch=1,
        log_start_offset=0,
        partition_max_bytes=1000,
    )
    windows = 0
    for _ in range(500):
        cluster.advance(1)
        if leader.high_watermark_current:
            break
        if leader.is_leader:
            windows += 1
            replies = leader.handle(Inbound(3, 77, request), cluster.now)
            response = next(o.message for o in replies if o.correlation_id == 77)
            assert isinstance(response, FetchResponse) and response.high_watermark == -1
            assert not follower.high_watermark_current, follower.high_watermark
    assert windows > 0 and leader.is_leader and leader.epoch == 2
    cluster.advance(300)
    assert follower.high_watermark_current
    assert follower.high_watermark == leader.high_watermark == leader.log_end_offset

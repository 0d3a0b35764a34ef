"""The Partition state machine, sans-IO: roles, the high watermark, ISR changes.

- transitions follow the legal table; stale metadata (a lower leader epoch, or the same
  one with a lower partition epoch) is ignored; OFFLINE is final;
- a new leader writes its epoch at its log end and hides its tail above the HW until
  the ISR has fetched it (seeds/000 "Watermark 滞后"); HW = min LEO over the ISR and
  never moves back;
- followers join the ISR when they reach the HW and the epoch's start; ISR members not
  caught up for replica.lag.time.max.ms are proposed for removal; while a proposal is
  in flight the HW uses the maximal ISR and no other proposal is made; the
  controller's answer or a newer partition epoch settles it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.replica.interfaces import IsrOutcome
from odradek.replica.partition import (
    FOLLOWER,
    LEADER,
    NEW,
    OFFLINE,
    Partition,
    PartitionError,
)
from odradek.replica.reads import FetchPosition
from odradek.storage.errors import StorageError
from odradek.storage.log_config import LogConfig
from tests.replica.partition_support import (
    F2,
    F3,
    REPLICAS,
    batch,
    consumer_fetch,
    follower_fetch,
    new_log,
    partition_on,
    read_values,
    records_bytes,
)
from tests.replica.partition_support import (
    LEADER as L,
)


@pytest.fixture
def leader(tmp_path: Path) -> Partition:
    partition = partition_on(new_log(tmp_path / "t-0"))
    assert partition.state is NEW
    assert partition.become_leader(1, 0, REPLICAS, REPLICAS, now_ms=0)
    return partition


def test_roles_follow_the_legal_table_and_stale_metadata_is_ignored(leader: Partition) -> None:
    assert leader.state is LEADER and leader.leader == L
    assert not leader.become_follower(F2, 0, 5, REPLICAS, REPLICAS)  # older leader epoch
    assert leader.state is LEADER
    assert leader.become_leader(1, 3, REPLICAS, (L, F2), now_ms=0)  # newer partition epoch
    assert leader.isr == (L, F2)
    assert not leader.become_leader(1, 2, REPLICAS, REPLICAS, now_ms=0)  # older one
    assert leader.isr == (L, F2)
    assert leader.become_follower(F2, 2, 4, REPLICAS, REPLICAS)
    assert (leader.state, leader.leader, leader.leader_epoch) == (FOLLOWER, F2, 2)
    with pytest.raises(PartitionError) as raised:
        leader.append_as_leader(batch(b"x"), 1)
    assert raised.value.code == "NOT_LEADER_OR_FOLLOWER"
    leader.go_offline()
    assert leader.state is OFFLINE
    assert not leader.become_leader(9, 9, REPLICAS, REPLICAS, now_ms=0)  # until a restart
    with pytest.raises(PartitionError) as offline:
        leader.check_leader()
    assert offline.value.code == "KAFKA_STORAGE_ERROR"


def test_becoming_leader_writes_the_epoch_at_the_log_end(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a", b"b"), 0)
    partition = partition_on(log)
    partition.become_leader(4, 0, (L,), (L,), now_ms=0)
    assert log.epoch_cache.latest_epoch == 4
    assert partition.end_offset_for_epoch(0) == (0, 2)  # epoch 0 ended where 4 began
    assert partition.last_offset_for_leader_epoch(4, 4) == (4, 2)
    assert partition.last_offset_for_leader_epoch(-1, 5) == (-1, -1)
    assert partition.leader_epoch_start_offset == 2


def test_single_replica_hw_follows_every_append(tmp_path: Path) -> None:
    partition = partition_on(new_log(tmp_path / "t-0"))
    partition.become_leader(0, 0, (L,), (L,), now_ms=0)
    info = partition.append_as_leader(batch(b"a", b"b"), -1)
    assert partition.high_watermark == 2 == info.last_offset + 1
    assert partition.replication_result(2) == "NONE"


def test_hw_is_the_minimum_leo_over_the_isr_and_never_moves_back(leader: Partition) -> None:
    leader.append_as_leader(batch(b"a", b"b", b"c"), -1)
    assert leader.high_watermark == 0  # nobody else has anything yet
    follower_fetch(leader, F2, 3, now_ms=1)
    assert leader.high_watermark == 0  # F3's log end is still unknown
    follower_fetch(leader, F3, 2, now_ms=1)
    assert leader.high_watermark == 2
    follower_fetch(leader, F3, 1, now_ms=2)  # an old fetch offset, out of order
    assert leader.high_watermark == 2  # never back
    read = follower_fetch(leader, F3, 3, now_ms=3)
    assert leader.high_watermark == 3 and read.high_watermark == 3


def test_a_new_leader_hides_its_tail_until_the_isr_has_fetched_it(tmp_path: Path) -> None:
    # The old leader acknowledged offsets 0-1 (HW 2) and wrote offset 2; this replica
    # became leader with all three and a checkpointed HW of 2.
    log = new_log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a", b"b"), 0)
    log.append_as_leader(batch(b"c"), 0)
    log.high_watermark = 2
    partition = partition_on(log)
    partition.become_leader(1, 0, REPLICAS, REPLICAS, now_ms=0)
    assert partition.high_watermark == 2
    assert read_values(consumer_fetch(partition, 0)) == [b"a", b"b"]
    assert consumer_fetch(partition, 2).ranges == []  # offset 2 exists, but is hidden
    with pytest.raises(PartitionError) as lagging:
        partition.offset_for_timestamp(-1, -1, 0)  # LATEST while the HW trails
    assert lagging.value.code == "OFFSET_NOT_AVAILABLE"
    follower_fetch(partition, F2, 3, now_ms=1)
    assert partition.high_watermark == 2
    follower_fetch(partition, F3, 3, now_ms=1)
    assert partition.high_watermark == 3
    assert b"c" in records_bytes(consumer_fetch(partition, 2))
    assert partition.offset_for_timestamp(-1, -1, 0) == (-1, 3, 1)
    partition.append_as_leader(batch(b"d"), 1)
    assert partition.offset_for_timestamp(-1, -1, 0) == (-1, 3, 1)  # a consumer: the HW
    assert partition.offset_for_timestamp(-1, -1, None) == (-1, 4, 1)  # a broker: the end


def test_a_follower_reads_to_the_log_end_a_consumer_below_the_hw(leader: Partition) -> None:
    leader.append_as_leader(batch(b"a"), 1)
    assert consumer_fetch(leader, 0).ranges == []
    assert b"a" in records_bytes(follower_fetch(leader, F2, 0, now_ms=1))
    with pytest.raises(PartitionError) as stranger:
        follower_fetch(leader, 9, 0, now_ms=1)
    assert stranger.value.code == "NOT_LEADER_OR_FOLLOWER"  # not in the replica set
    assert follower_fetch(leader, F2, 5, now_ms=1).error == "OFFSET_OUT_OF_RANGE"
    fenced = FetchPosition(0, 100, current_leader_epoch=0)
    with pytest.raises(PartitionError) as old:
        leader.read(fenced, -1, -1, 0, max_bytes=100, min_one_batch=True)
    assert old.value.code == "FENCED_LEADER_EPOCH"
    ahead = FetchPosition(0, 100, current_leader_epoch=2)
    with pytest.raises(PartitionError) as new:
        leader.read(ahead, -1, -1, 0, max_bytes=100, min_one_batch=True)
    assert new.value.code == "UNKNOWN_LEADER_EPOCH"


def test_lagging_followers_are_proposed_out_of_the_isr_after_the_lag_time(
    leader: Partition,
) -> None:
    leader.append_as_leader(batch(b"a"), 1)
    follower_fetch(leader, F2, 1, now_ms=1_000)  # caught up
    follower_fetch(leader, F3, 0, now_ms=1_000)  # behind
    assert not leader.maybe_shrink_isr(now_ms=10_000)  # 10 s since the last catch-up
    assert leader.take_proposal() is None
    follower_fetch(leader, F2, 1, now_ms=10_500)  # still at the log end
    assert leader.maybe_shrink_isr(now_ms=10_001)
    proposal = leader.take_proposal()
    assert proposal is not None and proposal.new_isr == (L, F2)
    assert proposal.topic_id == uuid.UUID(leader.topic_id) and proposal.partition_epoch == 0
    assert proposal.broker_epochs == {F2: 10}
    assert leader.take_proposal() is None  # taken once
    # While shrinking, the HW still waits for the old (larger) ISR ...
    follower_fetch(leader, F2, 1, now_ms=10_600)
    assert leader.high_watermark == 0
    assert not leader.maybe_shrink_isr(now_ms=99_000)  # one proposal at a time
    # ... and moves once the controller accepted the smaller one.
    assert leader.on_isr_outcome(proposal, IsrOutcome("NONE", L, 1, 1, (L, F2)))
    assert leader.isr == (L, F2) and leader.partition_epoch == 1 and leader.high_watermark == 1


def test_a_follower_that_reached_the_hw_is_proposed_back_into_the_isr(
    tmp_path: Path,
) -> None:
    partition = partition_on(new_log(tmp_path / "t-0"))
    partition.become_leader(1, 0, REPLICAS, (L, F2), now_ms=0)
    partition.append_as_leader(batch(b"a", b"b"), 1)
    follower_fetch(partition, F3, 1, now_ms=1)  # 1 >= the HW (0) and the epoch start (0)
    expand = partition.take_proposal()
    assert expand is not None and expand.new_isr == (L, F2, F3)
    # While expanding, the HW is computed over the larger set: F3 holds it at 1.
    follower_fetch(partition, F2, 2, now_ms=2)
    assert partition.high_watermark == 1
    assert partition.maximal_isr == (L, F2, F3)
    # The controller refuses (the partition moved on): stays pending until metadata.
    assert not partition.on_isr_outcome(expand, IsrOutcome("INVALID_UPDATE_VERSION"))
    assert partition.pending is expand
    # A newer partition epoch in the metadata wins over what was in flight.
    partition.become_leader(1, 1, REPLICAS, (L, F2), now_ms=3)
    assert partition.pending is None and partition.isr == (L, F2)
    assert partition.high_watermark == 2  # now only F2 counts
    # An answer to the superseded proposal changes nothing.
    assert not partition.on_isr_outcome(expand, IsrOutcome("NONE", L, 1, 2, (L, F2, F3)))
    assert partition.isr == (L, F2)


def test_a_follower_below_the_hw_is_not_proposed(tmp_path: Path) -> None:
    partition = partition_on(new_log(tmp_path / "t-0"))
    partition.become_leader(1, 0, REPLICAS, (L, F2), now_ms=0)
    partition.append_as_leader(batch(b"a", b"b"), 1)
    follower_fetch(partition, F2, 2, now_ms=1)
    assert partition.high_watermark == 2 and partition.take_proposal() is None
    follower_fetch(partition, F3, 1, now_ms=1)
    assert partition.take_proposal() is None  # 1 < HW 2
    follower_fetch(partition, F3, 2, now_ms=2)
    proposal = partition.take_proposal()
    assert proposal is not None and proposal.new_isr == (L, F2, F3)
    # OPERATION_NOT_ATTEMPTED: surely not applied, back to the committed ISR.
    partition.on_isr_outcome(proposal, IsrOutcome("OPERATION_NOT_ATTEMPTED"))
    assert partition.pending is None and partition.maximal_isr == (L, F2)


def test_a_follower_is_caught_up_if_it_reached_the_leader_s_previous_log_end(
    leader: Partition,
) -> None:
    leader.append_as_leader(batch(b"a"), 1)
    follower_fetch(leader, F2, 0, now_ms=5_000)  # leader's end was 1 at this fetch
    leader.append_as_leader(batch(b"b"), 1)  # end 2
    follower_fetch(leader, F2, 1, now_ms=6_000)  # reached 1: caught up as of 5 000
    assert leader.followers[F2].last_caught_up_ms == 5_000
    follower_fetch(leader, F2, 2, now_ms=7_000)  # at the end: caught up now
    assert leader.followers[F2].last_caught_up_ms == 7_000


def test_min_insync_replicas_before_and_after_the_append(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0", LogConfig(min_insync_replicas=2))
    partition = partition_on(log)
    partition.become_leader(1, 0, REPLICAS, (L,), now_ms=0)
    with pytest.raises(PartitionError) as before:
        partition.append_as_leader(batch(b"a"), -1)
    assert before.value.code == "NOT_ENOUGH_REPLICAS"
    partition.append_as_leader(batch(b"a"), 1)  # acks=1 is not held back
    partition.become_leader(1, 1, REPLICAS, (L, F2), now_ms=0)
    info = partition.append_as_leader(batch(b"b"), -1)
    assert partition.replication_result(info.last_offset + 1) is None  # not replicated yet
    partition.become_leader(1, 2, REPLICAS, (L,), now_ms=0)  # F2 dropped by the controller
    assert partition.replication_result(info.last_offset + 1) == (
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    )


def test_a_follower_partition_follows_the_leader_s_hw_and_log_start(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0")
    partition = partition_on(log, local_id=F2)
    partition.become_follower(L, 1, 0, REPLICAS, REPLICAS)
    with pytest.raises(PartitionError):
        consumer_fetch(partition, 0)  # no fetch from followers (KIP-392) yet
    source = new_log(tmp_path / "source")
    source.append_as_leader(batch(b"a"), 1)
    source.append_as_leader(batch(b"b"), 1)
    for data in source.read_batches(0):
        partition.append_as_follower(data)
    assert partition.log_end_offset == 2 and partition.latest_epoch() == 1
    partition.update_follower_high_watermark(5)
    assert partition.high_watermark == 2  # never above its own log end
    partition.update_follower_log_start_offset(1)
    assert partition.log_start_offset == 1
    partition.truncate_to(1)  # a batch boundary, as epoch ends are
    assert partition.log_end_offset == 1 and partition.high_watermark == 1
    partition.truncate_fully_and_start_at(7)
    assert (partition.log_start_offset, partition.log_end_offset) == (7, 7)
    partition.become_leader(2, 1, REPLICAS, REPLICAS, now_ms=0)
    with pytest.raises(PartitionError):
        partition.append_as_follower(batch(b"x"))


def test_a_fetcher_driving_a_partition_that_now_leads_gets_a_storage_error(
    leader: Partition,
) -> None:
    with pytest.raises(StorageError) as raised:  # what a FollowerLog raises: it backs off
        leader.truncate_to(0)
    assert raised.value.code == "NOT_LEADER_OR_FOLLOWER"

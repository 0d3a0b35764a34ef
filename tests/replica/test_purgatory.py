"""Purgatories and the two-phase produce / long-poll fetch of the ReplicaManager.

- acks=all completes when the HW passes the batch — i.e. when the followers fetched
  it — at the request's timeout with REQUEST_TIMED_OUT, with NOT_ENOUGH_REPLICAS_AFTER_APPEND
  if the ISR shrank below min.insync.replicas meanwhile, and with
  NOT_LEADER_OR_FOLLOWER when leadership is lost; acks=1 answers after the append;
- a consumer's long poll wakes when the HW advances (not on an append alone), a
  follower's when the log end does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.replica.partition import Partition
from odradek.replica.purgatory import DelayedProduces, HighWatermarkWaiters
from odradek.replica.reads import FetchParams, FetchPosition
from odradek.replica.replica_manager import ReplicaManager
from odradek.storage.log_config import LogConfig
from tests.replica.partition_support import (
    F2,
    F3,
    LEADER,
    REPLICAS,
    batch,
    follower_fetch,
    new_log,
    partition_on,
)

TP = ("t", 0)


class Done:
    """A waiter that records its result (the purgatory's contract: done, set_result)."""

    def __init__(self) -> None:
        self.result: str | None = None

    def done(self) -> bool:
        return self.result is not None

    def set_result(self, result: str) -> None:
        self.result = result


def test_delayed_produces_complete_in_offset_order_once() -> None:
    produces = DelayedProduces()
    first, second, third = Done(), Done(), Done()
    produces.add(5, second)
    produces.add(2, first)
    produces.add(9, third)
    assert produces.complete_up_to(4, isr_size=2, min_insync=2) == 1
    assert (first.result, second.result) == ("NONE", None)
    assert produces.complete_up_to(5, isr_size=1, min_insync=2) == 1
    assert second.result == "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    produces.discard(third)  # timed out
    assert len(produces) == 0
    assert produces.complete_up_to(100, 2, 2) == 0 and third.result is None
    late = Done()
    produces.add(200, late)
    produces.fail_all("NOT_LEADER_OR_FOLLOWER")
    assert late.result == "NOT_LEADER_OR_FOLLOWER"


def test_high_watermark_waiters_complete_at_their_offset_or_fail_together() -> None:
    waiters = HighWatermarkWaiters()
    low, high, gone, last = Done(), Done(), Done(), Done()
    waiters.add(7, high)
    waiters.add(3, low)
    waiters.add(5, gone)
    waiters.discard(gone)  # its load was cancelled
    assert waiters.complete_up_to(6) == 1 and (low.result, high.result) == ("NONE", None)
    assert gone.result is None and len(waiters) == 1
    waiters.add(9, last)
    waiters.fail_all("NOT_LEADER_OR_FOLLOWER")
    assert (high.result, last.result) == ("NOT_LEADER_OR_FOLLOWER",) * 2
    assert len(waiters) == 0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ReplicaManager, Partition]]:
    log = new_log(tmp_path / "t-0", LogConfig(min_insync_replicas=2))
    partition = partition_on(log)
    partition.become_leader(1, 0, REPLICAS, REPLICAS, now_ms=0)
    manager = ReplicaManager(LEADER, None)  # type: ignore[arg-type]  # no deltas here
    manager.partitions[TP] = partition
    yield manager, partition
    log.close()


def test_acks_all_completes_when_the_followers_fetched_the_batch(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster

    async def run() -> list[str]:
        first = manager.append_records("t", 0, batch(b"a"), -1)
        second = manager.append_records("t", 0, batch(b"b"), -1)
        acks_one = manager.append_records("t", 0, batch(b"c"), 1)
        assert acks_one.waiter is None and acks_one.error == "NONE"
        waiting = asyncio.create_task(manager.await_replication([first, second], 30_000))
        await asyncio.sleep(0)
        follower_fetch(partition, F2, 3, now_ms=1)
        await asyncio.sleep(0)
        assert not waiting.done()  # F3 has not fetched
        follower_fetch(partition, F3, 1, now_ms=1)  # HW 1: the first batch only
        await asyncio.sleep(0)
        assert first.waiter is None and first.error == "NONE"  # answered: final
        assert not waiting.done()
        follower_fetch(partition, F3, 2, now_ms=2)
        await waiting
        return [first.error, second.error]

    assert asyncio.run(run()) == ["NONE", "NONE"]


def test_acks_all_times_out_and_leaves_nothing_behind(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster

    async def run() -> str:
        status = manager.append_records("t", 0, batch(b"a"), -1)
        await manager.await_replication([status], 50)
        return status.error

    assert asyncio.run(run()) == "REQUEST_TIMED_OUT"
    assert len(partition.produces) == 0


def test_acks_all_after_the_isr_shrank_below_min_insync(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster

    async def run() -> str:
        status = manager.append_records("t", 0, batch(b"a"), -1)
        waiting = asyncio.create_task(manager.await_replication([status], 30_000))
        await asyncio.sleep(0)
        # The controller drops both followers; the HW is then the leader's log end.
        partition.become_leader(1, 1, REPLICAS, (LEADER,), now_ms=5)
        await waiting
        return status.error

    assert asyncio.run(run()) == "NOT_ENOUGH_REPLICAS_AFTER_APPEND"


def test_acks_all_fails_when_leadership_moves(cluster: tuple[ReplicaManager, Partition]) -> None:
    manager, partition = cluster

    async def run() -> str:
        status = manager.append_records("t", 0, batch(b"a"), -1)
        waiting = asyncio.create_task(manager.await_replication([status], 30_000))
        await asyncio.sleep(0)
        partition.become_follower(F2, 2, 1, REPLICAS, REPLICAS)
        await waiting
        return status.error

    assert asyncio.run(run()) == "NOT_LEADER_OR_FOLLOWER"


def _params(replica_id: int, offset: int, max_wait_ms: int = 30_000) -> FetchParams:
    return FetchParams(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[("t", [(0, FetchPosition(offset, 1 << 20))])],
    )


def test_consumers_wake_on_hw_advance_followers_on_log_end(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster

    async def run() -> None:
        consumer = asyncio.create_task(manager.fetch(_params(-1, 0)))
        follower = asyncio.create_task(manager.fetch(_params(F2, 0)))
        await asyncio.sleep(0.01)
        assert not consumer.done() and not follower.done()
        manager.append("t", 0, batch(b"a"), 1)
        (_, [(_, read)]) = (await follower)[0]
        assert read.size > 0  # the follower woke on the append
        await asyncio.sleep(0.01)
        assert not consumer.done()  # the HW did not move: nothing visible yet
        follower_fetch(partition, F2, 1, now_ms=1)
        follower_fetch(partition, F3, 1, now_ms=1)  # HW 1
        (_, [(_, seen)]) = (await consumer)[0]
        assert seen.size > 0 and seen.high_watermark == 1

    asyncio.run(run())


def test_a_fetch_with_an_error_or_a_diverging_epoch_answers_at_once(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, _ = cluster

    async def run() -> None:
        unknown = FetchParams(
            -1, 30_000, 1, 1 << 20, [("t", [(0, FetchPosition(0, 100)), (7, FetchPosition(0, 1))])]
        )
        results = await asyncio.wait_for(manager.fetch(unknown), 10)
        assert [read.error for _, read in results[0][1]] == [
            "NONE",
            "UNKNOWN_TOPIC_OR_PARTITION",
        ]
        behind = FetchPosition(5, 100, last_fetched_epoch=0)
        diverging = FetchParams(F2, 30_000, 1, 1 << 20, [("t", [(0, behind)])])
        results = await asyncio.wait_for(manager.fetch(diverging), 10)
        assert results[0][1][0][1].diverging_epoch is not None

    asyncio.run(run())


def test_delete_records_waits_for_the_live_followers_log_start(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster
    partition.is_alive = lambda broker: broker != F3  # F3 is fenced: not waited for

    async def run() -> list[tuple[int, str]]:
        manager.append("t", 0, batch(b"a", b"b", b"c"), 1)
        follower_fetch(partition, F2, 3, now_ms=1)
        follower_fetch(partition, F3, 3, now_ms=1)  # HW 3
        deleting = asyncio.create_task(manager.delete_records([("t", 0, 2), ("t", 9, 0)], 30_000))
        await asyncio.sleep(0.01)
        assert not deleting.done()  # F2 has not reported a log start of 2 yet
        assert partition.log_start_offset == 2  # the leader's own is moved at once
        position = FetchPosition(3, 1 << 20, log_start_offset=2)
        partition.read(position, F2, 10, 2, max_bytes=1 << 20, min_one_batch=True)
        return await deleting

    assert asyncio.run(run()) == [(2, "NONE"), (-1, "UNKNOWN_TOPIC_OR_PARTITION")]


def test_delete_records_times_out_and_fails_on_leadership_loss(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster
    manager.append("t", 0, batch(b"a", b"b"), 1)
    follower_fetch(partition, F2, 2, now_ms=1)
    follower_fetch(partition, F3, 2, now_ms=1)

    async def timed_out() -> list[tuple[int, str]]:
        return await manager.delete_records([("t", 0, 1)], 50)

    assert asyncio.run(timed_out()) == [(-1, "REQUEST_TIMED_OUT")]
    assert len(partition.deletes) == 0

    async def moved() -> list[tuple[int, str]]:
        deleting = asyncio.create_task(manager.delete_records([("t", 0, -1)], 30_000))
        await asyncio.sleep(0.01)
        partition.become_follower(F2, 2, 1, REPLICAS, REPLICAS)
        return await deleting

    assert asyncio.run(moved()) == [(-1, "NOT_LEADER_OR_FOLLOWER")]


# -- wake-ups: one loop iteration from the event to the answer ---------------------------
# The replication chain is a string of such wake-ups (a follower's parked fetch on an
# append, the acks=all produce and the consumer's fetch on the HW), and every extra
# loop iteration on a busy leader is a turn behind every other ready callback. These
# count iterations, not time: ``sleep(0)`` lets every callback already due run once.


def test_a_parked_follower_fetch_answers_one_iteration_after_the_append(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, _ = cluster

    async def run() -> None:
        follower = asyncio.create_task(manager.fetch(_params(F2, 0)))
        await asyncio.sleep(0.01)
        assert not follower.done()  # parked: nothing to read, max wait 30 s
        manager.append("t", 0, batch(b"a"), 1)
        await asyncio.sleep(0)
        assert follower.done()
        (_, [(_, read)]) = follower.result()[0]
        assert read.size > 0

    asyncio.run(run())


def test_acks_all_and_a_consumer_answer_one_iteration_after_the_hw_moves(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster

    async def run() -> None:
        consumer = asyncio.create_task(manager.fetch(_params(-1, 0)))
        await asyncio.sleep(0.01)
        statuses = [
            manager.append_records("t", 0, batch(b"a"), -1),
            manager.append_records("t", 0, batch(b"b"), -1),
        ]
        producer = asyncio.create_task(manager.await_replication(statuses, 30_000))
        await asyncio.sleep(0.01)
        follower_fetch(partition, F2, 2, now_ms=1)
        await asyncio.sleep(0)
        assert not producer.done() and not consumer.done()  # F3 holds the HW at 0
        follower_fetch(partition, F3, 2, now_ms=1)  # HW 2: both batches
        await asyncio.sleep(0)
        assert producer.done() and consumer.done()
        assert [s.error for s in statuses] == ["NONE", "NONE"]
        (_, [(_, seen)]) = consumer.result()[0]
        assert seen.high_watermark == 2

    asyncio.run(run())


def test_a_cancelled_produce_or_fetch_leaves_no_waiter_behind(
    cluster: tuple[ReplicaManager, Partition],
) -> None:
    manager, partition = cluster

    async def run() -> None:
        statuses = [manager.append_records("t", 0, batch(b"a"), -1)]
        producer = asyncio.create_task(manager.await_replication(statuses, 30_000))
        consumer = asyncio.create_task(manager.fetch(_params(-1, 0)))
        await asyncio.sleep(0.01)
        assert len(partition.produces) == 1 and len(partition.fetches.consumers) == 1
        producer.cancel()
        consumer.cancel()
        await asyncio.gather(producer, consumer, return_exceptions=True)
        assert len(partition.produces) == 0
        assert not partition.fetches.consumers and statuses[0].waiter is None

    asyncio.run(run())

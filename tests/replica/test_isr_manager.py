"""AlterPartitionManager against a fake controller, and the ReplicaManager wiring.

- proposals of several partitions go in one request; a partition with one queued or
  in flight gets OPERATION_NOT_ATTEMPTED for a second;
- request-level failures (NOT_CONTROLLER, an unreachable controller) are resent after
  the backoff, other outcomes reach the partition;
- end to end: the shrink tick proposes, the controller accepts, the HW moves on the
  smaller ISR and a parked acks=all produce completes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path

from odradek.replica.interfaces import IsrOutcome, IsrProposal
from odradek.replica.isr import AlterPartitionManager
from odradek.replica.replica_manager import ReplicaManager
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

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def proposal(topic_id: uuid.UUID, isr: tuple[int, ...], partition_epoch: int = 0) -> IsrProposal:
    return IsrProposal(topic_id, 0, 1, partition_epoch, isr, {})


class FakeController:
    """Accepts every proposal (partition epoch + 1) unless told to fail requests."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, int, list[IsrProposal]]] = []
        self.failures: list[str | Exception] = []

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, proposals: Sequence[IsrProposal]
    ) -> list[IsrOutcome]:
        self.requests.append((broker_id, broker_epoch, list(proposals)))
        if self.failures:
            failure = self.failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return [IsrOutcome(failure) for _ in proposals]
        return [
            IsrOutcome("NONE", LEADER, p.leader_epoch, p.partition_epoch + 1, p.new_isr)
            for p in proposals
        ]


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def test_proposals_are_batched_and_one_per_partition() -> None:
    controller = FakeController()
    manager = AlterPartitionManager(controller, LEADER, lambda: 42)
    outcomes: list[tuple[IsrProposal, IsrOutcome]] = []

    def record(sent: IsrProposal, outcome: IsrOutcome) -> None:
        outcomes.append((sent, outcome))

    first, second = proposal(T1, (1, 2)), proposal(T2, (1, 3))
    assert manager.submit(first, record) and manager.submit(second, record)
    assert not manager.submit(proposal(T1, (1,)), record)
    assert outcomes[-1][1].error == "OPERATION_NOT_ATTEMPTED"
    assert not asyncio.run(manager.send_pending())
    assert [(b, e, len(p)) for b, e, p in controller.requests] == [(LEADER, 42, 2)]
    assert [(s, o.error, o.partition_epoch) for s, o in outcomes[1:]] == [
        (first, "NONE", 1),
        (second, "NONE", 1),
    ]


def test_request_level_failures_are_retried_after_the_backoff() -> None:
    controller = FakeController()
    controller.failures = ["NOT_CONTROLLER", OSError("connection refused")]
    manager = AlterPartitionManager(controller, LEADER, lambda: 42, sleep=_no_sleep)
    outcomes: list[IsrOutcome] = []
    manager.submit(proposal(T1, (1, 2)), lambda _, outcome: outcomes.append(outcome))

    async def run() -> None:
        manager.start()
        for _ in range(100):
            if outcomes:
                break
            await asyncio.sleep(0)
        await manager.close()

    asyncio.run(run())
    assert len(controller.requests) == 3
    assert [o.error for o in outcomes] == ["NONE"]


def test_the_shrink_tick_completes_a_produce_once_the_controller_agrees(tmp_path: Path) -> None:
    controller = FakeController()
    now = [0]
    isr = AlterPartitionManager(controller, LEADER, lambda: 7, sleep=_no_sleep)
    manager = ReplicaManager(
        LEADER,
        None,  # type: ignore[arg-type]  # no deltas here
        isr_manager=isr,
        lag_time_max_ms=1_000,
        clock=lambda: now[0],
    )
    log = new_log(tmp_path / "t-0")
    partition = partition_on(log, lag_ms=1_000)
    partition.topic_id = str(T1)
    partition.become_leader(1, 0, REPLICAS, REPLICAS, now_ms=0)
    manager.partitions[("t", 0)] = partition

    async def run() -> str:
        isr.start()
        status = manager.append_records("t", 0, batch(b"a"), -1)
        waiting = asyncio.create_task(manager.await_replication([status], 30_000))
        follower_fetch(partition, F2, 1, now_ms=500)  # F2 keeps up; F3 never fetches
        now[0] = 1_200
        manager.maybe_shrink_isr()
        await asyncio.wait_for(waiting, 10)
        await isr.close()
        return status.error

    assert asyncio.run(run()) == "NONE"
    (_, epoch, [sent]), *_ = controller.requests
    assert epoch == 7 and sent.new_isr == (LEADER, F2) and F3 not in sent.broker_epochs
    assert partition.isr == (LEADER, F2) and partition.partition_epoch == 1
    assert partition.high_watermark == 1
    log.close()


def test_without_a_channel_a_proposal_is_dropped_and_can_be_made_again(tmp_path: Path) -> None:
    manager = ReplicaManager(LEADER, None, lag_time_max_ms=1_000, clock=lambda: 5_000)  # type: ignore[arg-type]
    log = new_log(tmp_path / "t-0")
    partition = partition_on(log, lag_ms=1_000)
    partition.become_leader(1, 0, REPLICAS, REPLICAS, now_ms=0)
    manager.partitions[("t", 0)] = partition
    manager.maybe_shrink_isr()
    assert partition.pending is None and partition.isr == REPLICAS
    assert partition.maybe_shrink_isr(5_000)  # not stuck behind a proposal no one sent
    log.close()

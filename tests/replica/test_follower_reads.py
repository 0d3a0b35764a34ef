"""Fetch from the closest replica (KIP-392) in the replica layer, sans-IO but for the loop.

- a follower serves a consumer that may read from followers (Fetch v11+) below its
  own high watermark — an offset between its HW and log end gets nothing yet, one past
  its log end OFFSET_OUT_OF_RANGE (the client goes back to the leader), or
  NOT_LEADER_OR_FOLLOWER for a client that sent no leader epoch — with the leader's
  epoch checks; a Fetch < v11, a replica not yet following and an offline one
  are refused; the first such read of a leader epoch is logged;
- the leader answers a consumer of a rack that holds an in-sync follower (not its own
  rack) with ``preferred_read_replica`` and no records, at once, without the long poll;
  without a selector, a rack, or for followers and old Fetch versions it reads itself;
- a consumer parked on a follower wakes when the follower's HW advances.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from odradek.metadata.image import BrokerImage, MetadataImage
from odradek.replica.partition import Partition, PartitionError
from odradek.replica.reads import FetchParams, FetchPosition, PartitionRead
from odradek.replica.replica_manager import ReplicaManager
from odradek.replica.replica_selector import RackAwareReplicaSelector
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager
from tests.replica.partition_support import (
    F2,
    F3,
    REPLICAS,
    batch,
    follower_fetch,
    new_log,
    partition_on,
    records_bytes,
)
from tests.replica.partition_support import LEADER as L

EPOCH = 1
RACKS = {L: "r1", F2: "r2", F3: "r3"}


def source_log(path: Path, count: int) -> Log:
    log = new_log(path)
    for i in range(count):
        log.append_as_leader(batch(b"v%d" % i), EPOCH)
    return log


def follower_with(tmp_path: Path, count: int, hw: int) -> tuple[Partition, Log]:
    """A follower of L holding ``count`` one-record batches, its HW at ``hw``."""
    source = source_log(tmp_path / "source", count)
    partition = partition_on(new_log(tmp_path / "t-0"), local_id=F2)
    assert partition.become_follower(L, EPOCH, 0, REPLICAS, REPLICAS)
    for data in source.read_batches(0):
        partition.append_as_follower(data)
    partition.update_follower_high_watermark(hw)
    return partition, source


def consumer_read(
    partition: Partition, offset: int, *, epoch: int = -1, leader_only: bool = False
) -> PartitionRead:
    return partition.read(
        FetchPosition(offset, 1 << 20, current_leader_epoch=epoch),
        -1,
        -1,
        0,
        max_bytes=1 << 20,
        min_one_batch=True,
        leader_only=leader_only,
    )


def test_a_follower_serves_consumers_below_its_own_high_watermark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    partition, source = follower_with(tmp_path, count=3, hw=2)
    with caplog.at_level(logging.INFO, logger="odradek.replica.partition"):
        read = consumer_read(partition, 0, epoch=EPOCH)
        assert read.error == "NONE" and read.high_watermark == 2
        assert records_bytes(read) == b"".join(source.read_batches(0, 2))  # not offset 2
        again = consumer_read(partition, 1)
        assert records_bytes(again) == b"".join(source.read_batches(1, 2))
    served = [r for r in caplog.records if "as a follower of 1" in r.getMessage()]
    assert len(served) == 1  # once per leader epoch
    for above_hw in (2, 3):  # committed on the leader maybe, not known here yet
        empty = consumer_read(partition, above_hw)
        assert (empty.error, empty.ranges, empty.high_watermark) == ("NONE", [], 2)
    # past its log end: a client that sent its epoch asks the leader next (KIP-320); one
    # that did not may be here on stale metadata, and must not reset its position
    assert consumer_read(partition, 4, epoch=EPOCH).error == "OFFSET_OUT_OF_RANGE"
    assert consumer_read(partition, 4).error == "NOT_LEADER_OR_FOLLOWER"
    partition.update_follower_high_watermark(3)
    assert records_bytes(consumer_read(partition, 2)) == b"".join(source.read_batches(2))


def test_a_follower_checks_epochs_and_refuses_leader_only_reads(tmp_path: Path) -> None:
    partition, _ = follower_with(tmp_path, count=2, hw=2)
    for epoch, code in ((EPOCH - 1, "FENCED_LEADER_EPOCH"), (EPOCH + 1, "UNKNOWN_LEADER_EPOCH")):
        with pytest.raises(PartitionError) as fenced:
            consumer_read(partition, 0, epoch=epoch)
        assert fenced.value.code == code
    with pytest.raises(PartitionError) as old_fetch:  # Fetch < v11: the leader only
        consumer_read(partition, 0, leader_only=True)
    assert old_fetch.value.code == "NOT_LEADER_OR_FOLLOWER"
    new = partition_on(new_log(tmp_path / "new"), local_id=F3)  # no role yet
    with pytest.raises(PartitionError) as not_yet:
        consumer_read(new, 0)
    assert not_yet.value.code == "NOT_LEADER_OR_FOLLOWER"
    partition.go_offline()
    with pytest.raises(PartitionError) as offline:
        consumer_read(partition, 0)
    assert offline.value.code == "KAFKA_STORAGE_ERROR"


def manager_with(
    tmp_path: Path, partition: Partition, node: int, selector: bool = True
) -> ReplicaManager:
    logs = LogManager([tmp_path / "logs"])
    manager = ReplicaManager(
        node, logs, replica_selector=RackAwareReplicaSelector() if selector else None
    )
    manager.partitions[("t", 0)] = partition
    brokers = {b: BrokerImage(b, (), rack=rack) for b, rack in RACKS.items()}
    manager.image = MetadataImage(brokers=brokers)
    return manager


def leader_in_sync(tmp_path: Path, count: int) -> Partition:
    partition = partition_on(new_log(tmp_path / "t-0"))
    assert partition.become_leader(EPOCH, 0, REPLICAS, REPLICAS, now_ms=0)
    for i in range(count):
        partition.append_as_leader(batch(b"v%d" % i), 1)
    for follower in (F2, F3):
        follower_fetch(partition, follower, count, now_ms=1)
    assert partition.log.high_watermark == count
    return partition


def params(rack: str | None, *, replica_id: int = -1, max_wait_ms: int = 0) -> FetchParams:
    position = FetchPosition(0, 1 << 20, current_leader_epoch=EPOCH)
    return FetchParams(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=1 << 30,  # more than there is: only a final answer ends the wait
        max_bytes=1 << 20,
        topics=[("t", [(0, position)])],
        client_rack=rack,
    )


async def one(manager: ReplicaManager, fetch: FetchParams) -> PartitionRead:
    results = await asyncio.wait_for(manager.fetch(fetch), timeout=30)
    return results[0][1][0][1]


def test_the_leader_points_a_consumer_at_a_follower_of_its_rack(tmp_path: Path) -> None:
    asyncio.run(_the_leader_points_a_consumer_at_a_follower_of_its_rack(tmp_path))


async def _the_leader_points_a_consumer_at_a_follower_of_its_rack(tmp_path: Path) -> None:
    partition = leader_in_sync(tmp_path, count=3)
    manager = manager_with(tmp_path, partition, L)
    for client_rack, chosen in (("r2", F2), ("r3", F3)):
        # a long max wait: the preferred replica is answered at once, as Kafka does
        read = await one(manager, params(client_rack, max_wait_ms=600_000))
        assert (read.error, read.preferred_read_replica, read.ranges) == ("NONE", chosen, [])
        assert (read.high_watermark, read.log_start_offset) == (3, 0)
    for rack in ("r1", "", "r9", None):  # its own rack, none, an unknown one, Fetch < v11
        read = await one(manager, params(rack))
        assert read.preferred_read_replica == -1 and read.size > 0, rack
    replication = await one(manager, params("r2", replica_id=F3))  # a follower: never
    assert replication.preferred_read_replica == -1 and replication.size > 0
    stale = replace(params("r2"), topics=[("t", [(0, FetchPosition(0, 1 << 20, 0))])])
    assert (await one(manager, stale)).error == "FENCED_LEADER_EPOCH"
    plain = manager_with(tmp_path, partition, L, selector=False)  # replica.selector.class unset
    assert (await one(plain, params("r2"))).preferred_read_replica == -1


def test_a_follower_out_of_the_isr_is_not_preferred(tmp_path: Path) -> None:
    asyncio.run(_a_follower_out_of_the_isr_is_not_preferred(tmp_path))


async def _a_follower_out_of_the_isr_is_not_preferred(tmp_path: Path) -> None:
    partition = leader_in_sync(tmp_path, count=2)
    manager = manager_with(tmp_path, partition, L)
    assert partition.become_leader(EPOCH, 1, REPLICAS, (L, F3), now_ms=2)  # F2 shrunk out
    read = await one(manager, params("r2"))
    assert read.preferred_read_replica == -1 and read.size > 0


def test_a_consumer_parked_on_a_follower_wakes_on_its_hw(tmp_path: Path) -> None:
    asyncio.run(_a_consumer_parked_on_a_follower_wakes_on_its_hw(tmp_path))


async def _a_consumer_parked_on_a_follower_wakes_on_its_hw(tmp_path: Path) -> None:
    partition, source = follower_with(tmp_path, count=1, hw=1)
    manager = manager_with(tmp_path, partition, F2)
    refused = await one(manager, params(None))  # Fetch < v11 at a follower
    assert refused.error == "NOT_LEADER_OR_FOLLOWER"
    position = FetchPosition(1, 1 << 20, current_leader_epoch=EPOCH)
    wait = FetchParams(-1, 600_000, 1, 1 << 20, [("t", [(0, position)])], client_rack="r2")
    parked = asyncio.create_task(manager.fetch(wait))
    await asyncio.sleep(0)
    assert not parked.done()
    source.append_as_leader(batch(b"next"), EPOCH)
    for data in source.read_batches(1):
        partition.append_as_follower(data)
    await asyncio.sleep(0)
    assert not parked.done()  # above this follower's HW: not yet visible
    partition.update_follower_high_watermark(2)
    results = await asyncio.wait_for(parked, timeout=30)
    read = results[0][1][0][1]
    assert records_bytes(read) == b"".join(source.read_batches(1))

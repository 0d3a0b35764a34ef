"""The coordinator runtime against a fake partition writer and an injected clock: loads
tied to leader epochs (newer reloads, stale ignored, superseded loads discarded), a load
that reads to the log end and serves only once the HW has passed it, one serialized
write queue per partition, rollback on a failed append, unload answering queued writes
at once, and timers. Last, the load's HW wait over the server's writer and a real
Partition, on a loop whose clock never moves: the HW advance itself must wake it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from odradek.coordinator.runtime import (
    CoordinatorError,
    CoordinatorResult,
    CoordinatorRuntime,
    PartitionState,
    leadership_changes,
)
from odradek.metadata.delta import MetadataDelta, PartitionChange
from odradek.metadata.image import PartitionImage, TopicImage
from odradek.records.codec import Record, encode_batch
from odradek.replica.partition import Partition
from odradek.replica.replica_manager import ReplicaManager
from odradek.server.coordinator_io import ReplicaPartitionWriter
from tests.coordinator.runtime_support import FakeWriter, RecordingShard
from tests.replica.partition_support import (
    F2,
    F3,
    LEADER,
    REPLICAS,
    TOPIC_ID,
    follower_fetch,
    new_log,
)

TOPIC = "__internal"
TP = (TOPIC, 0)
T = TypeVar("T")


class Rig:
    def __init__(self, *, auto_hw: bool = True) -> None:
        self.now = [1_000]
        self.writer = FakeWriter(auto_hw=auto_hw)
        self.shards: list[RecordingShard] = []
        self.runtime: CoordinatorRuntime[RecordingShard] = CoordinatorRuntime(
            TOPIC, self.writer, self._new_shard, lambda: self.now[0]
        )

    def _new_shard(self, partition: int) -> RecordingShard:
        shard = RecordingShard(partition, self.now)
        self.shards.append(shard)
        return shard

    def error_of(self, partition: int = 0) -> str:
        try:
            self.runtime.shard(partition)
        except CoordinatorError as error:
            return error.code
        return "NONE"


def run(test: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(test(), 10))


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def loaded(rig: Rig, partition: int = 0) -> RecordingShard:
    for _ in range(200):
        if rig.runtime.state(partition) is PartitionState.ACTIVE:
            return rig.runtime.shard(partition)
        await asyncio.sleep(0)
    raise AssertionError(f"not loaded: {rig.runtime.state(partition)}")


# -- loading -------------------------------------------------------------------------------
def test_load_reads_to_the_log_end_and_serves_once_the_hw_passes_it() -> None:
    async def test() -> None:
        rig = Rig(auto_hw=False)
        rig.writer.write_directly(TP, (b"a", b"1"), (b"b", b"2"))
        rig.writer.write_directly(TP, (b"a", b"3"))
        rig.writer.set_high_watermark(TP, 1)  # a new leader's HW trails the old one's
        assert rig.error_of() == "NOT_COORDINATOR"
        rig.runtime.on_leadership(0, 5)
        assert rig.error_of() == "COORDINATOR_LOAD_IN_PROGRESS"
        await settle()
        assert rig.writer.reads == [(TP, 0, 3)]  # to the log end, not the HW
        shard = rig.shards[0]
        assert shard.state == {b"a": b"3", b"b": b"2"} and shard.replayed == [0, 1, 2]
        assert rig.runtime.state(0) is PartitionState.AWAITING_HW
        assert rig.error_of() == "COORDINATOR_LOAD_IN_PROGRESS" and shard.loaded == 0
        with pytest.raises(CoordinatorError, match="COORDINATOR_LOAD_IN_PROGRESS"):
            await rig.runtime.write(0, lambda s: s.put(b"c", b"x", None))
        rig.writer.set_high_watermark(TP, 2)
        await settle()
        assert rig.error_of() == "COORDINATOR_LOAD_IN_PROGRESS"
        rig.writer.set_high_watermark(TP, 3)
        assert await loaded(rig) is shard and shard.loaded == 1
        await rig.runtime.stop()

    run(test)


def test_newer_epoch_reloads_and_stale_or_repeated_epochs_are_ignored() -> None:
    async def test() -> None:
        rig = Rig()
        rig.writer.write_directly(TP, (b"a", b"1"))
        rig.writer.set_high_watermark(TP, 1)
        rig.runtime.on_leadership(0, 3)
        first = await loaded(rig)
        rig.runtime.on_leadership(0, 3)  # the same epoch again (another delta)
        rig.runtime.on_leadership(0, 2)  # a stale event
        await settle()
        assert rig.shards == [first] and rig.runtime.shard(0) is first
        rig.runtime.on_leadership(0, 4)  # lost and regained in between: reload
        assert first.unloaded == 1
        second = await loaded(rig)
        assert second is not first and second.state == {b"a": b"1"}
        rig.runtime.on_leadership(0, None)
        assert second.unloaded == 1 and rig.error_of() == "NOT_COORDINATOR"
        await rig.runtime.stop()

    run(test)


def test_a_load_of_an_old_epoch_is_discarded() -> None:
    async def test() -> None:
        rig = Rig(auto_hw=False)
        rig.writer.write_directly(TP, (b"a", b"1"))
        rig.runtime.on_leadership(0, 1)
        await settle()
        old = rig.shards[0]
        assert rig.runtime.state(0) is PartitionState.AWAITING_HW  # HW 0 < 1
        rig.runtime.on_leadership(0, 2)  # a new epoch while the old load waits
        await settle()
        assert len(rig.shards) == 2 and old.unloaded == 1
        rig.writer.set_high_watermark(TP, 1)  # both loads' waits end
        new = await loaded(rig)
        await settle()
        assert new is rig.shards[1] and old.loaded == 0 and new.loaded == 1

        # A load superseded in the middle of its replay stops replaying.
        for i in range(5):
            rig.writer.write_directly(TP, (b"k%d" % i, b"v"))
        rig.runtime.on_leadership(0, 3)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        rig.runtime.on_leadership(0, None)
        await settle()
        partial = rig.shards[2]
        assert len(partial.replayed) < 6 and partial.loaded == 0
        assert rig.error_of() == "NOT_COORDINATOR"
        await rig.runtime.stop()

    run(test)


# -- the write queue -----------------------------------------------------------------------
def test_writes_run_one_at_a_time_in_order_each_after_the_previous_append() -> None:
    async def test() -> None:
        rig = Rig()
        rig.runtime.on_leadership(0, 0)
        shard = await loaded(rig)
        rig.writer.hold = True
        seen: list[tuple[str, dict[bytes, bytes | None]]] = []

        def op(name: str) -> Callable[[RecordingShard], CoordinatorResult[Any]]:
            def run_op(s: RecordingShard) -> CoordinatorResult[Any]:
                seen.append((name, dict(s.state)))  # what the op sees when it runs
                return s.put(b"k", name.encode(), name)

            return run_op

        writes = [asyncio.ensure_future(rig.runtime.write(0, op(n))) for n in ("w1", "w2", "w3")]
        await settle()
        assert [name for name, _ in seen] == ["w1"] and len(rig.writer.held) == 1
        assert shard.state == {}  # not applied before its append completes
        rig.writer.release()
        await settle()
        assert [name for name, _ in seen] == ["w1", "w2"]
        assert seen[1][1] == {b"k": b"w1"} and writes[0].result() == "w1"
        rig.writer.release()
        await settle()
        rig.writer.release()
        assert await asyncio.gather(*writes) == ["w1", "w2", "w3"]
        assert shard.state == {b"k": b"w3"}
        assert [[r.value for r in records] for _, records in rig.writer.appended] == [
            [b"w1"],
            [b"w2"],
            [b"w3"],
        ]
        await rig.runtime.stop()

    run(test)


def test_a_failed_append_rolls_back_and_answers_the_error() -> None:
    async def test() -> None:
        rig = Rig()
        rig.runtime.on_leadership(0, 0)
        shard = await loaded(rig)
        await rig.runtime.write(0, lambda s: s.put(b"k", b"old", None))
        rig.writer.fail = "NOT_LEADER_OR_FOLLOWER"
        with pytest.raises(CoordinatorError) as raised:
            await rig.runtime.write(0, lambda s: s.put(b"k", b"new", None))
        assert raised.value.code == "NOT_COORDINATOR" and shard.state == {b"k": b"old"}
        rig.writer.fail = "KAFKA_STORAGE_ERROR"
        rolled_back: list[str] = []

        def answering(s: RecordingShard) -> CoordinatorResult[str]:
            s.state[b"pending"] = b"x"  # changed before the append: rollback undoes it

            def rollback(error: CoordinatorError) -> str:
                del s.state[b"pending"]
                rolled_back.append(error.code)
                return f"failed: {error.code}"

            return CoordinatorResult("ok", [(b"k", b"v")], None, rollback)

        assert await rig.runtime.write(0, answering) == "failed: COORDINATOR_NOT_AVAILABLE"
        assert rolled_back == ["COORDINATOR_NOT_AVAILABLE"] and shard.state == {b"k": b"old"}
        rig.writer.fail = None

        def broken(s: RecordingShard) -> CoordinatorResult[None]:
            raise CoordinatorError("GROUP_ID_NOT_FOUND")

        with pytest.raises(CoordinatorError, match="GROUP_ID_NOT_FOUND"):
            await rig.runtime.write(0, broken)
        assert await rig.runtime.write(0, lambda s: s.put(b"k", b"after", "ok")) == "ok"
        await rig.runtime.stop()

    run(test)


def test_unload_answers_queued_writes_at_once_and_lets_the_one_in_flight_finish() -> None:
    async def test() -> None:
        rig = Rig()
        rig.runtime.on_leadership(0, 0)
        await loaded(rig)
        rig.writer.hold = True
        in_flight = asyncio.ensure_future(rig.runtime.write(0, lambda s: s.put(b"a", b"1", 1)))
        queued = [
            asyncio.ensure_future(rig.runtime.write(0, lambda s: s.put(b"b", b"2", 2)))
            for _ in range(3)
        ]
        await settle()
        rig.runtime.on_leadership(0, None)
        await settle()
        for write in queued:
            assert write.done()
            error = write.exception()
            assert isinstance(error, CoordinatorError) and error.code == "NOT_COORDINATOR"
        assert not in_flight.done() and rig.shards[0].unloaded == 1
        rig.writer.release()
        assert await in_flight == 1  # in the log: its answer is what the log says
        assert len(rig.writer.appended) == 1
        await rig.runtime.stop()

    run(test)


def test_partitions_have_separate_queues() -> None:
    async def test() -> None:
        rig = Rig()
        rig.runtime.on_leadership(0, 0)
        rig.runtime.on_leadership(1, 0)
        await loaded(rig, 0)
        await loaded(rig, 1)
        rig.writer.hold = True
        slow = asyncio.ensure_future(rig.runtime.write(0, lambda s: s.put(b"a", b"1", 0)))
        await settle()
        rig.writer.hold = False
        assert await rig.runtime.write(1, lambda s: s.put(b"b", b"1", 1)) == 1
        assert not slow.done()
        rig.writer.release()
        assert await slow == 0
        await rig.runtime.stop()

    run(test)


# -- timers --------------------------------------------------------------------------------
def test_due_shards_tick_once_as_writes_with_the_injected_clock() -> None:
    async def test() -> None:
        rig = Rig()
        for partition in (0, 1):
            rig.runtime.on_leadership(partition, 0)
            await loaded(rig, partition)
        first, second = rig.shards
        first.deadline = 1_500
        second.deadline = 3_000
        assert rig.runtime.next_tick_s() == pytest.approx(0.05)  # longest sleep
        rig.now[0] = 1_480
        assert rig.runtime.next_tick_s() == pytest.approx(0.021)
        assert rig.runtime.run_due_timers() == 0
        rig.now[0] = 1_500
        rig.writer.hold = True
        assert rig.runtime.run_due_timers() == 1
        assert rig.runtime.run_due_timers() == 0  # queued once, not per ticker round
        await settle()
        assert first.ticks == [1_500] and second.ticks == []
        assert first.state == {}  # applied once written
        rig.writer.release()
        await settle()
        assert first.state == {b"tick": b"1500"}
        rig.now[0] = 3_100
        rig.writer.hold = False
        assert rig.runtime.run_due_timers() == 1
        await settle()
        assert second.ticks == [3_100] and second.state == {b"tick": b"3100"}
        await rig.runtime.stop()

    run(test)


def test_ticker_runs_from_start_until_stop() -> None:
    async def test() -> None:
        rig = Rig()
        rig.runtime.start()
        rig.runtime.on_leadership(0, 0)
        shard = await loaded(rig)
        shard.deadline = rig.now[0]
        for _ in range(100):
            if shard.ticks:
                break
            await asyncio.sleep(0.01)
        assert shard.ticks == [rig.now[0]]
        await rig.runtime.stop()
        assert shard.unloaded == 1

    run(test)


# -- leadership from metadata deltas -------------------------------------------------------
def test_leadership_changes_from_a_metadata_delta() -> None:
    topic_id, other_id = uuid.uuid4(), uuid.uuid4()
    ours = TopicImage(TOPIC, topic_id)
    other = TopicImage("other", other_id)

    def change(topic: TopicImage, partition: int, old: int | None, new: int, epoch: int) -> Any:
        before = None if old is None else PartitionImage(partition, (1, 2), (1, 2), old, epoch - 1)
        after = PartitionImage(partition, (1, 2), (1, 2), new, epoch)
        return (topic.topic_id, partition), PartitionChange(topic, before, after)

    delta = MetadataDelta(
        0,
        1,
        partitions=dict(
            [
                change(ours, 2, 2, 1, 7),  # moved here
                change(ours, 0, None, 2, 0),  # created elsewhere
                change(ours, 1, 1, 2, 4),  # moved away
                change(other, 0, None, 1, 0),  # not the internal topic
            ]
        ),
    )
    assert leadership_changes(delta, TOPIC, 1) == [(0, None), (1, None), (2, 7)]
    gone = TopicImage(TOPIC, uuid.uuid4(), {0: PartitionImage(0, (1,), (1,), 1, 3)})
    deleted = MetadataDelta(0, 1, deleted_topics={gone.topic_id: gone})
    assert leadership_changes(deleted, TOPIC, 1) == [(0, None)]


def test_stop_answers_the_write_in_flight_too() -> None:
    async def test() -> None:
        rig = Rig()
        rig.runtime.on_leadership(0, 0)
        await loaded(rig)
        rig.writer.hold = True
        in_flight = asyncio.ensure_future(rig.runtime.write(0, lambda s: s.put(b"a", b"1", 1)))
        queued = asyncio.ensure_future(rig.runtime.write(0, lambda s: s.put(b"b", b"2", 2)))
        await settle()
        await rig.runtime.stop()
        for write in (in_flight, queued):
            error = write.exception()
            assert isinstance(error, CoordinatorError) and error.code == "NOT_COORDINATOR"

    run(test)


def test_a_load_waits_until_the_replica_leads_in_its_epoch() -> None:
    async def test() -> None:
        rig = Rig()
        rig.writer.write_directly(TP, (b"a", b"1"))
        rig.writer.set_high_watermark(TP, 1)
        rig.writer.leader_epochs[TP] = 6  # the metadata says 7; the replica lags
        rig.runtime.on_leadership(0, 7)
        await asyncio.sleep(0.05)
        assert rig.runtime.state(0) is PartitionState.LOADING and rig.writer.reads == []
        assert rig.error_of() == "COORDINATOR_LOAD_IN_PROGRESS"
        rig.writer.write_directly(TP, (b"b", b"2"))  # still fetched as a follower
        rig.writer.set_high_watermark(TP, 2)
        rig.writer.leader_epochs[TP] = 7
        shard = await loaded_within(rig, 10.0)
        assert shard.state == {b"a": b"1", b"b": b"2"}
        await rig.runtime.stop()

    run(test)


async def loaded_within(rig: Rig, timeout_s: float) -> RecordingShard:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while rig.runtime.state(0) is not PartitionState.ACTIVE:
        assert asyncio.get_running_loop().time() < deadline, rig.runtime.state(0)
        await asyncio.sleep(0.01)
    return rig.runtime.shard(0)


# -- the HW wait over a real partition: woken by the advance, never by a timer ----------------
class FrozenClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock never moves: no timer (a poll's sleep) ever fires, so
    only a wake-up can finish what waits on it."""

    def time(self) -> float:
        return 0.0


class ReplicaRig:
    """The runtime over the server's ReplicaPartitionWriter and a real leader Partition
    of three replicas whose followers have not fetched yet (its HW trails its log end)."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = new_log(tmp_path / f"{TOPIC}-0")
        self.partition = Partition(TOPIC, 0, TOPIC_ID, self.log, LEADER)
        self.partition.become_leader(5, 0, REPLICAS, REPLICAS, now_ms=0)
        records = [Record(i, 1_000, key, b"v") for i, key in enumerate((b"a", b"b", b"c"))]
        self.partition.append_as_leader(encode_batch(records), acks=1)
        assert self.log.high_watermark == 0
        replicas = ReplicaManager(LEADER, None)  # type: ignore[arg-type]  # no deltas here
        replicas.partitions[TP] = self.partition
        self.shards: list[RecordingShard] = []
        self.runtime: CoordinatorRuntime[RecordingShard] = CoordinatorRuntime(
            TOPIC, ReplicaPartitionWriter(replicas), self._new_shard, lambda: 1_000
        )

    def _new_shard(self, partition: int) -> RecordingShard:
        self.shards.append(RecordingShard(partition, [1_000]))
        return self.shards[-1]

    def state(self) -> PartitionState:
        return self.runtime.state(0)


def run_frozen(test: Callable[[], Awaitable[None]]) -> None:
    loop = FrozenClockLoop()
    try:
        loop.run_until_complete(test())
    finally:
        loop.close()


def test_a_load_is_woken_by_the_hw_advance_with_no_clock_moving(tmp_path: Path) -> None:
    rig = ReplicaRig(tmp_path)

    async def test() -> None:
        rig.runtime.on_leadership(0, 5)
        await settle()
        assert rig.state() is PartitionState.AWAITING_HW  # replayed to 3, the HW is 0
        assert rig.shards[0].replayed == [0, 1, 2]
        follower_fetch(rig.partition, F2, 3, now_ms=1)
        await settle()
        assert rig.state() is PartitionState.AWAITING_HW  # F3 holds the HW at 0
        follower_fetch(rig.partition, F3, 2, now_ms=1)  # HW 2: not yet all it loaded
        await settle()
        assert rig.log.high_watermark == 2 and rig.state() is PartitionState.AWAITING_HW
        follower_fetch(rig.partition, F3, 3, now_ms=2)  # HW 3: the wait's wake-up
        await settle()  # no time passes on this loop: only the wake can finish the load
        assert rig.state() is PartitionState.ACTIVE and rig.shards[0].loaded == 1
        assert len(rig.partition.hw_waiters) == 0
        await rig.runtime.stop()

    run_frozen(test)
    rig.log.close()


def test_a_load_waiting_for_the_hw_ends_cleanly_when_leadership_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig = ReplicaRig(tmp_path)

    async def test() -> None:
        rig.runtime.on_leadership(0, 5)
        await settle()
        assert rig.state() is PartitionState.AWAITING_HW
        assert len(rig.partition.hw_waiters) == 1
        # One metadata delta, in the broker's order: the replica follows, then the
        # coordinator hears that this node no longer leads.
        rig.partition.become_follower(F2, 6, 1, REPLICAS, REPLICAS)
        rig.runtime.on_leadership(0, None)
        await settle()
        assert rig.state() is PartitionState.UNLOADED
        assert rig.shards[0].loaded == 0 and rig.shards[0].unloaded == 1
        assert len(rig.partition.hw_waiters) == 0

        # Leading again in a newer epoch: the next load waits afresh, and losing the
        # leadership in the coordinator's view alone cancels it and forgets its waiter.
        rig.partition.become_leader(7, 2, REPLICAS, REPLICAS, now_ms=3)
        rig.runtime.on_leadership(0, 7)
        await settle()
        assert rig.state() is PartitionState.AWAITING_HW
        rig.runtime.on_leadership(0, None)
        await settle()
        assert rig.state() is PartitionState.UNLOADED
        assert rig.partition.hw_waiters.complete_up_to(3) == 0  # nobody left to wake
        await rig.runtime.stop()

    with caplog.at_level(logging.INFO, logger="odradek.coordinator.runtime"):
        run_frozen(test)
    assert "cannot load" not in caplog.text  # a lost leadership is not a failed load
    rig.log.close()

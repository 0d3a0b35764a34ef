"""A seeded simulation of the transaction coordinator facade.

Clients (one per transactional id, plus the zombie instances each new instance
fences) run random InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / EndTxn /
verification requests against a ``TransactionCoordinator`` whose partition writer
is in memory and fails appends at random (cleanly, or after writing — an ambiguous
failure that also moves leadership, as a leader losing its place mid-append does),
whose marker channel fails and delays at random, while a chaos task moves the
leadership of ``__transaction_state`` partitions (reload from the log) and the clock
jumps (transaction timeouts). Everything runs on one event loop with ``sleep(0)``
yields only (backoffs are 0 ms), so a seed replays exactly.

Checked: every marker written agrees with the durable decision (the id's latest
record is Prepare of that outcome, producer id and epoch, holding the partition);
in the log a Prepare is followed only by itself or the Complete of the same outcome;
a fenced instance never gets NONE for AddPartitionsToTxn or EndTxn; an id's epoch
never decreases (for one producer id); a verification NONE matches the log; and at
the end, with failures off, every transaction is complete.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from odradek.coordinator.partition_writer import PartitionWriteError
from odradek.coordinator.transaction.coordinator import (
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinator,
    TransactionSettings,
)
from odradek.coordinator.transaction.markers import MarkerEntry
from odradek.coordinator.transaction.records import TransactionValue, decode_key, decode_value
from odradek.coordinator.transaction.state import PREPARED, TxnState
from odradek.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from tests.coordinator.runtime_support import FakeWriter

TopicPartition = tuple[str, int]
STATE_PARTITIONS = 2
DATA = [("t", 0), ("t", 1), ("u", 0), ("u", 1)]
IDS = ["alpha", "beta", "gamma", "delta"]
TIMEOUT_MS = 5_000
STEPS = 120
QUIESCE_ROUNDS_MAX = 2_000
PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = 2, 3, 4, 5


class SimulationFailure(AssertionError):
    pass


@dataclass
class Instance:
    """One producer instance of a transactional id."""

    txn: str
    producer_id: int
    epoch: int
    fenced: bool = False


@dataclass
class World:
    seed: int
    rng: random.Random
    now: list[int]
    trace: list[str] = field(default_factory=list)
    append_failure: float = 0.05
    ambiguous_failure: float = 0.02
    marker_failure: float = 0.3
    requests: int = 0
    markers_written: int = 0
    completed: int = 0

    def log(self, text: str) -> None:
        self.trace.append(f"{self.now[0]:>9} {text}")

    def fail(self, message: str) -> SimulationFailure:
        tail = "\n".join(self.trace[-40:])
        return SimulationFailure(
            f"seed {self.seed}: {message}\n"
            f"replay: .venv/bin/python -m tests.coordinator.transaction.simulation "
            f"--seed {self.seed}\n{tail}"
        )


class ChaosWriter(FakeWriter):
    """Appends fail at random: cleanly, or after writing (then leadership moves)."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        self.coordinator: TransactionCoordinator | None = None
        self.epochs: dict[int, int] = {}

    async def append(self, tp: TopicPartition, records: bytes) -> int:
        """As the replica layer: the batch lands in the log at the call (or the call
        fails at once), then the wait for the high watermark yields."""
        rng = self.world.rng
        roll = rng.random()
        if roll < self.world.append_failure:
            self.world.log(f"append to {tp} fails cleanly")
            raise PartitionWriteError("NOT_ENOUGH_REPLICAS")
        offset = await super().append(tp, records)
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        if roll < self.world.append_failure + self.world.ambiguous_failure:
            self.world.log(f"append to {tp} written, then leadership moves")
            self.move(tp[1])
            raise PartitionWriteError("NOT_LEADER_OR_FOLLOWER")
        return offset

    def move(self, partition: int, lose: bool = False) -> None:
        assert self.coordinator is not None
        if lose:
            self.coordinator.on_leadership(partition, None)
            return
        self.epochs[partition] = self.epochs.get(partition, 0) + 1
        self.coordinator.on_leadership(partition, self.epochs[partition])

    def latest(self) -> dict[str, TransactionValue | None]:
        """Each id's latest record in the log."""
        latest: dict[str, TransactionValue | None] = {}
        for partition in range(STATE_PARTITIONS):
            for batch in self.log((TRANSACTION_STATE_TOPIC, partition)).batches:
                for record in batch:
                    assert record.key is not None
                    value = None if record.value is None else decode_value(record.value)
                    latest[decode_key(record.key)] = value
        return latest

    def history(self) -> dict[str, list[TransactionValue | None]]:
        found: dict[str, list[TransactionValue | None]] = {}
        for partition in range(STATE_PARTITIONS):
            for batch in self.log((TRANSACTION_STATE_TOPIC, partition)).batches:
                for record in batch:
                    assert record.key is not None
                    value = None if record.value is None else decode_value(record.value)
                    found.setdefault(decode_key(record.key), []).append(value)
        return found


class ChaosMarkers:
    """Writes markers with random failures and delays, checking each against the log."""

    def __init__(self, world: World, writer: ChaosWriter) -> None:
        self.world = world
        self.writer = writer
        self.written: list[tuple[int, int, bool, TopicPartition]] = []

    async def write_markers(self, entries: Sequence[MarkerEntry]) -> Mapping[TopicPartition, str]:
        rng = self.world.rng
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)
        answers = {}
        latest = self.writer.latest()
        for entry in entries:
            for tp in entry.partitions:
                if rng.random() < self.world.marker_failure:
                    answers[tp] = rng.choice(["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"])
                    continue
                self.check(entry, tp, latest)
                self.written.append((entry.producer_id, entry.producer_epoch, entry.commit, tp))
                self.world.markers_written += 1
                answers[tp] = "NONE"
        return answers

    def check(
        self, entry: MarkerEntry, tp: TopicPartition, latest: dict[str, TransactionValue | None]
    ) -> None:
        owners = [
            (txn, value)
            for txn, value in latest.items()
            if value is not None and value.producer_id == entry.producer_id
        ]
        if len(owners) != 1:
            raise self.world.fail(f"marker {entry} for {tp}: owners in the log {owners}")
        txn, value = owners[0]
        status = PREPARE_COMMIT if entry.commit else PREPARE_ABORT
        partitions = {(t, p) for t, ids in value.partitions or () for p in ids}
        if (
            value.status != status
            or value.producer_epoch != entry.producer_epoch
            or tp not in partitions
        ):
            raise self.world.fail(f"marker {entry} for {tp} disagrees with {txn}'s {value}")


def image() -> MetadataImage:
    topics = {
        name: TopicImage(
            name,
            uuid.uuid4(),
            {i: PartitionImage(i, (1,), (1,), 1, 0) for i in range(2)},
        )
        for name in ("t", "u")
    }
    return MetadataImage(brokers={1: BrokerImage(1, ())}, topics=topics)


class ProducerIds:
    def __init__(self) -> None:
        self.next = 1000

    async def next_producer_id(self) -> int:
        self.next += 1
        return self.next


@dataclass
class Metadata:
    image: MetadataImage
    node_id: int = 1


class Simulation:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.world = World(seed, rng, [1_000_000])
        self.writer = ChaosWriter(self.world)
        self.markers = ChaosMarkers(self.world, self.writer)
        settings = TransactionSettings(
            partitions=STATE_PARTITIONS,
            replication_factor=1,
            abort_check_interval_ms=1_000,
            marker_retry_backoff_ms=0,
            marker_retry_backoff_max_ms=0,
        )
        self.coordinator = TransactionCoordinator(
            Metadata(image()),  # type: ignore[arg-type]
            self.writer,
            None,  # type: ignore[arg-type]
            settings,
            lambda: self.world.now[0],
            ProducerIds(),
            self.markers,
        )
        self.writer.coordinator = self.coordinator
        self.instances: dict[str, list[Instance]] = {txn: [] for txn in IDS}

    # -- clients -----------------------------------------------------------------------
    async def client(self, txn: str) -> None:
        rng = self.world.rng
        for _ in range(STEPS):
            for _ in range(rng.randrange(5)):
                await asyncio.sleep(0)
            await self.step(txn, rng)

    async def step(self, txn: str, rng: random.Random) -> None:
        c = self.coordinator
        live = [i for i in self.instances[txn] if not i.fenced]
        zombies = [i for i in self.instances[txn] if i.fenced]
        action = rng.random()
        self.world.requests += 1
        if not live or action < 0.08:
            result = await c.init_producer_id(txn, TIMEOUT_MS)
            self.world.log(f"{txn}: init -> {result}")
            if result.error == "NONE":
                self.initialized(txn, result.producer_id, result.producer_epoch)
            return
        instance = live[-1]
        if zombies and action < 0.2:
            instance = rng.choice(zombies)
        fenced = instance.fenced
        action = rng.random()
        if action < 0.45:
            tps = rng.sample(DATA, rng.randrange(1, 3))
            errors = await c.add_partitions(txn, instance.producer_id, instance.epoch, tps)
            error = next(iter(errors.values()))
            self.world.log(f"{txn}: {instance} add {tps} -> {error}")
        elif action < 0.55:
            error = await c.add_offsets(txn, instance.producer_id, instance.epoch, rng.randrange(3))
            self.world.log(f"{txn}: {instance} add offsets -> {error}")
        elif action < 0.65:
            tps = rng.sample(DATA, 2)
            fenced = instance.fenced
            answers = await c.verify_partitions(txn, instance.producer_id, instance.epoch, tps)
            self.world.log(f"{txn}: {instance} verify {tps} -> {answers}")
            self.check_verified(txn, instance, fenced, answers)
            return
        else:
            commit = rng.random() < 0.6
            error = await c.end_txn(txn, instance.producer_id, instance.epoch, commit)
            self.world.log(f"{txn}: {instance} end commit={commit} -> {error}")
        if error == "NONE" and fenced:
            raise self.world.fail(f"fenced {instance} got NONE")

    def initialized(self, txn: str, producer_id: int, epoch: int) -> None:
        for other in self.instances[txn]:
            if other.producer_id != producer_id or other.epoch < epoch:
                other.fenced = True
            elif other.epoch > epoch:
                raise self.world.fail(f"{txn}: init gave epoch {epoch} after {other}")
        self.instances[txn].append(Instance(txn, producer_id, epoch))

    def check_verified(
        self, txn: str, instance: Instance, fenced: bool, answers: Mapping[TopicPartition, str]
    ) -> None:
        """A verification NONE needs an Ongoing record of that producer id and epoch
        holding the partition (the log may have moved on since the answer was made)."""
        history = [v for v in self.writer.history().get(txn, []) if v is not None]
        for tp, error in answers.items():
            if error != "NONE":
                continue
            if fenced:
                raise self.world.fail(f"fenced {instance} verified {tp}")
            if not any(
                v.status == 1
                and v.producer_id == instance.producer_id
                and v.producer_epoch == instance.epoch
                and tp in {(t, p) for t, ids in v.partitions or () for p in ids}
                for v in history
            ):
                raise self.world.fail(f"{txn}: verified {tp}, never in the log: {history}")

    # -- chaos ---------------------------------------------------------------------------
    async def chaos(self, stop: asyncio.Event) -> None:
        rng = self.world.rng
        lost: set[int] = set()
        while not stop.is_set():
            for _ in range(rng.randrange(1, 8)):
                await asyncio.sleep(0)
            roll = rng.random()
            partition = rng.randrange(STATE_PARTITIONS)
            if roll < 0.05:
                self.world.log(f"leadership of {partition} moves")
                lost.discard(partition)
                self.writer.move(partition)
            elif roll < 0.07 and partition not in lost:
                self.world.log(f"leadership of {partition} lost")
                lost.add(partition)
                self.writer.move(partition, lose=True)
            elif roll < 0.12 and lost:
                back = lost.pop()
                self.world.log(f"leadership of {back} back")
                self.writer.move(back)
            elif roll < 0.5:
                self.world.now[0] += rng.randrange(0, 1_500)
                self.coordinator.runtime.run_due_timers()
        for partition in sorted(lost):
            self.writer.move(partition)

    # -- the run ---------------------------------------------------------------------------
    async def run(self) -> None:
        for partition in range(STATE_PARTITIONS):
            self.writer.move(partition)
        stop = asyncio.Event()
        chaos = asyncio.get_running_loop().create_task(self.chaos(stop))
        try:
            await asyncio.gather(*(self.client(txn) for txn in IDS))
        finally:
            stop.set()
            await chaos
        await self.quiesce()
        self.check_log()
        await self.coordinator.stop()

    async def quiesce(self) -> None:
        """Failures off, time runs: every transaction must complete."""
        self.world.append_failure = self.world.ambiguous_failure = 0.0
        self.world.marker_failure = 0.0
        self.world.log("quiesce")
        for _ in range(QUIESCE_ROUNDS_MAX):
            await asyncio.sleep(0)
            self.world.now[0] += 100
            self.coordinator.runtime.run_due_timers()
            if self.quiet():
                return
        raise self.world.fail(f"not quiet: {self.writer.latest()}")

    def quiet(self) -> bool:
        if self.coordinator.finishing():
            return False
        for _, shard in self.coordinator.runtime.active_shards():
            if any(m.state in PREPARED or m.pending for m in shard.ids.values()):
                return False
        loaded = {p for p, _ in self.coordinator.runtime.active_shards()}
        return loaded == set(range(STATE_PARTITIONS))

    def check_log(self) -> None:
        for txn, values in self.writer.history().items():
            previous: TransactionValue | None = None
            for value in values:
                if previous is not None and value is not None:
                    same_id = value.producer_id == previous.producer_id
                    if same_id and value.producer_epoch < previous.producer_epoch:
                        raise self.world.fail(f"{txn}: epoch went back: {previous} -> {value}")
                    if previous.status in (PREPARE_COMMIT, PREPARE_ABORT):
                        same = replace(value, last_update_ms=previous.last_update_ms)
                        done = (
                            COMPLETE_COMMIT if previous.status == PREPARE_COMMIT else COMPLETE_ABORT
                        )
                        if same != previous and not (
                            value.status == done
                            and value.producer_id == previous.producer_id
                            and value.producer_epoch == previous.producer_epoch
                        ):
                            raise self.world.fail(f"{txn}: {previous} followed by {value}")
                    if value.status in (COMPLETE_COMMIT, COMPLETE_ABORT):
                        self.world.completed += 1
                previous = value
            if previous is not None and previous.status in (PREPARE_COMMIT, PREPARE_ABORT):
                raise self.world.fail(f"{txn} ends in {previous}")
        for _, shard in self.coordinator.runtime.active_shards():
            for metadata in shard.ids.values():
                if metadata.state in PREPARED or metadata.state is TxnState.PREPARE_EPOCH_FENCE:
                    raise self.world.fail(f"{metadata.transactional_id} left in {metadata.state}")


def run_seed(seed: int) -> Simulation:
    sim = Simulation(seed)

    async def main() -> None:
        await asyncio.wait_for(sim.run(), 60)

    asyncio.run(main())
    return sim


def _summary(sim: Simulation) -> dict[str, Any]:
    w = sim.world
    return {
        "requests": w.requests,
        "markers": w.markers_written,
        "completed": w.completed,
        "trace": len(w.trace),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args()
    result = run_seed(args.seed)
    if args.trace:
        print("\n".join(result.world.trace))
    print(_summary(result))

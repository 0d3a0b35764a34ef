"""A deterministic, seeded simulation of a KRaft quorum, checking safety after every step.

How this works and why: a real cluster's bugs hide in interleavings that tests written
by hand never reach. Here every source of nondeterminism — message delays, drops,
duplicates and reordering, partitions, crashes and restarts, skewed node clocks, client
appends, snapshots — comes from one ``random.Random(seed)``, so any failure replays
exactly from its seed (``make simulate SEED=... VOTERS=...``). Time is a global event
queue; each node sees it through its own clock (an offset and a rate within ±3%).

Entries span offsets as Kafka's batches do: a client append takes 1–5 offsets (drawn
from the seed), and in some runs the LeaderChange entry takes two, so every invariant
is checked with offsets that are not entry boundaries around.

Crashes are honest about durability: the in-memory log keeps only its flushed prefix,
partial snapshots vanish, the election store survives (it is written synchronously), and
messages in flight to or from the old incarnation are dropped (as TCP would).

A run has a chaotic phase, then a calm one (partitions healed, crashed nodes restarted,
no more drops) in which the quorum must elect a leader and commit new entries.

Checked after every step (``check_invariants``):
* at most one leader per epoch, over the whole run;
* a node's epoch never decreases, across restarts too;
* a committed entry (below any node's high watermark) never changes: every node's
  committed prefix agrees with the global record, a node never holds a high watermark
  above its log end, and every new leader's log contains everything committed in an
  earlier epoch (Raft's leader completeness; a candidate paused with its votes may win
  an old epoch late, without what a later epoch committed, and can commit nothing);
* each node's state machine sees the same sequence (a digest chain, also carried in
  snapshots);
* a leader's high watermark never goes back;
* the highest high watermark is on a majority of voters' flushed logs (or snapshots).
"""

from __future__ import annotations

import collections
import heapq
import random
import shutil
import tempfile
from pathlib import Path

from odradek.raft import (
    Inbound,
    MemoryElectionStore,
    MemorySnapshotStore,
    NotLeaderError,
    Outbound,
    RaftConfig,
    RaftNode,
)
from odradek.raft.control_records import encode_leader_change
from odradek.raft.election import (
    ControlEntryBuilder,
    leader_change_payload,
    plain_control_entry,
)
from odradek.raft.log import LogEntry, stamped
from odradek.raft.messages import REQUEST_TYPES, FetchRequest
from odradek.raft.node import BackPressureError
from odradek.records.codec import Record, encode_batch
from tests.raft.invariants import InvariantChecks
from tests.raft.model import (
    INITIAL_DIGEST,
    CountingDiskLog,
    CountingLog,
    Scenario,
    SimNode,
    SimulationFailure,
)

__all__ = ["Scenario", "Simulation", "SimulationFailure", "run_seed", "scenario_for"]

# Events remembered for the failure report.
TRACE_EVENTS = 60
# A run that needs more events than this is looping, not simulating.
MAX_EVENTS = 2_000_000
CLUSTER_ID = "simulated-cluster"
# A client append takes 1..this many offsets (a batch of that many records).
MAX_ENTRY_OFFSETS = 5
SIM_CONFIG = RaftConfig(
    election_timeout_ms=1000,
    fetch_timeout_ms=2000,
    election_backoff_max_ms=1000,
    retry_backoff_ms=20,
    request_timeout_ms=400,
    append_linger_ms=25,
    fetch_max_wait_ms=200,
    fetch_max_bytes=4096,
    snapshot_chunk_bytes=64,
)


class Simulation(InvariantChecks):
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.rng = random.Random(scenario.seed)
        self.voter_ids = list(range(1, scenario.voters + 1))
        ids = list(self.voter_ids)
        if scenario.observer:
            ids.append(scenario.voters + 1)
        self.nodes = {
            node_id: SimNode(
                node_id,
                clock_offset_ms=self.rng.uniform(0, 1_000_000),
                clock_rate=self.rng.uniform(0.97, 1.03),
            )
            for node_id in ids
        }
        # Disk runs keep each node's log in its own directory (tmpfs when there is one:
        # fsync is what the run counts, not what it waits for).
        self.root: Path | None = None
        if scenario.disk:
            shm = Path("/dev/shm")
            parent = shm if shm.is_dir() else None
            self.root = Path(tempfile.mkdtemp(prefix="raft-sim-", dir=parent))
            for node in self.nodes.values():
                node.log = CountingDiskLog.create(self.root / f"{node.node_id}-0")
        self.now = 0.0
        self.queue: list[tuple[float, int, tuple[object, ...]]] = []
        self.sequence = 0
        self.trace: collections.deque[str] = collections.deque(maxlen=TRACE_EVENTS)
        self.partitioned: set[frozenset[int]] = set()
        self.calm = False
        self.init_truth()
        self.appended = 0
        self.calm_payloads: set[bytes] = set()
        self.events = 0
        self.crashes = 0
        self.snapshots_taken = 0
        self.wipes = 0
        # The long poll: (answering node, asker, correlation id) → the asker's
        # incarnation when the request arrived. An answer goes back on that connection,
        # so a parked fetch released after the asker restarted is dropped, as TCP would.
        self.request_origins: dict[tuple[int, int, int], int] = {}
        self.fetches_parked = 0
        self.fetches_released = 0
        self.flushes_started = 0
        self.flushes_voided = 0

    # --- scheduling ---------------------------------------------------------------------

    def schedule(self, at: float, event: tuple[object, ...]) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (at, self.sequence, event))

    def schedule_tick(self, node: SimNode) -> None:
        if node.raft is None:
            return
        at = max(node.global_time_of(node.raft.next_deadline_ms()), self.now)
        if node.local_ms(at) < node.raft.next_deadline_ms():
            at += 1.0 / node.clock_rate
        if at < node.tick_at:
            node.tick_generation += 1
            node.tick_at = at
            self.schedule(at, ("tick", node.node_id, node.tick_generation))

    def fail(self, reason: str) -> SimulationFailure:
        scenario = self.scenario
        lines = [
            f"seed {scenario.seed}, {scenario.voters} voters: {reason}",
            f"at t={self.now:.3f} ms after {self.events} events",
            f"replay: make simulate SEED={scenario.seed} VOTERS={scenario.voters}"
            f"  (or python -m tests.raft.simulate --seed {scenario.seed}"
            f" --voters {scenario.voters}{' --disk' if scenario.disk else ''})",
            "last events:",
            *("  " + line for line in self.trace),
        ]
        return SimulationFailure("\n".join(lines))

    # --- running --------------------------------------------------------------------------

    def run(self) -> Simulation:
        try:
            return self._run()
        finally:
            if self.root is not None:
                for node in self.nodes.values():
                    if isinstance(node.log, CountingDiskLog):
                        for segment in node.log.storage_log.segments:
                            segment.close()
                shutil.rmtree(self.root, ignore_errors=True)

    def _run(self) -> Simulation:
        scenario = self.scenario
        for node in self.nodes.values():
            self.start_node(node)
        self.schedule(self.rng.uniform(*scenario.crash_interval_ms), ("fault",))
        self.schedule(self.rng.uniform(*scenario.client_interval_ms), ("client",))
        for node_id in self.nodes:
            self.schedule(self.rng.uniform(*scenario.snapshot_interval_ms), ("snapshot", node_id))
        self.schedule(scenario.chaos_ms, ("calm",))
        end = scenario.chaos_ms + scenario.calm_ms
        while self.queue:
            at, _, event = heapq.heappop(self.queue)
            if at > end:
                break
            self.now = at
            self.events += 1
            if self.events > MAX_EVENTS:
                raise self.fail("too many events (a timer loop?)")
            try:
                self.dispatch(event)
            except SimulationFailure:
                raise
            except AssertionError as error:
                raise self.fail(f"assertion in the node: {error}") from error
            self.check_invariants()
        self.now = end
        self.check_liveness()
        return self

    def dispatch(self, event: tuple[object, ...]) -> None:
        kind = event[0]
        if kind == "tick":
            _, node_id, generation = event
            node = self.nodes[node_id]  # type: ignore[index]
            if node.raft is None or generation != node.tick_generation:
                return
            if self.now < node.paused_until:
                node.tick_at = node.paused_until
                self.schedule(node.paused_until, event)
                return
            node.tick_at = float("inf")
            self.trace.append(f"{self.now:10.3f} tick {node_id} ({node.raft.role_name})")
            self.send(node, node.raft.tick(node.local_ms(self.now)))
            self.after_step(node)
        elif kind == "deliver":
            self.deliver(event)
        elif kind == "fault":
            self.inject_fault()
        elif kind == "restart":
            node = self.nodes[event[1]]  # type: ignore[index]
            if node.raft is None:
                self.start_node(node)
        elif kind == "heal":
            self.trace.append(f"{self.now:10.3f} heal partitions")
            self.partitioned.clear()
        elif kind == "client":
            self.client_append()
        elif kind == "snapshot":
            self.take_snapshot(self.nodes[event[1]])  # type: ignore[index]
        elif kind == "calm":
            self.begin_calm()
        elif kind == "flushed":
            self.complete_flush(event)

    def start_node(self, node: SimNode) -> None:
        node.incarnation += 1
        node.pending_flush = None
        node.tick_at = float("inf")
        node.applied_offset = 0
        node.digest = INITIAL_DIGEST
        node.raft = RaftNode(
            node.node_id,
            self.voter_ids,
            node.log,
            node.store,
            node.snapshots,
            SIM_CONFIG,
            random.Random(self.rng.random()),
            node.local_ms(self.now),
            cluster_id=CLUSTER_ID,
            control_entry=self.control_entry(),
            defer_flush=self.scenario.split_flush,
        )
        if node.raft.epoch < node.max_epoch:
            raise self.fail(f"node {node.node_id} restarted in epoch {node.raft.epoch}")
        node.verified_offset = node.raft.high_watermark
        self.trace.append(
            f"{self.now:10.3f} start {node.node_id} #{node.incarnation} as "
            f"{node.raft.role_name} epoch {node.raft.epoch} log "
            f"[{node.log.start_offset}, {node.log.end_offset}) flushed {node.log.flushed_offset}"
        )
        self.after_step(node)

    @property
    def truncated_entries(self) -> int:
        return sum(node.log.truncated_entries for node in self.nodes.values())

    @property
    def snapshot_installs(self) -> int:
        return sum(node.log.snapshot_installs for node in self.nodes.values())

    def wipe(self, node: SimNode) -> None:
        """Lose the observer's disk: it comes back empty and catches up from scratch.
        (Voters are not wiped: without KIP-853 directory ids a wiped voter could vote
        twice in one epoch, which no Raft survives.)"""
        self.trace.append(f"{self.now:10.3f} wipe {node.node_id}")
        if self.root is not None:
            old = node.log
            assert isinstance(old, CountingDiskLog)
            for segment in old.storage_log.segments:
                segment.close()
            node.log = CountingDiskLog.create(self.root / f"{node.node_id}-{self.wipes + 1}")
        else:
            node.log = CountingLog()
        node.store = MemoryElectionStore()
        node.snapshots = MemorySnapshotStore()
        node.max_epoch = 0
        self.wipes += 1

    def crash(self, node: SimNode) -> None:
        assert node.raft is not None
        self.trace.append(
            f"{self.now:10.3f} crash {node.node_id} ({node.raft.role_name} epoch "
            f"{node.raft.epoch}, log end {node.log.end_offset} flushed {node.log.flushed_offset})"
        )
        node.raft = None
        unflushed = node.log.end_offset - node.log.flushed_offset
        node.log.crash()
        node.log.truncated_entries -= unflushed  # lost, not truncated by the protocol
        node.snapshots.crash()
        self.crashes += 1

    # --- the network ----------------------------------------------------------------------

    def send(self, source: SimNode, outbound: list[Outbound], answering: int | None = None) -> None:
        """``answering``: the correlation id of the request just handled, if any; an
        answer to any other request is a parked fetch released."""
        scenario = self.scenario
        for message in outbound:
            destination = self.nodes.get(message.destination_id)
            if destination is None or destination.raft is None:
                continue
            destination_incarnation = destination.incarnation
            if not isinstance(message.message, REQUEST_TYPES):
                key = (source.node_id, destination.node_id, message.correlation_id)
                destination_incarnation = self.request_origins.pop(key, destination_incarnation)
                if message.correlation_id != answering:
                    self.fetches_released += 1
            if frozenset((source.node_id, destination.node_id)) in self.partitioned:
                continue
            if not self.calm and self.rng.random() < scenario.drop_probability:
                continue
            copies = 1
            if not self.calm and self.rng.random() < scenario.duplicate_probability:
                copies = 2
            for _ in range(copies):
                delay = self.rng.uniform(0.5, 8.0)
                if self.rng.random() < scenario.reorder_probability:
                    delay += self.rng.uniform(0, 150)
                inbound = Inbound(
                    source.node_id,
                    message.correlation_id,
                    message.message,
                )
                event = (
                    "deliver",
                    source.node_id,
                    source.incarnation,
                    destination.node_id,
                    destination_incarnation,
                    inbound,
                )
                self.schedule(self.now + delay, event)

    def deliver(self, event: tuple[object, ...]) -> None:
        _, source_id, source_incarnation, destination_id, destination_incarnation, inbound = event
        source = self.nodes[source_id]  # type: ignore[index]
        destination = self.nodes[destination_id]  # type: ignore[index]
        if destination.raft is None or destination.incarnation != destination_incarnation:
            return
        if source.incarnation != source_incarnation or source.raft is None:
            return  # the connection died with the sender
        if frozenset((source.node_id, destination.node_id)) in self.partitioned:
            return
        if self.now < destination.paused_until:
            self.schedule(destination.paused_until, event)  # waits in the socket buffer
            return
        assert isinstance(inbound, Inbound)
        self.trace.append(
            f"{self.now:10.3f} {source_id}->{destination_id} #{inbound.correlation_id} "
            f"{_brief(inbound.message)}"
        )
        answering = None
        if isinstance(inbound.message, REQUEST_TYPES):
            answering = inbound.correlation_id
            key = (destination_id, source_id, inbound.correlation_id)
            self.request_origins[key] = source_incarnation  # type: ignore[assignment]
        outbound = destination.raft.handle(inbound, destination.local_ms(self.now))
        if isinstance(inbound.message, FetchRequest) and not any(
            out.correlation_id == answering and out.destination_id == source_id for out in outbound
        ):
            self.fetches_parked += 1
        self.send(destination, outbound, answering)
        self.after_step(destination)

    # --- faults, clients, snapshots -------------------------------------------------------

    def inject_fault(self) -> None:
        if self.calm:
            return
        scenario = self.scenario
        self.schedule(self.now + self.rng.uniform(*scenario.crash_interval_ms), ("fault",))
        choice = self.rng.random()
        alive = [node for node in self.nodes.values() if node.raft is not None]
        if choice < 0.45 and alive:
            node = self.rng.choice(alive)
            # Prefer crashing the leader sometimes: that is where the interesting cases are.
            leaders = [n for n in alive if n.raft is not None and n.raft.is_leader]
            if leaders and self.rng.random() < 0.5:
                node = self.rng.choice(leaders)
            self.crash(node)
            if node.node_id not in self.voter_ids and self.rng.random() < 0.5:
                self.wipe(node)
            downtime = self.rng.uniform(50, 4000)
            self.schedule(self.now + downtime, ("restart", node.node_id))
        elif choice < 0.75:
            ids = list(self.nodes)
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            side_a, side_b = ids[:cut], ids[cut:]
            self.partitioned = {frozenset((a, b)) for a in side_a for b in side_b}
            self.trace.append(f"{self.now:10.3f} partition {sorted(side_a)} | {sorted(side_b)}")
            self.schedule(self.now + self.rng.uniform(300, 5000), ("heal",))
        elif choice < 0.8 and alive:
            node = self.rng.choice(alive)
            leaders = [n for n in alive if n.raft is not None and n.raft.is_leader]
            if leaders and self.rng.random() < 0.5:
                node = self.rng.choice(leaders)
            node.paused_until = self.now + self.rng.uniform(100, 6000)
            self.trace.append(
                f"{self.now:10.3f} pause {node.node_id} until {node.paused_until:.3f}"
            )
        elif choice < 0.88:
            leaders = [
                n
                for n in alive
                if n.raft is not None and n.raft.is_leader and self.now >= n.paused_until
            ]
            if leaders:
                node = self.rng.choice(leaders)
                assert node.raft is not None
                self.trace.append(f"{self.now:10.3f} resign {node.node_id}")
                self.send(node, node.raft.resign(node.local_ms(self.now)))
                self.after_step(node)
        else:
            # A one-way-ish glitch: isolate one node briefly.
            node_id = self.rng.choice(list(self.nodes))
            self.partitioned = {
                frozenset((node_id, other)) for other in self.nodes if other != node_id
            }
            self.trace.append(f"{self.now:10.3f} isolate {node_id}")
            self.schedule(self.now + self.rng.uniform(100, 3000), ("heal",))

    def begin_calm(self) -> None:
        self.calm = True
        for node in self.nodes.values():
            node.paused_until = min(node.paused_until, self.now)
        self.partitioned.clear()
        self.trace.append(f"{self.now:10.3f} calm: heal, restart everything, no more faults")
        for node in self.nodes.values():
            if node.raft is None:
                self.start_node(node)

    def client_append(self) -> None:
        self.schedule(self.now + self.rng.uniform(*self.scenario.client_interval_ms), ("client",))
        leaders = [
            n
            for n in self.nodes.values()
            if n.raft is not None and n.raft.is_leader and self.now >= n.paused_until
        ]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        assert node.raft is not None
        payload = f"s{self.scenario.seed}-e{self.appended}".encode()
        count = self.rng.randint(1, MAX_ENTRY_OFFSETS)
        self.appended += 1
        if self.root is not None:
            payload = _batch(payload, count)
        try:
            offset = node.raft.append(payload, node.local_ms(self.now), count)
        except (NotLeaderError, BackPressureError):
            return
        if self.calm:
            if self.root is not None:  # what the logs hold: the leader's stamped bytes
                entry = LogEntry(offset - count + 1, node.raft.epoch, payload, count=count)
                payload = stamped(entry).payload
            self.calm_payloads.add(payload)
        self.trace.append(f"{self.now:10.3f} append {payload!r} to {node.node_id} at {offset}")
        self.schedule_tick(node)

    def control_entry(self) -> ControlEntryBuilder:
        if self.root is not None:
            return _control_batch_entry
        if self.scenario.seed % 3 == 0:
            return _two_offset_control_entry
        return plain_control_entry

    def take_snapshot(self, node: SimNode) -> None:
        self.schedule(
            self.now + self.rng.uniform(*self.scenario.snapshot_interval_ms),
            ("snapshot", node.node_id),
        )
        if node.raft is None or node.applied_offset - node.log.start_offset < 8:
            return
        if self.now < node.paused_until:
            return
        payload = f"{node.applied_offset}:{node.digest.hex()}".encode()
        snapshot_id = node.raft.create_snapshot(node.applied_offset, payload)
        self.snapshots_taken += 1
        self.trace.append(f"{self.now:10.3f} snapshot {node.node_id} {snapshot_id}")

    def after_step(self, node: SimNode) -> None:
        self.apply_committed(node)
        self.start_flush(node)
        self.schedule_tick(node)

    def start_flush(self, node: SimNode) -> None:
        """split_flush: prepare the flush the node asked for (one at a time, as the
        driver does); the fsync finishes after a delay, unless the node crashes first."""
        raft = node.raft
        if raft is None or node.pending_flush is not None or not raft.take_flush_request():
            return
        node.pending_flush = node.log.prepare_flush()
        self.flushes_started += 1
        delay = self.rng.uniform(0.2, 12.0)
        self.schedule(self.now + delay, ("flushed", node.node_id, node.incarnation))

    def complete_flush(self, event: tuple[object, ...]) -> None:
        _, node_id, incarnation = event
        node = self.nodes[node_id]  # type: ignore[index]
        if node.raft is None or node.incarnation != incarnation or node.pending_flush is None:
            return  # crashed meanwhile: the fsync never finished
        if self.now < node.paused_until:
            self.schedule(node.paused_until, event)
            return
        pending = node.pending_flush
        node.pending_flush = None
        pending.fsync()  # type: ignore[attr-defined]
        before = node.log.flushed_offset
        node.log.mark_flushed(pending)  # type: ignore[arg-type]
        if node.log.flushed_offset == before:
            self.flushes_voided += 1
        self.trace.append(
            f"{self.now:10.3f} flushed {node_id} to {node.log.flushed_offset} "
            f"(log end {node.log.end_offset})"
        )
        self.send(node, node.raft.tick(node.local_ms(self.now)))
        self.after_step(node)


def _brief(message: object) -> str:
    name = type(message).__name__
    fields = getattr(message, "__dataclass_fields__", {})
    parts = []
    for key in fields:
        if key in ("cluster_id", "records", "unaligned_records"):
            continue
        parts.append(f"{key}={getattr(message, key)}")
    records = getattr(message, "records", None)
    if records:
        parts.append(f"records=[{records[0].offset}..{records[-1].last_offset}]")
    return f"{name}({', '.join(parts)})"


def _two_offset_control_entry(
    epoch: int, leader_id: int, voters: frozenset[int], granting_voters: frozenset[int]
) -> tuple[bytes, int]:
    """A LeaderChange taking two offsets, so the leader's epoch start is an entry of
    more than one offset too (the high watermark rule reasons about it)."""
    return leader_change_payload(leader_id, voters), 2


def _control_batch_entry(
    epoch: int, leader_id: int, voters: frozenset[int], granting_voters: frozenset[int]
) -> tuple[bytes, int]:
    """The production LeaderChange batch with a fixed timestamp (runs stay replayable)."""
    return encode_leader_change(leader_id, voters, granting_voters, timestamp_ms=0), 1


def _batch(text: bytes, count: int) -> bytes:
    """A v2 batch of ``count`` records for a disk run (timestamps fixed, as above)."""
    return encode_batch([Record(index, 0, None, text) for index in range(count)])


def scenario_for(seed: int, voters: int) -> Scenario:
    """Fault intensity varies with the seed: some runs are gentle, some brutal."""
    knobs = random.Random(seed * 7919 + voters)
    fault_gap_ms = knobs.choice((300, 800, 1500, 3000))
    return Scenario(
        seed=seed,
        voters=voters,
        observer=seed % 2 == 0,
        drop_probability=knobs.choice((0.0, 0.02, 0.08, 0.2)),
        duplicate_probability=knobs.choice((0.0, 0.02, 0.1)),
        reorder_probability=knobs.choice((0.0, 0.05, 0.2)),
        crash_interval_ms=(fault_gap_ms // 2, fault_gap_ms * 2),
        snapshot_interval_ms=knobs.choice(((200, 800), (500, 2500), (2000, 6000))),
        split_flush=seed % 4 in (1, 2),
    )


def run_seed(seed: int, voters: int, disk: bool = False) -> Simulation:
    scenario = scenario_for(seed, voters)
    scenario.disk = disk
    return Simulation(scenario).run()

"""A seeded fault schedule and the code that applies it to a ``Cluster``.

``schedule(seed, ...)`` is a pure function: the same seed gives the same faults (kind,
node, moment, duration), which is what ``CHAOS_SEED=...`` replays. Timing inside the
processes is not seeded (threads, the kernel), so a replay repeats the faults, not
every interleaving.

Kinds:
- ``kill``: SIGKILL, down for ``hold_s``, restart (recovery timed until ready);
- ``pause``: SIGSTOP for ``hold_s`` (clients time out, sessions expire), then SIGCONT;
- ``term``: SIGTERM (must exit 0), down for ``hold_s``, restart;
- ``crashloop``: SIGKILL, restart, SIGKILL again ``hold_s`` into that restart (while it
  recovers, or just after), restart: recovery itself interrupted.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from tests.chaos.cluster import Cluster

KINDS = ("kill", "pause", "term", "crashloop")


@dataclass(frozen=True)
class Fault:
    at_s: float  # from the start of the workload
    kind: str
    node: int
    hold_s: float


@dataclass(frozen=True)
class FaultPlan:
    """How often and how hard: the knobs ``schedule`` draws from."""

    cycles: int
    first_after_s: float = 6.0
    gap_s: tuple[float, float] = (3.0, 8.0)
    pause_s: tuple[float, float] = (0.5, 8.0)
    down_s: tuple[float, float] = (0.0, 2.0)
    crash_after_s: tuple[float, float] = (0.05, 1.5)  # into the interrupted restart
    weights: tuple[float, ...] = (0.4, 0.3, 0.15, 0.15)  # as KINDS
    every_kind: bool = False  # the first faults are each kind once, in a seeded order


def schedule(seed: int, plan: FaultPlan, nodes: int) -> list[Fault]:
    rng = random.Random(seed)
    faults = []
    at_s = plan.first_after_s
    first_kinds = rng.sample(KINDS, len(KINDS)) if plan.every_kind else []
    for cycle in range(plan.cycles):
        if cycle < len(first_kinds):
            kind = first_kinds[cycle]
        else:
            kind = rng.choices(KINDS, weights=plan.weights)[0]
        bounds = {"pause": plan.pause_s, "crashloop": plan.crash_after_s}.get(kind, plan.down_s)
        hold_s = round(rng.uniform(*bounds), 2)
        faults.append(Fault(round(at_s, 2), kind, rng.randrange(nodes), hold_s))
        at_s += hold_s + rng.uniform(*plan.gap_s)
    return faults


@dataclass
class Outcome:
    fault: Fault
    started_s: float
    recovery_s: float = 0.0  # restart until ready (kill, term, crashloop)
    error: str = ""
    interrupted: bool = False  # crashloop: the second kill came before the ready line


def apply(fault: Fault, cluster: Cluster, started_s: float) -> Outcome:
    """Inflict one fault and bring the node back; a node that cannot come back raises."""
    node = cluster.nodes[fault.node]
    outcome = Outcome(fault, started_s)
    if fault.kind == "pause":
        node.pause()
        try:
            time.sleep(fault.hold_s)
        finally:
            node.resume()
        return outcome
    if fault.kind == "crashloop":
        node.kill()
        outcome.interrupted = not node.start_and_crash(fault.hold_s)
        outcome.recovery_s = node.start()
        return outcome
    if fault.kind == "kill":
        node.kill()
    else:
        status = node.stop()
        if status != 0:
            outcome.error = f"SIGTERM exit status {status}"
    time.sleep(fault.hold_s)
    outcome.recovery_s = node.start()
    return outcome


# -- the quorum: several nodes at a time, the active controller among the targets ----------

LEADER = -1  # a target resolved when the fault is applied: the active controller then


@dataclass(frozen=True)
class QuorumFault:
    at_s: float
    kind: str
    targets: tuple[int, ...]  # node indexes, or LEADER
    hold_s: float


@dataclass(frozen=True)
class QuorumPlan:
    """``schedule_quorum``'s knobs: a fault hits one node, or two at once (the quorum
    loses its majority until they are back) with probability ``pair``; a target is the
    active controller with probability ``leader``."""

    cycles: int
    first_after_s: float = 5.0
    gap_s: tuple[float, float] = (2.0, 6.0)
    pause_s: tuple[float, float] = (0.5, 5.0)
    down_s: tuple[float, float] = (0.0, 2.0)
    crash_after_s: tuple[float, float] = (0.05, 1.5)
    weights: tuple[float, ...] = (0.4, 0.3, 0.15, 0.15)  # as KINDS
    pair: float = 0.2
    leader: float = 0.5
    every_kind: bool = False


def schedule_quorum(seed: int, plan: QuorumPlan, nodes: int) -> list[QuorumFault]:
    rng = random.Random(seed)
    faults = []
    at_s = plan.first_after_s
    first_kinds = rng.sample(KINDS, len(KINDS)) if plan.every_kind else []
    for cycle in range(plan.cycles):
        if cycle < len(first_kinds):
            kind = first_kinds[cycle]
        else:
            kind = rng.choices(KINDS, weights=plan.weights)[0]
        # A crash loop hits one node: two restarting at once is the kill of a pair.
        count = 2 if kind != "crashloop" and rng.random() < plan.pair else 1
        targets: list[int] = [LEADER] if rng.random() < plan.leader else []
        others = rng.sample(range(nodes), nodes)
        targets += others[: count - len(targets)]
        bounds = {"pause": plan.pause_s, "crashloop": plan.crash_after_s}.get(kind, plan.down_s)
        hold_s = round(rng.uniform(*bounds), 2)
        faults.append(QuorumFault(round(at_s, 2), kind, tuple(targets), hold_s))
        at_s += hold_s + rng.uniform(*plan.gap_s)
    return faults


@dataclass
class QuorumOutcome:
    fault: QuorumFault
    started_s: float
    nodes: tuple[int, ...] = ()  # the node indexes hit
    leader: int | None = None  # the active controller's index just before
    recovery_s: float = 0.0  # restart until every node hit was ready
    error: str = ""
    interrupted: bool = False


def resolve_targets(targets: tuple[int, ...], leader: int | None, nodes: int) -> tuple[int, ...]:
    """Node indexes for ``targets``: LEADER becomes ``leader`` (or, with no leader
    known, a node not already named); duplicates are dropped."""
    chosen: list[int] = []
    for target in targets:
        if target == LEADER:
            target = leader if leader is not None else min(set(range(nodes)) - set(targets))
        if target in chosen:  # the leader was also drawn by index: take another node
            target = min(set(range(nodes)) - set(chosen))
        chosen.append(target)
    return tuple(chosen)


def apply_quorum(fault: QuorumFault, cluster: Cluster, started_s: float) -> QuorumOutcome:
    """Inflict one fault on its nodes at once and bring them back together."""
    leader = cluster.leader() if LEADER in fault.targets else None
    hit = resolve_targets(fault.targets, leader, len(cluster.nodes))
    nodes = [cluster.nodes[index] for index in hit]
    outcome = QuorumOutcome(fault, started_s, hit, leader)
    if fault.kind == "pause":
        for node in nodes:
            node.pause()
        try:
            time.sleep(fault.hold_s)
        finally:
            for node in nodes:
                node.resume()
        return outcome
    if fault.kind == "crashloop":
        (node,) = nodes
        node.kill()
        outcome.interrupted = not node.start_and_crash(fault.hold_s)
        outcome.recovery_s = node.start()
        return outcome
    for node in nodes:
        if fault.kind == "kill":
            node.kill()
        else:
            status = node.stop()
            if status != 0:
                outcome.error = f"{node.name}: SIGTERM exit status {status}"
    time.sleep(fault.hold_s)
    outcome.recovery_s = cluster.start_nodes(nodes)
    return outcome

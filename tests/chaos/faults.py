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

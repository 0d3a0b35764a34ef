"""The replicated run's nemesis: seeded faults on partition leaders, processes and links.

``schedule(seed, plan, mix, nodes)`` is pure, like ``faults.schedule``: the same seed
and mix give the same faults (kind, target, second node, moment, duration), which is
what a failing run's replay line repeats. One fault at a time; a mix names the kinds
drawn from:

- ``kill``: SIGKILL, down for ``hold_s``, restart;
- ``pause``: SIGSTOP for ``hold_s``, SIGCONT (a leader that stops answering, then
  wakes up believing it still leads);
- ``term``: SIGTERM (controlled shutdown), down for ``hold_s``, restart;
- ``isolate``: the target cut from both other nodes, both directions (Jepsen's
  partition-random-node; for three nodes also its random halves and majorities);
- ``bridge``: the target and one other node cut from each other, the third still
  reaching both (Jepsen's bridge: each side sees a majority through it);
- ``oneway``: the target cannot reach one other node, which still reaches it (an
  asymmetric link: requests one way, nothing back the other).

Mixes: ``kill`` (kill), ``pause`` (pause), ``partition`` (isolate, bridge, oneway),
``mixed`` (all six). The target is a partition leader (``LEADER``: the leader of a
seeded partition when the fault is applied, as Metadata says) with probability
``plan.leader``, else a seeded node. Network faults go through a ``NetProxy``
(tests/support/netproxy.py) in front of every node's listeners, between nodes only:
the test's clients reach every node throughout (an isolated leader is the case that
lost writes in Kafka 2013: it keeps accepting them).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.chaos.cluster import Cluster
from tests.support.netproxy import NetProxy

PROCESS_KINDS = ("kill", "pause", "term")
NETWORK_KINDS = ("isolate", "bridge", "oneway")
MIXES: dict[str, tuple[str, ...]] = {
    "kill": ("kill",),
    "pause": ("pause",),
    "partition": NETWORK_KINDS,
    "mixed": (*PROCESS_KINDS, *NETWORK_KINDS),
}
BLOCKED = ("dropped", "held", "refused")  # NetProxy.stats of connections a cut stopped
LEADER = -1  # resolved when applied: the node leading ``Nemesis.partition``


@dataclass(frozen=True)
class Nemesis:
    at_s: float  # from the start of the workload
    kind: str
    target: int  # node index, or LEADER
    partition: int  # whose leader LEADER means
    other: int  # bridge/oneway: the other end, as an offset 1.. from the target
    hold_s: float


@dataclass(frozen=True)
class NemesisPlan:
    """``schedule``'s knobs. Faults stop ``quiet_s`` before ``duration_s`` so the run
    ends healed; partitions hold past ``broker.session.timeout.ms`` about half the
    time (the controller fences the cut node and elects new leaders)."""

    duration_s: float
    first_after_s: float = 5.0
    gap_s: tuple[float, float] = (2.0, 6.0)
    down_s: tuple[float, float] = (0.0, 3.0)
    pause_s: tuple[float, float] = (1.0, 12.0)
    cut_s: tuple[float, float] = (2.0, 15.0)
    leader: float = 0.7
    quiet_s: float = 8.0


def schedule(seed: int, plan: NemesisPlan, mix: str, nodes: int, partitions: int) -> list[Nemesis]:
    rng = random.Random(seed)
    kinds = MIXES[mix]
    # The first faults are each kind of the mix once, in a seeded order.
    first = rng.sample(kinds, len(kinds))
    faults: list[Nemesis] = []
    at_s = plan.first_after_s
    while True:
        kind = first[len(faults)] if len(faults) < len(first) else rng.choice(kinds)
        bounds = {"pause": plan.pause_s}.get(
            kind, plan.cut_s if kind in NETWORK_KINDS else plan.down_s
        )
        hold_s = round(rng.uniform(*bounds), 2)
        target = LEADER if rng.random() < plan.leader else rng.randrange(nodes)
        fault = Nemesis(
            round(at_s, 2), kind, target, rng.randrange(partitions), rng.randrange(1, nodes), hold_s
        )
        # a restart takes a few seconds more than the hold
        busy_s = hold_s + (4.0 if kind in ("kill", "term") else 0.0)
        if at_s + busy_s > plan.duration_s - plan.quiet_s:
            return faults
        faults.append(fault)
        at_s += busy_s + rng.uniform(*plan.gap_s)


@dataclass
class NemesisOutcome:
    fault: Nemesis
    started_s: float
    node: int = -1  # the target's node index
    other: int = -1  # the other end of a bridge/oneway
    was_leader: bool = False  # the target led the fault's partition
    recovery_s: float = 0.0  # restart until ready (kill, term)
    cut: int = 0  # links cut
    blocked: int = 0  # connections the proxies dropped, held or refused meanwhile
    error: str = ""


def apply(
    fault: Nemesis,
    cluster: Cluster,
    net: NetProxy,
    leader_of: Callable[[int], int | None],
    started_s: float,
) -> NemesisOutcome:
    """Inflict one fault and undo it (restart, resume, heal) before returning.
    ``leader_of(partition)`` is the node index leading it now (None if unknown)."""
    outcome = NemesisOutcome(fault, started_s)
    size = len(cluster.nodes)
    leader = leader_of(fault.partition)
    index = fault.target if fault.target != LEADER else (leader if leader is not None else 0)
    outcome.node, outcome.was_leader = index, index == leader
    outcome.other = (index + fault.other) % size
    node = cluster.nodes[index]
    name, other = node.name, cluster.nodes[outcome.other].name
    if fault.kind == "pause":
        node.pause()
        try:
            time.sleep(fault.hold_s)
        finally:
            node.resume()
    elif fault.kind in ("kill", "term"):
        if fault.kind == "kill":
            node.kill()
        else:
            status = node.stop()
            if status != 0:
                outcome.error = f"{name}: SIGTERM exit status {status}"
        time.sleep(fault.hold_s)
        outcome.recovery_s = node.start()
    else:
        blocked_before = sum(net.stats[k] for k in BLOCKED)
        if fault.kind == "isolate":
            links = net.partition([{name}, {n.name for n in cluster.nodes} - {name}])
        elif fault.kind == "bridge":
            links = net.partition([{name}, {other}])
        else:
            links = {(name, other)}
            net.cut_links(links)
        outcome.cut = len(links)
        try:
            time.sleep(fault.hold_s)
        finally:
            net.heal()
            outcome.blocked = sum(net.stats[k] for k in BLOCKED) - blocked_before
    return outcome


def describe(outcome: NemesisOutcome, cluster: Cluster) -> str:
    """One progress line's fault part: what was done to whom."""
    fault = outcome.fault
    name = cluster.nodes[outcome.node].name if outcome.node >= 0 else "?"
    other = cluster.nodes[outcome.other].name if outcome.other >= 0 else "?"
    who = name + (f" (leader of p{fault.partition})" if outcome.was_leader else "")
    text = {
        "kill": f"kill -9 {who}",
        "pause": f"SIGSTOP {who}",
        "term": f"SIGTERM {who}",
        "isolate": f"isolate {who}",
        "bridge": f"cut {who} <-> {other}",
        "oneway": f"cut {who} -> {other}",
    }[fault.kind]
    line = f"{outcome.started_s:7.1f}s {text} for {fault.hold_s:.2f}s"
    if fault.kind in ("kill", "term"):
        line += f", ready after {outcome.recovery_s:.2f}s"
    if outcome.error:
        line += f", {outcome.error}"
    return line

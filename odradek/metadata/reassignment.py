"""Partition reassignment on the controller: moving a partition's replicas (KIP-455).

How this works and why (Kafka's KRaft ``ReplicationControlManager`` with
``PartitionReassignmentReplicas``): a reassignment never copies data itself; it only
changes the partition's replica set in steps every broker follows from the metadata
log, so that the records are copied by the ordinary replica fetchers and no
committed record ever has fewer than its ISR's copies:

1. start (AlterPartitionReassignments with a target): the partition's replicas
   become target ∪ current (target first, so the preferred leader is the target's
   first), ``adding_replicas`` = target − current, ``removing_replicas`` = current −
   target. A new target replaces an ongoing one from the current set as Kafka does:
   the old move's adding replicas that the new target drops are removed only when the
   new move completes, so no ISR member ever leaves the set before its replacement is
   in sync.
   The brokers of adding replicas see themselves assigned by the metadata delta,
   create the replica and follow the leader (the ReplicaManager's becomes_follower);
   the leader keeps leading.
2. progress: each adding replica that catches up is brought into the ISR by the
   leader's AlterPartition (alter_partition.py), which calls ``complete_reassignment``
   on the ISR it accepts.
3. completion, once every target replica is in the ISR (in the same record as the ISR
   change that made it so): replicas = target, the removing replicas leave the ISR,
   both lists are emptied, and if the leader was a removing replica the first target
   replica in the ISR and eligible leads (a new leader epoch). The removed brokers see
   in the delta that the partition moved away and delete their replica.

A target that needs no new replica (a subset of an in-sync replica set) completes at
once; a mere reordering changes the replica order at once. Cancel (a null target)
reverts to the original replicas: the adding ones leave the replica set and the ISR,
and a leader among them is replaced. As in Kafka, the original replicas are the set
less the adding ones, in the set's order (target first), so a cancel keeps the
original brokers but not necessarily their original order (preferred leader).

Per-partition errors are Kafka's: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT
(empty, a broker twice, a broker not registered), INVALID_REPLICATION_FACTOR (a target
whose size differs from the original replicas' when the request forbids it — v1's
``allow_replication_factor_change``, KIP-860), NO_REASSIGNMENT_IN_PROGRESS (cancel of
none), INVALID_REQUEST (a partition named twice).

Sans-IO like elections.py: decisions from an image, as ``PartitionChange`` records
(the two lists are fields of ``PartitionImage``, so snapshots keep ongoing
reassignments exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from odradek.metadata.elections import Eligible, PartitionChanges, elect
from odradek.metadata.image import MetadataImage, MetadataRecord, PartitionImage, TopicImage


@dataclass(frozen=True, slots=True)
class ReassignmentRequest:
    """One partition of AlterPartitionReassignments; ``replicas`` None cancels."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    topic: str
    partition: int
    error: str = "NONE"
    message: str | None = None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """One row of ListPartitionReassignments."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def ongoing(state: PartitionImage) -> bool:
    return bool(state.adding_replicas or state.removing_replicas)


def original_replicas(state: PartitionImage) -> tuple[int, ...]:
    """The replicas before the ongoing reassignment (all of them when none runs)."""
    return tuple(r for r in state.replicas if r not in state.adding_replicas)


def alter_reassignments(
    image: MetadataImage,
    requests: Sequence[ReassignmentRequest],
    eligible: Eligible,
    *,
    allow_replication_factor_change: bool = True,
) -> tuple[list[ReassignmentResult], list[MetadataRecord]]:
    """AlterPartitionReassignments: one result per request, in order, and the records."""
    changes = PartitionChanges(image)
    results = []
    seen: set[tuple[str, int]] = set()
    for request in requests:
        key = (request.topic, request.partition)
        if key in seen:
            results.append(
                ReassignmentResult(*key, "INVALID_REQUEST", "the partition is named twice")
            )
            continue
        seen.add(key)
        topic = image.topics.get(request.topic)
        if topic is None or request.partition not in topic.partitions:
            results.append(ReassignmentResult(*key, "UNKNOWN_TOPIC_OR_PARTITION"))
            continue
        if request.replicas is None:
            results.append(_cancel(changes, topic, request.partition, eligible))
            continue
        problem = _invalid_target(image, request.replicas)
        if problem is not None:
            results.append(ReassignmentResult(*key, "INVALID_REPLICA_ASSIGNMENT", problem))
            continue
        state = changes.state(topic, request.partition)
        factor = len(original_replicas(state))
        if not allow_replication_factor_change and len(request.replicas) != factor:
            results.append(
                ReassignmentResult(
                    *key,
                    "INVALID_REPLICATION_FACTOR",
                    f"The replication factor is changed from {factor} to {len(request.replicas)}",
                )
            )
            continue
        _start(changes, topic, state, tuple(request.replicas), eligible)
        results.append(ReassignmentResult(*key))
    return results, changes.records()


def _invalid_target(image: MetadataImage, target: Sequence[int]) -> str | None:
    if not target:
        return "the replica assignment is empty"
    seen: set[int] = set()
    for broker_id in target:
        if broker_id in seen:
            return f"the replica assignment names broker {broker_id} more than once"
        seen.add(broker_id)
        if broker_id not in image.brokers:
            return f"the replica assignment names broker {broker_id}, which is not registered"
    return None


def _start(
    changes: PartitionChanges,
    topic: TopicImage,
    state: PartitionImage,
    target: tuple[int, ...],
    eligible: Eligible,
) -> None:
    current = state.replicas  # with an ongoing move's adding replicas (module doc)
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    started = replace(
        state, replicas=target + removing, adding_replicas=adding, removing_replicas=removing
    )
    changes.set(topic, started)  # the ISR and the leader are all in the new set
    complete_reassignment(changes, topic, state.partition, eligible)


def _cancel(
    changes: PartitionChanges, topic: TopicImage, index: int, eligible: Eligible
) -> ReassignmentResult:
    state = changes.state(topic, index)
    if not ongoing(state):
        return ReassignmentResult(topic.name, index, "NO_REASSIGNMENT_IN_PROGRESS")
    original = original_replicas(state)
    isr = tuple(r for r in state.isr if r in original)
    reverted = replace(
        state, replicas=original, isr=isr or state.isr, adding_replicas=(), removing_replicas=()
    )
    if state.leader not in original or not isr:
        election = elect(reverted, isr, eligible, False)
        reverted = replace(reverted, leader=election.leader, isr=election.isr)
    changes.set(topic, reverted)
    return ReassignmentResult(topic.name, index)


def complete_reassignment(
    changes: PartitionChanges, topic: TopicImage, index: int, eligible: Eligible
) -> None:
    """Finish the partition's reassignment if every target replica is in its ISR (as
    decided so far in ``changes``): replicas = target, the removing replicas out of the
    ISR, a new leader if the current one is removed. Nothing otherwise."""
    state = changes.state(topic, index)
    if not ongoing(state):
        return
    target = tuple(r for r in state.replicas if r not in state.removing_replicas)
    if not all(r in state.isr for r in target):
        return
    isr = tuple(r for r in state.isr if r in target)
    done = replace(state, replicas=target, isr=isr, adding_replicas=(), removing_replicas=())
    if state.leader not in target:
        election = elect(done, isr, eligible, False)
        done = replace(done, leader=election.leader, isr=election.isr)
    changes.set(topic, done)


def list_reassignments(
    image: MetadataImage, partitions: Sequence[tuple[str, int]] | None
) -> list[OngoingReassignment]:
    """ListPartitionReassignments: the ongoing reassignments among ``partitions`` (None:
    all of them); partitions unknown or not being reassigned are left out, as Kafka."""
    if partitions is None:
        wanted = [(n, i) for n in sorted(image.topics) for i in sorted(image.topics[n].partitions)]
    else:
        wanted = list(dict.fromkeys(partitions))
    rows = []
    for name, index in wanted:
        topic = image.topics.get(name)
        state = topic.partitions.get(index) if topic is not None else None
        if state is not None and ongoing(state):
            rows.append(
                OngoingReassignment(
                    name, index, state.replicas, state.adding_replicas, state.removing_replicas
                )
            )
    return rows


__all__ = [
    "OngoingReassignment",
    "ReassignmentRequest",
    "ReassignmentResult",
    "alter_reassignments",
    "complete_reassignment",
    "list_reassignments",
    "ongoing",
    "original_replicas",
]

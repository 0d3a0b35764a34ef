"""AlterPartition on the controller: which ISR changes a leader may make.

How this works and why (KIP-497, KIP-903; Kafka's ``ReplicationControlManager
.alterPartition``): a partition's leader shrinks the ISR when a follower falls behind
and expands it when one catches up, but only the active controller writes the change
(a ``PartitionChange`` record), so that every broker and every future leader agrees on
who is in sync. A proposal is checked, in this order, against the image:

- the request as a whole: the sender must be registered with the broker epoch it
  names (STALE_BROKER_EPOCH otherwise: a restarted broker's old requests die here;
  -1, "not supported" in AlterPartition v2's schema, skips the check);
- the topic id must name a topic (UNKNOWN_TOPIC_ID), the index a partition
  (UNKNOWN_TOPIC_OR_PARTITION);
- the proposal's leader epoch must be the partition's (FENCED_LEADER_EPOCH: a leader
  deposed since, or one that has not yet seen its own election) and the sender its
  leader (NOT_LEADER_OR_FOLLOWER);
- a proposal whose ISR is already in place is answered with the current state and
  writes nothing, whatever its partition epoch: the answer to an earlier identical
  request was lost and the leader asks again;
- otherwise the partition epoch must be the current one (INVALID_UPDATE_VERSION: the
  leader decided on a state the controller has changed since, e.g. it removed a fenced
  follower, and must first learn the new one);
- the new ISR must be non-empty, without repeats, made of the partition's replicas
  and hold the leader (INVALID_REQUEST);
- each new member must be eligible — registered, unfenced, not shutting down — and,
  when the leader names the broker epoch it fetched with (KIP-903, v3), that must be
  the member's current registration (INELIGIBLE_REPLICA): a replica that restarted
  with an empty disk must not be counted as in sync on the strength of its previous
  life's fetches.

An accepted ISR that holds every target replica of an ongoing reassignment completes
it in the same record (reassignment.py): the reassignment is finished by the very
AlterPartition that brought its last adding replica into the ISR.

Accepted proposals become one record each; the caller commits them together and
answers each from the image after the commit (the new partition epoch, leader epoch
unchanged). This module is sans-IO, like elections.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from odradek.metadata.elections import Eligible, PartitionChanges
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage, MetadataRecord, PartitionImage
from odradek.metadata.reassignment import complete_reassignment
from odradek.replica.interfaces import IsrOutcome, IsrProposal

UNKNOWN_BROKER_EPOCH = -1


def check_sender(image: MetadataImage, broker_id: int, broker_epoch: int) -> None:
    """STALE_BROKER_EPOCH unless ``broker_id`` is registered with ``broker_epoch``."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise ControllerError("STALE_BROKER_EPOCH", f"broker {broker_id} is not registered")
    if broker_epoch != UNKNOWN_BROKER_EPOCH and broker.epoch != broker_epoch:
        raise ControllerError(
            "STALE_BROKER_EPOCH",
            f"broker {broker_id} is registered with epoch {broker.epoch}, not {broker_epoch}",
        )


def outcome(state: PartitionImage, error: str = "NONE") -> IsrOutcome:
    return IsrOutcome(error, state.leader, state.leader_epoch, state.partition_epoch, state.isr)


def decide(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    proposals: Sequence[IsrProposal],
    eligible: Eligible,
) -> tuple[list[IsrOutcome | None], list[MetadataRecord]]:
    """Per proposal: its outcome now, or None (accepted: answer from the image once the
    records are committed); and the records. Raises ControllerError STALE_BROKER_EPOCH."""
    check_sender(image, broker_id, broker_epoch)
    changes = PartitionChanges(image)
    outcomes: list[IsrOutcome | None] = []
    seen: set[tuple[object, int]] = set()
    for proposal in proposals:
        key = (proposal.topic_id, proposal.partition)
        if key in seen:
            outcomes.append(IsrOutcome("INVALID_REQUEST"))
            continue
        seen.add(key)
        outcomes.append(_decide_one(image, changes, broker_id, proposal, eligible))
    return outcomes, changes.records()


def _decide_one(
    image: MetadataImage,
    changes: PartitionChanges,
    broker_id: int,
    proposal: IsrProposal,
    eligible: Eligible,
) -> IsrOutcome | None:
    topic = image.topic_by_id(proposal.topic_id)
    if topic is None or topic.topic_id != proposal.topic_id:
        return IsrOutcome("UNKNOWN_TOPIC_ID")
    state = topic.partitions.get(proposal.partition)
    if state is None:
        return IsrOutcome("UNKNOWN_TOPIC_OR_PARTITION")
    if proposal.leader_epoch != state.leader_epoch:
        return outcome(state, "FENCED_LEADER_EPOCH")
    if state.leader != broker_id:
        return outcome(state, "NOT_LEADER_OR_FOLLOWER")
    new_isr = tuple(proposal.new_isr)
    if sorted(new_isr) == sorted(state.isr):
        return outcome(state)  # already in place: a retry whose answer was lost
    if proposal.partition_epoch != state.partition_epoch:
        return outcome(state, "INVALID_UPDATE_VERSION")
    if (
        not new_isr
        or len(set(new_isr)) != len(new_isr)
        or not set(new_isr) <= set(state.replicas)
        or state.leader not in new_isr
    ):
        return outcome(state, "INVALID_REQUEST")
    for member in new_isr:
        if member in state.isr:
            continue
        registered = image.brokers.get(member)
        named_epoch = proposal.broker_epochs.get(member, UNKNOWN_BROKER_EPOCH)
        if (
            registered is None
            or not eligible(member)
            or (named_epoch != UNKNOWN_BROKER_EPOCH and named_epoch != registered.epoch)
        ):
            return outcome(state, "INELIGIBLE_REPLICA")
    changes.set(topic, replace(state, isr=new_isr))
    complete_reassignment(changes, topic, proposal.partition, eligible)
    return None


__all__ = ["UNKNOWN_BROKER_EPOCH", "check_sender", "decide", "outcome"]

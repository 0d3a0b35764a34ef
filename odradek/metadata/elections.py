"""Partition leader elections and ISR removals: the controller's decisions, as records.

How this works and why (seeds/000 "Leader 失效", "Follower 失效"; Kafka's KRaft
``ReplicationControlManager`` and ``PartitionChangeBuilder``): a partition's leader
and ISR change only through ``PartitionChange`` records the active controller
commits (image.py: each bumps the partition epoch, a leader change the leader epoch
too). This module decides them, sans-IO, from an image and the set of brokers that
may serve (``Eligible``: registered, unfenced and not shutting down):

- a broker that leaves (its session expired and it is fenced, or it asked for a
  controlled shutdown) leaves every ISR it is in — unless it is the ISR's last member:
  then the ISR keeps it, since only it is known to hold every committed record — and
  every partition it leads gets a new leader;
- a new leader is the first replica, in replica order (so the preferred replica when
  it can), that is in the ISR and eligible. With none, the partition is offline
  (leader -1) unless ``unclean.leader.election.enable`` is on for its topic: then the
  first eligible replica leads with an ISR of itself, and whatever it lacks of the
  committed log is lost (logged as a WARN, the data loss Kafka's option accepts);
- a broker that comes back (unfenced) may bring offline partitions back: each
  leaderless partition it is a replica of is elected again with it eligible;
- a preferred-leader election (ElectLeaders PREFERRED, the auto rebalance) moves the
  leadership to the first replica when it is in the ISR and eligible; an UNCLEAN one
  elects a leaderless partition from any eligible replica.

``PartitionChanges`` holds the working state of one decision: several steps (two
brokers fenced by one timer run) see each other's effect, and each changed partition
yields one record holding only the fields that differ from the image, so a leader
changed once bumps its epoch once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final

from odradek.metadata.image import MetadataImage, MetadataRecord, PartitionImage, TopicImage

logger = logging.getLogger(__name__)

NO_LEADER: Final = -1
UNCLEAN_CONFIG: Final = "unclean.leader.election.enable"
# ElectLeaders' election_type (Kafka's ElectionType)
PREFERRED: Final = 0
UNCLEAN: Final = 1

Eligible = Callable[[int], bool]  # may this broker lead or join an ISR now?
UncleanAllowed = Callable[[str], bool]  # unclean.leader.election.enable of a topic


@dataclass(frozen=True, slots=True)
class Election:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """One partition's answer to ElectLeaders: an error name, "NONE" if elected."""

    topic: str
    partition: int
    error: str


def elect(
    partition: PartitionImage, isr: tuple[int, ...], eligible: Eligible, unclean: bool
) -> Election:
    """The leader ``partition`` gets with ``isr`` (see the module doc)."""
    for replica in partition.replicas:
        if replica in isr and eligible(replica):
            return Election(replica, isr)
    if unclean:
        for replica in partition.replicas:
            if eligible(replica):
                return Election(replica, (replica,), unclean=True)
    return Election(NO_LEADER, isr)


def eligible_in(image: MetadataImage, leaving: frozenset[int] = frozenset()) -> Eligible:
    """Registered, unfenced brokers of ``image``, less ``leaving``."""

    def eligible(broker_id: int) -> bool:
        broker = image.brokers.get(broker_id)
        return broker is not None and not broker.fenced and broker_id not in leaving

    return eligible


def topic_allows_unclean(image: MetadataImage, default: Callable[[], bool]) -> UncleanAllowed:
    """A topic's ``unclean.leader.election.enable``, else the broker default."""

    def allowed(topic: str) -> bool:
        value = image.topic_configs(topic).get(UNCLEAN_CONFIG)
        if value is None:
            return default()
        return value.strip().lower() == "true"

    return allowed


class PartitionChanges:
    """The partition states of one decision in progress (see the module doc)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._states: dict[tuple[uuid.UUID, int], PartitionImage] = {}
        self._topics: dict[uuid.UUID, TopicImage] = {}

    def partitions(self) -> Iterator[tuple[TopicImage, PartitionImage]]:
        """Every partition, in its state so far."""
        for name in sorted(self.image.topics):
            topic = self.image.topics[name]
            for index in sorted(topic.partitions):
                yield topic, self.state(topic, index)

    def state(self, topic: TopicImage, index: int) -> PartitionImage:
        state = self._states.get((topic.topic_id, index))
        return state if state is not None else topic.partitions[index]

    def set(self, topic: TopicImage, state: PartitionImage) -> None:
        self._states[(topic.topic_id, state.partition)] = state
        self._topics[topic.topic_id] = topic

    def records(self) -> list[MetadataRecord]:
        """One PartitionChange per partition whose state differs from the image."""
        records = []
        for (topic_id, index), state in sorted(
            self._states.items(), key=lambda item: (str(item[0][0]), item[0][1])
        ):
            before = self._topics[topic_id].partitions[index]
            fields: dict[str, object] = {"topic_id": str(topic_id), "partition": index}
            if state.leader != before.leader:
                fields["leader"] = state.leader
            if state.isr != before.isr:
                fields["isr"] = list(state.isr)
            if state.replicas != before.replicas:
                fields["replicas"] = list(state.replicas)
            if state.adding_replicas != before.adding_replicas:
                fields["adding_replicas"] = list(state.adding_replicas)
            if state.removing_replicas != before.removing_replicas:
                fields["removing_replicas"] = list(state.removing_replicas)
            if len(fields) > 2:
                records.append(MetadataRecord("PartitionChange", fields))
        return records

    # -- decisions ---------------------------------------------------------------------
    def remove_broker(self, broker_id: int, eligible: Eligible, unclean: UncleanAllowed) -> None:
        """``broker_id`` leaves: out of every ISR but a last one, its leaderships moved."""
        for topic, state in list(self.partitions()):
            if broker_id not in state.isr and state.leader != broker_id:
                continue
            isr = tuple(r for r in state.isr if r != broker_id) or state.isr
            leader = state.leader
            if leader in (broker_id, NO_LEADER):
                election = elect(state, isr, eligible, unclean(topic.name))
                self._log(topic, state, election)
                leader, isr = election.leader, election.isr
            self.set(topic, _with(state, leader, isr))

    def add_broker(self, broker_id: int, eligible: Eligible, unclean: UncleanAllowed) -> None:
        """``broker_id`` may serve again: offline partitions it can lead get a leader."""
        for topic, state in list(self.partitions()):
            if state.leader != NO_LEADER or broker_id not in state.replicas:
                continue
            election = elect(state, state.isr, eligible, unclean(topic.name))
            if election.leader != NO_LEADER:
                self._log(topic, state, election)
                self.set(topic, _with(state, election.leader, election.isr))

    def elect_preferred(self, topic: TopicImage, index: int, eligible: Eligible) -> str:
        """PREFERRED election of one partition: an error name ("NONE": elected)."""
        state = self.state(topic, index)
        preferred = state.replicas[0] if state.replicas else NO_LEADER
        if state.leader == preferred:
            return "ELECTION_NOT_NEEDED"
        if preferred not in state.isr or not eligible(preferred):
            return "PREFERRED_LEADER_NOT_AVAILABLE"
        self.set(topic, _with(state, preferred, state.isr))
        return "NONE"

    def elect_unclean(self, topic: TopicImage, index: int, eligible: Eligible) -> str:
        """UNCLEAN election of one partition: the ISR first, else any eligible replica."""
        state = self.state(topic, index)
        if state.leader != NO_LEADER:
            return "ELECTION_NOT_NEEDED"
        election = elect(state, state.isr, eligible, True)
        if election.leader == NO_LEADER:
            return "ELIGIBLE_LEADERS_NOT_AVAILABLE"
        self._log(topic, state, election)
        self.set(topic, _with(state, election.leader, election.isr))
        return "NONE"

    @staticmethod
    def _log(topic: TopicImage, state: PartitionImage, election: Election) -> None:
        where = f"{topic.name}-{state.partition}"
        if election.unclean:
            logger.warning(
                "unclean leader election for %s: broker %d leads with ISR %s, out of sync "
                "with the last ISR %s; records it lacks are lost",
                where,
                election.leader,
                list(election.isr),
                list(state.isr),
            )
        elif election.leader == NO_LEADER and state.leader != NO_LEADER:
            logger.warning(
                "%s is offline: no replica of ISR %s is eligible to lead", where, list(state.isr)
            )


def elect_leaders(
    image: MetadataImage, kind: int, partitions: Sequence[tuple[str, int]] | None
) -> tuple[list[ElectionResult], list[MetadataRecord]]:
    """ElectLeaders: PREFERRED or UNCLEAN elections of ``partitions`` (topic, index), or
    of every partition when None — then answering only those not already led as asked,
    as Kafka does. The results in order (repeats once) and the records."""
    if partitions is None:
        targets = [(n, i) for n in sorted(image.topics) for i in sorted(image.topics[n].partitions)]
    else:
        targets = list(dict.fromkeys(partitions))
    changes = PartitionChanges(image)
    eligible = eligible_in(image)
    results = []
    for name, index in targets:
        topic = image.topics.get(name)
        if topic is None or index not in topic.partitions:
            code = "UNKNOWN_TOPIC_OR_PARTITION"
        elif kind == PREFERRED:
            code = changes.elect_preferred(topic, index, eligible)
        else:
            code = changes.elect_unclean(topic, index, eligible)
        if partitions is None and code == "ELECTION_NOT_NEEDED":
            continue
        results.append(ElectionResult(name, index, code))
    return results, changes.records()


def rebalance(image: MetadataImage) -> list[MetadataRecord]:
    """The auto leader rebalance (seeds/000 "Leader 均衡"; ``auto.leader.rebalance.enable``):
    every partition not led by its preferred replica gets a preferred election, where
    that replica is eligible and in the ISR. As Kafka's KRaft controller, with no
    per-broker threshold (``leader.imbalance.per.broker.percentage`` was ZooKeeper
    mode's and is gone from Kafka 4, KAFKA-18743)."""
    changes = PartitionChanges(image)
    eligible = eligible_in(image)
    for name in sorted(image.topics):
        topic = image.topics[name]
        for index in sorted(topic.partitions):
            state = topic.partitions[index]
            if state.replicas and state.leader != state.replicas[0]:
                changes.elect_preferred(topic, index, eligible)
    return changes.records()


def _with(state: PartitionImage, leader: int, isr: tuple[int, ...]) -> PartitionImage:
    return replace(state, leader=leader, isr=isr)


__all__ = [
    "NO_LEADER",
    "PREFERRED",
    "UNCLEAN",
    "UNCLEAN_CONFIG",
    "Election",
    "ElectionResult",
    "PartitionChanges",
    "elect",
    "elect_leaders",
    "eligible_in",
    "rebalance",
    "topic_allows_unclean",
]

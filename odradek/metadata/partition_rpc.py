"""AlterPartition, ElectLeaders and AlterPartitionReassignments to the active controller.

The RPC channel's half.

How this works and why: ``RemoteControllerChannel`` (controller_rpc.py) forwards every
metadata change to the active controller; these two concern partition leadership and
are built and read here, beside it, so neither module grows past a readable size.

- AlterPartition (key 56, v2–v3: the versions Kafka 3.x/4.x brokers send, naming
  topics by id; v3 carries each new ISR member's broker epoch, KIP-903): the
  proposals are grouped by topic id, sent once, and each partition's answer becomes
  the ``IsrOutcome`` of its proposal. A failure of the request as a whole — its
  top-level error (STALE_BROKER_EPOCH ...), or no controller answering in time
  (REQUEST_TIMED_OUT) — is that error in every outcome, as ``IsrChannel`` promises.
  The channel does not wait for the local image: the leader takes the outcome itself
  (the partition epoch it answers is the one to build the next proposal on).
- ElectLeaders (key 43, v0–v2; v0 knows only PREFERRED elections): a forwarded
  request, answered per partition with the controller's error names. The caller
  (the channel) waits for its image to show each elected partition led.
- AlterPartitionReassignments (key 45, v0–v1; v1 carries
  ``allow_replication_factor_change``): forwarded the same way; the caller waits for
  its image to show each accepted target (or cancel) in the partition's replicas.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_entity
from odradek.metadata.controller_client import ControllerClient
from odradek.metadata.elections import NO_LEADER, PREFERRED, ElectionResult
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage
from odradek.metadata.reassignment import (
    ReassignmentRequest,
    ReassignmentResult,
    ongoing,
)
from odradek.replica.interfaces import IsrOutcome, IsrProposal

ELECT_LEADERS_KEY: Final = 43
ALTER_REASSIGNMENTS_KEY: Final = 45
ALTER_REASSIGNMENTS_VERSIONS: Final = (0, 1)
RF_CHANGE_VERSION: Final = 1  # allow_replication_factor_change
ALTER_PARTITION_KEY: Final = 56
ELECT_LEADERS_VERSIONS: Final = (0, 2)
ALTER_PARTITION_VERSIONS: Final = (2, 3)
BROKER_EPOCHS_VERSION: Final = 3  # new_isr_with_epochs
ELECTION_TYPE_VERSION: Final = 1  # election_type, and a top-level error_code


def _name(code: ErrorCode) -> str:
    return code.name.upper()


async def alter_partition(
    client: ControllerClient,
    timeout_s: float,
    broker_id: int,
    broker_epoch: int,
    proposals: Sequence[IsrProposal],
) -> list[IsrOutcome]:
    """``IsrChannel.alter_partition`` over the controller listener (see module doc)."""
    if not proposals:
        return []
    by_topic: dict[Any, list[IsrProposal]] = {}
    for proposal in proposals:
        by_topic.setdefault(proposal.topic_id, []).append(proposal)

    def build(version: int) -> Any:
        def partition(p: IsrProposal) -> Any:
            states = tuple(
                request_entity(
                    ALTER_PARTITION_KEY,
                    version,
                    "BrokerState",
                    broker_id=member,
                    broker_epoch=p.broker_epochs.get(member, -1),
                )
                for member in p.new_isr
                if version >= BROKER_EPOCHS_VERSION
            )
            return request_entity(
                ALTER_PARTITION_KEY,
                version,
                "PartitionData",
                partition_index=p.partition,
                leader_epoch=p.leader_epoch,
                new_isr=tuple(p.new_isr),
                new_isr_with_epochs=states,
                leader_recovery_state=0,
                partition_epoch=p.partition_epoch,
            )

        topics = tuple(
            request_entity(
                ALTER_PARTITION_KEY,
                version,
                "TopicData",
                topic_id=topic_id,
                partitions=tuple(partition(p) for p in group),
            )
            for topic_id, group in by_topic.items()
        )
        return request_entity(
            ALTER_PARTITION_KEY,
            version,
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            topics=topics,
        )

    try:
        response = await client.send(ALTER_PARTITION_KEY, build, timeout_s=timeout_s)
    except ControllerError as failure:
        return [IsrOutcome(failure.code) for _ in proposals]
    if response.error_code != ErrorCode.none:
        return [IsrOutcome(_name(response.error_code)) for _ in proposals]
    answers: dict[tuple[Any, int], IsrOutcome] = {}
    for topic in response.topics:
        for p in topic.partitions:
            answers[(topic.topic_id, int(p.partition_index))] = IsrOutcome(
                _name(p.error_code),
                int(p.leader_id),
                int(p.leader_epoch),
                int(p.partition_epoch),
                tuple(int(b) for b in p.isr),
            )
    missing = IsrOutcome("UNKNOWN_SERVER_ERROR")
    return [answers.get((p.topic_id, p.partition), missing) for p in proposals]


async def elect_leaders(
    client: ControllerClient,
    timeout_s: float,
    election_type: int,
    partitions: Sequence[tuple[str, int]] | None,
) -> list[ElectionResult]:
    """ElectLeaders to the active controller: one result per partition it answered;
    raises ControllerError for the request as a whole."""
    grouped: dict[str, list[int]] = {}
    for topic, index in partitions or ():
        grouped.setdefault(topic, []).append(index)

    def build(version: int) -> Any:
        if version < ELECTION_TYPE_VERSION and election_type != PREFERRED:
            raise ControllerError(
                "UNSUPPORTED_VERSION", "the controller knows only preferred elections (v0)"
            )
        wanted = (
            None
            if partitions is None
            else tuple(
                request_entity(
                    ELECT_LEADERS_KEY,
                    version,
                    "TopicPartitions",
                    topic=topic,
                    partitions=tuple(indexes),
                )
                for topic, indexes in grouped.items()
            )
        )
        return request_entity(
            ELECT_LEADERS_KEY,
            version,
            election_type=election_type,
            topic_partitions=wanted,
            timeout=datetime.timedelta(seconds=timeout_s),
        )

    response = await client.send(ELECT_LEADERS_KEY, build, timeout_s=timeout_s)
    top = getattr(response, "error_code", ErrorCode.none)
    if top != ErrorCode.none:
        raise ControllerError(_name(top), f"ElectLeaders failed: {_name(top)}")
    return [
        ElectionResult(result.topic, int(p.partition_id), _name(p.error_code))
        for result in response.replica_election_results
        for p in result.partition_result
    ]


def elected(
    election_type: int, results: Sequence[ElectionResult]
) -> Callable[[MetadataImage], bool]:
    """Does an image show every partition ``results`` elected, led as asked?"""
    done = [(r.topic, r.partition) for r in results if r.error == "NONE"]

    def shown(image: MetadataImage) -> bool:
        for name, index in done:
            topic = image.topics.get(name)
            state = topic.partitions.get(index) if topic is not None else None
            if state is None:
                return False  # not known here yet (or deleted since: the wait is bounded)
            if election_type == PREFERRED and state.replicas[:1] != (state.leader,):
                return False
            if state.leader == NO_LEADER:
                return False
        return True

    return shown


async def alter_partition_reassignments(
    client: ControllerClient,
    timeout_s: float,
    requests: Sequence[ReassignmentRequest],
    allow_rf_change: bool,
) -> list[ReassignmentResult]:
    """AlterPartitionReassignments to the active controller: one result per partition
    it answered; raises ControllerError for the request as a whole."""
    grouped: dict[str, list[ReassignmentRequest]] = {}
    for request in requests:
        grouped.setdefault(request.topic, []).append(request)

    def build(version: int) -> Any:
        if version < RF_CHANGE_VERSION and not allow_rf_change:
            raise ControllerError(
                "UNSUPPORTED_VERSION", "the controller cannot refuse a replication factor change"
            )
        topics = tuple(
            request_entity(
                ALTER_REASSIGNMENTS_KEY,
                version,
                "ReassignableTopic",
                name=topic,
                partitions=tuple(
                    request_entity(
                        ALTER_REASSIGNMENTS_KEY,
                        version,
                        "ReassignablePartition",
                        partition_index=r.partition,
                        replicas=r.replicas,
                    )
                    for r in group
                ),
            )
            for topic, group in grouped.items()
        )
        return request_entity(
            ALTER_REASSIGNMENTS_KEY,
            version,
            timeout=datetime.timedelta(seconds=timeout_s),
            allow_replication_factor_change=allow_rf_change,  # v1+; v0 has no such field
            topics=topics,
        )

    response = await client.send(ALTER_REASSIGNMENTS_KEY, build, timeout_s=timeout_s)
    if response.error_code != ErrorCode.none:
        name = _name(response.error_code)
        raise ControllerError(name, response.error_message or name)
    return [
        ReassignmentResult(
            topic.name,
            int(p.partition_index),
            _name(p.error_code),
            None if p.error_code == ErrorCode.none else p.error_message,
        )
        for topic in response.responses
        for p in topic.partitions
    ]


def reassigned(
    requests: Sequence[ReassignmentRequest], results: Sequence[ReassignmentResult]
) -> Callable[[MetadataImage], bool]:
    """Does an image show every accepted request: a target at the head of the
    partition's replicas, a cancel as no reassignment in progress?"""
    accepted = {(r.topic, r.partition) for r in results if r.error == "NONE"}
    done = [r for r in requests if (r.topic, r.partition) in accepted]

    def shown(image: MetadataImage) -> bool:
        for request in done:
            topic = image.topics.get(request.topic)
            state = topic.partitions.get(request.partition) if topic is not None else None
            if state is None:
                return False
            if request.replicas is None:
                if ongoing(state):
                    return False
            elif state.replicas[: len(request.replicas)] != request.replicas:
                return False
        return True

    return shown


__all__ = [
    "ALTER_PARTITION_KEY",
    "ALTER_PARTITION_VERSIONS",
    "ALTER_REASSIGNMENTS_KEY",
    "ALTER_REASSIGNMENTS_VERSIONS",
    "ELECT_LEADERS_KEY",
    "ELECT_LEADERS_VERSIONS",
    "alter_partition",
    "alter_partition_reassignments",
    "elect_leaders",
    "elected",
    "reassigned",
]

"""ElectLeaders (43) on both planes and AlterPartition (56) on the CONTROLLER plane.

How this works and why: both change who leads a partition or who is in sync with it,
which only the active controller decides (metadata/elections.py,
metadata/alter_partition.py).

- ElectLeaders is an admin request (``kafka-leader-election.sh``, ``odradek
  leader-election``, AdminClient.electLeaders): on a broker listener it goes through
  the broker's controller channel (forwarded to the active controller in a quorum, as
  CreateTopics), on a controller listener to this node's controller behind the gate
  (NOT_CONTROLLER unless active). v0 has no election type (PREFERRED) and no
  top-level error; a failure of the whole request then answers every partition asked
  with it. Per partition: NONE, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
  ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION. Asked for every
  partition (null topics), only partitions not already led as asked are answered.
- AlterPartition is a partition leader's ISR change, sent by brokers to the
  controller listener (v2–v3, topics by id; v3 names each ISR member's broker epoch,
  KIP-903). A failure of the whole request (NOT_CONTROLLER, STALE_BROKER_EPOCH) is the
  top-level error with no topics; otherwise each partition is answered with its error
  and the partition's state (leader, epochs, ISR) after the request.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.metadata.controller_rpc import FORWARDED_VERSIONS
from odradek.metadata.elections import PREFERRED, ElectionResult
from odradek.metadata.errors import ControllerError
from odradek.metadata.partition_rpc import ALTER_PARTITION_KEY, ELECT_LEADERS_KEY
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.replica.interfaces import IsrOutcome, IsrProposal
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import BOTH_PLANES, Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import AdminServices, ControllerServices


def _require_cluster(services: AdminServices, request: Request, operation: AclOperation) -> None:
    """``operation`` on the cluster (Kafka's table), else CLUSTER_AUTHORIZATION_FAILED."""
    denial = services.authorizer.denial(request.session, operation, ResourceType.CLUSTER)
    if denial is not None:
        raise ControllerError(denial, f"not authorized to {operation.name} the cluster")


@handles(ELECT_LEADERS_KEY, *FORWARDED_VERSIONS[ELECT_LEADERS_KEY], plane=BOTH_PLANES)
async def elect_leaders(services: AdminServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(ELECT_LEADERS_KEY, version)
    body = request.body
    election_type = int(getattr(body, "election_type", PREFERRED))
    wanted = (
        None
        if body.topic_partitions is None
        else [(t.topic, int(p)) for t in body.topic_partitions for p in t.partitions]
    )
    try:
        _require_cluster(services, request, AclOperation.ALTER)
        results = await services.controller.elect_leaders(election_type, wanted)
        top = "NONE"
    except ControllerError as failure:
        top = failure.code
        if version >= 1:
            results = []
        else:  # no top-level error in v0: every partition asked carries it
            results = [ElectionResult(t, p, failure.code) for t, p in dict.fromkeys(wanted or ())]
    by_topic: dict[str, list[Any]] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append(
            make(
                module.PartitionResult,
                partition_id=result.partition,
                error_code=error_code(result.error),
                error_message=None if result.error == "NONE" else result.error,
            )
        )
    return make(
        module.ElectLeadersResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error_code(top),
        replica_election_results=tuple(
            make(module.ReplicaElectionResult, topic=topic, partition_result=tuple(partitions))
            for topic, partitions in by_topic.items()
        ),
    )


@handles(ALTER_PARTITION_KEY, *FORWARDED_VERSIONS[ALTER_PARTITION_KEY], plane=Plane.CONTROLLER)
async def alter_partition(services: ControllerServices, request: Request) -> Any:
    module = response_module(ALTER_PARTITION_KEY, request.header.api_version)
    body = request.body
    proposals = []
    for topic in body.topics:
        for p in topic.partitions:
            states = getattr(p, "new_isr_with_epochs", None)
            if states is not None:
                isr = tuple(int(s.broker_id) for s in states)
                epochs = {int(s.broker_id): int(s.broker_epoch) for s in states}
            else:
                isr, epochs = tuple(int(b) for b in p.new_isr), {}
            proposals.append(
                IsrProposal(
                    topic.topic_id,  # None: answered UNKNOWN_TOPIC_ID
                    int(p.partition_index),
                    int(p.leader_epoch),
                    int(p.partition_epoch),
                    isr,
                    epochs,
                )
            )

    def respond(code: str, topics: tuple[Any, ...] = ()) -> Any:
        return make(
            module.AlterPartitionResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(code),
            topics=topics,
        )

    try:
        outcomes = await services.brokers.alter_partition(
            int(body.broker_id), int(body.broker_epoch), proposals
        )
    except ControllerError as failure:
        return respond(failure.code)
    by_topic: dict[Any, list[Any]] = {}
    for proposal, outcome in zip(proposals, outcomes, strict=True):
        by_topic.setdefault(proposal.topic_id, []).append(_partition(module, proposal, outcome))
    return respond(
        "NONE",
        tuple(
            make(module.TopicData, topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in by_topic.items()
        ),
    )


def _partition(module: Any, proposal: IsrProposal, outcome: IsrOutcome) -> Any:
    return make(
        module.PartitionData,
        partition_index=proposal.partition,
        error_code=error_code(outcome.error),
        leader_id=outcome.leader_id,
        leader_epoch=outcome.leader_epoch,
        isr=outcome.isr,
        leader_recovery_state=0,
        partition_epoch=outcome.partition_epoch,
    )

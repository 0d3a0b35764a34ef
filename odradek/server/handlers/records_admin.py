"""DeleteRecords (key 21) and OffsetForLeaderEpoch (key 23), answered by partition leaders.

DeleteRecords moves a partition's log start offset forward (offset -1 means the high
watermark); segments wholly below it are deleted, the rest is hidden from readers. The
answer waits (up to the request's timeout) until every live replica's log start offset
has passed it too (Kafka's low watermark), as the replica layer does it.
Topics whose cleanup.policy does not include ``delete`` refuse it with
POLICY_VIOLATION, as Kafka does.

OffsetForLeaderEpoch returns the end offset of the largest epoch <= the requested
one; the leader wrote its current epoch into the epoch cache at its log end when it
became leader (replica/partition.py), so the current epoch ends at the log end even
before anything is written in it. Both checks and lookups are the partition's.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.replica.replica_manager import PartitionError
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

DELETE_RECORDS_KEY = 21
OFFSET_FOR_LEADER_EPOCH_KEY = 23
UNDEFINED: Final = (-1, -1)


@handles(DELETE_RECORDS_KEY, 0, 2)
async def delete_records(services: BrokerServices, request: Request) -> Any:
    module = response_module(DELETE_RECORDS_KEY, request.header.api_version)
    body = request.body
    deletable = services.authorizer.allowed_names(
        request.session, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in body.topics)
    )
    wanted = [
        (t.name, p.partition_index, p.offset)
        for t in body.topics
        if t.name in deletable
        for p in t.partitions
    ]
    timeout_ms = int(body.timeout.total_seconds() * 1000)
    answers = iter(await services.replicas.delete_records(wanted, timeout_ms) if wanted else [])
    topics = []
    for topic in body.topics:
        partitions = []
        for wanted_partition in topic.partitions:
            if topic.name in deletable:
                low_watermark, code = next(answers)
            else:
                low_watermark, code = -1, "TOPIC_AUTHORIZATION_FAILED"
            partitions.append(
                make(
                    module.DeleteRecordsPartitionResult,
                    partition_index=wanted_partition.partition_index,
                    low_watermark=low_watermark,
                    error_code=error_code(code),
                )
            )
        topics.append(
            make(module.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(partitions))
        )
    return make(
        module.DeleteRecordsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics)
    )


@handles(OFFSET_FOR_LEADER_EPOCH_KEY, 2, 4)
async def offset_for_leader_epoch(services: BrokerServices, request: Request) -> Any:
    module = response_module(OFFSET_FOR_LEADER_EPOCH_KEY, request.header.api_version)
    body = request.body
    # DESCRIBE on each topic; a follower's request (replica id >= 0): CLUSTER_ACTION
    names = {topic.topic for topic in body.topics}
    if getattr(body, "replica_id", -1) >= 0:
        allowed = services.authorizer.allowed(
            request.session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
        )
        visible, denial = (names if allowed else set()), "CLUSTER_AUTHORIZATION_FAILED"
    else:
        visible = services.authorizer.allowed_names(
            request.session, AclOperation.DESCRIBE, ResourceType.TOPIC, names
        )
        denial = "TOPIC_AUTHORIZATION_FAILED"
    topics = []
    for topic in body.topics:
        partitions = []
        for wanted in topic.partitions:
            code = "NONE"
            epoch, end_offset = UNDEFINED
            try:
                if topic.topic not in visible:
                    raise PartitionError(denial)
                epoch, end_offset = services.replicas.last_offset_for_leader_epoch(
                    topic.topic, wanted.partition, wanted.current_leader_epoch, wanted.leader_epoch
                )
            except PartitionError as error:
                code = error.code
            partitions.append(
                make(
                    module.EpochEndOffset,
                    error_code=error_code(code),
                    partition=wanted.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(
            make(module.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(partitions))
        )
    return make(
        module.OffsetForLeaderEpochResponse,
        throttle_time=datetime.timedelta(0),
        topics=tuple(topics),
    )

"""DeleteRecords (key 21) and OffsetForLeaderEpoch (key 23), answered by partition leaders.

DeleteRecords moves a partition's log start offset forward (offset -1 means the high
watermark); segments wholly below it are deleted, the rest is hidden from readers.
Topics whose cleanup.policy does not include ``delete`` refuse it with
POLICY_VIOLATION, as Kafka does.

OffsetForLeaderEpoch returns the end offset of the largest epoch <= the requested
one. Kafka's leader records its new epoch at its log end when it becomes leader; our
epoch cache only learns an epoch from the first batch written in it, so until then
the current epoch is treated as starting at the log end (``end_offset_for``).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.replica.replica_manager import Partition, PartitionError
from odradek.server.handlers import handles
from odradek.server.handlers.fetch import _check_epoch
from odradek.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

DELETE_RECORDS_KEY = 21
OFFSET_FOR_LEADER_EPOCH_KEY = 23
HIGH_WATERMARK: Final = -1
UNDEFINED: Final = (-1, -1)


@handles(DELETE_RECORDS_KEY, 0, 2)
async def delete_records(services: BrokerServices, request: Request) -> Any:
    module = response_module(DELETE_RECORDS_KEY, request.header.api_version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for wanted in topic.partitions:
            low_watermark, code = -1, "NONE"
            try:
                partition = services.replicas.leader_partition(topic.name, wanted.partition_index)
                low_watermark = _delete_before(partition, wanted.offset)
            except PartitionError as error:
                code = error.code
            partitions.append(
                make(
                    module.DeleteRecordsPartitionResult,
                    partition_index=wanted.partition_index,
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


def _delete_before(partition: Partition, offset: int) -> int:
    """Advance the log start offset to ``offset``; returns the new log start offset."""
    log = partition.log
    if not log.config.is_deleting:
        raise PartitionError(
            "POLICY_VIOLATION",
            f"records of {partition.topic}-{partition.index} cannot be deleted: "
            f"cleanup.policy={log.config.cleanup_policy}",
        )
    target = log.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise PartitionError("OFFSET_OUT_OF_RANGE", f"offset {offset} is negative")
    try:
        log.increment_log_start_offset(target)
    except OffsetOutOfRangeError as error:
        raise PartitionError("OFFSET_OUT_OF_RANGE", str(error)) from None
    return log.log_start_offset


@handles(OFFSET_FOR_LEADER_EPOCH_KEY, 2, 4)
async def offset_for_leader_epoch(services: BrokerServices, request: Request) -> Any:
    module = response_module(OFFSET_FOR_LEADER_EPOCH_KEY, request.header.api_version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for wanted in topic.partitions:
            code = "NONE"
            epoch, end_offset = UNDEFINED
            try:
                partition = services.replicas.leader_partition(topic.topic, wanted.partition)
                _check_epoch(partition, wanted.current_leader_epoch)
                epoch, end_offset = end_offset_for(partition, wanted.leader_epoch)
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


def end_offset_for(partition: Partition, requested: int) -> tuple[int, int]:
    """(largest epoch <= ``requested``, its end offset) on the leader, or (-1, -1)."""
    log = partition.log
    current = partition.leader_epoch
    latest = log.latest_epoch
    if requested < 0 or requested > current:
        return UNDEFINED
    if latest is None or latest < current:
        # No batch written in the current epoch yet: it starts at the log end.
        if requested == current:
            return current, log.log_end_offset
        if latest is None or requested > latest:
            return (latest if latest is not None else requested), log.log_end_offset
    return log.end_offset_for_epoch(requested)

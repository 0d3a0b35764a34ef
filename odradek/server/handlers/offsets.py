"""ListOffsets (key 2): earliest, latest, max-timestamp, and offset-by-timestamp."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.replica.replica_manager import Partition, PartitionError
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

LIST_OFFSETS_KEY = 2
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


@handles(LIST_OFFSETS_KEY, 1, 8)
async def list_offsets(services: BrokerServices, request: Request) -> Any:
    module = response_module(LIST_OFFSETS_KEY, request.header.api_version)
    body = request.body
    topics = []
    for topic in body.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                partition = services.replicas.leader_partition(topic.name, wanted.partition_index)
                timestamp, offset, epoch = _lookup(partition, wanted.timestamp)
                error = "NONE"
            except PartitionError as failure:
                timestamp, offset, epoch, error = -1, -1, -1, failure.code
            partitions.append(
                make(
                    module.ListOffsetsPartitionResponse,
                    partition_index=wanted.partition_index,
                    error_code=error_code(error),
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(
            make(module.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions))
        )
    return make(
        module.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics)
    )


def _lookup(partition: Partition, timestamp: int) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) for one ListOffsets query."""
    log = partition.log
    if timestamp == LATEST:
        return -1, log.high_watermark, partition.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        offset = log.log_start_offset
        return -1, offset, _epoch_at(partition, offset)
    if timestamp == LATEST_TIERED:
        return -1, -1, -1
    if timestamp == MAX_TIMESTAMP:
        max_timestamp, offset = log.max_timestamp_and_offset()
        if offset < 0:
            return -1, -1, -1
        offset = _record_with_timestamp(partition, offset, max_timestamp)
        return max_timestamp, offset, _epoch_at(partition, offset)
    if timestamp < 0:
        raise PartitionError("INVALID_REQUEST", f"unknown special timestamp {timestamp}")
    found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= log.high_watermark:
        return -1, -1, -1
    offset_found, timestamp_found = found
    return timestamp_found, offset_found, _epoch_at(partition, offset_found)


def _record_with_timestamp(partition: Partition, batch_offset: int, timestamp: int) -> int:
    """Offset of the first record carrying ``timestamp`` in the batch holding ``batch_offset``.

    Segments track the max timestamp per batch (its last offset, as Kafka's time index
    does); MAX_TIMESTAMP answers with the record itself (KIP-734, KAFKA-16310), so the
    one batch is decoded here.
    """
    from odradek.records.codec import decode_batch
    from odradek.records.compression import STORED_EXPANSION, ExpansionLimitError
    from odradek.records.errors import CorruptRecordError

    for data in partition.log.read_batches(batch_offset, batch_offset + 1):
        try:  # a bomb stored unopened, or records that do not decode: the batch's offset
            records = decode_batch(data, limit=STORED_EXPANSION * len(data)).records
        except (ExpansionLimitError, CorruptRecordError):
            return batch_offset
        for record in records:
            if record.timestamp == timestamp:
                return record.offset
    return batch_offset


def _epoch_at(partition: Partition, offset: int) -> int:
    epoch = partition.log.epoch_cache.epoch_for_offset(offset)
    return epoch if epoch is not None else partition.leader_epoch

"""Fetch (key 1): read whole batches below the high watermark, long-polling for more.

The response is encoded by protocol/fetch_codec.py so record bytes go from segment
files to the socket with sendfile. Consumers read below the HW (read_committed:
below the LSO, equal to the HW until transactions arrive); followers (replica_id >= 0)
read to the log end. KIP-74: the first batch of the first partition with data is
returned whole even if larger than max_bytes; later partitions share what is left.
Fetch sessions (KIP-227) are declined: session id 0 in every response makes clients
send full fetches, which the protocol allows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from odradek.network.connection import Response
from odradek.protocol.build import error_code
from odradek.protocol.fetch_codec import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    TopicResult,
    encode_fetch_response,
)
from odradek.protocol.messages import Request
from odradek.replica.replica_manager import Partition, PartitionError
from odradek.server.handlers import handles
from odradek.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

FETCH_KEY = 1
FINAL_EPOCH = -1


@handles(FETCH_KEY, MIN_VERSION, MAX_VERSION)
async def fetch(services: BrokerServices, request: Request) -> Response:
    body = request.body
    header = request.header
    session_id = getattr(body, "session_id", 0)
    session_epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    if session_id != 0 or session_epoch > 0:
        parts = encode_fetch_response(
            header.api_version,
            header.correlation_id,
            [],
            error_code=error_code("FETCH_SESSION_ID_NOT_FOUND").value,
        )
        return Response(parts)
    deadline = time.monotonic() + body.max_wait.total_seconds()
    while True:
        results, partitions, total, failed = _read_all(services, request)
        remaining = deadline - time.monotonic()
        if failed or total >= body.min_bytes or remaining <= 0 or not partitions:
            break
        if services.replicas.closing:  # shutting down: answer with what there is
            break
        await services.replicas.wait_for_data(partitions, remaining)
    return Response(encode_fetch_response(header.api_version, header.correlation_id, results))


def _read_all(
    services: BrokerServices, request: Request
) -> tuple[list[TopicResult], list[Partition], int, bool]:
    body = request.body
    is_follower = body.replica_id >= 0
    budget = getattr(body, "max_bytes", 0x7FFFFFFF)
    results, watched, total, failed = [], [], 0, False
    for topic in body.topics:
        partitions = []
        for wanted in topic.partitions:
            result = PartitionResult(wanted.partition, 0)
            try:
                partition = services.replicas.leader_partition(topic.topic, wanted.partition)
                _check_epoch(partition, getattr(wanted, "current_leader_epoch", -1))
                log = partition.log
                # Both isolation levels read below the HW: the LSO equals the HW
                # until transactions exist.
                limit = None if is_follower else log.high_watermark
                info = log.read(
                    wanted.fetch_offset,
                    max(min(wanted.partition_max_bytes, budget), 0),
                    max_offset=limit,
                    min_one_batch=total == 0,
                )
                result.ranges = info.ranges
                result.high_watermark = log.high_watermark
                result.last_stable_offset = log.high_watermark
                result.log_start_offset = log.log_start_offset
                result.aborted = None
                total += result.records_size
                budget -= result.records_size
                watched.append(partition)
            except PartitionError as error:
                result.error_code = error_code(error.code).value
                failed = True
            except OffsetOutOfRangeError:
                result.error_code = error_code("OFFSET_OUT_OF_RANGE").value
                result.high_watermark = partition.log.high_watermark
                result.last_stable_offset = partition.log.high_watermark
                result.log_start_offset = partition.log.log_start_offset
                failed = True
            partitions.append(result)
        results.append(TopicResult(topic.topic, partitions))
    return results, watched, total, failed


def _check_epoch(partition: Partition, current_leader_epoch: int) -> None:
    if current_leader_epoch < 0 or current_leader_epoch == partition.leader_epoch:
        return
    if current_leader_epoch < partition.leader_epoch:
        raise PartitionError("FENCED_LEADER_EPOCH")
    raise PartitionError("UNKNOWN_LEADER_EPOCH")

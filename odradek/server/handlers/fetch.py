"""Fetch (key 1): decode, let the replica layer read and wait, encode.

The semantics live in replica/ (review step 3): ``ReplicaManager.fetch`` reads every
partition — consumers below the high watermark (read_committed: below the LSO, equal
to the HW until transactions arrive), followers (``replica_id`` >= 0) to the log end,
reporting their position to the leader — checks leader epochs, reports a diverging
epoch (v12+), points a consumer with a rack (v11+ ``rack_id``) at a follower of its
rack (``preferred_read_replica``, KIP-392) and serves such consumers as a follower
too, and long-polls until ``min_bytes`` or ``max_wait``. This handler only
turns the request into ``FetchParams`` and the answer into fetch_codec's structures,
whose records go from segment files to the socket with sendfile. KIP-74: the first
batch of the first partition with data is returned whole even if larger than
max_bytes; later partitions share what is left. Fetch sessions (KIP-227) are
declined: session id 0 in every response makes clients send full fetches, which the
protocol allows.
"""

from __future__ import annotations

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
from odradek.replica.reads import FetchParams, FetchPosition, PartitionRead
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

FETCH_KEY = 1
FINAL_EPOCH = -1
MAX_INT32 = 0x7FFFFFFF


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
    results = await services.replicas.fetch(fetch_params(body))
    topics = [
        TopicResult(name, [_encode(index, read) for index, read in partitions])
        for name, partitions in results
    ]
    return Response(encode_fetch_response(header.api_version, header.correlation_id, topics))


def fetch_params(body: object) -> FetchParams:
    """The request as the replica layer takes it (fields by version: v3 max_bytes,
    v4 isolation_level, v5 log_start_offset, v9 current_leader_epoch, v11 rack_id,
    v12 last_fetched_epoch; v15+ carries the follower in replica_state)."""
    replica_id = getattr(body, "replica_id", -1)
    replica_epoch = -1
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        replica_id = replica_state.replica_id
        replica_epoch = replica_state.replica_epoch
    topics = [
        (
            topic.topic,
            [
                (
                    wanted.partition,
                    FetchPosition(
                        wanted.fetch_offset,
                        wanted.partition_max_bytes,
                        getattr(wanted, "current_leader_epoch", -1),
                        getattr(wanted, "last_fetched_epoch", -1),
                        getattr(wanted, "log_start_offset", -1),
                    ),
                )
                for wanted in topic.partitions
            ],
        )
        for topic in getattr(body, "topics", ())
    ]
    return FetchParams(
        replica_id=replica_id,
        max_wait_ms=int(body.max_wait.total_seconds() * 1000),  # type: ignore[attr-defined]
        min_bytes=body.min_bytes,  # type: ignore[attr-defined]
        max_bytes=getattr(body, "max_bytes", MAX_INT32),
        topics=topics,
        isolation_level=getattr(body, "isolation_level", 0),
        replica_epoch=replica_epoch,
        client_rack=getattr(body, "rack_id", None),  # v11+: may read from a follower
    )


def _encode(index: int, read: PartitionRead) -> PartitionResult:
    return PartitionResult(
        index,
        error_code(read.error).value,
        read.high_watermark,
        read.last_stable_offset,
        read.log_start_offset,
        read.ranges,
        diverging_epoch=read.diverging_epoch,
        preferred_read_replica=read.preferred_read_replica,
    )

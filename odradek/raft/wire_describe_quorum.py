"""DescribeQuorum ⇄ kio: the request's check, the response from a node's quorum
description, and the request a client (forwarding, tests) sends.

How this works and why: DescribeQuorum (API 55, KIP-595; v1 fetch and caught-up
timestamps, v2 error message, directory ids and the voters' nodes) is an admin API,
not a message between voters: the driver answers it with a ``QuorumDescription``
rather than a core message, a broker forwards it to the active controller, and
``kafka-metadata-quorum`` reads it. So it has its own mapping beside wire.py's (which
maps the voters' messages), built on that module's shared pieces (the version table,
the one-partition topic list). Timestamps are the node's monotonic clock turned into
wall-clock milliseconds, as Kafka reports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.protocol.build import make
from odradek.raft.wire import (
    DESCRIBE_QUORUM_KEY,
    METADATA_PARTITION,
    metadata_topic,
    request_module,
    response_module,
    single_partition,
)

# The listener name DescribeQuorum v2 gives voters' addresses under: the voters come from
# controller.quorum.voters, which names no listener (Kafka's default controller listener).
CONTROLLER_LISTENER: Final = "CONTROLLER"


def check_describe_quorum_request(entity: Any) -> None:
    """WireError unless the request asks about the metadata partition (only)."""
    single_partition(entity)


def describe_quorum_to_kio(
    description: Any,
    version: int,
    wall_offset_ms: int = 0,
    nodes: Sequence[tuple[int, str, int]] = (),
) -> Any:
    """DescribeQuorumResponse from a ``QuorumDescription``; ``wall_offset_ms`` turns the
    node's clock (monotonic) into wall-clock timestamps, as Kafka reports them. ``nodes``
    (v2): each voter's ``(node id, host, port)`` on the controller listener, so a tool
    that asked a follower can find the leader."""
    module = response_module(DESCRIBE_QUORUM_KEY, version)

    def replica(r: Any) -> Any:
        def wall(ms: int) -> int:
            return ms + wall_offset_ms if ms >= 0 else -1

        return make(
            module.ReplicaState,
            replica_id=r.replica_id,
            replica_directory_id=None,
            log_end_offset=r.log_end_offset,
            last_fetch_timestamp=wall(r.last_fetch_timestamp),
            last_caught_up_timestamp=wall(r.last_caught_up_timestamp),
        )

    partition = make(
        module.PartitionData,
        partition_index=METADATA_PARTITION,
        error_code=description.error_code,
        error_message=None,
        leader_id=description.leader_id,
        leader_epoch=description.leader_epoch,
        high_watermark=description.high_watermark,
        current_voters=tuple(replica(r) for r in description.current_voters),
        observers=tuple(replica(r) for r in description.observers),
    )
    return make(
        module.DescribeQuorumResponse,
        error_code=ErrorCode.none,
        error_message=None,
        topics=(metadata_topic(module, "TopicData", (partition,)),),
        nodes=tuple(
            make(
                module.Node,
                node_id=node_id,
                listeners=(make(module.Listener, name=CONTROLLER_LISTENER, host=host, port=port),),
            )
            for node_id, host, port in nodes
        )
        if version >= 2
        else (),
    )


def describe_quorum_request(version: int) -> Any:
    module = request_module(DESCRIBE_QUORUM_KEY, version)
    partition = module.PartitionData(partition_index=METADATA_PARTITION)
    return module.DescribeQuorumRequest(topics=(metadata_topic(module, "TopicData", (partition,)),))

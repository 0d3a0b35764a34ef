"""ListOffsets (key 2): earliest, latest, max-timestamp, and offset-by-timestamp.

The lookups are the partition's (``Partition.offset_for_timestamp``, review step 3):
leader epoch fencing, the HW as the visible end, and OFFSET_NOT_AVAILABLE from a new
leader whose HW has not reached the start of its epoch yet. A consumer's request
(replica id -1) carries an isolation level; a broker's or a debug one (-2) does not.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.replica.replica_manager import PartitionError
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

LIST_OFFSETS_KEY = 2


@handles(LIST_OFFSETS_KEY, 1, 8)
async def list_offsets(services: BrokerServices, request: Request) -> Any:
    module = response_module(LIST_OFFSETS_KEY, request.header.api_version)
    body = request.body
    isolation = getattr(body, "isolation_level", 0) if body.replica_id == -1 else None
    # DESCRIBE on each topic (a follower's request: CLUSTER_ACTION on the cluster)
    follower = body.replica_id >= 0
    operation = AclOperation.CLUSTER_ACTION if follower else AclOperation.DESCRIBE
    names = {topic.name for topic in body.topics}
    if follower:
        allowed = services.authorizer.allowed(request.session, operation, ResourceType.CLUSTER)
        visible = names if allowed else set()
    else:
        visible = services.authorizer.allowed_names(
            request.session, operation, ResourceType.TOPIC, names
        )
    topics = []
    for topic in body.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                if topic.name not in visible:
                    code = "CLUSTER" if follower else "TOPIC"
                    raise PartitionError(f"{code}_AUTHORIZATION_FAILED")
                timestamp, offset, epoch = services.replicas.offset_for_timestamp(
                    topic.name,
                    wanted.partition_index,
                    wanted.timestamp,
                    getattr(wanted, "current_leader_epoch", -1),
                    isolation,
                )
                if wanted.timestamp >= 0:  # tiered storage: maybe below the local log
                    timestamp, offset, epoch = await services.replicas.remote_offset_for_timestamp(
                        topic.name,
                        wanted.partition_index,
                        wanted.timestamp,
                        (timestamp, offset, epoch),
                    )
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

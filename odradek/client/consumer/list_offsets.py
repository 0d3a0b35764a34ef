"""ListOffsets for the consumer core: offsets (and timestamps) for a timestamp, the
log end (LATEST) or the log start (EARLIEST), asked of each partition's leader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import request_entity
from odradek.client._core.errors import KafkaError
from odradek.client.consumer.offsets import TP

LIST_OFFSETS: Final = 2


async def list_offsets(
    cluster: Cluster, isolation: int, query: Mapping[TP, int]
) -> dict[TP, tuple[int, int]]:
    """(offset, timestamp) per partition for a timestamp, LATEST or EARLIEST."""

    async def attempt() -> dict[TP, tuple[int, int]]:
        by_node: dict[int, list[TP]] = {}
        for tp in query:
            by_node.setdefault(await cluster.leader_for(*tp), []).append(tp)
        result: dict[TP, tuple[int, int]] = {}
        for node_id, tps in by_node.items():
            connection = await cluster.connection(node_id)
            version = connection.version_for(LIST_OFFSETS)
            topics: dict[str, list[Any]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(
                    request_entity(
                        LIST_OFFSETS,
                        version,
                        "ListOffsetsPartition",
                        partition_index=p,
                        current_leader_epoch=-1,
                        timestamp=query[(t, p)],
                    )
                )
            request = request_entity(
                LIST_OFFSETS,
                version,
                replica_id=-1,
                isolation_level=isolation,
                topics=tuple(
                    request_entity(
                        LIST_OFFSETS, version, "ListOffsetsTopic", name=t, partitions=tuple(ps)
                    )
                    for t, ps in topics.items()
                ),
            )
            response = await connection.send(request)
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code != ErrorCode.none:
                        raise KafkaError(p.error_code, f"{topic.name}-{p.partition_index}")
                    result[(topic.name, p.partition_index)] = (p.offset, p.timestamp)
        return result

    return await cluster.with_retry(attempt)

"""The consumer's group offsets: coordinator lookup, OffsetFetch and OffsetCommit.

How this works and why: a group's committed offsets live with its coordinator, a broker
found by FindCoordinator and kept until it answers NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE (``coordinator_error`` forgets it). Every group request
(JoinGroup, SyncGroup, Heartbeat, OffsetCommit, ...) goes over a connection of its own
to the coordinator, as Java and librdkafka do: a broker answers one connection's
requests in order and holds a JoinGroup until the whole group has joined, which on a
shared connection would stall the fetches behind it for the whole rebalance. ``committed`` reads
offsets with OffsetFetch (``require_stable``, so offsets of open transactions are not
read as final); ``commit`` writes them with OffsetCommit under the member's current
generation, member id and group instance id (``generation``, set by the group member;
-1 and empty outside a group, which the broker accepts while the group has no members).
A commit the group refuses because of a rebalance or a stale generation raises
``CommitFailedError`` after telling the member (``on_commit_failed``), which decides
whether its partitions are lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import (
    BrokerAddress,
    BrokerConnection,
    request_entity,
)
from odradek.client._core.errors import KafkaError

OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
TP = tuple[str, int]
Generation = tuple[int, str, str | None]  # (generation id, member id, group instance id)
_COORDINATOR_ERRORS: Final = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available}
)
_GROUP_MOVED_ON: Final = frozenset(
    {
        ErrorCode.illegal_generation,
        ErrorCode.unknown_member_id,
        ErrorCode.rebalance_in_progress,
        ErrorCode.fenced_instance_id,
    }
)


class CommitFailedError(KafkaError):
    """A group commit was rejected because the member is no longer in the generation."""


class GroupOffsets:
    """Committed offsets of one group, through its coordinator."""

    def __init__(self, cluster: Cluster, group_id: str | None) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self._connection: BrokerConnection | None = None
        self._finding = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        # Set by the group member: what a commit is made under, and who hears that the
        # group refused one (the error code and the generation the commit was made in).
        self.generation: Callable[[], Generation] = lambda: (-1, "", None)
        self.on_commit_failed: Callable[[ErrorCode, Generation], None] = lambda c, g: None

    def coordinator_error(self, code: ErrorCode, what: str) -> KafkaError:
        if code in _COORDINATOR_ERRORS:
            self._forget()
        return KafkaError(code, what)

    def reconnect(self) -> None:
        """Use a new connection from now on: the broker may be holding a request on
        this one (a JoinGroup that was given up) and answers a connection in order."""
        self._forget()

    def _forget(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            task = asyncio.get_running_loop().create_task(connection.close())
            self._closing.add(task)  # referenced until done
            task.add_done_callback(self._closing.discard)

    async def coordinator(self) -> BrokerConnection:
        """The connection to the group's coordinator, found and opened when needed."""
        if not self.group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "group.id is not set")
        async with self._finding:
            if self._connection is not None and not self._connection.closed:
                return self._connection
            connection = await self.cluster.any_connection()
            version = connection.version_for(FIND_COORDINATOR)
            response = await connection.send(
                request_entity(
                    FIND_COORDINATOR, version, key_type=0, coordinator_keys=(self.group_id,)
                )
            )
            found = response.coordinators[0]
            if found.error_code != ErrorCode.none:
                raise KafkaError(found.error_code, f"FindCoordinator {self.group_id}")
            address = BrokerAddress(found.node_id, found.host, found.port)
            self._connection = await self.cluster.open(address)
            return self._connection

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def committed(self, partitions: Iterable[TP]) -> dict[TP, tuple[int, str | None]]:
        """(offset, metadata) committed by the group; offset -1 when none."""
        wanted = list(partitions)

        async def attempt() -> dict[TP, tuple[int, str | None]]:
            connection = await self.coordinator()
            version = connection.version_for(OFFSET_FETCH)
            by_topic: dict[str, list[int]] = {}
            for t, p in wanted:
                by_topic.setdefault(t, []).append(p)
            request = request_entity(
                OFFSET_FETCH,
                version,
                require_stable=True,
                groups=(
                    request_entity(
                        OFFSET_FETCH,
                        version,
                        "OffsetFetchRequestGroup",
                        group_id=self.group_id,
                        member_id=None,
                        member_epoch=-1,
                        topics=tuple(
                            request_entity(
                                OFFSET_FETCH,
                                version,
                                "OffsetFetchRequestTopics",
                                name=t,
                                partition_indexes=tuple(ps),
                            )
                            for t, ps in by_topic.items()
                        ),
                    ),
                ),
            )
            response = await connection.send(request)
            group = response.groups[0]
            if group.error_code != ErrorCode.none:
                raise self.coordinator_error(group.error_code, f"OffsetFetch {self.group_id}")
            result: dict[TP, tuple[int, str | None]] = {tp: (-1, None) for tp in wanted}
            for topic in group.topics:
                for p in topic.partitions:
                    if p.error_code != ErrorCode.none:
                        raise KafkaError(p.error_code, f"{topic.name}-{p.partition_index}")
                    result[(topic.name, p.partition_index)] = (p.committed_offset, p.metadata)
            return result

        return await self.cluster.with_retry(attempt)

    async def commit(self, offsets: Mapping[TP, int], metadata: str = "") -> None:
        """OffsetCommit ``offsets`` in the member's current generation."""
        to_commit = dict(offsets)

        async def attempt() -> None:
            connection = await self.coordinator()
            version = connection.version_for(OFFSET_COMMIT)
            generation = self.generation()
            by_topic: dict[str, list[Any]] = {}
            for (t, p), offset in to_commit.items():
                by_topic.setdefault(t, []).append(
                    request_entity(
                        OFFSET_COMMIT,
                        version,
                        "OffsetCommitRequestPartition",
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=metadata,
                    )
                )
            request = request_entity(
                OFFSET_COMMIT,
                version,
                group_id=self.group_id,
                generation_id_or_member_epoch=generation[0],
                member_id=generation[1],
                group_instance_id=generation[2],
                topics=tuple(
                    request_entity(
                        OFFSET_COMMIT,
                        version,
                        "OffsetCommitRequestTopic",
                        name=t,
                        partitions=tuple(ps),
                    )
                    for t, ps in by_topic.items()
                ),
            )
            response = await connection.send(request)
            for topic in response.topics:
                for p in topic.partitions:
                    code = p.error_code
                    if code == ErrorCode.none:
                        continue
                    if code in _GROUP_MOVED_ON:
                        self.on_commit_failed(code, generation)
                        raise CommitFailedError(code, "the group rebalanced; commit failed")
                    raise self.coordinator_error(code, f"commit {topic.name}-{p.partition_index}")

        await self.cluster.with_retry(attempt)

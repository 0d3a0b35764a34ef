"""Transaction markers: written into the partitions led here, sent to the leaders of the rest.

How this works and why (seeds/000 提交或回滚事务; KIP-98's WriteTxnMarkers): once a
transaction's PrepareCommit/PrepareAbort is durable in ``__transaction_state``, the
transaction coordinator must put a COMMIT or ABORT control batch into every partition
the transaction wrote to (and into the ``__consumer_offsets`` partition of each group
it sent offsets to). Only a partition's leader may append, so the coordinator's
``TxnMarkerChannel`` (``write_markers``, implemented here) groups the partitions by
their leader in this node's metadata image:

- partitions led by this node are written directly (``write_local``, which is also
  what the WriteTxnMarkers handler calls when another broker's coordinator sends
  them): a data partition through ``ReplicaManager.write_marker`` (acks=all, answered
  once the high watermark passed the marker), a ``__consumer_offsets`` partition
  through the group coordinator's write queue (``complete_transaction``), which makes
  the transaction's pending offsets committed or drops them once the marker is written;
- the others go in one WriteTxnMarkers request per leader, over a connection to the
  leader's inter-broker listener that is kept between requests and made again after
  a failure. A leader that cannot be reached answers its partitions with
  NOT_LEADER_OR_FOLLOWER, which the coordinator retries (after a backoff, with
  metadata that may by then name a new leader).

Every answer is a Kafka error name per partition; the coordinator retries until each
says NONE (or UNKNOWN_TOPIC_OR_PARTITION: the topic is gone). Control batches are
only ever created here, from a coordinator's request — clients cannot write them
(log_validator.py refuses them).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from odradek.client._core.connection import API_VERSIONS_KEY, KafkaConnectionError, request_entity
from odradek.coordinator.group.shard import OFFSETS_TOPIC
from odradek.coordinator.runtime import CoordinatorError
from odradek.coordinator.transaction.markers import MarkerEntry
from odradek.replica.replica_manager import PartitionError
from odradek.server.peer_connections import Endpoint, PeerConnections

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials
    from odradek.coordinator.group.coordinator import GroupCoordinator
    from odradek.metadata.view import MetadataView
    from odradek.replica.replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

WRITE_TXN_MARKERS_KEY: Final = 27
CLIENT_VERSIONS: Final = {API_VERSIONS_KEY: (0, 3), WRITE_TXN_MARKERS_KEY: (1, 1)}
REQUEST_TIMEOUT_S: Final = 30.0  # request.timeout.ms of Kafka's marker channel

TopicPartition = tuple[str, int]


class TxnMarkerWriter:
    """The transaction coordinator's ``TxnMarkerChannel`` and WriteTxnMarkers' writer."""

    def __init__(
        self,
        metadata: MetadataView,
        replicas: ReplicaManager,
        groups: Callable[[], GroupCoordinator | None],
        endpoint: Endpoint,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self._groups = groups
        self.peers = PeerConnections(
            f"txn-markers-{metadata.node_id}",
            endpoint,
            CLIENT_VERSIONS,
            REQUEST_TIMEOUT_S,
            ssl_context=ssl_context,
            sasl=sasl,
        )

    # -- the coordinator's channel -------------------------------------------------------
    async def write_markers(self, entries: Sequence[MarkerEntry]) -> dict[TopicPartition, str]:
        image = self.metadata.image
        me = self.metadata.node_id
        by_leader: dict[int, list[MarkerEntry]] = {}
        results: dict[TopicPartition, str] = {}
        for entry in entries:
            grouped: dict[int, list[TopicPartition]] = {}
            for tp in entry.partitions:
                topic = image.topics.get(tp[0])
                part = topic.partitions.get(tp[1]) if topic is not None else None
                if part is None:
                    results[tp] = "UNKNOWN_TOPIC_OR_PARTITION"
                elif part.leader < 0:
                    results[tp] = "NOT_LEADER_OR_FOLLOWER"
                else:
                    grouped.setdefault(part.leader, []).append(tp)
            for leader, tps in grouped.items():
                by_leader.setdefault(leader, []).append(_with_partitions(entry, tps))
        jobs = [
            self._write_all_local(batch) if leader == me else self._send(leader, batch)
            for leader, batch in by_leader.items()
        ]
        for answered in await asyncio.gather(*jobs):
            results.update(answered)
        return results

    async def _write_all_local(self, entries: Sequence[MarkerEntry]) -> dict[TopicPartition, str]:
        results: dict[TopicPartition, str] = {}
        for answered in await asyncio.gather(*(self.write_local(e) for e in entries)):
            results.update(answered)
        return results

    # -- partitions led here -------------------------------------------------------------
    async def write_local(self, entry: MarkerEntry) -> dict[TopicPartition, str]:
        """Write ``entry``'s marker into each of its partitions (this node must lead
        them); the error name per partition."""
        tps = list(dict.fromkeys(entry.partitions))
        answers = await asyncio.gather(*(self._write_one(entry, tp) for tp in tps))
        return dict(zip(tps, answers, strict=True))

    async def _write_one(self, entry: MarkerEntry, tp: TopicPartition) -> str:
        topic, index = tp
        if topic == OFFSETS_TOPIC:
            groups = self._groups()
            if groups is None:
                return "NOT_LEADER_OR_FOLLOWER"
            try:
                return await groups.complete_transaction(
                    index,
                    entry.producer_id,
                    entry.producer_epoch,
                    entry.coordinator_epoch,
                    entry.commit,
                )
            except CoordinatorError as error:
                return error.code
        try:
            await self.replicas.write_marker(
                topic,
                index,
                entry.producer_id,
                entry.producer_epoch,
                entry.coordinator_epoch,
                entry.commit,
            )
        except PartitionError as error:
            return error.code
        return "NONE"

    # -- partitions led elsewhere -----------------------------------------------------------
    async def _send(self, leader: int, entries: Sequence[MarkerEntry]) -> dict[TopicPartition, str]:
        wanted = [tp for entry in entries for tp in entry.partitions]
        try:
            response = await self.peers.send(leader, _request(entries))
        except (KafkaConnectionError, OSError, TimeoutError) as error:
            logger.info("markers for %d partitions of node %d: %s", len(wanted), leader, error)
            return dict.fromkeys(wanted, "NOT_LEADER_OR_FOLLOWER")
        results = dict.fromkeys(wanted, "UNKNOWN_SERVER_ERROR")
        for marker in response.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    results[(topic.name, partition.partition_index)] = (
                        partition.error_code.name.upper()
                    )
        return results

    async def close(self) -> None:
        await self.peers.close()


def _with_partitions(entry: MarkerEntry, partitions: list[TopicPartition]) -> MarkerEntry:
    return MarkerEntry(
        entry.producer_id,
        entry.producer_epoch,
        entry.coordinator_epoch,
        entry.commit,
        tuple(partitions),
    )


def _request(entries: Sequence[MarkerEntry]) -> Any:
    version = 1
    markers = []
    for entry in entries:
        by_topic: dict[str, list[int]] = {}
        for topic, index in entry.partitions:
            by_topic.setdefault(topic, []).append(index)
        topics = tuple(
            request_entity(
                WRITE_TXN_MARKERS_KEY,
                version,
                "WritableTxnMarkerTopic",
                name=name,
                partition_indexes=tuple(indexes),
            )
            for name, indexes in by_topic.items()
        )
        markers.append(
            request_entity(
                WRITE_TXN_MARKERS_KEY,
                version,
                "WritableTxnMarker",
                producer_id=entry.producer_id,
                producer_epoch=entry.producer_epoch,
                transaction_result=entry.commit,
                topics=topics,
                coordinator_epoch=entry.coordinator_epoch,
            )
        )
    return request_entity(WRITE_TXN_MARKERS_KEY, version, markers=tuple(markers))

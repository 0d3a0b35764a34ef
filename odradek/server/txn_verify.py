"""KIP-890 part 1: a partition leader verifies a transactional produce with the coordinator.

Why (seeds/000 事务, KIP-890): a producer adds a partition to its transaction
(AddPartitionsToTxn) before it writes there, but a write that is delayed — a retry
stuck in a socket while the transaction commits or aborts — can reach the leader
after the marker. The leader would then see a transactional batch with no open
transaction and open one; no coordinator knows it, no marker will ever close it, and
the partition's last stable offset stops there for good: a *hanging transaction*,
which blocks every read_committed consumer.

So before a transactional batch that would open a transaction in a partition (one
already open for that producer and epoch needs nothing), the produce handler:

1. takes the producer's *verification guard* from the partition's producer state
   (``ReplicaManager.verification_guard``); any marker for the producer drops it;
2. asks the transactional id's coordinator whether the partition is in the
   producer's ongoing transaction (``TxnVerifier.verify``): the local
   ``TransactionCoordinator.verify_partitions`` when this node leads the id's
   ``__transaction_state`` partition, else AddPartitionsToTxn v4 with
   ``verify_only`` to that leader (one request for all the produce's partitions);
3. appends with the guard: the log refuses (INVALID_TXN_STATE) a batch that would open
   a transaction once the guard is gone — a marker landed while the coordinator was
   asked (producer_state.check).

Answers, as Kafka gives them to producers that cannot know new error codes
(KAFKA-15459): INVALID_TXN_STATE for a partition not in the transaction,
INVALID_PRODUCER_EPOCH for a fenced producer, and NOT_ENOUGH_REPLICAS (retriable for
every client) with a message when the coordinator cannot answer now (moving, loading,
busy ending the transaction, unreachable).

``transaction.partition.verification.enable`` (default true, as Kafka) turns it off.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from odradek.client._core.connection import (
    API_VERSIONS_KEY,
    KafkaConnectionError,
    request_entity,
)
from odradek.coordinator.transaction.shard import TRANSACTION_STATE_TOPIC
from odradek.server.peer_connections import Endpoint, PeerConnections

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials
    from odradek.coordinator.transaction.coordinator import TransactionCoordinator
    from odradek.metadata.view import MetadataView

logger = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN_KEY: Final = 24
VERIFY_VERSION: Final = 4  # the first with the brokers' batched form and verify_only
CLIENT_VERSIONS: Final = {API_VERSIONS_KEY: (0, 3), ADD_PARTITIONS_TO_TXN_KEY: (4, 5)}
REQUEST_TIMEOUT_S: Final = 30.0

TopicPartition = tuple[str, int]

# What the producer is told, by the coordinator's answer.
_AS_PRODUCE_ERROR: Final = {
    "NONE": "NONE",
    "INVALID_TXN_STATE": "INVALID_TXN_STATE",
    "PRODUCER_FENCED": "INVALID_PRODUCER_EPOCH",
    "INVALID_PRODUCER_EPOCH": "INVALID_PRODUCER_EPOCH",
    "INVALID_PRODUCER_ID_MAPPING": "INVALID_TXN_STATE",
    "TRANSACTIONAL_ID_NOT_FOUND": "INVALID_TXN_STATE",
}
RETRY_LATER: Final = "NOT_ENOUGH_REPLICAS"


def produce_error(coordinator_error: str) -> str:
    """The produce error for a verification answer (module docstring)."""
    return _AS_PRODUCE_ERROR.get(coordinator_error, RETRY_LATER)


class TxnVerifier:
    def __init__(
        self,
        metadata: MetadataView,
        coordinator: Callable[[], TransactionCoordinator | None],
        endpoint: Endpoint,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.metadata = metadata
        self._coordinator = coordinator
        self.peers = PeerConnections(
            f"txn-verify-{metadata.node_id}",
            endpoint,
            CLIENT_VERSIONS,
            REQUEST_TIMEOUT_S,
            ssl_context=ssl_context,
            sasl=sasl,
        )

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, str]:
        """The coordinator's answer (a Kafka error name) for each partition."""
        coordinator = self._coordinator()
        if coordinator is None:
            return dict.fromkeys(partitions, "COORDINATOR_NOT_AVAILABLE")
        index = coordinator.partition_for(transactional_id)
        topic = self.metadata.image.topics.get(TRANSACTION_STATE_TOPIC)
        state = topic.partitions.get(index) if topic is not None else None
        leader = state.leader if state is not None else -1
        if leader < 0:
            return dict.fromkeys(partitions, "COORDINATOR_NOT_AVAILABLE")
        if leader == self.metadata.node_id:
            return await coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        request = _request(transactional_id, producer_id, producer_epoch, partitions)
        try:
            response = await self.peers.send(leader, request)
        except (KafkaConnectionError, OSError, TimeoutError) as error:
            logger.info("verifying %s with node %d: %s", transactional_id, leader, error)
            return dict.fromkeys(partitions, "COORDINATOR_NOT_AVAILABLE")
        return _answers(response, partitions)

    async def close(self) -> None:
        await self.peers.close()


def _request(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Sequence[TopicPartition],
) -> object:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    topics = tuple(
        request_entity(
            ADD_PARTITIONS_TO_TXN_KEY,
            VERIFY_VERSION,
            "AddPartitionsToTxnTopic",
            name=name,
            partitions=tuple(indexes),
        )
        for name, indexes in by_topic.items()
    )
    transaction = request_entity(
        ADD_PARTITIONS_TO_TXN_KEY,
        VERIFY_VERSION,
        "AddPartitionsToTxnTransaction",
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        verify_only=True,
        topics=topics,
    )
    return request_entity(ADD_PARTITIONS_TO_TXN_KEY, VERIFY_VERSION, transactions=(transaction,))


def _answers(response: object, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, str]:
    top = response.error_code.name.upper()  # type: ignore[attr-defined]
    if top != "NONE":
        return dict.fromkeys(partitions, top)
    answers = dict.fromkeys(partitions, "UNKNOWN_SERVER_ERROR")
    for result in response.results_by_transaction:  # type: ignore[attr-defined]
        for topic in result.topic_results:
            for partition in topic.results_by_partition:
                tp = (topic.name, partition.partition_index)
                if tp in answers:
                    answers[tp] = partition.partition_error_code.name.upper()
    return answers

"""The transactional producer's requests, built from plain values, and their answers.

How this works and why: the transaction manager's I/O loop (transaction_manager.py)
only decides *when* to send; what each request holds, at the version the connection
negotiated, and how an answer with one error per partition is read, is here, free of
I/O, like consumer/group_requests.py for the group protocol. AddPartitionsToTxn is
spoken at v0-3 (v4+ is the broker-to-broker batched form), EndTxn at v0-3 (v5 is
KIP-890 part 2, not spoken), TxnOffsetCommit at v0-3 (v3 adds the member's
generation, member id and instance id).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_entity
from odradek.client.producer.transactions import TP, ConsumerGroupMetadata

FIND_COORDINATOR_KEY: Final = 10
INIT_PRODUCER_ID_KEY: Final = 22
ADD_PARTITIONS_TO_TXN_KEY: Final = 24
ADD_OFFSETS_TO_TXN_KEY: Final = 25
END_TXN_KEY: Final = 26
TXN_OFFSET_COMMIT_KEY: Final = 28
TRANSACTION_VERSIONS: Final = {
    FIND_COORDINATOR_KEY: (1, 3),
    ADD_PARTITIONS_TO_TXN_KEY: (0, 3),
    ADD_OFFSETS_TO_TXN_KEY: (0, 3),
    END_TXN_KEY: (0, 3),
    TXN_OFFSET_COMMIT_KEY: (0, 3),
}
Offsets = Mapping[TP, tuple[int, int, str | None]]  # (offset, leader epoch, metadata)


def find_coordinator(version: int, key: str, key_type: int) -> Any:
    return request_entity(FIND_COORDINATOR_KEY, version, key=key, key_type=key_type)


def init_producer_id(
    version: int,
    transactional_id: str,
    timeout_ms: int,
    producer_id: int,
    producer_epoch: int,
) -> Any:
    """With v3+ and a current id, the coordinator bumps this producer's epoch (KIP-360)
    instead of treating it as a new instance."""
    bump = version >= 3 and producer_id >= 0
    return request_entity(
        INIT_PRODUCER_ID_KEY,
        version,
        transactional_id=transactional_id,
        transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        producer_id=producer_id if bump else -1,
        producer_epoch=producer_epoch if bump else -1,
    )


def add_partitions(
    version: int, transactional_id: str, producer_id: int, epoch: int, tps: Iterable[TP]
) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    topics = tuple(
        request_entity(
            ADD_PARTITIONS_TO_TXN_KEY,
            version,
            "AddPartitionsToTxnTopic",
            name=topic,
            partitions=tuple(partitions),
        )
        for topic, partitions in by_topic.items()
    )
    return request_entity(
        ADD_PARTITIONS_TO_TXN_KEY,
        version,
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=topics,
    )


def add_partitions_errors(response: Any) -> dict[TP, ErrorCode]:
    return {
        (topic.name, p.partition_index): p.partition_error_code
        for topic in response.results_by_topic_v3_and_below
        for p in topic.results_by_partition
    }


def add_offsets(
    version: int, transactional_id: str, producer_id: int, epoch: int, group_id: str
) -> Any:
    return request_entity(
        ADD_OFFSETS_TO_TXN_KEY,
        version,
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        group_id=group_id,
    )


def end_txn(version: int, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Any:
    return request_entity(
        END_TXN_KEY,
        version,
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        committed=commit,
    )


def txn_offset_commit(
    version: int,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    group: ConsumerGroupMetadata,
    offsets: Offsets,
) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (offset, leader_epoch, metadata) in offsets.items():
        by_topic.setdefault(topic, []).append(
            request_entity(
                TXN_OFFSET_COMMIT_KEY,
                version,
                "TxnOffsetCommitRequestPartition",
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=leader_epoch,
                committed_metadata=metadata,
            )
        )
    topics = tuple(
        request_entity(
            TXN_OFFSET_COMMIT_KEY,
            version,
            "TxnOffsetCommitRequestTopic",
            name=topic,
            partitions=tuple(parts),
        )
        for topic, parts in by_topic.items()
    )
    return request_entity(
        TXN_OFFSET_COMMIT_KEY,
        version,
        transactional_id=transactional_id,
        group_id=group.group_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        generation_id=group.generation_id,
        member_id=group.member_id,
        group_instance_id=group.group_instance_id,
        topics=topics,
    )


def txn_offset_commit_errors(response: Any) -> dict[TP, ErrorCode]:
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in response.topics
        for p in topic.partitions
    }

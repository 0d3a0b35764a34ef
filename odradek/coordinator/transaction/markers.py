"""How the transaction coordinator gets its markers written, without the broker.

How this works and why (KIP-98 WriteTxnMarkers; seeds/000 提交或回滚事务 5.2): once a
PrepareCommit/PrepareAbort record is durable the outcome is decided, and the
coordinator must put a commit or abort marker (a control batch) into every partition
of the transaction before it may write CompleteCommit/CompleteAbort. The partitions'
leaders may be this node or others, so the coordinator only sees this Protocol; the
server layer implements it (local appends through the replica manager, a
WriteTxnMarkers request to each remote leader).

Contract: ``write_markers(entries)`` tries each entry's partitions once and answers,
per (topic, partition) of every entry, the Kafka error name: "NONE" once the marker
is written (appended by the partition's leader; the coordinator does not need it to
be replicated further), anything else when it is not. The coordinator retries the
partitions that failed with a backoff, forever, except UNKNOWN_TOPIC_OR_PARTITION
(the topic was deleted: nothing to mark), which it drops. A partition missing from
the answer counts as failed. The channel must never raise for a partition's
failure; an exception is treated as every partition having failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

TopicPartition = tuple[str, int]

# What a partition answers when its topic is gone: its marker is dropped.
DROPPED_ERRORS: Final = frozenset({"UNKNOWN_TOPIC_OR_PARTITION"})


@dataclass(frozen=True, slots=True)
class MarkerEntry:
    """One transaction's marker for some of its partitions."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int  # the leader epoch of the __transaction_state partition
    commit: bool
    partitions: tuple[TopicPartition, ...]


class TxnMarkerChannel(Protocol):
    async def write_markers(self, entries: Sequence[MarkerEntry]) -> Mapping[TopicPartition, str]:
        """Write each entry's marker to its partitions once: an error name per partition."""
        ...

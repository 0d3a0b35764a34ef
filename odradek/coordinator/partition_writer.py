"""How a coordinator reads and writes its internal topic, without the broker.

How this works and why: a coordinator keeps its state in partitions of an internal
topic (``__consumer_offsets``; ``__transaction_state`` later) that it leads. It
needs these from the layers below, each a Protocol here so it imports neither the
broker, the replica manager nor the controller (the server package implements them,
in ``server/coordinator_io.py``):

- ``PartitionWriter.append(tp, records)``: an awaitable that completes once the batch
  is written — at the high watermark once replication exists, so an answer the
  coordinator gives after it survives a leader change — with the batch's last offset;
- ``PartitionWriter.append_marker(tp, producer id, epoch, coordinator epoch, commit)``:
  the same for a transaction's end marker (the group coordinator's TxnOffsetCommit
  offsets count from the COMMIT marker on);
- ``PartitionWriter.read(tp, start, end)``: the partition's batches for a load, with a
  ``Damage`` in place of what cannot be read (``group/loader.py``). A load reads to
  ``log_end_offset(tp)``, not to the high watermark: a new leader's HW may trail
  records the old leader had acknowledged, and a coordinator that loaded only to its
  HW would forget them; it then answers COORDINATOR_LOAD_IN_PROGRESS until
  ``wait_for_high_watermark(tp, end)`` says the HW has passed all it loaded (so it
  never answers from state that a further leader change could still take back) — an
  awaitable the HW advance completes, raising PartitionWriteError if this node stops
  leading meanwhile;
- ``PartitionWriter.leader_epoch(tp)``: the epoch this node leads the partition in
  (a load is tied to it: a newer epoch means reload);
- ``TopicCreator.create_topic``: create the internal topic on first use, through the
  controller channel.

Each raises ``PartitionWriteError`` with the Kafka error name when this node cannot
serve the partition (not its leader, not hosted, storage error).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from odradek.coordinator.group.loader import Damage
from odradek.records.codec import Record

TopicPartition = tuple[str, int]


class PartitionWriteError(Exception):
    """This node cannot read or write the partition now; ``code`` is the Kafka name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


class PartitionWriter(Protocol):
    async def append(self, tp: TopicPartition, records: bytes) -> int:
        """Append one batch as leader; the offset of its last record, once written."""
        ...

    async def append_marker(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> int:
        """Append a transaction's COMMIT/ABORT marker as leader; its offset, once written."""
        ...

    def read(
        self, tp: TopicPartition, start: int, end: int | None = None
    ) -> Iterator[list[Record] | Damage]:
        """Each batch's records in [max(start, log start), end or the HW), in order."""
        ...

    def leader_epoch(self, tp: TopicPartition) -> int: ...

    def log_end_offset(self, tp: TopicPartition) -> int:
        """The offset the next append gets: where a load reads to."""
        ...

    def high_watermark(self, tp: TopicPartition) -> int: ...

    async def wait_for_high_watermark(self, tp: TopicPartition, offset: int) -> None:
        """Return once the partition's high watermark is at least ``offset``."""
        ...


class TopicCreator(Protocol):
    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> str | None:
        """Create an internal topic: None, or the Kafka error name (TOPIC_ALREADY_EXISTS
        included; the caller decides what is fine). Once it returns None the caller's
        metadata image shows the topic."""
        ...

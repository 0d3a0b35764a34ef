"""The coordinators' partition writer and topic creator, over this node's replicas.

How this works and why: ``coordinator/partition_writer.py`` says what a coordinator
needs from below; this module provides it from the server's parts, so the coordinator
package imports neither the replica manager nor the controller. An append is a
leader append with acks=all that returns once the high watermark has passed the batch
(``ReplicaManager.append_at_high_watermark``: the followers in the ISR have it), so an
answer a coordinator gives after it survives a leader change. A load reads to the log
end offset and then waits for the high watermark to pass it
(``wait_for_high_watermark``: ``ReplicaManager.wait_for_high_watermark`` parks a waiter
that the partition completes when its HW advances, and fails when it stops leading):
a new leader's HW may trail records the old leader acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from odradek.coordinator.group.loader import Damage, scan
from odradek.coordinator.partition_writer import PartitionWriteError, TopicPartition
from odradek.metadata.controller_channel import ControllerChannel, NewTopic
from odradek.records.codec import Record
from odradek.replica.replica_manager import PartitionError, ReplicaManager

if TYPE_CHECKING:
    from odradek.replica.replica_manager import Partition


class ReplicaPartitionWriter:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def _leader(self, tp: TopicPartition) -> Partition:
        try:
            return self.replicas.leader_partition(*tp)
        except PartitionError as error:
            raise PartitionWriteError(error.code, str(error)) from None

    async def append(self, tp: TopicPartition, records: bytes) -> int:
        try:  # acks=all: returns once the HW passed the batch
            info = await self.replicas.append_at_high_watermark(tp[0], tp[1], records)
        except PartitionError as error:
            raise PartitionWriteError(error.code, str(error)) from None
        return info.last_offset

    async def append_marker(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> int:
        try:  # acks=all, as any coordinator write
            info = await self.replicas.write_marker(
                tp[0], tp[1], producer_id, producer_epoch, coordinator_epoch, commit
            )
        except PartitionError as error:
            raise PartitionWriteError(error.code, str(error)) from None
        return info.last_offset

    def read(
        self, tp: TopicPartition, start: int, end: int | None = None
    ) -> Iterator[list[Record] | Damage]:
        log = self._leader(tp).log
        first = max(start, log.log_start_offset)
        return scan(log, first, log.high_watermark if end is None else end)

    def leader_epoch(self, tp: TopicPartition) -> int:
        return self._leader(tp).leader_epoch

    def log_end_offset(self, tp: TopicPartition) -> int:
        return self._leader(tp).log.log_end_offset

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._leader(tp).log.high_watermark

    async def wait_for_high_watermark(self, tp: TopicPartition, offset: int) -> None:
        # Woken by the HW advance; raises once this node stops leading, so a wait
        # never outlives leadership.
        try:
            await self.replicas.wait_for_high_watermark(tp[0], tp[1], offset)
        except PartitionError as error:
            raise PartitionWriteError(error.code, str(error)) from None


class ChannelTopicCreator:
    def __init__(self, channel: ControllerChannel) -> None:
        self.channel = channel

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> str | None:
        topic = NewTopic(name, partitions, replication_factor, configs=dict(configs))
        (error,) = await self.channel.create_topics([topic], validate_only=False)
        return None if error is None else error.code

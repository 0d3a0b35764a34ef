"""ProducerIdManager: producer ids from blocks the controller reserves for this broker.

How this works and why: a producer id must be unique across the cluster, so the
controller hands each broker blocks of ids (a ``ProducerIds`` metadata record per
block; AllocateProducerIds on a broker-only node) and the broker gives them out one
by one. Two callers that find the block used up at once may both ask for a block;
the later one wins and the rest of the earlier block is never handed out, which
wastes ids but never repeats one.
"""

from __future__ import annotations

from typing import Protocol

from odradek.metadata.controller_channel import ProducerIdBlock


class ProducerIdAllocator(Protocol):
    """The part of the ControllerChannel this needs."""

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock: ...


class ProducerIdManager:
    def __init__(self, broker_id: int, allocator: ProducerIdAllocator) -> None:
        self.broker_id = broker_id
        self.allocator = allocator
        self._next_id = 0
        self._end = 0  # end of the reserved block (exclusive)

    async def next_producer_id(self) -> int:
        """The next unused id; raises ControllerError if no block could be reserved."""
        if self._next_id >= self._end:
            block = await self.allocator.allocate_producer_ids(self.broker_id)
            self._next_id, self._end = block.first_id, block.first_id + block.count
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

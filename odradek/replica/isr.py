"""AlterPartitionManager: a leader's ISR proposals, batched to the active controller.

How this works and why (KIP-497, KIP-903; seeds/001 ISR): partitions decide *that*
their ISR should change (replica/isr_state.py); the controller decides whether it
does, so a proposal is only a wish until its answer or a newer partition epoch in the
metadata arrives. Proposals wait in ``unsent`` and go in one AlterPartition request
per round, all the partitions that have one — the way Kafka batches them — through an
``IsrChannel`` (local in combined mode, an RPC otherwise). A partition has at most one
proposal queued or in flight: a second one is answered OPERATION_NOT_ATTEMPTED at
once, which sends the partition back to its committed ISR to try again later.

A request-level failure (NOT_CONTROLLER while the quorum elects, a stale broker epoch
around re-registration, no controller reachable) is not the partition's answer: those
proposals are queued again and resent after ``retry_backoff_ms``. Every other outcome
goes to the proposal's callback (``Partition.on_isr_outcome``), in request order.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

from odradek.replica.interfaces import IsrChannel, IsrOutcome, IsrProposal
from odradek.tasks import cancel_and_wait

logger = logging.getLogger(__name__)

OutcomeCallback = Callable[[IsrProposal, IsrOutcome], None]
# Errors that say nothing about the proposal itself: send it again.
RETRIABLE: Final = frozenset(
    {
        "NOT_CONTROLLER",
        "STALE_BROKER_EPOCH",
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
        "COORDINATOR_NOT_AVAILABLE",
        "UNKNOWN_SERVER_ERROR",
    }
)
DEFAULT_RETRY_BACKOFF_MS: Final = 100


class AlterPartitionManager:
    def __init__(
        self,
        channel: IsrChannel,
        broker_id: int,
        broker_epoch: Callable[[], int],
        *,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.retry_backoff_ms = retry_backoff_ms
        self._sleep = sleep
        self.unsent: dict[tuple[uuid.UUID, int], tuple[IsrProposal, OutcomeCallback]] = {}
        self.in_flight: set[tuple[uuid.UUID, int]] = set()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, proposal: IsrProposal, callback: OutcomeCallback) -> bool:
        """Queue ``proposal``; False (and OPERATION_NOT_ATTEMPTED to ``callback``) if
        its partition already has one queued or in flight."""
        key = (proposal.topic_id, proposal.partition)
        if key in self.unsent or key in self.in_flight:
            callback(proposal, IsrOutcome("OPERATION_NOT_ATTEMPTED"))
            return False
        self.unsent[key] = (proposal, callback)
        self._wakeup.set()
        return True

    async def send_pending(self) -> bool:
        """Send everything queued in one request and deliver the outcomes; returns
        whether some proposals were queued again (a request-level failure)."""
        if not self.unsent:
            return False
        batch = list(self.unsent.items())
        self.unsent.clear()
        keys = [key for key, _ in batch]
        self.in_flight.update(keys)
        proposals = [proposal for _, (proposal, _) in batch]
        try:
            outcomes = await self.channel.alter_partition(
                self.broker_id, self.broker_epoch(), proposals
            )
            if len(outcomes) != len(proposals):
                logger.warning(
                    "AlterPartition: %d outcomes for %d proposals", len(outcomes), len(proposals)
                )
                outcomes = [IsrOutcome("UNKNOWN_SERVER_ERROR")] * len(proposals)
        except (OSError, TimeoutError, ConnectionError) as error:
            logger.info("AlterPartition failed (%s); will retry", error)
            outcomes = [IsrOutcome("NETWORK_EXCEPTION")] * len(proposals)
        finally:
            self.in_flight.difference_update(keys)
        retry = False
        for (key, (proposal, callback)), outcome in zip(batch, outcomes, strict=True):
            if outcome.error in RETRIABLE:
                self.unsent.setdefault(key, (proposal, callback))
                retry = True
            else:
                callback(proposal, outcome)
        return retry

    async def run(self) -> None:
        """Send whenever something is queued; back off after a request-level failure."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if await self.send_pending():
                await self._sleep(self.retry_backoff_ms / 1000)
                self._wakeup.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

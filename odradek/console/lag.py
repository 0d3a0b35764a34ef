"""Consumer lag over time, sampled while the console runs.

How this works and why: the cluster keeps no history of lag, so the console samples it:
every ``interval_s`` a background task lists the groups and asks each one's total lag
(committed offsets against end offsets, ``ClusterSource.lag``), and keeps the last
``MAX_SAMPLES`` ``(unix seconds, total lag)`` pairs per group in memory for the group
page's chart. A failed round (a broker down, a group being deleted) is skipped and
tried again next interval — the console must stay up while the cluster is not. The
clock is injected so tests can drive samples without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from odradek.console.source import ClusterSource

MAX_SAMPLES: Final = 720  # an hour at the default 5 s interval, a few KiB per group
MAX_GROUPS: Final = 1000  # groups sampled per round; a bound, not an expected size
log = logging.getLogger(__name__)


class LagHistory:
    """The last samples of each group's total lag, oldest first."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._samples: dict[str, deque[tuple[float, int]]] = {}

    def add(self, group_id: str, total_lag: int) -> None:
        samples = self._samples.setdefault(group_id, deque(maxlen=MAX_SAMPLES))
        samples.append((self._clock(), total_lag))

    def samples(self, group_id: str) -> list[tuple[float, int]]:
        return list(self._samples.get(group_id, ()))

    def forget_except(self, group_ids: set[str]) -> None:
        for gone in set(self._samples) - group_ids:
            del self._samples[gone]


class LagSampler:
    """Samples every group's lag into a ``LagHistory`` every ``interval_s`` seconds."""

    def __init__(self, source: ClusterSource, history: LagHistory, interval_s: float) -> None:
        self.source = source
        self.history = history
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def sample_once(self) -> None:
        groups = (await self.source.groups())[:MAX_GROUPS]
        for group in groups:
            try:
                partitions = await self.source.lag(group.group_id)
            except Exception as error:  # one group's failure must not stop the others
                log.debug("lag of group %s not sampled: %s", group.group_id, error)
                continue
            self.history.add(group.group_id, sum(p.lag or 0 for p in partitions))
        self.history.forget_except({g.group_id for g in groups})

    def start(self) -> None:
        if self.interval_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except Exception as error:  # the cluster may be down: try again next round
                log.warning("lag sampling failed: %s", error)
            await asyncio.sleep(self.interval_s)

"""A ``__consumer_offsets`` load that fails outright (an I/O error, a bug) is reported and
retried; meanwhile the partition's groups answer COORDINATOR_NOT_AVAILABLE, never a
forever-pending COORDINATOR_LOAD_IN_PROGRESS from a task that died unseen."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.coordinator.group import coordinator as coordinator_module
from odradek.coordinator.group.coordinator import (
    CoordinatorError,
    CoordinatorSettings,
    GroupCoordinator,
)


class FlakyLog:
    """A log whose segments cannot be listed the first ``failures`` times."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.log_start_offset = 0
        self.high_watermark = 0

    @property
    def segments(self) -> list[Any]:
        if self.failures:
            self.failures -= 1
            raise OSError(5, "Input/output error")
        return []


def test_failed_load_answers_not_available_then_retries(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(coordinator_module, "LOAD_RETRY_MAX_S", 0)
    log = FlakyLog(failures=2)
    partition = SimpleNamespace(log=log)
    broker: Any = SimpleNamespace(
        replica_manager=SimpleNamespace(leader_partition=lambda topic, p: partition)
    )
    coordinator = GroupCoordinator(broker, CoordinatorSettings(partitions=1), clock=lambda: 0)

    async def run() -> list[str]:
        seen = []
        coordinator._owned.add(0)
        coordinator._loading.add(0)
        task = asyncio.get_running_loop().create_task(coordinator._load(0))
        for _ in range(50):
            try:
                coordinator._check_owner("g")
                seen.append("NONE")
            except CoordinatorError as error:
                seen.append(error.code)
            if task.done():
                break
            await asyncio.sleep(0)
        await task
        coordinator._check_owner("g")  # loaded: no error
        return seen

    with caplog.at_level(logging.ERROR, logger=coordinator_module.__name__):
        seen = asyncio.run(run())
    assert "COORDINATOR_NOT_AVAILABLE" in seen
    failures = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 2
    assert all("Input/output error" in m and "retrying" in m for m in failures)

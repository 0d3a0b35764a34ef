"""A ``__consumer_offsets`` load that fails outright (an I/O error, a bug) is reported and
retried; meanwhile the partition's groups answer COORDINATOR_NOT_AVAILABLE, never a
forever-pending COORDINATOR_LOAD_IN_PROGRESS from a task that died unseen."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.coordinator import runtime as runtime_module
from odradek.coordinator.group.coordinator import (
    CoordinatorError,
    CoordinatorSettings,
    GroupCoordinator,
)


class FlakyWriter:
    """A partition writer whose partition cannot be read the first ``failures`` times."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    async def append(self, tp: tuple[str, int], records: bytes) -> int:
        raise AssertionError("a load does not append")

    def read(self, tp: tuple[str, int], start: int, end: int | None = None) -> Iterator[Any]:
        if self.failures:
            self.failures -= 1
            raise OSError(5, "Input/output error")
        return iter(())

    def leader_epoch(self, tp: tuple[str, int]) -> int:
        return 0

    def log_end_offset(self, tp: tuple[str, int]) -> int:
        return 0

    def high_watermark(self, tp: tuple[str, int]) -> int:
        return 0

    async def wait_for_high_watermark(self, tp: tuple[str, int], offset: int) -> None:
        return None


def test_failed_load_answers_not_available_then_retries(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runtime_module, "LOAD_RETRY_MAX_S", 0)
    metadata: Any = SimpleNamespace(node_id=1)
    topics: Any = None  # the topic exists: never created here
    coordinator = GroupCoordinator(
        metadata, FlakyWriter(failures=2), topics, CoordinatorSettings(partitions=1), lambda: 0
    )

    async def run() -> list[str]:
        seen = []
        coordinator.on_leadership(0, 0)
        for _ in range(50):
            try:
                coordinator.fetch_offsets("g", None)
                seen.append("NONE")
                break
            except CoordinatorError as error:
                seen.append(error.code)
            await asyncio.sleep(0)
        coordinator.fetch_offsets("g", None)  # loaded: no error
        await coordinator.stop()
        return seen

    with caplog.at_level(logging.ERROR, logger=runtime_module.__name__):
        seen = asyncio.run(run())
    assert "COORDINATOR_NOT_AVAILABLE" in seen
    failures = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 2
    assert all("Input/output error" in m and "retrying" in m for m in failures)

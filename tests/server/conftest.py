from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess, running_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh single-node broker per test, stopped (by pid) afterwards."""
    with running_broker(tmp_path / "data") as process:
        yield process


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module, for tests that only add their own topics."""
    with running_broker(tmp_path_factory.mktemp("shared") / "data") as process:
        yield process

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh single-node broker per test, stopped (by pid) afterwards."""
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module, for tests that only add their own topics."""
    process = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    try:
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()

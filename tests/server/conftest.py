from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess, running_broker
from tests.support.kraft import Quorum


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


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker the test starts, kills and starts again (same object, data in
    ``tmp_path / "data"``); stopped by pid at the end whatever state it is in."""
    process = BrokerProcess(tmp_path / "data")
    try:
        yield process
    finally:
        gc.collect()  # librdkafka handles in reference cycles close their sockets
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture
def quorum(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Quorum]:
    """A started KRaft quorum of ``odradek serve`` processes (tests/support/kraft.py: three
    combined nodes unless told otherwise), its options from the test's or module's
    ``@pytest.mark.quorum(...)`` (``Quorum``'s keywords: properties, roles, node_ids, ...);
    in ``tmp_path / "quorum"``, every process stopped by pid afterwards."""
    marker = request.node.get_closest_marker("quorum")
    options = dict(marker.kwargs) if marker is not None else {}
    with Quorum(tmp_path / "quorum", **options) as started:
        yield started

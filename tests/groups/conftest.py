"""Fixtures for the consumer-group tests: brokers tuned for fast rebalances.

Every broker here runs with ``group.initial.rebalance.delay.ms=0`` (a group's first
generation forms at once) and a low ``group.min.session.timeout.ms`` so clients may
use short sessions and a killed member's partitions move within seconds. On failure
the broker's log is attached to the report; a broker log with a traceback or an
ERROR line fails the test that caused it.
"""

from __future__ import annotations

import gc
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.groups.harness import GroupRun
from tests.support.broker import BrokerProcess

GROUP_ARGS = (
    "--override",
    "group.initial.rebalance.delay.ms=0",
    "--override",
    "group.min.session.timeout.ms=500",
)


def group_broker_process(data_dir: Path, *extra: str) -> BrokerProcess:
    return BrokerProcess(data_dir, [*GROUP_ARGS, *extra])


def _stop(process: BrokerProcess) -> None:
    # librdkafka handles caught in reference cycles keep reconnecting from their own
    # threads until collected: collect them before the broker goes away.
    gc.collect()
    try:
        process.stop()
    finally:
        process.kill()


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module; tests use their own uniquely named groups and topics."""
    process = group_broker_process(tmp_path_factory.mktemp("groups") / "data").start()
    try:
        yield process
    finally:
        _stop(process)


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own, for tests that restart it or need it untouched."""
    process = group_broker_process(tmp_path / "data").start()
    try:
        yield process
    finally:
        _stop(process)


@pytest.fixture
def runs() -> Iterator[list[GroupRun]]:
    """GroupRuns a test makes; their member processes are stopped (by pid) afterwards."""
    made: list[GroupRun] = []
    yield made
    for run in made:
        run.close()


_BAD_LOG_MARKERS = (" ERROR ", " CRITICAL ", "Traceback")


@pytest.fixture(autouse=True)
def _broker_log_stays_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """A handler failure or an internal error logged while a test ran fails that test."""
    brokers: list[tuple[BrokerProcess, int]] = []
    for name in ("group_broker", "fresh_broker"):
        if name in request.fixturenames:
            broker: BrokerProcess = request.getfixturevalue(name)
            start = broker.log_path.stat().st_size if broker.log_path.exists() else 0
            brokers.append((broker, start))
    yield
    for broker, start in brokers:
        with open(broker.log_path, "rb") as log:
            log.seek(start)
            added = log.read().decode(errors="replace")
        bad = [line for line in added.splitlines() if any(m in line for m in _BAD_LOG_MARKERS)]
        assert not bad, "broker logged problems during this test:\n" + "\n".join(bad[:20])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when == "call":
        for name in ("group_broker", "fresh_broker"):
            broker = getattr(item, "funcargs", {}).get(name)
            if broker is not None:
                report.sections.append((f"{name} log (tail)", broker.log()[-6000:]))
    return report

"""Fixtures for interop tests: one real ``odradek serve`` per test module.

Clients under test (confluent-kafka, kafka-python, aiokafka, kcat) were written by
other people; each test creates its own uniquely named topics, so a module-scoped
broker is shared safely. On failure the broker's log is attached to the report.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Generator, Iterator

import pytest

from tests.support.broker import BrokerProcess


@pytest.fixture(scope="module")
def interop_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("interop") / "data").start()
    try:
        yield process
    finally:
        # librdkafka handles caught in reference cycles (futures, callbacks) keep
        # reconnecting from their own threads until collected: collect them first.
        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture
def bootstrap(interop_broker: BrokerProcess) -> str:
    assert interop_broker.alive(), f"broker died; log:\n{interop_broker.log()[-4000:]}"
    return interop_broker.bootstrap


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh, valid topic name per test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{base}-{uuid.uuid4().hex[:8]}"


# Broker log lines that mean a client did something the broker could not handle (a
# closed connection, a handler failure): any of them fails the test that caused it,
# even when the client recovered by retrying.
_BAD_LOG_MARKERS = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")


@pytest.fixture(autouse=True)
def _broker_log_stays_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    if "interop_broker" not in request.fixturenames:
        yield
        return
    broker: BrokerProcess = request.getfixturevalue("interop_broker")
    start = broker.log_path.stat().st_size if broker.log_path.exists() else 0
    yield
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
        broker = getattr(item, "funcargs", {}).get("interop_broker")
        if broker is not None:
            report.sections.append(("odradek broker log (tail)", broker.log()[-6000:]))
    return report

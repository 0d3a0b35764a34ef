"""Bad-request warnings are rate-limited per peer address, and what is held back is counted.

Before, every malformed or unsupported request logged its own WARNING line, so a
client sending garbage in a loop could fill the broker's log (and disk).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from pathlib import Path

import pytest

from odradek.network.warn_limit import OTHERS, PeerWarnings, peer_address
from tests.support.broker import running_broker

logger = logging.getLogger("tests.warn_limit")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger.name]


def test_peer_address_forms() -> None:
    assert peer_address("127.0.0.1:5000") == "127.0.0.1"
    assert peer_address("::1:5000") == "::1"
    assert peer_address("[fe80::1]:5000") == "fe80::1"
    assert peer_address("unix") == "unix"


def test_one_line_per_address_per_interval_then_a_count(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger.name)
    clock = Clock()
    warnings = PeerWarnings(logger, "bad-request lines", interval_s=10, clock=clock)
    for n in range(1000):
        warnings.warn(f"10.0.0.1:{40000 + n}", "bad request %d from %s", n, "10.0.0.1")
    assert warnings.warn("10.0.0.2:1", "bad request from %s", "10.0.0.2")  # another address
    assert lines(caplog) == ["bad request 0 from 10.0.0.1", "bad request from 10.0.0.2"]
    clock.now += 9.9
    assert not warnings.warn("10.0.0.1:1", "still held back")
    clock.now += 0.1  # 10 s after its line: the next one is logged, after the summary
    assert warnings.warn("10.0.0.1:1", "logged again")
    assert lines(caplog)[2:] == [
        "1000 more bad-request lines suppressed (at most one line per address per 10 s): "
        "10.0.0.1: 1000",
        "logged again",
    ]
    warnings.close()  # nothing left to report
    assert len(lines(caplog)) == 4


def test_memory_is_bounded_by_max_peers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger.name)
    clock = Clock()
    warnings = PeerWarnings(logger, "lines", interval_s=10, max_peers=3, clock=clock)
    for n in range(100):
        warnings.warn(f"10.1.0.{n}:1", "from %d", n)
        warnings.warn(f"10.1.0.{n}:2", "again from %d", n)
    assert lines(caplog) == ["from 0", "from 1", "from 2"]
    assert len(warnings._last_logged) <= 3 and len(warnings._suppressed) <= 4
    warnings.summarize()
    summary = lines(caplog)[-1]
    assert summary.startswith("197 more lines suppressed")
    assert f"{OTHERS}: 194" in summary and "and" not in summary.split(":", 1)[1]
    clock.now += 10  # the quiet addresses are forgotten, new ones logged again
    assert warnings.warn("10.2.0.1:1", "new address")


def test_the_count_is_reported_by_a_timer_when_the_flood_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger.name)

    async def flood() -> None:
        warnings = PeerWarnings(logger, "lines", interval_s=0.05)
        for _ in range(20):
            warnings.warn("10.0.0.9:1", "bad")
        await asyncio.sleep(0.3)
        warnings.close()

    asyncio.run(flood())
    assert lines(caplog) == [
        "bad",
        "19 more lines suppressed (at most one line per address per 0.05 s): 10.0.0.9: 19",
    ]


def test_broker_logs_one_line_for_a_flood_of_malformed_requests(tmp_path: Path) -> None:
    # Metadata v1 whose topic array claims a million entries and holds none.
    garbage = struct.pack(">hhih", 3, 1, 1, 1) + b"t" + struct.pack(">i", 1_000_000)
    with running_broker(tmp_path / "data") as broker:
        for _ in range(50):
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
                sock.sendall(struct.pack(">i", len(garbage)) + garbage)
                assert sock.recv(16) == b""  # closed
        deadline = time.monotonic() + 30
        while "suppressed" not in broker.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        log = broker.log()
        assert log.count("malformed request") == 1, log[-3000:]
        assert "49 more malformed-request lines suppressed" in log and "127.0.0.1: 49" in log

"""Warnings about what a peer sent, at most one line per peer address per interval.

How this works and why: every undecodable or unsupported request closes its
connection with a WARNING naming the peer. That line is useful once; a hostile or
broken client that reconnects and sends garbage in a loop would otherwise write one
line per request and fill the broker's disk with them. ``PeerWarnings.warn`` logs the
first line from an address, then counts the rest from that address until
``interval_s`` has passed since its last logged line. The counts are reported as one
summary line ("N more ... suppressed") at most once per interval: from a timer on the
running event loop (so a flood that stops is still reported), or on the next warning
when there is no loop. Memory is bounded: at most ``max_peers`` addresses are
remembered; past that, the addresses are counted together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

DEFAULT_INTERVAL_S: Final = 10.0
DEFAULT_MAX_PEERS: Final = 10_000
OTHERS: Final = "other addresses"  # the key counts go under once max_peers are tracked
SUMMARY_ADDRESSES: Final = 5  # addresses named in a summary line, most suppressed first


def peer_address(peer: str) -> str:
    """The address of a "host:port" peer ("[v6]:port" and bare "v6:port" too)."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


class PeerWarnings:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_peers: int = DEFAULT_MAX_PEERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what  # e.g. "bad requests", for the summary line
        self.interval_s = interval_s
        self.max_peers = max_peers
        self.clock = clock
        self._last_logged: dict[str, float] = {}  # address -> when its last line went out
        self._suppressed: dict[str, int] = {}  # address -> lines not logged since a summary
        self._last_summary = clock()
        self._timer: asyncio.TimerHandle | None = None

    def warn(self, peer: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless this peer's address had a line in the last
        interval; True if it was logged."""
        now = self.clock()
        address = peer_address(peer)
        if self._suppressed and now - self._last_summary >= self.interval_s:
            self.summarize()
        last = self._last_logged.get(address)
        if last is None and len(self._last_logged) >= self.max_peers:
            self._forget_quiet(now)
            if len(self._last_logged) >= self.max_peers:
                address, last = OTHERS, self._last_logged.get(OTHERS, now)
        if last is not None and now - last < self.interval_s:
            self._count(address)
            return False
        self._last_logged[address] = now
        self.logger.warning(message, *args)
        return True

    def _count(self, address: str) -> None:
        if address not in self._suppressed and len(self._suppressed) >= self.max_peers:
            address = OTHERS
        self._suppressed[address] = self._suppressed.get(address, 0) + 1
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop: the next warn() summarizes when it is due
                return
            self._timer = loop.call_later(self.interval_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.summarize()

    def _forget_quiet(self, now: float) -> None:
        for address in [a for a, t in self._last_logged.items() if now - t >= self.interval_s]:
            del self._last_logged[address]

    def summarize(self) -> None:
        """One line with the counts suppressed since the last summary (none if none)."""
        self._last_summary = self.clock()
        if not self._suppressed:
            return
        counts = sorted(self._suppressed.items(), key=lambda item: -item[1])
        self._suppressed = {}
        total = sum(count for _, count in counts)
        named = ", ".join(f"{address}: {count}" for address, count in counts[:SUMMARY_ADDRESSES])
        rest = len(counts) - SUMMARY_ADDRESSES
        more = f" and {rest} more addresses" if rest > 0 else ""
        self.logger.warning(
            "%d more %s suppressed (at most one line per address per %g s): %s%s",
            total,
            self.what,
            self.interval_s,
            named,
            more,
        )

    def close(self) -> None:
        """Report what is still counted and stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.summarize()

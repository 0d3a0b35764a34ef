"""Connection and request-memory limits, and the open-file limit they live under.

How this works and why (Kafka's names and semantics, KIP-72 and KIP-402):

- ``ConnectionQuotas``: ``max.connections`` bounds the broker's connections. When it
  is reached the acceptor waits (``acquire_slot``) until a connection closes, as
  Kafka's does: new clients queue in the listen backlog instead of being refused.
  ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``,
  ``host:count,...``) is checked once the peer is known; a connection over it is
  closed at once with a log line and earlier connections of that address are
  untouched. Both change at runtime (``update``). ``max.connections`` is further
  capped by the open-file limit minus a reserve for log segments, indexes and
  checkpoints (``connection_fd_cap``), so clients can never take the descriptors
  storage needs.
- ``RequestMemoryPool``: ``queued.max.request.bytes`` bounds the bytes of requests
  read but not yet handled, across all connections. A connection reserves a frame's
  whole size as soon as its size prefix arrives and before reading its body, and
  gives it back when the request has been handled; while the pool is exhausted it
  stops reading its socket (TCP backpressure) — no connection is dropped for it.
  As in Kafka's non-strict pool, any free byte admits a whole frame, so one frame
  can overshoot. Large frames may use the pool only up to ``capacity - capacity/8``:
  that last eighth is kept for small frames (<= 64 KiB: ApiVersions, Metadata,
  heartbeats, fetch requests), which may also use whatever large ones leave, so slow
  senders of large produce requests cannot stop the broker from answering everyone
  else. Request bytes held are at most ``queued.max.request.bytes`` plus one request
  (<= ``socket.request.max.bytes``) plus 64 KiB.
- ``raise_open_file_limit``: at start the soft RLIMIT_NOFILE goes up to the hard one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import resource
import socket
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

logger = logging.getLogger(__name__)

INT_MAX: Final = 2**31 - 1
SMALL_REQUEST_BYTES: Final = 64 * 1024
# Descriptors kept for storage: at least this many, a quarter of the limit, and twice
# what is open (segments, indexes, the metadata log) besides the connections.
FILE_RESERVE_MIN: Final = 128
MIN_CONNECTIONS: Final = 8
LOG_INTERVAL_S: Final = 10.0


# -- addresses -------------------------------------------------------------------------
def normalize_ip(address: str) -> str:
    """The canonical text of an IP (IPv4-mapped IPv6 becomes IPv4; scope ids dropped)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def resolve_overrides(overrides: Iterable[tuple[str, int]]) -> dict[str, int]:
    """``(host, count)`` pairs to ``{ip: count}``; a host name gives all its addresses."""
    resolved: dict[str, int] = {}
    for host, count in overrides:
        try:
            resolved[normalize_ip(str(ipaddress.ip_address(host)))] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as error:
            logger.warning(
                "max.connections.per.ip.overrides: cannot resolve %r (%s); ignored", host, error
            )
            continue
        for info in infos:
            resolved[normalize_ip(str(info[4][0]))] = count
    return resolved


# -- descriptors -----------------------------------------------------------------------
def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one; returns (soft before, soft after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        target = _nr_open()
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            logger.warning("cannot raise the open-file limit %d to %d: %s", soft, target, error)
            return soft, soft
        logger.info("open-file limit raised from %d to %d (hard limit %s)", soft, target, hard)
        return soft, target
    logger.info("open-file limit %s (hard limit %s)", soft, hard)
    return soft, soft


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return 1 << 20


def open_descriptor_count() -> int:
    for directory in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(directory))
    return 0


def connection_fd_cap(fd_limit: int, files_open: int) -> int:
    """Connections the open-file limit allows with storage's reserve kept free."""
    if fd_limit == resource.RLIM_INFINITY or fd_limit >= INT_MAX:
        return INT_MAX
    reserve = max(FILE_RESERVE_MIN, fd_limit // 4, 2 * files_open)
    return max(fd_limit - reserve, MIN_CONNECTIONS)


def current_fd_limit() -> int:
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


# -- connections -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = INT_MAX
    max_per_ip: int = INT_MAX
    per_ip_overrides: tuple[tuple[str, int], ...] = ()
    explicit_max: bool = False  # max.connections was set (its cap is then a WARN)


@dataclass(slots=True)
class _RateLimitedLog:
    last: float = -LOG_INTERVAL_S
    suppressed: int = 0

    def due(self, now: float) -> tuple[bool, int]:
        if now - self.last < LOG_INTERVAL_S:
            self.suppressed += 1
            return False, 0
        suppressed, self.suppressed, self.last = self.suppressed, 0, now
        return True, suppressed


@dataclass(slots=True)
class ConnectionQuotas:
    """Connection counts against the limits; one per SocketServer, on its event loop."""

    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    fd_cap: int = INT_MAX
    total: int = 0  # connections open, plus slots reserved by a waiting acceptor
    per_ip: dict[str, int] = field(default_factory=dict)
    _overrides: dict[str, int] = field(default_factory=dict)
    _waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    _full_log: _RateLimitedLog = field(default_factory=_RateLimitedLog)
    _ip_logs: dict[str, _RateLimitedLog] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._overrides = resolve_overrides(self.limits.per_ip_overrides)

    @property
    def max_connections(self) -> int:
        return min(self.limits.max_connections, self.fd_cap)

    def ip_limit(self, ip: str) -> int:
        return self._overrides.get(ip, self.limits.max_per_ip)

    def update(self, limits: ConnectionLimits) -> None:
        if limits == self.limits:
            return
        if limits.per_ip_overrides != self.limits.per_ip_overrides:
            self._overrides = resolve_overrides(limits.per_ip_overrides)
        old = self.max_connections
        self.limits = limits
        if self.max_connections != old:
            self._report_cap()
        self._wake()

    def set_fd_cap(self, cap: int) -> None:
        if cap != self.fd_cap:
            self.fd_cap = cap
            self._report_cap()
            self._wake()

    def _report_cap(self) -> None:
        wanted, cap = self.limits.max_connections, self.fd_cap
        if wanted <= cap:
            return
        text = (
            "max.connections=%d is more than the open-file limit allows with a reserve "
            "for log files: at most %d connections"
        )
        log = logger.warning if self.limits.explicit_max else logger.info
        log(text, wanted, cap)

    # acceptor side
    def try_acquire_slot(self) -> bool:
        if self.total >= self.max_connections:
            return False
        self.total += 1
        return True

    async def acquire_slot(self) -> None:
        """Reserve room for one more connection, waiting while max.connections is reached."""
        while not self.try_acquire_slot():
            logged, suppressed = self._full_log.due(time.monotonic())
            if logged:
                logger.warning(
                    "max.connections=%d reached: not accepting until a connection closes%s",
                    self.max_connections,
                    f" ({suppressed} more waits since the last line)" if suppressed else "",
                )
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def release_slot(self) -> None:
        self.total -= 1
        self._wake()

    def admit(self, ip: str) -> bool:
        """Count a connection from ``ip`` in its reserved slot; False = over its per-IP limit."""
        count = self.per_ip.get(ip, 0)
        limit = self.ip_limit(ip)
        if count >= limit:
            log = self._ip_logs.setdefault(ip, _RateLimitedLog())
            logged, suppressed = log.due(time.monotonic())
            if logged:
                logger.info(
                    "rejected connection from %s: it has %d (max.connections.per.ip%s=%d)%s",
                    ip,
                    count,
                    ".overrides" if ip in self._overrides else "",
                    limit,
                    f"; {suppressed} more rejected since the last line" if suppressed else "",
                )
            return False
        self.per_ip[ip] = count + 1
        return True

    def closed(self, ip: str) -> None:
        """A connection admitted from ``ip`` ended: free its slot."""
        count = self.per_ip.get(ip, 0) - 1
        if count > 0:
            self.per_ip[ip] = count
        else:
            self.per_ip.pop(ip, None)
            self._ip_logs.pop(ip, None)
        self.release_slot()

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


# -- request memory --------------------------------------------------------------------
class RequestMemoryPool:
    """Bytes of requests read and not yet handled (Kafka's queued.max.request.bytes)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # <= 0: unbounded
        self.reserve = capacity // 8 if capacity > 0 else 0
        self.used = 0
        self.used_small = 0  # of which by small frames
        self._small: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._large: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._log = _RateLimitedLog()

    @property
    def bounded(self) -> bool:
        return self.capacity > 0

    def _fits(self, size: int) -> bool:
        # Non-strict, as Kafka's pool: any free byte below the threshold admits the frame.
        if size <= SMALL_REQUEST_BYTES:
            return self.used < self.capacity or self.used_small < self.reserve
        return self.used - self.used_small < self.capacity - self.reserve

    def _queue(self, size: int) -> deque[tuple[int, asyncio.Future[None]]]:
        return self._small if size <= SMALL_REQUEST_BYTES else self._large

    def try_acquire(self, size: int) -> bool:
        if not self.bounded:
            self.used += size
            return True
        if any(not waiter.done() for _, waiter in self._queue(size)) or not self._fits(size):
            return False  # first come, first served within a size class
        self._take(size)
        return True

    def _take(self, size: int) -> None:
        self.used += size
        if size <= SMALL_REQUEST_BYTES:
            self.used_small += size

    async def acquire(self, size: int) -> None:
        """Reserve ``size`` bytes, waiting (and so not reading the socket) until they fit."""
        if self.try_acquire(size):
            return
        logged, suppressed = self._log.due(time.monotonic())
        if logged:
            logger.warning(
                "queued.max.request.bytes=%d reached (%d held): reading paused%s",
                self.capacity,
                self.used,
                f" ({suppressed} more pauses since the last line)" if suppressed else "",
            )
        waiter = asyncio.get_running_loop().create_future()
        self._queue(size).append((size, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted just as we were cancelled
            raise

    def release(self, size: int) -> None:
        self.used -= size
        if size <= SMALL_REQUEST_BYTES:
            self.used_small -= size
        self._wake()

    def _wake(self) -> None:
        for queue in (self._small, self._large):
            while queue:
                size, waiter = queue[0]
                if waiter.done():
                    queue.popleft()
                    continue
                if not self._fits(size):
                    break
                queue.popleft()
                self._take(size)
                waiter.set_result(None)

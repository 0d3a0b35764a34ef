"""Network partitions between local processes: a TCP proxy in front of every listener.

How this works and why: nodes of a test cluster all live on 127.0.0.1, so there is no
network to cut with iptables, and namespaces need root. Instead every node *listens*
on a real port and *advertises* a proxy's port (Kafka's ``listeners`` vs
``advertised.listeners``; ``controller.quorum.voters`` names the proxies of the
controller listeners), so every connection one node opens to another passes through
a ``Proxy`` run by the test. A proxy knows which node it fronts (``dst``); to cut the
link A→B but not C→B it must also know who connected. Nodes cannot bind their
outgoing sockets to addresses of their own, so the proxy asks the kernel: the peer's
(127.0.0.1, source port) names one socket in ``/proc/net/tcp`` (or ``tcp6``), whose
inode appears as ``socket:[inode]`` among the ``/proc/<pid>/fd`` links of exactly one
process. ``NetProxy`` is given a function returning the current pid of every named
party (pids change across restarts); a connection from any other process (the test's
own clients) belongs to ``CLIENT``.

A cut link is directional, as a TCP connection's initiator is: ``cut("n1", "n2")``
stops n1 reaching n2's listeners while n2 may still reach n1's (an asymmetric
partition); ``partition([{...}, {...}])`` cuts both directions between groups, as
Jepsen's partitions do. When a link is cut, the proxy aborts the connections on it
(both sockets reset) and then either refuses new ones (``REFUSE``: accepted and reset at
once, like an ICMP-unreachable network) or holds them (``HOLD``, the default: accepted,
bytes read and kept but nothing forwarded, like packets dropped by a firewall) until
the link heals, when a held connection is joined to its upstream with its buffered
bytes, or until the initiator gives up and closes it. ``heal()`` clears every cut.

All proxies share one asyncio loop in a daemon thread; the public methods are called
from any thread and return once the loop has acted (a cut has dropped its
connections when ``cut`` returns). ``close()`` stops every listener and connection.
Counters (``stats``) say what the nemesis did: connections proxied, dropped, refused,
held, and those from an unidentified process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

CLIENT = "client"  # any process that is not a named party
HOST = "127.0.0.1"
HOLD = "hold"
REFUSE = "refuse"
CHUNK = 256 * 1024
HOLD_BUFFER_BYTES = 4 * 1024 * 1024  # held bytes beyond this: the held connection is reset
HOLD_POLL_S = 0.05

T = TypeVar("T")


# -- who is connecting: /proc ----------------------------------------------------------


def _hex_endpoint(address: str, port: int, family: int) -> str:
    """An endpoint as /proc/net/tcp{,6} print it (address in host byte order words)."""
    packed = socket.inet_pton(family, address)
    words = [packed[i : i + 4][::-1].hex().upper() for i in range(0, len(packed), 4)]
    return f"{''.join(words)}:{port:04X}"


def socket_inode(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The inode of the TCP socket bound at ``local`` and connected to ``remote`` (both
    IPv4 or IPv4-mapped), as the kernel lists it; None when there is none."""
    wanted = []
    for family, path in ((socket.AF_INET, "/proc/net/tcp"), (socket.AF_INET6, "/proc/net/tcp6")):
        if family == socket.AF_INET6:
            mapped = ("::ffff:" + local[0], "::ffff:" + remote[0])
            pair = (
                _hex_endpoint(mapped[0], local[1], family),
                _hex_endpoint(mapped[1], remote[1], family),
            )
        else:
            pair = (
                _hex_endpoint(local[0], local[1], family),
                _hex_endpoint(remote[0], remote[1], family),
            )
        wanted.append((path, pair))
    for path, (want_local, want_remote) in wanted:
        try:
            with open(path) as table:
                next(table, None)  # header
                for line in table:
                    fields = line.split()
                    if len(fields) > 9 and fields[1] == want_local and fields[2] == want_remote:
                        return int(fields[9])
        except OSError:
            continue
    return None


def owner_of(inode: int, parties: Mapping[str, int]) -> str | None:
    """The name of the party whose process holds socket ``inode`` among its fds."""
    target = f"socket:[{inode}]"
    for name, pid in parties.items():
        fd_dir = f"/proc/{pid}/fd"
        try:
            entries = os.listdir(fd_dir)
        except OSError:  # gone, or not ours
            continue
        for entry in entries:
            try:
                if os.readlink(f"{fd_dir}/{entry}") == target:
                    return name
            except OSError:
                continue
    return None


def identify(peer: tuple[str, int], proxy_port: int, parties: Mapping[str, int]) -> str | None:
    """Which party opened the connection from ``peer`` to the proxy at ``proxy_port``:
    a name of ``parties``, or None (another process: a client)."""
    host = peer[0].removeprefix("::ffff:")
    inode = socket_inode((host, peer[1]), (HOST, proxy_port))
    if inode is None or inode == 0:
        return None
    return owner_of(inode, parties)


# -- the proxies ---------------------------------------------------------------------


@dataclass(eq=False)
class _Connection:
    src: str
    dst: str
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


@dataclass(eq=False)
class Proxy:
    """One listener's proxy: accepts on ``port``, forwards to ``upstream`` (set before
    traffic is expected; a connection arriving with no upstream is reset)."""

    dst: str
    port: int
    upstream: tuple[str, int] | None = None
    server: asyncio.Server | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


class NetProxy:
    def __init__(self, parties: Callable[[], Mapping[str, int]], mode: str = HOLD) -> None:
        """``parties()``: the current pid of every named process (a node being down is
        simply absent). ``mode``: what a cut link does with new connections."""
        assert mode in (HOLD, REFUSE)
        self.parties = parties
        self.mode = mode
        self.proxies: list[Proxy] = []
        self.stats: Counter[str] = Counter()
        self._cut: set[tuple[str, str]] = set()
        self._connections: set[_Connection] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netproxy", daemon=True)
        self._thread.start()
        self._closed = False

    # -- from any thread ---------------------------------------------------------------

    def add(self, dst: str, upstream: tuple[str, int] | None = None, port: int = 0) -> Proxy:
        """A new proxy in front of party ``dst`` (its listener at ``upstream``)."""
        return self._call(self._add(dst, upstream, port))

    def cut(self, src: str, dst: str) -> None:
        """Stop ``src`` reaching ``dst``'s listeners (one direction)."""
        self.cut_links([(src, dst)])

    def cut_links(self, links: Iterable[tuple[str, str]]) -> None:
        self._call(self._apply(set(links)))

    def partition(self, groups: Iterable[Iterable[str]]) -> set[tuple[str, str]]:
        """Cut both directions between every two groups; returns the links cut."""
        sets = [set(group) for group in groups]
        links = {
            (a, b)
            for i, one in enumerate(sets)
            for j, other in enumerate(sets)
            if i != j
            for a in one
            for b in other
        }
        self.cut_links(links)
        return links

    def heal(self) -> None:
        self._call(self._heal())

    @property
    def cuts(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._cut)

    def is_cut(self, src: str, dst: str) -> bool:
        return (src, dst) in self._cut

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._call(self._close(), timeout_s=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> NetProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coroutine: Any, timeout_s: float = 30) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout_s)

    # -- on the loop -------------------------------------------------------------------

    async def _add(self, dst: str, upstream: tuple[str, int] | None, port: int) -> Proxy:
        proxy = Proxy(dst, 0, upstream)
        server = await asyncio.start_server(
            lambda r, w: self._accept(proxy, r, w), HOST, port, reuse_address=True
        )
        proxy.server = server
        proxy.port = server.sockets[0].getsockname()[1]
        self.proxies.append(proxy)
        return proxy

    async def _apply(self, links: set[tuple[str, str]]) -> None:
        self._cut |= links
        for connection in list(self._connections):
            if (connection.src, connection.dst) in self._cut:
                self.stats["dropped"] += 1
                connection.abort()

    async def _heal(self) -> None:
        self._cut.clear()

    async def _close(self) -> None:
        for proxy in self.proxies:
            if proxy.server is not None:
                proxy.server.close()
        for connection in list(self._connections):
            connection.abort()
        # Connections still being identified or held end here, not with the loop.
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for proxy in self.proxies:
            if proxy.server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proxy.server.wait_closed(), 2)

    async def _accept(
        self, proxy: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            await self._serve(proxy, reader, writer)
        except asyncio.CancelledError:
            # close() cancels connections in flight; a connection task that ended
            # cancelled would be logged as an error by asyncio's stream callback.
            writer.transport.abort()

    async def _serve(
        self, proxy: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        try:
            parties = dict(self.parties())
        except Exception:
            parties = {}
        name = await asyncio.get_running_loop().run_in_executor(
            None, identify, (peer[0], peer[1]), proxy.port, parties
        )
        if name is None:
            self.stats["from_client"] += 1
            name = CLIENT
        connection = _Connection(name, proxy.dst, writer)
        self._connections.add(connection)
        try:
            held: bytes | None = b""
            if (name, proxy.dst) in self._cut:
                if self.mode == REFUSE:
                    self.stats["refused"] += 1
                    return
                self.stats["held"] += 1
                held = await self._hold(connection, reader)
                if held is None:
                    return
            if proxy.upstream is None:
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*proxy.upstream)
            except OSError:
                self.stats["upstream_refused"] += 1
                return
            connection.upstream = up_writer
            if (name, proxy.dst) in self._cut:  # cut while connecting
                return
            self.stats["proxied"] += 1
            if held:
                up_writer.write(held)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._connections.discard(connection)
            connection.abort()

    async def _hold(self, connection: _Connection, reader: asyncio.StreamReader) -> bytes | None:
        """Keep a connection on a cut link open, reading and keeping what it sends,
        until the link heals (its bytes, to be forwarded) or it closes (None)."""
        buffer = bytearray()
        while (connection.src, connection.dst) in self._cut:
            try:
                data = await asyncio.wait_for(reader.read(CHUNK), HOLD_POLL_S)
            except TimeoutError:
                continue
            except (ConnectionError, OSError):
                return None
            if not data or len(buffer) + len(data) > HOLD_BUFFER_BYTES:
                return None
            buffer += data
        return bytes(buffer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # One direction ended: end the other too (a half-closed Kafka connection is
            # of no use to either side), so neither waits on a dead peer.
            writer.transport.abort()

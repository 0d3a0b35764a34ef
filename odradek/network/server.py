"""Listeners: accept TCP connections and run a Connection task for each.

How this works and why: each listener is a plain non-blocking socket served by an
accept loop on the event loop (uvloop when available). Binding port 0 picks a free
port; ``bound`` reports the real one so ``odradek serve --listen 127.0.0.1:0`` can
print it. A listener may have its own request handler (``bind(..., handler=)``): the
broker binds its client listeners with the broker plane's dispatcher and its controller
listeners with the controller plane's, so one server serves both planes and each
connection only ever sees its listener's. Shutdown stops accepting first, then lets
every connection finish the request it is handling before closing it.

Limits (``limits.py``): before each accept the acceptor reserves a slot under
``max.connections`` and waits while there is none (clients queue in the listen
backlog, as with Kafka); the accepted peer is then checked against
``max.connections.per.ip`` and closed at once, with a log line, if it is over. Every
connection reads its requests through the one ``RequestMemoryPool``
(``queued.max.request.bytes``). ``reserve_files`` caps the connection count so the
descriptors that log segments and checkpoints need stay free.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

from odradek.network.connection import Connection, ConnectionContext, Handler
from odradek.network.limits import (
    ConnectionLimits,
    ConnectionQuotas,
    RequestMemoryPool,
    connection_fd_cap,
    current_fd_limit,
    normalize_ip,
    open_descriptor_count,
)
from odradek.network.tls import ListenerTls
from odradek.network.warn_limit import PeerWarnings

logger = logging.getLogger(__name__)

LISTEN_BACKLOG = 512


@dataclass(slots=True)
class BoundListener:
    name: str
    host: str
    port: int
    sock: socket.socket
    handler: Handler  # what answers this listener's requests (its plane's dispatcher)
    security_protocol: str = "PLAINTEXT"  # listener.security.protocol.map's for it
    tls: ListenerTls | None = None  # SSL and SASL_SSL listeners (network/tls.py)

    def url(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


class SocketServer:
    def __init__(
        self,
        handler: Handler,
        *,
        max_frame_bytes: int,
        idle_timeout_ms: int,
        limits: ConnectionLimits | None = None,
        queued_max_request_bytes: int = -1,
    ) -> None:
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_ms = idle_timeout_ms
        self.quotas = ConnectionQuotas(limits or ConnectionLimits())
        self.pool = RequestMemoryPool(queued_max_request_bytes)
        self.frame_warnings = PeerWarnings(logger, "bad-frame lines")
        self.tls_warnings = PeerWarnings(logger, "TLS handshake failures")
        self.bound: list[BoundListener] = []
        self._accept_tasks: list[asyncio.Task[None]] = []
        self._connections: dict[int, tuple[Connection, asyncio.Task[None]]] = {}
        self._ids = itertools.count(1)

    def bind(
        self,
        name: str,
        host: str,
        port: int,
        handler: Handler | None = None,
        *,
        security_protocol: str = "PLAINTEXT",
        tls: ListenerTls | None = None,
    ) -> BoundListener:
        """Listen on ``host:port``; ``handler`` answers its requests (default: the
        server's); its connections' sessions carry ``security_protocol``; with ``tls``
        every connection is TLS (the listener's context, principal mapping)."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(LISTEN_BACKLOG)
        except OSError as error:  # name the address: "[Errno 98]" alone says nothing
            sock.close()
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            raise OSError(
                error.errno, f"cannot listen on {name} {address}: {error.strerror}"
            ) from None
        sock.setblocking(False)
        listener = BoundListener(
            name,
            host,
            sock.getsockname()[1],
            sock,
            handler if handler is not None else self.handler,
            security_protocol,
            tls,
        )
        self.bound.append(listener)
        return listener

    def start(self) -> None:
        for listener in self.bound:
            self._accept_tasks.append(asyncio.create_task(self._accept_loop(listener)))

    def reserve_files(self) -> int:
        """Cap connections at the open-file limit minus a reserve for storage's files."""
        files = open_descriptor_count() - len(self._connections) - len(self.bound)
        cap = connection_fd_cap(current_fd_limit(), max(files, 0))
        self.quotas.set_fd_cap(cap)
        return cap

    async def _accept_loop(self, listener: BoundListener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.quotas.acquire_slot()  # max.connections: wait for one to close
            try:
                client, address = await loop.sock_accept(listener.sock)
            except OSError as error:  # e.g. EMFILE: keep serving the others
                self.quotas.release_slot()
                logger.warning("accept on %s failed: %s", listener.url(), error)
                await asyncio.sleep(0.1)
                continue
            except BaseException:
                self.quotas.release_slot()
                raise
            ip = normalize_ip(str(address[0]))
            if not self.quotas.admit(ip):
                client.close()
                self.quotas.release_slot()
                continue
            try:
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # the peer is already gone
                client.close()
                self.quotas.closed(ip)
                continue
            connection_id = next(self._ids)
            context = ConnectionContext(
                f"{address[0]}:{address[1]}",
                listener.name,
                connection_id,
                security_protocol=listener.security_protocol,
            )
            connection = Connection(
                client,
                context,
                listener.handler,
                max_frame_bytes=self.max_frame_bytes,
                idle_timeout_ms=self.idle_timeout_ms,
                pool=self.pool,
                frame_warnings=self.frame_warnings,
                tls=listener.tls,
                tls_warnings=self.tls_warnings,
            )
            task = asyncio.create_task(connection.run())
            self._connections[connection_id] = (connection, task)
            task.add_done_callback(self._forget(connection_id, ip))

    def _forget(self, connection_id: int, ip: str) -> Callable[[asyncio.Task[None]], None]:
        def forget(_: asyncio.Task[None]) -> None:
            if self._connections.pop(connection_id, None) is not None:
                self.quotas.closed(ip)

        return forget

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting; let each connection finish its current request; close all."""
        for task in self._accept_tasks:
            task.cancel()
        for task in self._accept_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for listener in self.bound:
            listener.sock.close()
        connections = list(self._connections.values())
        for connection, _ in connections:
            connection.close_soon()
        tasks = [task for _, task in connections]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.frame_warnings.close()  # report what the last interval suppressed
        self.tls_warnings.close()

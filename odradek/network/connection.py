"""One client connection: read frames, handle them in order, write responses.

How this works and why: sockets are used directly (non-blocking, through the loop's
``sock_*`` calls) rather than through asyncio transports, because fetch responses
send record bytes straight from segment files with ``os.sendfile`` and uvloop's
transports cannot do that. A reader task turns bytes into frames and puts them on a
bounded queue; when ``MAX_QUEUED_REQUESTS`` are waiting it stops reading, so a client
that pipelines faster than we serve is throttled by TCP itself. The connection
handles one request at a time, like Kafka (which mutes a channel until its response
is sent): responses therefore leave in request order, and two produce requests of
one producer can never be reordered. A response may carry a quota's throttle
(KIP-219): after sending it the connection is muted for that long — its requests are
neither read nor handled — so a client over its quota is held back by the broker
whether or not it honours ``throttle_time_ms`` itself. Slow work in one connection never blocks
another — each is its own task.

Reads are exact: the 4-byte size, then that many bytes. Between the two the frame's
whole size is reserved in the broker's ``RequestMemoryPool``
(``queued.max.request.bytes``) and it is given back once the request has been
handled, so the bytes of partly read and queued requests are bounded across all
connections; while the pool is exhausted the socket is simply not read. A ``recv``
is first tried directly on the non-blocking socket and awaited only when no bytes
are there, so a request already in the kernel costs no event-loop round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from odradek.network.limits import RequestMemoryPool
from odradek.network.tls import HANDSHAKE_TIMEOUT_S, ListenerTls, TlsStream
from odradek.network.warn_limit import PeerWarnings
from odradek.protocol.frames import SIZE_PREFIX_BYTES, FrameError
from odradek.protocol.session import Session
from odradek.records.file_range import FileRange
from odradek.security.principal import NoMatchingRule, subject_dn

logger = logging.getLogger(__name__)

# Requests read ahead of the one being handled; past this the socket is not read
# (backpressure). Kafka's clients pipeline at most 5 per connection by default.
MAX_QUEUED_REQUESTS: Final = 16
RECV_BYTES: Final = 256 * 1024
_SIZE = struct.Struct(">i")


@dataclass(slots=True)
class Response:
    """Response body pieces: bytes, or file ranges to ``sendfile``; None = no response."""

    parts: list[bytes | FileRange]
    close_after: bool = False
    # KIP-219: a throttled client's connection is muted (nothing read or handled) for
    # this long after its response is sent. With no parts, nothing is sent (acks=0).
    throttle_ms: int = 0

    @property
    def size(self) -> int:
        return sum(p.length if isinstance(p, FileRange) else len(p) for p in self.parts)


class CloseConnection(Exception):
    """Raised by a handler to drop the connection (e.g. an unsupported API)."""


@dataclass(slots=True)
class ConnectionContext:
    peer: str
    listener: str
    connection_id: int
    attributes: dict[str, object] = field(default_factory=dict)
    security_protocol: str = "PLAINTEXT"
    # Who the peer is (protocol/session.py): every request on this connection carries
    # this one object, which TLS and SASL fill in as they authenticate the peer.
    session: Session = field(init=False)

    def __post_init__(self) -> None:
        self.session = Session.for_listener(self.listener, self.security_protocol, self.peer)


Handler = Callable[[bytes, ConnectionContext], Awaitable[Response | None]]


class Connection:
    def __init__(
        self,
        sock: socket.socket,
        context: ConnectionContext,
        handler: Handler,
        *,
        max_frame_bytes: int,
        idle_timeout_ms: int,
        pool: RequestMemoryPool | None = None,
        frame_warnings: PeerWarnings | None = None,
        tls: ListenerTls | None = None,
        tls_warnings: PeerWarnings | None = None,
    ) -> None:
        self.sock = sock
        self.context = context
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.pool = pool if pool is not None else RequestMemoryPool(0)
        self.held = 0  # bytes of this connection's frames reserved in the pool
        # Bad-frame lines are rate-limited per peer address (shared by the server's
        # connections), so a client reconnecting in a loop cannot fill the log.
        self.frame_warnings = frame_warnings or PeerWarnings(logger, "bad-frame lines")
        self.idle_timeout_s = idle_timeout_ms / 1000 if idle_timeout_ms >= 0 else None
        self.last_active = time.monotonic()
        self._frames: asyncio.Queue[bytes | None] = asyncio.Queue(MAX_QUEUED_REQUESTS)
        self.closing = False
        self.busy = False
        self._unmuted = asyncio.Event()
        self._unmuted.set()
        self._stopping = asyncio.Event()  # ends a mute early (shutdown)
        self.tls = tls
        self.tls_warnings = tls_warnings or PeerWarnings(logger, "TLS handshake failures")
        self.stream: TlsStream | None = None

    async def run(self) -> None:
        if self.tls is not None and not await self._start_tls(self.tls):
            with contextlib.suppress(OSError):
                self.sock.close()
            return
        reader = asyncio.create_task(self._read_loop())
        try:
            await self._process_loop()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if self.stream is not None:  # best effort: a full socket drops it
                with contextlib.suppress(OSError):
                    self.sock.send(self.stream.close_notify())
            with contextlib.suppress(OSError):
                self.sock.close()
            if self.held:
                self.pool.release(self.held)
                self.held = 0

    async def _start_tls(self, tls: ListenerTls) -> bool:
        """Handshake and principal; False (after one rate-limited line) on failure."""
        loop = asyncio.get_running_loop()

        async def raw_send(data: bytes) -> None:
            await loop.sock_sendall(self.sock, data)

        stream = TlsStream(tls.context, lambda count: self._sock_recv(loop, count), raw_send)
        peer = self.context.peer
        try:
            await asyncio.wait_for(stream.handshake(), HANDSHAKE_TIMEOUT_S)
            certificate = stream.peer_certificate()
            if certificate is not None:
                name = tls.mapper.name(subject_dn(certificate))
                self.context.session.principal = f"User:{name}"
        except TimeoutError:
            self.tls_warnings.warn(
                peer, "TLS handshake with %s timed out after %gs", peer, HANDSHAKE_TIMEOUT_S
            )
            return False
        except EOFError:  # connected and left before a byte (a port probe): no warning
            logger.debug("%s closed the connection before the TLS handshake", peer)
            return False
        except NoMatchingRule as error:
            self.tls_warnings.warn(peer, "TLS client %s refused: %s", peer, error)
            return False
        except (ssl.SSLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", None) or error
            self.tls_warnings.warn(peer, "TLS handshake with %s failed: %s", peer, reason)
            return False
        self.stream = stream
        self.last_active = time.monotonic()
        return True

    def close_soon(self) -> None:
        """Stop after the request being handled (used by shutdown)."""
        self.closing = True
        self._stopping.set()
        with contextlib.suppress(asyncio.QueueFull):
            self._frames.put_nowait(None)

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self.closing:
                await self._unmuted.wait()
                prefix = await self._read_exactly(loop, SIZE_PREFIX_BYTES)
                if prefix is None:
                    break
                (size,) = _SIZE.unpack(prefix)
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameError(
                        f"frame of {size} bytes exceeds "
                        f"socket.request.max.bytes={self.max_frame_bytes}"
                    )
                if not self.pool.try_acquire(size):
                    await self.pool.acquire(size)  # backpressure: the socket is not read
                    self.last_active = time.monotonic()  # waiting for memory is not idling
                self.held += size
                frame = await self._read_exactly(loop, size)
                if frame is None:
                    break
                await self._frames.put(frame)
        except FrameError as error:
            self.frame_warnings.warn(
                self.context.peer, "closing connection from %s: %s", self.context.peer, error
            )
        except (OSError, TimeoutError):
            pass
        await self._frames.put(None)  # the processor finishes what was read, then stops

    async def _read_exactly(self, loop: asyncio.AbstractEventLoop, count: int) -> bytes | None:
        """``count`` bytes, or None at end of stream (or idle timeout) before they came."""
        if count == 0:
            return b""
        data = await self._recv(loop, min(count, RECV_BYTES))
        if not data:
            return None
        self.last_active = time.monotonic()
        if len(data) == count:
            return data
        chunks, remaining = [data], count - len(data)
        while remaining:
            data = await self._recv(loop, min(remaining, RECV_BYTES))
            if not data:
                return None
            self.last_active = time.monotonic()
            chunks.append(data)
            remaining -= len(data)
        return b"".join(chunks)

    async def _recv(self, loop: asyncio.AbstractEventLoop, count: int) -> bytes:
        if self.stream is not None:
            return await self.stream.recv(count)
        return await self._sock_recv(loop, count)

    async def _sock_recv(self, loop: asyncio.AbstractEventLoop, count: int) -> bytes:
        try:
            return self.sock.recv(count)  # already there: no event-loop round trip
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            if self.idle_timeout_s is None:
                return await loop.sock_recv(self.sock, count)
            remaining = self.last_active + self.idle_timeout_s - time.monotonic()
            if remaining <= 0 and not self.busy and self._frames.empty():
                logger.info("closing idle connection from %s", self.context.peer)
                return b""
            try:
                return await asyncio.wait_for(
                    loop.sock_recv(self.sock, count), max(remaining, 0.05)
                )
            except TimeoutError:
                continue

    async def _process_loop(self) -> None:
        while True:
            frame = await self._frames.get()
            if frame is None:
                return
            self.busy = True
            try:
                response = await self.handler(frame, self.context)
            except CloseConnection:
                return
            finally:
                self.busy = False
                self.last_active = time.monotonic()
                self.held -= len(frame)
                self.pool.release(len(frame))
            if response is None:
                continue
            try:
                if response.parts:
                    await self._send(response)
            except (OSError, ConnectionError) as error:
                logger.debug("send to %s failed: %s", self.context.peer, error)
                return
            if response.close_after or self.closing:
                return
            if response.throttle_ms > 0:
                await self._mute(response.throttle_ms)
                if self.closing:
                    return

    async def _mute(self, throttle_ms: int) -> None:
        """KIP-219: neither read nor handle this client's requests for the throttle."""
        self._unmuted.clear()
        self.busy = True  # a muted connection is not idle
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), throttle_ms / 1000)
        finally:
            self.busy = False
            self.last_active = time.monotonic()
            self._unmuted.set()

    async def _send(self, response: Response) -> None:
        if self.stream is not None:
            await self._send_tls(self.stream, response)
            return
        loop = asyncio.get_running_loop()
        pending = bytearray(_SIZE.pack(response.size))
        for part in response.parts:
            if isinstance(part, FileRange):
                if pending:
                    await loop.sock_sendall(self.sock, pending)
                    pending = bytearray()
                await self._sendfile(loop, part)
            else:
                pending += part
        if pending:
            await loop.sock_sendall(self.sock, pending)

    async def _send_tls(self, stream: TlsStream, response: Response) -> None:
        pending = bytearray(_SIZE.pack(response.size))
        for part in response.parts:
            if isinstance(part, FileRange):
                if pending:
                    await stream.sendall(pending)
                    pending = bytearray()
                await stream.send_file(part.fd, part.position, part.length)
            else:
                pending += part
        if pending:
            await stream.sendall(pending)

    async def _sendfile(self, loop: asyncio.AbstractEventLoop, part: FileRange) -> None:
        """Zero-copy: page cache → socket, waiting for writability as needed."""
        position, remaining = part.position, part.length
        out_fd = self.sock.fileno()
        while remaining > 0:
            try:
                sent = os.sendfile(out_fd, part.fd, position, remaining)
            except BlockingIOError:
                await self._writable(loop)
                continue
            if sent == 0:  # the file shrank under us: the response cannot be completed
                raise ConnectionError(f"segment range {part} no longer readable")
            position += sent
            remaining -= sent

    async def _writable(self, loop: asyncio.AbstractEventLoop) -> None:
        waiter = loop.create_future()
        fd = self.sock.fileno()

        def ready() -> None:
            if not waiter.done():
                waiter.set_result(None)

        loop.add_writer(fd, ready)
        try:
            await waiter
        finally:
            loop.remove_writer(fd)

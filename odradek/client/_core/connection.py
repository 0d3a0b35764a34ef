"""One client connection to a Kafka broker: kio requests in, decoded responses out.

How this works and why: requests are pipelined — each gets a correlation id and a
future, and responses are matched to futures in order (Kafka answers in request order
on a connection). On connect the client sends ApiVersions and keeps the broker's
ranges, so every request is sent at the highest version both sides know
(``version_for``). Any failure of the socket fails every outstanding future with
``ConnectionLost`` and closes the connection; the caller decides whether to retry.
Requests that expect no response (Produce with acks=0) complete as soon as written.

Responses are read by a ``BufferedProtocol`` (``_ResponseReader``): the event loop
receives small frames into one reused buffer, and a large frame (a fetch of
megabytes) straight into a buffer of its own size; each whole frame is decoded in the
protocol's callback. A ``StreamReader`` copied every byte twice more (into its
buffer and out of it) and woke a reader task per chunk — each wake-up needing the GIL
that the blocking faces' application thread competes for.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from odradek.protocol.bounds import checked
from odradek.protocol.build import make

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials

API_VERSIONS_KEY: Final = 18
MAX_RESPONSE_BYTES: Final = 1 << 30  # a response larger than this is a broken peer
# Array elements in one response, all arrays together (protocol/bounds.py): enough for
# the metadata of a cluster of two million partitions, each replica and ISR entry
# counted; a broker claiming more is broken or hostile.
MAX_RESPONSE_ARRAY_ELEMENTS: Final = 16_000_000
# Responses up to this size are received into one reused buffer and copied out once;
# larger ones (fetches) get a buffer of their own that the socket fills directly.
SCRATCH_BYTES: Final = 256 * 1024
CLOSE_WAIT_S: Final = 5.0  # how long close() waits for the transport to finish
_SIZE = struct.Struct(">i")
_SASL_KEYS: Final = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate


class KafkaConnectionError(Exception):
    """The connection failed or closed; ``retriable`` is always True."""

    retriable = True


class ConnectionLost(KafkaConnectionError):
    pass


class RequestTimedOut(ConnectionLost):
    """No response within the request's timeout (the connection is closed with it):
    the peer went silent, which a caller with somewhere else to ask may tell apart."""


class UnsupportedVersionError(Exception):
    """No version of an API is known to both client and broker."""


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


def request_entity(api_key: int, version: int, class_name: str | None = None, **fields: Any) -> Any:
    """Build any version of a request (or a nested entity by class name) from one field set."""
    if class_name is None:
        return make(load_request_schema(api_key, version), **fields)
    module = load_payload_module(api_key, version, EntityType.request)
    return make(getattr(module, class_name), **fields)


def request_module(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


class BrokerConnection:
    def __init__(
        self,
        address: BrokerAddress,
        *,
        client_id: str,
        request_timeout_s: float,
        client_versions: Mapping[int, tuple[int, int]],
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.address = address
        self.ssl_context = ssl_context  # security.protocol SSL (client/_core/tls.py)
        self.sasl = sasl  # authenticate after ApiVersions (client/_core/sasl.py)
        self.session_lifetime_ms = 0
        # KIP-368: re-authenticate before a non-SASL request once past this (monotonic)
        self._reauth_at: float | None = None
        self._reauth_lock = asyncio.Lock()
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        # SaslHandshake v1 + SaslAuthenticate (KIP-152) whenever SASL is asked for, so
        # callers with their own version tables (the CLI's tools) need not list them.
        self.client_versions = (
            {17: (1, 1), 36: (0, 2), **client_versions} if sasl is not None else client_versions
        )
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._transport: asyncio.Transport | None = None
        self._protocol: _ResponseReader | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], Any]] = {}
        self._order: list[int] = []
        self._ids = itertools.count(1)
        self._write_lock = asyncio.Lock()
        self.closed = False

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _ResponseReader(self._on_frame, self._on_lost),
                    self.address.host,
                    self.address.port,
                    ssl=self.ssl_context,
                ),
                self.request_timeout_s,
            )
        except ssl.SSLCertVerificationError as error:
            raise KafkaConnectionError(
                f"TLS to {self.address.host}:{self.address.port} refused the broker's "
                f"certificate: {error.verify_message or error.reason}"
            ) from None
        except (OSError, TimeoutError) as error:
            raise KafkaConnectionError(
                f"cannot connect to {self.address.host}:{self.address.port}: {error}"
            ) from None
        self._transport, self._protocol = transport, protocol
        try:
            await self._negotiate()
            if self.sasl is not None:
                from odradek.client._core.sasl import authenticate

                self._session_started(await authenticate(self, self.sasl))
        except BaseException:  # failed or cancelled mid-handshake: do not leak the socket
            self._fail(ConnectionLost("closed during the ApiVersions or SASL handshake"))
            raise

    async def _negotiate(self) -> None:
        low, high = self.client_versions.get(API_VERSIONS_KEY, (0, 3))
        version = min(high, 3)
        while True:
            request = request_entity(
                API_VERSIONS_KEY,
                version,
                client_software_name="odradek-python",
                client_software_version="0.1.0",
            )
            response = await self.send(request)
            if response.error_code == ErrorCode.unsupported_version and version > low:
                version = 0  # the broker lists its versions in a v0 response
                continue
            break
        if response.error_code != ErrorCode.none:
            raise KafkaConnectionError(f"ApiVersions failed: {response.error_code.name}")
        self.broker_versions = {
            k.api_key: (k.min_version, k.max_version) for k in response.api_keys
        }

    def _session_started(self, lifetime_ms: int) -> None:
        """The broker's session lifetime (KIP-368): re-authenticate at 85% of it."""
        self.session_lifetime_ms = lifetime_ms
        self._reauth_at = time.monotonic() + lifetime_ms * 0.85 / 1000 if lifetime_ms > 0 else None

    async def _reauthenticate(self) -> None:
        """A new SaslHandshake + SaslAuthenticate on this connection, once the
        requests in flight are answered (Kafka's brokers expect none during it);
        requests sent meanwhile wait on the lock."""
        from odradek.client._core.sasl import authenticate

        async with self._reauth_lock:
            if self._reauth_at is None or time.monotonic() < self._reauth_at:
                return  # another sender did it
            while self._order and not self.closed:
                await asyncio.sleep(0.002)
            if self.closed:
                raise ConnectionLost(f"connection to node {self.address.node_id} is closed")
            assert self.sasl is not None
            self._session_started(await authenticate(self, self.sasl))

    def version_for(self, api_key: int) -> int:
        """Highest version both sides support."""
        client = self.client_versions.get(api_key)
        broker = self.broker_versions.get(api_key)
        if client is None or broker is None:
            raise UnsupportedVersionError(f"broker does not support API key {api_key}")
        high = min(client[1], broker[1])
        if high < max(client[0], broker[0]):
            raise UnsupportedVersionError(f"no common version for API key {api_key}")
        return high

    def supports(self, api_key: int) -> bool:
        try:
            self.version_for(api_key)
            return True
        except UnsupportedVersionError:
            return False

    async def send(
        self,
        request: Any,
        *,
        expect_response: bool = True,
        timeout_s: float | None = None,
        raw: bool = False,
    ) -> Any:
        """Send one request; its decoded response (None when none is expected).
        ``timeout_s`` replaces ``request.timeout.ms`` for requests the broker may hold
        longer (JoinGroup waits for the whole group). ``raw``: the response frame
        itself, undecoded (correlation id first) — replica fetchers parse Fetch
        responses with protocol/fetch_codec.py and keep the records as a view."""
        if self.closed or self._transport is None or self._protocol is None:
            raise ConnectionLost(f"connection to node {self.address.node_id} is closed")
        if (
            self._reauth_at is not None
            and time.monotonic() >= self._reauth_at
            and request.__api_key__ not in _SASL_KEYS
        ):
            await self._reauthenticate()
        correlation_id = next(self._ids)
        header_schema = request.__header_schema__
        buffer = io.BytesIO()
        buffer.write(b"\x00\x00\x00\x00")  # the size, filled in below
        entity_writer(header_schema)(
            buffer,
            header_schema(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=correlation_id,
                client_id=self.client_id,
            ),
        )
        entity_writer(type(request))(buffer, request)
        # Sent from the buffer itself: a produce request is mostly record batches,
        # and getvalue() plus a size prefix would copy them twice more.
        frame = buffer.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        future: asyncio.Future[Any] | None = None
        async with self._write_lock:
            if expect_response:
                future = asyncio.get_running_loop().create_future()
                # A caller that stopped waiting (cancelled) must not leave an
                # unretrieved exception behind when the connection later fails.
                future.add_done_callback(_retrieve_exception)
                schema = (
                    None if raw else load_response_schema(request.__api_key__, request.__version__)
                )
                self._pending[correlation_id] = (future, schema)
                self._order.append(correlation_id)
            try:
                self._transport.write(frame)
                await self._protocol.drain()
            except (OSError, ConnectionError) as error:
                self._fail(ConnectionLost(str(error)))
                raise ConnectionLost(str(error)) from None
        if future is None:
            return None
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            self._fail(ConnectionLost(f"request timed out after {timeout} s"))
            raise RequestTimedOut("request timed out") from None

    def _on_frame(self, frame: bytes | bytearray | memoryview) -> None:
        """One whole response (without its size prefix), on the loop."""
        if self.closed:
            return
        try:
            correlation_id = _SIZE.unpack_from(frame, 0)[0]
        except Exception as error:  # a frame shorter than a correlation id
            self._fail(ConnectionLost(f"{type(error).__name__}: {error}"))
            return
        if not self._order or self._order[0] != correlation_id:
            self._fail(ConnectionLost(f"unexpected correlation id {correlation_id}"))
            return
        self._order.pop(0)
        future, schema = self._pending.pop(correlation_id)
        if schema is None:  # asked for raw
            if not future.done():
                future.set_result(frame)
            return
        try:
            # A hostile or broken broker's counts must not reach kio, which allocates
            # for a declared count before checking the bytes (and aborts if it cannot).
            # A newer broker's tagged fields that kio does not know are removed (KIP-482).
            frame = checked(frame, schema, schema.__header_schema__, MAX_RESPONSE_ARRAY_ELEMENTS)
            _header, offset = entity_reader(schema.__header_schema__)(frame, 0)
            body: Any = entity_reader(schema)(frame, offset)[0]
        except Exception as error:  # an undecodable response
            # Its own caller learns it now, not at its timeout: the future is no
            # longer among the pending ones that _fail completes.
            lost = ConnectionLost(f"cannot decode {schema.__name__}: {error}")
            if not future.done():
                future.set_exception(lost)
            self._fail(lost)
            return
        if not future.done():
            future.set_result(body)

    def _on_lost(self, error: Exception) -> None:
        self._fail(error if isinstance(error, ConnectionLost) else ConnectionLost(str(error)))

    def _fail(self, error: Exception) -> None:
        self.closed = True
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._order.clear()
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self._fail(ConnectionLost("closed by the client"))
        if self._protocol is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._protocol.closed, CLOSE_WAIT_S)


class _ResponseReader(asyncio.BufferedProtocol):
    """Size-prefixed frames from the socket, each handed whole to ``on_frame``.

    Bytes arrive in a reused scratch buffer; a frame that fits there is copied out
    once as ``bytes``. A frame too big for it gets a buffer of its own size that the
    loop then receives into directly, and is handed over as a read-only memoryview
    of that buffer (kio decodes from any read-only buffer). Writes are paused and
    resumed by the transport; ``drain`` waits while they are paused.
    """

    def __init__(
        self,
        on_frame: Callable[[bytes | memoryview], None],
        on_lost: Callable[[Exception], None],
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._scratch = bytearray(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        self._start = 0  # unparsed bytes are self._scratch[_start:_end]
        self._end = 0
        self._frame: bytearray | None = None  # a big frame being received
        self._frame_view = memoryview(b"")
        self._filled = 0
        self._paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- reading ------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return self._frame_view[self._filled :]
        if self._end == len(self._scratch):  # full: move the partial frame to the front
            unparsed = self._end - self._start
            self._scratch[:unparsed] = self._scratch[self._start : self._end]
            self._start, self._end = 0, unparsed
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                frame_view = self._frame_view.toreadonly()
                self._frame, self._frame_view, self._filled = None, memoryview(b""), 0
                self._on_frame(frame_view)
            return
        self._end += nbytes
        self._parse_scratch()

    def _parse_scratch(self) -> None:
        scratch, view = self._scratch, self._view
        while self._end - self._start >= 4:
            size = _SIZE.unpack_from(scratch, self._start)[0]
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                self._lose(ConnectionLost(f"response size {size} out of range"))
                return
            begin = self._start + 4
            available = self._end - begin
            if available >= size:
                self._start = begin + size
                self._on_frame(bytes(view[begin : begin + size]))
                continue
            if size > len(scratch) - 4:  # will not fit: a buffer of its own
                self._frame = bytearray(size)
                self._frame_view = memoryview(self._frame)
                self._frame_view[:available] = view[begin : self._end]
                self._filled = available
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0

    def eof_received(self) -> bool:
        self._lose(ConnectionLost("connection closed by the broker"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lose(ConnectionLost(f"connection lost: {exc}" if exc else "connection closed"))
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionLost("connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)

    def _lose(self, error: Exception) -> None:
        on_lost, self._on_lost = self._on_lost, _ignore
        on_lost(error)

    # -- writing ------------------------------------------------------------------
    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        self._drain_waiter = None

    async def drain(self) -> None:
        if self.closed.done():
            raise ConnectionLost("connection closed")
        if not self._paused:
            return
        if self._drain_waiter is None:
            self._drain_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drain_waiter)


def _ignore(error: Exception) -> None:
    return None


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()

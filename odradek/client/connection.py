"""One client connection to a Kafka broker: kio requests in, decoded responses out.

How this works and why: requests are pipelined — each gets a correlation id and a
future, and one reader task matches responses to futures in order (Kafka answers in
request order on a connection). On connect the client sends ApiVersions and keeps the
broker's ranges, so every request is sent at the highest version both sides know
(``version_for``). Any failure of the socket fails every outstanding future with
``ConnectionLost`` and closes the connection; the caller decides whether to retry.
Requests that expect no response (Produce with acks=0) complete as soon as written.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from odradek.protocol.build import make

API_VERSIONS_KEY: Final = 18
MAX_RESPONSE_BYTES: Final = 1 << 30  # a response larger than this is a broken peer
_SIZE = struct.Struct(">i")


class KafkaConnectionError(Exception):
    """The connection failed or closed; ``retriable`` is always True."""

    retriable = True


class ConnectionLost(KafkaConnectionError):
    pass


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
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.client_versions = client_versions
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], Any]] = {}
        self._order: list[int] = []
        self._ids = itertools.count(1)
        self._read_task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self.closed = False

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.address.host, self.address.port),
                self.request_timeout_s,
            )
        except (OSError, TimeoutError) as error:
            raise KafkaConnectionError(
                f"cannot connect to {self.address.host}:{self.address.port}: {error}"
            ) from None
        self._read_task = asyncio.create_task(self._read_loop())
        await self._negotiate()

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
        self, request: Any, *, expect_response: bool = True, timeout_s: float | None = None
    ) -> Any:
        """Send one request; its decoded response (None when none is expected).
        ``timeout_s`` replaces ``request.timeout.ms`` for requests the broker may hold
        longer (JoinGroup waits for the whole group)."""
        if self.closed or self._writer is None:
            raise ConnectionLost(f"connection to node {self.address.node_id} is closed")
        correlation_id = next(self._ids)
        header_schema = request.__header_schema__
        buffer = io.BytesIO()
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
        payload = buffer.getvalue()
        future: asyncio.Future[Any] | None = None
        async with self._write_lock:
            if expect_response:
                future = asyncio.get_running_loop().create_future()
                # A caller that stopped waiting (cancelled) must not leave an
                # unretrieved exception behind when the connection later fails.
                future.add_done_callback(_retrieve_exception)
                schema = load_response_schema(request.__api_key__, request.__version__)
                self._pending[correlation_id] = (future, schema)
                self._order.append(correlation_id)
            try:
                self._writer.write(_SIZE.pack(len(payload)) + payload)
                await self._writer.drain()
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
            raise ConnectionLost("request timed out") from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    raise ConnectionLost(f"response size {size} out of range")
                frame = await self._reader.readexactly(size)
                correlation_id = _SIZE.unpack_from(frame, 0)[0]
                if not self._order or self._order[0] != correlation_id:
                    raise ConnectionLost(f"unexpected correlation id {correlation_id}")
                self._order.pop(0)
                future, schema = self._pending.pop(correlation_id)
                _header, offset = entity_reader(schema.__header_schema__)(frame, 0)
                body: Any = entity_reader(schema)(frame, offset)[0]
                if not future.done():
                    future.set_result(body)
        except asyncio.CancelledError:
            raise
        except ConnectionLost as error:
            self._fail(error)
        except Exception as error:  # EOF, reset, undecodable response
            self._fail(ConnectionLost(f"{type(error).__name__}: {error}"))

    def _fail(self, error: Exception) -> None:
        self.closed = True
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._order.clear()
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        self._fail(ConnectionLost("closed by the client"))
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._read_task
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()

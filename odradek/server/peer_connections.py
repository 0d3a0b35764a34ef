"""Connections from this broker to the other brokers' inter-broker listeners.

The transaction coordinator's marker writer (txn_markers.py) and the partition
leader's transaction verification (txn_verify.py) both send requests to other
brokers. ``PeerConnections`` keeps one ``BrokerConnection`` per peer between requests,
makes it on first use (one at a time per peer: a lock), and drops it after any
failure so the next request connects again — to the address the metadata names by
then. A failure is raised to the caller, who turns it into a retriable Kafka error.

Concurrency: used from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from odradek.client._core.connection import BrokerAddress, BrokerConnection, KafkaConnectionError

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials

Endpoint = Callable[[int], tuple[str, int] | None]


class PeerConnections:
    def __init__(
        self,
        client_id: str,
        endpoint: Endpoint,
        client_versions: Mapping[int, tuple[int, int]],
        request_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.client_id = client_id
        self.ssl_context = ssl_context  # a TLS inter-broker listener
        self.sasl = sasl  # a SASL inter-broker listener: this broker's login
        self._endpoint = endpoint
        self._versions = dict(client_versions)
        self._timeout_s = request_timeout_s
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def send(self, broker_id: int, request: Any) -> Any:
        """The peer's response; KafkaConnectionError, OSError or TimeoutError on a
        failure (the connection is then dropped)."""
        try:
            connection = await self._connection(broker_id)
            return await connection.send(request)
        except (KafkaConnectionError, OSError, TimeoutError):
            await self.drop(broker_id)
            raise

    async def _connection(self, broker_id: int) -> BrokerConnection:
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            connection = self._connections.get(broker_id)
            if connection is not None and not connection.closed:
                return connection
            address = self._endpoint(broker_id)
            if address is None:
                raise KafkaConnectionError(f"node {broker_id} has no inter-broker endpoint")
            connection = BrokerConnection(
                BrokerAddress(broker_id, address[0], address[1]),
                client_id=self.client_id,
                request_timeout_s=self._timeout_s,
                client_versions=self._versions,
                ssl_context=self.ssl_context,
                sasl=self.sasl,
            )
            await connection.connect()
            self._connections[broker_id] = connection
            return connection

    async def drop(self, broker_id: int) -> None:
        connection = self._connections.pop(broker_id, None)
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def close(self) -> None:
        for broker_id in list(self._connections):
            await self.drop(broker_id)

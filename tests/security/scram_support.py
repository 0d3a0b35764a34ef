"""Helpers of the SCRAM credential tests: raw requests to one node, the metadata log's bytes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from odradek.client._core.connection import BrokerAddress, BrokerConnection, request_entity

DESCRIBE, ALTER = 50, 51


def send(address: str, api_key: int, **fields: Any) -> Any:
    """One v0 request to the broker at ``address`` (this node only: no routing)."""
    host, port = address.rsplit(":", 1)

    async def go() -> Any:
        connection = BrokerConnection(
            BrokerAddress(-1, host, int(port)),
            client_id="scram-test",
            request_timeout_s=30.0,
            client_versions={18: (0, 3), api_key: (0, 0)},
        )
        await connection.connect()
        try:
            return await connection.send(request_entity(api_key, 0, **fields))
        finally:
            await connection.close()

    return asyncio.run(go())


def upsertion(name: str, mechanism: int, iterations: int, salt: bytes, salted: bytes) -> Any:
    return request_entity(
        ALTER,
        0,
        "ScramCredentialUpsertion",
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=salted,
    )


def deletion(name: str, mechanism: int) -> Any:
    return request_entity(ALTER, 0, "ScramCredentialDeletion", name=name, mechanism=mechanism)


def describe_on(address: str, users: list[str] | None = None) -> dict[str, Any]:
    """{user: (error name, ((mechanism, iterations), ...))} as the node at ``address``
    answers from its own image."""
    names = (
        None
        if users is None
        else tuple(request_entity(DESCRIBE, 0, "UserName", name=u) for u in users)
    )
    response = send(address, DESCRIBE, users=names)
    return {
        r.user: (
            r.error_code.name.upper(),
            tuple((int(i.mechanism), int(i.iterations)) for i in r.credential_infos),
        )
        for r in response.results
    }


def metadata_log_bytes(log_dir: Path) -> bytes:
    """Every segment of ``log_dir``'s ``__cluster_metadata-0``, concatenated."""
    segments = sorted((log_dir / "__cluster_metadata-0").glob("*.log"))
    return b"".join(path.read_bytes() for path in segments)

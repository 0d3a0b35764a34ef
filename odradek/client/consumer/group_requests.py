"""The classic group protocol's requests, as a consumer-group member sends them.

How this works and why: ``group.py`` decides when to join, sync, heartbeat
and leave; these functions only build each request at the version the coordinator
connection negotiated and return the broker's response (error codes included), so
the member's logic reads without the wire shapes in the way.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from odradek.client._core.connection import BrokerConnection, request_entity
from odradek.client.consumer.core import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP


async def join_group(
    connection: BrokerConnection,
    group_id: str,
    member_id: str,
    instance_id: str | None,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocols: Iterable[tuple[str, bytes]],
) -> Any:
    version = connection.version_for(JOIN_GROUP)
    request = request_entity(
        JOIN_GROUP,
        version,
        group_id=group_id,
        session_timeout=datetime.timedelta(milliseconds=session_timeout_ms),
        rebalance_timeout=datetime.timedelta(milliseconds=rebalance_timeout_ms),
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=tuple(
            request_entity(
                JOIN_GROUP, version, "JoinGroupRequestProtocol", name=name, metadata=data
            )
            for name, data in protocols
        ),
        reason=None,
    )
    # The broker holds a JoinGroup until the group has joined: up to the rebalance
    # timeout, as Java's client allows for.
    wait_s = max(connection.request_timeout_s, rebalance_timeout_ms / 1000 + 5)
    return await connection.send(request, timeout_s=wait_s)


async def sync_group(
    connection: BrokerConnection,
    group_id: str,
    generation_id: int,
    member_id: str,
    instance_id: str | None,
    protocol_name: str | None,
    assignments: Mapping[str, bytes],
) -> Any:
    version = connection.version_for(SYNC_GROUP)
    return await connection.send(
        request_entity(
            SYNC_GROUP,
            version,
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name=protocol_name,
            assignments=tuple(
                request_entity(
                    SYNC_GROUP, version, "SyncGroupRequestAssignment", member_id=m, assignment=a
                )
                for m, a in assignments.items()
            ),
        )
    )


async def heartbeat(
    connection: BrokerConnection,
    group_id: str,
    generation_id: int,
    member_id: str,
    instance_id: str | None,
) -> Any:
    return await connection.send(
        request_entity(
            HEARTBEAT,
            connection.version_for(HEARTBEAT),
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
        )
    )


async def leave_group(
    connection: BrokerConnection,
    group_id: str,
    member_id: str,
    instance_id: str | None,
    reason: str,
) -> Any:
    version = connection.version_for(LEAVE_GROUP)
    return await connection.send(
        request_entity(
            LEAVE_GROUP,
            version,
            group_id=group_id,
            member_id=member_id,
            members=(
                request_entity(
                    LEAVE_GROUP,
                    version,
                    "MemberIdentity",
                    member_id=member_id,
                    group_instance_id=instance_id,
                    reason=reason,
                ),
            ),
        )
    )

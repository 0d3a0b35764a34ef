"""Test helper: a broker registered and unfenced through a controller, as the broker
lifecycle does it (BrokerRegistration, then a caught-up BrokerHeartbeat)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from odradek.metadata.broker_heartbeats import BrokerHeartbeat, BrokerRegistration
from odradek.metadata.controller import Controller


async def register_unfenced(
    controller: Controller,
    broker_id: int,
    endpoints: Sequence[tuple[str, str, int]] = (("PLAINTEXT", "localhost", 9092),),
    rack: str | None = None,
) -> int:
    """Register ``broker_id`` and unfence it; its broker epoch."""
    epoch = await controller.register_broker(
        BrokerRegistration(broker_id, str(uuid.uuid4()), tuple(endpoints), rack)
    )
    reply = await controller.broker_heartbeat(
        BrokerHeartbeat(broker_id, epoch, controller.image.offset)
    )
    assert not reply.is_fenced
    return epoch

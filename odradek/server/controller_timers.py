"""The controller's periodic duties on a node: fence brokers whose sessions expired,
move leaderships back to preferred replicas, and take time-bound metadata snapshots.

How this works and why: each is a loop the broker starts as a task once the quorum is
up (``Broker.start``) and cancels when it stops. They run on every node that has a
controller, and only the active controller's calls do anything (the controller checks
that it leads; elsewhere a call is a no-op or a ControllerError for the next tick), so
no timer needs to follow leadership changes. Split from broker.py, the composition
root, which only starts them: the fencing cadence is the part of failover timing a
reader looks for, and it reads better on its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from odradek.metadata.controller import Controller
from odradek.metadata.errors import ControllerError
from odradek.metadata.raft_writer import RaftMetadataWriter

# The broker's log lines keep the name operators (and the kill tests) know them by.
logger = logging.getLogger("odradek.server.broker")

# How often the time bound of metadata snapshots is checked (commits check the bytes).
SNAPSHOT_CHECK_INTERVAL_S: Final = 1.0


async def session_ticks(controller: Controller, timeout_ms: int) -> None:
    """The active controller fences brokers whose heartbeats stopped for
    ``timeout_ms`` (broker.session.timeout.ms; elsewhere this does nothing)."""
    tick_s = max(0.05, min(0.5, timeout_ms / 8000))  # well inside half a session
    while True:
        # at the earliest session expiry, not a tick later
        await asyncio.sleep(controller.session_check_delay_s(tick_s))
        try:
            fenced = await controller.fence_stale_brokers()
        except ControllerError as error:  # lost leadership or a full disk: next tick
            logger.debug("fencing stale brokers: %s", error)
            continue
        if fenced:
            logger.info(
                "fenced broker(s) %s: no heartbeat for broker.session.timeout.ms=%d",
                ", ".join(map(str, fenced)),
                timeout_ms,
            )


async def leader_balance_ticks(controller: Controller, interval_s: float) -> None:
    """auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds
    (``interval_s``) the active controller moves leaderships back to preferred
    replicas (``Controller.rebalance_leaders``; elsewhere this does nothing)."""
    while True:
        await asyncio.sleep(interval_s)
        moved = await controller.rebalance_leaders()
        if moved:
            logger.info("moved %d partition leadership(s) back to preferred replicas", moved)


async def snapshot_ticks(writer: RaftMetadataWriter) -> None:
    """The time bound of metadata snapshots: commits check the byte bound."""
    while True:
        await asyncio.sleep(SNAPSHOT_CHECK_INTERVAL_S)
        writer.maybe_snapshot()

"""A node's stop sequence: the controlled shutdown, then every part of the broker
stopped in the reverse of the order it started, the logs flushed and closed last.

How this works and why: on a combined node Kafka's order holds — the broker half's
controlled shutdown first (want_shut_down until the controller has fenced this broker
and moved its leaderships to in-sync replicas, or CONTROLLED_SHUTDOWN_WAIT_S passed),
while this node's own controller may still be the active one and answers it; then stop
accepting, let in-flight requests finish, cancel the background tasks, resign and stop
the Raft driver (a leader hands over with EndQuorumEpoch), stop the lifecycle and the
controller listeners, and flush and checkpoint every log, which writes the
clean-shutdown marker. A full disk while closing still closes the rest and is raised
at the end. Split from broker.py, the composition root, whose ``stop`` calls
``stop_broker``: the order is the whole point of this code and reads on its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

from odradek.storage.errors import StorageError
from odradek.tasks import cancel_and_wait

if TYPE_CHECKING:
    from odradek.server.broker import Broker

# The broker's log lines keep the name operators (and the shutdown tests) know them by.
logger = logging.getLogger("odradek.server.broker")

# How long a SIGTERM'd broker waits for the controller's should_shut_down.
CONTROLLED_SHUTDOWN_WAIT_S: Final = 1.0


async def stop_broker(broker: Broker) -> None:
    # Kafka's order on a combined node: the broker half's controlled shutdown first
    # (want_shut_down until the controller has fenced this broker and moved its
    # leaderships to in-sync replicas), while this node's own controller may still
    # be the active one — it then handles its own broker's request and commits the
    # moves — and only then the controller half resigns (below), so another voter
    # takes over at once. Resigning first would leave the request to a controller
    # this node no longer follows: its loader stops with the driver, so it could
    # never show the moves applied and be let go.
    if broker.lifecycle is not None:
        await _controlled_shutdown(broker)
    broker.replica_manager.stop_waiting()
    await broker.replica_fetchers.close()  # no waiting for a leader's long poll
    await broker.group_coordinator.stop()  # parked joins/syncs answer at once
    await broker.txn_coordinator.stop()  # marker writing resumes on the next leader
    await broker.txn_markers.close()
    if broker.txn_verifier is not None:
        await broker.txn_verifier.close()
    await broker.server.stop()
    for dispatcher in broker.dispatchers.values():
        dispatcher.malformed.close()  # the counts the last interval suppressed
        dispatcher.unsupported.close()
    # A running clean stops at its next batch; its thread ends before logs close.
    await broker.log_manager.cleaner.stop(broker.cleaner_task)
    for task in broker.background_tasks():
        await cancel_and_wait(task)
    if broker.remote_log_manager is not None:  # waits for a running copy or read
        # The metadata clients first: a copy blocked publishing gives up at once.
        await broker.remote_log_manager.stop_metadata()
        await asyncio.get_running_loop().run_in_executor(None, broker.remote_log_manager.close)
    if broker.remote_channel is not None:
        await broker.remote_channel.close()
    if broker.metadata_writer is not None:
        await broker.metadata_writer.wait_snapshot()  # before its log is closed
    if broker.raft_driver is not None:
        # A leader hands over first (EndQuorumEpoch) so the others elect at once.
        await broker.raft_driver.shutdown(resign=True)
        if broker.metadata_writer is not None:
            broker.metadata_writer.fail_waiters("the controller is shutting down")
    if broker.lifecycle is not None:
        await broker.lifecycle.stop()
    if broker.controller_server is not None:
        await broker.controller_server.stop(grace_s=0.5)
    loop = asyncio.get_running_loop()
    failure: Exception | None = None
    try:
        await loop.run_in_executor(None, broker.log_manager.shutdown)
    except (StorageError, OSError) as error:  # a full disk: close the rest anyway
        failure = error
    if broker.metadata_log is not None and not broker.metadata_log.closed:
        try:
            broker.metadata_log.flush()
            broker.metadata_log.close()
        except OSError as error:
            failure = failure or StorageError(
                f"the metadata log {broker.metadata_log.directory}: {error.strerror or error}"
            )
    broker.stopped.set()
    if failure is not None:
        raise failure


async def _controlled_shutdown(broker: Broker) -> None:
    """want_shut_down until the controller has moved this broker's leaderships
    away and lets it go (or CONTROLLED_SHUTDOWN_WAIT_S passed); logged either way."""
    assert broker.lifecycle is not None
    if await broker.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_WAIT_S):
        logger.info("controlled shutdown done: the controller let this broker go")
    else:
        logger.warning(
            "controlled shutdown: no answer from the controller within %.1f s; "
            "stopping anyway (leaderships move when the session expires)",
            CONTROLLED_SHUTDOWN_WAIT_S,
        )

"""RaftDriver: the asyncio adapter around the sans-IO ``RaftNode`` (as uvicorn wraps h11).

How this works and why: the node decides everything; the driver only moves bytes and
time. One task (``_run``) sleeps until ``node.next_deadline_ms()`` or until something
wakes it (an append, an inbound message), then calls ``tick`` and sends what it returns.
Each ``Outbound`` request goes to its peer over that peer's ``BrokerConnection`` to the
controller listener named in ``controller.quorum.voters``, one task per request (the
connection pipelines them); the response comes back to the node as an ``Inbound`` with
the request's correlation id. A peer that cannot be reached is retried no sooner than
``controller.quorum.retry.backoff.ms``; the node itself gives up on unanswered requests
and resends on its own timers, so a lost request is never retried here. A response
that arrives on a connection that was replaced meanwhile is dropped, as TCP would drop
it with the old connection.

Requests from peers arrive through the CONTROLLER-plane handlers
(``server/handlers/quorum.py``) as ``handle_request(source_id, message)``: the node
handles it at once, and the handler awaits the Outbound answering it (matched by a
local correlation id). Most answers come out of that same step; a fetch the leader
parks (the long poll, up to the fetcher's max wait) is answered by a later step — a
tick, an append, another peer's fetch that moves the high watermark — whose output
goes through the same routing: a response resolves the waiting handler (or is dropped
if its connection went away meanwhile), a request goes to its peer.

``append`` (leader only) stamps the batch with the offset and epoch it gets, appends,
and resolves once the high watermark has passed it — after the commit listener has
been handed it, so a caller that awaits ``append`` finds the change applied. It fails
with ``NotControllerError`` (naming the leader it knows) on a non-leader and, as Kafka's
controller fails its pending writes, when leadership is lost before the commit.
Committed entries and snapshot loads reach the listener in log order (``poll_committed``),
called on the loop.

fsync off the loop: for a log with ``prepare_flush`` / ``mark_flushed`` (``DiskRaftLog``,
and ``MemoryRaftLog``) the node runs with ``defer_flush`` and never fsyncs inside a
step. After each step the driver takes the node's flush request, prepares the flush on
the loop (staged index entries, the end it covers), runs ``fsync`` on a worker thread
(``asyncio.to_thread``) while the loop keeps serving, then marks it flushed and ticks,
which is when the leader's high watermark may move. One flush runs at a time; a
request made meanwhile is taken after it. A failed fsync stops the driver like a failed
step: pending and later appends fail with ``RaftStepError``, and peers' requests close
their connections (``QuorumStoppedError``).

``shutdown(resign=True)``: a leader sends EndQuorumEpoch and gives it
``SHUTDOWN_RESIGN_WAIT_S`` to go out, then every task stops and connections close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random as random_module
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from odradek.client._core.connection import (
    API_VERSIONS_KEY,
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
)
from odradek.raft import wire
from odradek.raft.config import RaftConfig
from odradek.raft.election_store import ElectionStore
from odradek.raft.log import RaftLog, SnapshotId
from odradek.raft.messages import (
    REQUEST_TYPES,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    Inbound,
    Outbound,
    Request,
    Response,
    VoteRequest,
)
from odradek.raft.node import CommitEvent, NotLeaderError, QuorumDescription, RaftNode
from odradek.raft.roles import SilentLeader
from odradek.raft.snapshots import SnapshotStore
from odradek.raft.wire_records import batch_header
from odradek.records.batch import stamp

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials

logger = logging.getLogger("odradek.raft.driver")

# How long a resigning leader waits for its EndQuorumEpoch requests before closing: long
# enough for a localhost/LAN round trip, short enough not to hold a shutdown up.
SHUTDOWN_RESIGN_WAIT_S: Final = 0.5
# How long shutdown waits for an fsync under way on the worker thread (a healthy disk
# takes milliseconds; a dead one is not waited for).
SHUTDOWN_FLUSH_WAIT_S: Final = 5.0
# Longest sleep between ticks even when the node names a later deadline: a cheap guard
# against a deadline computed before some state change the driver did not see.
MAX_SLEEP_S: Final = 0.5
# Commit batches handed to the listener per loop turn, so a long catch-up does not hold
# the loop; the rest follow on the next turn.
MAX_COMMIT_POLLS_PER_TURN: Final = 64
# Requests in flight to one peer: the node keeps one fetch and a handful of election
# messages outstanding; far more means the peer is not answering.
MAX_IN_FLIGHT_PER_PEER: Final = 64

CommitListener = Callable[[CommitEvent], None]


class NotControllerError(Exception):
    """This node does not lead the quorum (any more); ``leader_id`` is the one it knows."""

    def __init__(self, leader_id: int | None, detail: str = "") -> None:
        super().__init__(detail or f"not the active controller; leader is {leader_id}")
        self.leader_id = leader_id


class RaftStepError(Exception):
    """A step of the node failed (e.g. the log's fsync on a full disk): the node's state
    is unknown, so the driver stopped; pending and later appends fail with this."""


class QuorumStoppedError(Exception):
    """The driver stopped (shutdown or a failed step): a peer's request gets no answer
    from this node; the handler closes the connection and the peer goes elsewhere."""


class SplitFlushLog(Protocol):
    """A log whose fsync can run off the event loop (``DiskRaftLog``)."""

    def prepare_flush(self) -> Any: ...
    def mark_flushed(self, pending: Any) -> None: ...


class VoterAddress(Protocol):
    """One entry of controller.quorum.voters (``server.config.QuorumVoter`` fits)."""

    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


@dataclass(slots=True)
class _Peer:
    node_id: int
    host: str
    port: int
    connection: BrokerConnection | None = None
    connecting: asyncio.Task[BrokerConnection] | None = None
    retry_at_ms: int = 0
    in_flight: int = 0


@dataclass(slots=True)
class _PendingAppend:
    last_offset: int
    epoch: int
    future: asyncio.Future[int] = field(repr=False)


def source_id_of(message: Request) -> int:
    """The node that sent a quorum request, as the request itself names it."""
    if isinstance(message, VoteRequest | FetchRequest | FetchSnapshotRequest):
        return message.replica_id
    if isinstance(message, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return message.leader_id
    raise TypeError(f"not a quorum request: {type(message).__name__}")


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class RaftDriver:
    def __init__(
        self,
        node_id: int,
        voters: Iterable[VoterAddress],
        log: RaftLog,
        election_store: ElectionStore,
        snapshot_store: SnapshotStore,
        config: RaftConfig,
        *,
        cluster_id: str | None,
        listener: CommitListener | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
        random: random_module.Random | None = None,
        node_options: Mapping[str, Any] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        """``voters`` is controller.quorum.voters (this node among them); ``node_options``
        go to ``RaftNode`` as they are (e.g. the LeaderChange ``control_entry`` builder);
        ``ssl_context``: the voters' controller listeners are TLS; ``sasl``: they are
        SASL, and this node logs in with these credentials."""
        self.ssl_context = ssl_context
        self.sasl = sasl
        addresses = list(voters)
        self.node_id = node_id
        self.cluster_id = cluster_id
        # controller.quorum.voters as given: DescribeQuorum (v2 nodes) and DescribeCluster
        # on the controller plane name every voter's address from it.
        self.voters: tuple[VoterAddress, ...] = tuple(addresses)
        self.config = config
        self._clock_ms = clock_ms
        self._listener = listener
        self._peers = {
            v.node_id: _Peer(v.node_id, v.host, v.port) for v in addresses if v.node_id != node_id
        }
        # A log that splits its flush gets its fsync on a worker thread; any other
        # (the in-memory one) is flushed by the node inside tick.
        self._split_log: SplitFlushLog | None = None
        if callable(getattr(log, "prepare_flush", None)) and callable(
            getattr(log, "mark_flushed", None)
        ):
            self._split_log = log  # type: ignore[assignment]
        self.node = RaftNode(
            node_id,
            frozenset(v.node_id for v in addresses),
            log,
            election_store,
            snapshot_store,
            config,
            random or random_module.Random(),
            clock_ms(),
            cluster_id=cluster_id,
            defer_flush=self._split_log is not None,
            **(node_options or {}),
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._appends: list[_PendingAppend] = []
        self._inbound_ids = 0
        # Peers' requests awaiting the node's answer (a parked fetch waits here), by the
        # inbound correlation id the driver gave them.
        self._answers: dict[int, tuple[int, asyncio.Future[Response]]] = {}
        self._flush_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._listener_fault: BaseException | None = None
        self._step_fault: RaftStepError | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def set_listener(self, listener: CommitListener) -> None:
        """Register where committed entries go; before ``start`` (nothing is missed: the
        node hands over from its last applied offset)."""
        self._listener = listener
        self._wake.set()

    def start(self) -> None:
        assert self._task is None, "started twice"
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"raft-driver-{self.node_id}"
        )

    async def shutdown(self, resign: bool = True) -> None:
        if self._stopping:
            return
        self._stopping = True
        if resign and self.node.is_leader:
            sent = self._send_all(self.node.resign(self._clock_ms()))
            if sent:
                await asyncio.wait(sent, timeout=SHUTDOWN_RESIGN_WAIT_S)
        self._fail_appends("the controller is shutting down")
        self._fail_answers()
        if self._flush_task is not None:
            # Let a running fsync finish: the owner closes the log after this returns,
            # and the worker thread must not be inside it then.
            await asyncio.wait({self._flush_task}, timeout=SHUTDOWN_FLUSH_WAIT_S)
        tasks = [t for t in (self._task, self._flush_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for peer in self._peers.values():
            if peer.connection is not None:
                await peer.connection.close()
                peer.connection = None

    # --- what the rest of the node sees ---------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.node.is_leader

    @property
    def leader_id(self) -> int | None:
        return self.node.leader_id

    @property
    def epoch(self) -> int:
        return self.node.epoch

    @property
    def predecessor(self) -> SilentLeader | None:
        """While leading: the leader this node replaced after its fetches to it timed
        out, and when it last heard from it (``time.monotonic`` ms); else None."""
        return self.node.predecessor if self.node.is_leader else None

    @property
    def high_watermark(self) -> int:
        return self.node.high_watermark

    @property
    def high_watermark_current(self) -> bool:
        """The high watermark is the quorum's of this epoch (``RaftNode``'s)."""
        return self.node.high_watermark_current

    @property
    def stopped(self) -> bool:
        """True once ``shutdown`` began: requests must no longer reach the node."""
        return self._stopping

    @property
    def listener_fault(self) -> BaseException | None:
        """The error the commit listener raised, if it did; nothing was handed over since."""
        return self._listener_fault

    def create_snapshot(
        self, end_offset: int, payload: bytes, *, delete_log: bool = True
    ) -> SnapshotId:
        """Store the state machine's snapshot of every entry below ``end_offset`` (which
        the listener has been handed) and, with ``delete_log``, trim the log below it
        (the metadata writer keeps the log below the older retained snapshot instead)."""
        return self.node.create_snapshot(end_offset, payload, delete_log=delete_log)

    def describe_quorum(self) -> tuple[QuorumDescription, int]:
        """The quorum as the leader sees it, and the offset (ms) from the node's clock to
        the wall clock, for DescribeQuorum's timestamps."""
        now_ms = self._clock_ms()
        return self.node.describe_quorum(now_ms), time.time_ns() // 1_000_000 - now_ms

    async def append(self, payload: bytes, count: int | None = None) -> int:
        """Append one record batch as leader; its last offset once committed.

        ``count`` (offsets the entry takes) defaults to the batch's own span
        (lastOffsetDelta + 1; 1 for a payload that is not a v2 batch) and must match it
        when given: every replica derives it from the batch header it receives."""
        node = self.node
        if self._step_fault is not None:
            raise self._step_fault
        if self._stopping or not node.is_leader:
            raise NotControllerError(node.leader_id)
        span = _batch_span(payload)
        if count is None:
            count = span
        elif count != span:
            raise ValueError(f"count {count} but the batch spans {span} offsets")
        now_ms = self._clock_ms()
        epoch = node.epoch
        payload = _stamped(payload, node.log_end_offset, epoch)
        try:
            last_offset = node.append(payload, now_ms, count=count)
        except NotLeaderError:
            raise NotControllerError(node.leader_id) from None
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._appends.append(_PendingAppend(last_offset, epoch, future))
        self._wake.set()
        return await future

    async def handle_request(self, source_id: int, message: Request) -> Response:
        """A peer's request (from a CONTROLLER-plane handler): the node's answer to it.

        Most answers come out of the same step; a fetch the leader parks (long poll) is
        answered by a later step — an append, a new high watermark, a lost leadership or
        its max wait — and this awaits it. ``QuorumStoppedError`` when the driver stopped
        (or stops meanwhile)."""
        if not isinstance(message, REQUEST_TYPES):
            raise TypeError(f"not a quorum request: {type(message).__name__}")
        if self._stopping or self._step_fault is not None:
            raise QuorumStoppedError(f"node {self.node_id}: the quorum driver stopped")
        self._inbound_ids += 1
        correlation_id = self._inbound_ids
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._answers[correlation_id] = (source_id, future)
        try:
            outbound = self.node.handle(
                Inbound(source_id, correlation_id, message), self._clock_ms()
            )
            self._send_all(outbound)
            self._after_step()
            self._wake.set()  # a parked fetch (or a role change) moved the deadline
            # The node answers within the request's max wait (capped by the request
            # timeout); the bound here only guards against a bug leaving it parked.
            limit_s = 2 * self.config.request_timeout_ms / 1000 + MAX_SLEEP_S
            try:
                return await asyncio.wait_for(future, limit_s)
            except TimeoutError:
                raise QuorumStoppedError(
                    f"node {self.node_id} did not answer {type(message).__name__}"
                ) from None
        finally:
            self._answers.pop(correlation_id, None)

    # --- the loop -------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                if self._step_fault is not None:
                    raise self._step_fault  # the fsync on the worker thread failed
                self._send_all(self.node.tick(self._clock_ms()))
                self._after_step()
                self._maybe_start_flush()
            except Exception as error:
                # The node's state is unknown (a flush half done): stop, and fail the
                # appends waiting and to come rather than leave them hanging.
                logger.error(
                    "node %d: raft step failed, the quorum stops here: %r", self.node_id, error
                )
                if self._step_fault is None:
                    self._step_fault = RaftStepError(f"the metadata log failed: {error}")
                for pending in self._appends:
                    if not pending.future.done():
                        pending.future.set_exception(self._step_fault)
                self._appends = []
                self._fail_answers()
                raise
            delay_s = (self.node.next_deadline_ms() - self._clock_ms()) / 1000
            if delay_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(delay_s, MAX_SLEEP_S))
            else:
                # Due again at once: still let the loop run once (requests, the flush
                # task this step started, signals) — a deadline the step did not move
                # must not turn into a loop that never yields.
                await asyncio.sleep(0)

    def _maybe_start_flush(self) -> None:
        """Start the fsync the node asked for, unless one is running (the node asks
        again after that one if it still needs it)."""
        log = self._split_log
        if log is None or self._flush_task is not None or not self.node.take_flush_request():
            return
        pending = log.prepare_flush()  # on the loop: staged index entries, the target
        self._flush_task = asyncio.get_running_loop().create_task(
            self._flush(log, pending), name=f"raft-fsync-{self.node_id}"
        )

    async def _flush(self, log: SplitFlushLog, pending: Any) -> None:
        """The fsync on a worker thread while the loop serves; then, on the loop, the
        flushed offset moves (unless a truncation voided it) and the node ticks."""
        try:
            await asyncio.to_thread(pending.fsync)
        except Exception as error:
            self._step_fault = RaftStepError(f"the metadata log failed: {error}")
        else:
            log.mark_flushed(pending)
        finally:
            self._flush_task = None
            self._wake.set()

    def _fail_answers(self) -> None:
        for _, future in self._answers.values():
            if not future.done():
                future.set_exception(QuorumStoppedError("the quorum driver stopped"))

    def _after_step(self) -> None:
        self._deliver_commits()
        self._settle_appends()

    def _deliver_commits(self) -> None:
        listener = self._listener
        if listener is None or self._listener_fault is not None:
            return
        for _ in range(MAX_COMMIT_POLLS_PER_TURN):
            events = self.node.poll_committed()
            if not events:
                return
            for event in events:
                try:
                    listener(event)
                except Exception as error:
                    # The state machine missed a committed change: handing it later ones
                    # would build on a wrong state, so delivery stops (Kafka treats this
                    # as a fatal fault); consensus goes on so the quorum is not hurt.
                    logger.exception("node %d: commit listener failed", self.node_id)
                    self._listener_fault = error
                    return
        self._wake.set()  # more to hand over: next turn

    def _settle_appends(self) -> None:
        if not self._appends:
            return
        node = self.node
        log = node.log
        still: list[_PendingAppend] = []
        for pending in self._appends:
            if pending.future.done():
                continue
            if node.high_watermark > pending.last_offset:
                kept = pending.last_offset < log.start_offset or (
                    pending.last_offset < log.end_offset
                    and log.epoch_at(pending.last_offset) == pending.epoch
                )
                if kept:
                    pending.future.set_result(pending.last_offset)
                else:
                    pending.future.set_exception(NotControllerError(node.leader_id))
            elif not node.is_leader or node.epoch != pending.epoch:
                pending.future.set_exception(NotControllerError(node.leader_id))
            else:
                still.append(pending)
        self._appends = still

    def _fail_appends(self, detail: str) -> None:
        for pending in self._appends:
            if not pending.future.done():
                pending.future.set_exception(NotControllerError(self.node.leader_id, detail))
        self._appends = []

    # --- sending ------------------------------------------------------------------------

    def _send_all(self, outbound: list[Outbound]) -> list[asyncio.Task[None]]:
        tasks = []
        for out in outbound:
            if not isinstance(out.message, REQUEST_TYPES):
                waiting = self._answers.get(out.correlation_id)
                if waiting is not None and waiting[0] == out.destination_id:
                    if not waiting[1].done():
                        waiting[1].set_result(out.message)
                else:
                    # The peer's handler gave up (its connection closed): as TCP would.
                    logger.debug("node %d: answer to a gone request: %r", self.node_id, out)
                continue
            peer = self._peers.get(out.destination_id)
            if peer is None:
                # A response is only ever returned by handle_request; anything else
                # addressed elsewhere is a bug in the caller's routing, not the peer's.
                logger.warning("node %d: cannot route %r", self.node_id, out)
                continue
            if peer.in_flight >= MAX_IN_FLIGHT_PER_PEER:
                continue  # the node resends on its own timers
            task = asyncio.get_running_loop().create_task(self._exchange(peer, out))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            tasks.append(task)
        return tasks

    async def _exchange(self, peer: _Peer, out: Outbound) -> None:
        peer.in_flight += 1
        try:
            connection = await self._connection(peer)
            request = out.message
            assert isinstance(request, REQUEST_TYPES)
            api_key = wire.api_key_of(request)
            entity = wire.request_to_kio(request, connection.version_for(api_key))
            response = await connection.send(entity)
            if peer.connection is not connection or self._stopping:
                return  # the connection was replaced: its answers are stale
            message = wire.response_from_kio(response)
        except (KafkaConnectionError, OSError) as error:
            logger.debug("node %d → %d: %s", self.node_id, peer.node_id, error)
            return
        except (wire.WireError, UnsupportedVersionError) as error:
            logger.warning("node %d → %d: %s", self.node_id, peer.node_id, error)
            return
        finally:
            peer.in_flight -= 1
        self._feed(Inbound(peer.node_id, out.correlation_id, message))

    def _feed(self, inbound: Inbound) -> None:
        try:
            self._send_all(self.node.handle(inbound, self._clock_ms()))
            self._after_step()
        except Exception:
            logger.exception(
                "node %d: handling a response from %d failed", self.node_id, inbound.source_id
            )
        self._wake.set()  # deadlines may have moved

    async def _connection(self, peer: _Peer) -> BrokerConnection:
        connection = peer.connection
        if connection is not None and not connection.closed:
            return connection
        if peer.connecting is None:
            if self._clock_ms() < peer.retry_at_ms:
                raise KafkaConnectionError(f"node {peer.node_id}: backing off")
            peer.connecting = asyncio.get_running_loop().create_task(self._connect(peer))
            self._tasks.add(peer.connecting)
            peer.connecting.add_done_callback(self._tasks.discard)
        return await asyncio.shield(peer.connecting)

    async def _connect(self, peer: _Peer) -> BrokerConnection:
        versions: dict[int, tuple[int, int]] = dict(wire.VERSIONS)
        versions[API_VERSIONS_KEY] = (0, 3)
        connection = BrokerConnection(
            BrokerAddress(peer.node_id, peer.host, peer.port),
            client_id=f"raft-{self.node_id}",
            request_timeout_s=self.config.request_timeout_ms / 1000,
            client_versions=versions,
            ssl_context=self.ssl_context,
            sasl=self.sasl,
        )
        try:
            await connection.connect()
        except BaseException:
            peer.retry_at_ms = self._clock_ms() + self.config.retry_backoff_ms
            raise
        finally:
            peer.connecting = None
        old, peer.connection = peer.connection, connection
        if old is not None:
            await old.close()
        return connection


def _batch_span(payload: bytes) -> int:
    header = batch_header(payload)
    return 1 if header is None else int(header.last_offset_delta) + 1


def _stamped(payload: bytes, offset: int, epoch: int) -> bytes:
    """A v2 batch with the offset and epoch it gets in the log (every replica then holds
    the same bytes); anything else unchanged (wire_records.py wraps it for the network)."""
    if batch_header(payload) is None:
        return payload
    batch = bytearray(payload)
    stamp(batch, 0, offset, epoch)
    return bytes(batch)

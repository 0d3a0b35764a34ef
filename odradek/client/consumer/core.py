"""Asyncio consumer core: positions, fetchers per leader, offsets, commits.

How this works and why: every assigned partition has a state (position, paused,
pending reset). One fetcher task per leader broker long-polls Fetch for that
broker's fetchable partitions — assigned, with a known position, not paused, and
with nothing still buffered — so a partition never has two fetches in flight and the
buffer stays bounded by ``max.partition.fetch.bytes`` per partition. Fetched batches
are decoded by ``fetch_decode.py`` (a truncated last batch is ignored, control batches skipped,
aborted transactions dropped under read_committed) into per-partition buffers;
``getmany`` hands records out and advances positions. A seek bumps the partition's
epoch so that in-flight or buffered data for the old position is dropped.

Positions start unknown and are resolved lazily by the fetchers: a pending
``seek_to_beginning/end`` first, then the group's committed offset (OffsetFetch via
the coordinator), then ``auto.offset.reset``. OFFSET_OUT_OF_RANGE resets the same
way. Commits and committed offsets go through the group coordinator
(``offsets.py``). Group membership (``subscribe``) lives in
``group.py`` and drives ``assign``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.config import ClientConfig
from odradek.client._core.connection import BrokerConnection, KafkaConnectionError, request_entity
from odradek.client._core.errors import KafkaError
from odradek.client._core.sasl import sasl_credentials
from odradek.client.consumer.fetch_decode import ConsumerRecord, FetchedRecords, decode_fetch
from odradek.client.consumer.list_offsets import LIST_OFFSETS, list_offsets
from odradek.client.consumer.offsets import (
    FIND_COORDINATOR,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    TP,
    GroupOffsets,
)

logger = logging.getLogger(__name__)

# How often a fetcher looks again while other partitions' records wait to be read.
BUFFERED_RECHECK_S = 0.005
FETCH: Final = 1
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
CONSUMER_VERSIONS: Final = {
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 8),
    OFFSET_COMMIT: (7, 9),
    OFFSET_FETCH: (8, 9),
    FIND_COORDINATOR: (4, 6),
    JOIN_GROUP: (5, 9),
    HEARTBEAT: (3, 4),
    LEAVE_GROUP: (3, 5),
    SYNC_GROUP: (3, 5),
}
LATEST: Final = -1
EARLIEST: Final = -2
_RESET = {"earliest": EARLIEST, "smallest": EARLIEST, "latest": LATEST, "largest": LATEST}
_REFRESH_ERRORS: Final = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.replica_not_available,
    }
)


@dataclass(slots=True)
class _PartState:
    position: int | None = None
    paused: bool = False
    reset_to: int | None = None  # a pending seek_to_beginning/end
    epoch: int = 0  # bumped by every seek; stale fetch data is dropped
    high_watermark: int = -1
    last_stable: int = -1  # the LSO from the last fetch answer
    stored: int | None = None  # store_offsets (enable.auto.offset.store=false)
    committed: int | None = None  # the group's offset as last read or committed here
    reset_position: int | None = None  # where auto.offset.reset / seek_to_* put it
    revoking: bool = False  # being given up: nothing more is handed out or fetched
    # (epoch, next offset for the application) while records drained from the core
    # still wait in the blocking face's poll() buffer; see committable_position.
    consumed: tuple[int, int] | None = None


def committable_position(state: _PartState) -> int | None:
    """The offset after the last record the application received: what commits,
    auto-commit and ``position()`` use. Records drained by a prefetching face but not
    yet returned from its ``poll()`` do not count; a consumed mark from before the
    last seek or reset (an older epoch) is stale and ignored."""
    consumed = state.consumed
    if consumed is not None and consumed[0] == state.epoch:
        return consumed[1]
    return state.position


@dataclass(slots=True)
class _Buffered:
    records: FetchedRecords
    next_offset: int
    epoch: int


class ConsumerCore:
    """The asyncio consumer; create and use it inside one running event loop."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.cluster = Cluster(
            config["bootstrap.servers"],
            client_id=config["client.id"],
            request_timeout_ms=config["request.timeout.ms"],
            retry_backoff_ms=config["retry.backoff.ms"],
            metadata_max_age_ms=config["metadata.max.age.ms"],
            ssl_context=config.ssl_context,
            client_versions=CONSUMER_VERSIONS,
            sasl=sasl_credentials(config),
        )
        self.group_id: str | None = config["group.id"]
        self.isolation = 1 if config["isolation.level"] == "read_committed" else 0
        self.reset_policy: int | None = _RESET.get(config["auto.offset.reset"])
        self.auto_store: bool = config["enable.auto.offset.store"]
        self._parts: dict[TP, _PartState] = {}
        self._buffer: dict[TP, _Buffered] = {}
        # What getmany hands out: the blocking face sets its Message (same layout).
        self.record_type: type[Any] = ConsumerRecord
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        self._state_event = asyncio.Event()
        self._data_event = asyncio.Event()
        self._resolve_lock = asyncio.Lock()
        self._error: Exception | None = None
        self.offsets = GroupOffsets(self.cluster, self.group_id)
        self.closed = False
        # Set by the blocking face, which hands drained records out later from its own
        # thread: _drain then keeps the committable position where it was.
        self.prefetch = False
        # Every commit's outcome, on the loop thread (the blocking face's on_commit).
        self.commit_listener: Callable[[BaseException | None, dict[TP, int]], None] | None = None
        # Held by that face while it checks a buffered record is still deliverable and
        # marks it consumed, and by hold(): a record returned after a revocation's
        # commit was computed would be handed out twice (here and by the next owner).
        self.hand_lock = threading.Lock()

    # -- wakeups ---------------------------------------------------------------------
    def _notify_state(self) -> None:
        event, self._state_event = self._state_event, asyncio.Event()
        event.set()

    def _notify_data(self) -> None:
        event, self._data_event = self._data_event, asyncio.Event()
        event.set()

    # -- assignment and positions ------------------------------------------------------
    async def assign(
        self, partitions: Iterable[TP], offsets: Mapping[TP, int] | None = None
    ) -> None:
        """Replace the assignment; ``offsets`` sets starting positions (else resolved)."""
        await self.start_fetching(self.set_assignment(partitions, offsets))

    def set_assignment(
        self, partitions: Iterable[TP], offsets: Mapping[TP, int] | None = None
    ) -> set[str]:
        """``assign``'s part that needs no I/O (a face whose ``assign`` does not wait
        calls it first, then ``start_fetching``); returns the topics assigned."""
        wanted = list(dict.fromkeys(partitions))
        old = self._parts
        self._parts = {tp: old.get(tp) or _PartState() for tp in wanted}
        for state in self._parts.values():
            state.revoking = False  # still (or again) assigned: see hold()
        for tp in list(self._buffer):
            if tp not in self._parts:
                del self._buffer[tp]
        for tp, offset in (offsets or {}).items():
            if tp in self._parts and offset >= 0:
                self.seek(tp, offset)
        return {t for t, _ in wanted}

    async def start_fetching(self, topics: set[str]) -> None:
        """Learn the assigned ``topics``' leaders, then fetch."""
        if topics:
            self.cluster.want_topics(topics)
            await self.cluster.with_retry(lambda: self.cluster.refresh(topics))
        self._spawn_fetchers()
        self._notify_state()

    def assignment(self) -> list[TP]:
        return list(self._parts)

    def _state(self, tp: TP) -> _PartState:
        state = self._parts.get(tp)
        if state is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"{tp[0]}-{tp[1]} is not assigned"
            )
        return state

    def seek(self, tp: TP, offset: int) -> None:
        state = self._state(tp)
        state.position, state.reset_to = offset, None
        state.epoch += 1
        self._buffer.pop(tp, None)
        self._notify_state()

    def _seek_to(self, partitions: Iterable[TP] | None, timestamp: int) -> None:
        for tp in list(partitions) if partitions is not None else list(self._parts):
            state = self._state(tp)
            state.position, state.reset_to = None, timestamp
            state.epoch += 1
            self._buffer.pop(tp, None)
        self._notify_state()

    def seek_to_beginning(self, partitions: Iterable[TP] | None = None) -> None:
        self._seek_to(partitions, EARLIEST)

    def seek_to_end(self, partitions: Iterable[TP] | None = None) -> None:
        self._seek_to(partitions, LATEST)

    async def position(self, tp: TP) -> int:
        state = self._state(tp)
        while state.position is None:
            await self._resolve_positions()
            self._raise_error()
            state = self._state(tp)
        position = committable_position(state)
        assert position is not None
        return position

    def pause(self, partitions: Iterable[TP]) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, partitions: Iterable[TP]) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._notify_state()

    def hold(self, partitions: Iterable[TP]) -> None:
        """Hand out no more records of partitions about to be revoked: what the
        revoke callback commits must cover everything the application got."""
        with self.hand_lock:
            for tp in partitions:
                state = self._parts.get(tp)
                if state is not None:
                    state.revoking = True

    def paused(self) -> list[TP]:
        return [tp for tp, s in self._parts.items() if s.paused]

    def highwater(self, tp: TP) -> int:
        return self._state(tp).high_watermark

    def last_stable_offset(self, tp: TP) -> int:
        return self._state(tp).last_stable

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    async def _resolve_positions(self) -> None:
        async with self._resolve_lock:
            unknown = [tp for tp, s in self._parts.items() if s.position is None]
            if not unknown:
                return
            resets = {tp: self._parts[tp].reset_to for tp in unknown}
            committed: dict[TP, int] = {}
            need_committed = [tp for tp in unknown if resets[tp] is None]
            if self.group_id and need_committed:
                committed = {
                    tp: o
                    for tp, (o, _m) in (await self.committed(need_committed)).items()
                    if o >= 0
                }
            for tp in unknown:
                if resets[tp] is None and tp not in committed:
                    if self.reset_policy is None:
                        self._error = KafkaError(
                            ErrorCode.offset_out_of_range,
                            f"{tp[0]}-{tp[1]}: no committed offset and auto.offset.reset=none",
                        )
                        self._parts[tp].reset_to = None
                        continue
                    resets[tp] = self.reset_policy
            query = {tp: ts for tp, ts in resets.items() if ts is not None}
            found = await self.list_offsets(query) if query else {}
            for tp in unknown:
                state = self._parts.get(tp)
                if state is None or state.position is not None:
                    continue
                if tp in committed:
                    state.position = state.committed = committed[tp]
                elif tp in found and state.reset_to in (None, query.get(tp)):
                    state.position, state.reset_to = found[tp][0], None
                    state.reset_position = state.position
        self._notify_state()

    # -- ListOffsets -----------------------------------------------------------------
    async def list_offsets(self, query: Mapping[TP, int]) -> dict[TP, tuple[int, int]]:
        """(offset, timestamp) per partition for a timestamp, LATEST or EARLIEST."""
        return await list_offsets(self.cluster, self.isolation, query)

    async def offsets_for_times(
        self, timestamps: Mapping[TP, int]
    ) -> dict[TP, tuple[int, int] | None]:
        found = await self.list_offsets(timestamps)
        return {tp: (found[tp] if found.get(tp, (-1, -1))[0] >= 0 else None) for tp in timestamps}

    # -- fetching --------------------------------------------------------------------
    def _leader(self, tp: TP) -> int:
        info = self.cluster.metadata.topics.get(tp[0])
        partition = info.partitions.get(tp[1]) if info is not None else None
        return partition.leader if partition is not None else -1

    def _spawn_fetchers(self) -> None:
        for tp in self._parts:
            node_id = self._leader(tp)
            task = self._fetchers.get(node_id)
            if node_id >= 0 and (task is None or task.done()) and not self.closed:
                self._fetchers[node_id] = asyncio.get_running_loop().create_task(
                    self._fetch_loop(node_id)
                )

    def _fetchable(self, node_id: int) -> list[TP]:
        return [
            tp
            for tp, s in self._parts.items()
            if s.position is not None
            and not s.paused
            and not s.revoking
            and tp not in self._buffer
            and self._leader(tp) == node_id
        ]

    async def _fetch_loop(self, node_id: int) -> None:
        while not self.closed:
            wake = self._state_event
            try:
                await self._resolve_positions()
                partitions = self._fetchable(node_id)
                if not partitions:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), 1.0)
                    continue
                # While this broker's other partitions still hold unread records, do
                # not long-poll for the rest: the buffered ones may run dry long before
                # fetch.max.wait.ms and could not be fetched again until it ends.
                buffered = any(
                    tp in self._buffer and self._leader(tp) == node_id for tp in self._parts
                )
                got = await self._fetch_once(node_id, partitions, long_poll=not buffered)
                if buffered and not got:
                    await asyncio.sleep(BUFFERED_RECHECK_S)
            except asyncio.CancelledError:
                raise
            except (KafkaError, KafkaConnectionError) as error:
                logger.debug("fetch from node %s failed: %s", node_id, error)
                if isinstance(error, KafkaError) and not error.retriable():
                    self._error = error
                    self._notify_data()
                await asyncio.sleep(self.cluster.retry_backoff_s)
                with contextlib.suppress(KafkaError, KafkaConnectionError):
                    await self.cluster.refresh()
                self._spawn_fetchers()
            except Exception as error:  # a corrupt batch, a bug: report through poll
                logger.exception("fetcher for node %s", node_id)
                self._error = error
                self._notify_data()
                await asyncio.sleep(self.cluster.retry_backoff_s)

    async def _fetch_once(self, node_id: int, partitions: list[TP], long_poll: bool = True) -> bool:
        """One Fetch for ``partitions``; True if it returned any records."""
        connection = await self.cluster.connection(node_id)
        version = connection.version_for(FETCH)
        sent: dict[TP, tuple[int, int]] = {}
        topics: dict[str, list[Any]] = {}
        for tp in partitions:
            state = self._parts[tp]
            assert state.position is not None
            sent[tp] = (state.position, state.epoch)
            topics.setdefault(tp[0], []).append(
                request_entity(
                    FETCH,
                    version,
                    "FetchPartition",
                    partition=tp[1],
                    current_leader_epoch=-1,
                    fetch_offset=state.position,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=self.config["max.partition.fetch.bytes"],
                )
            )
        request = request_entity(
            FETCH,
            version,
            replica_id=-1,
            max_wait=datetime.timedelta(
                milliseconds=self.config["fetch.max.wait.ms"] if long_poll else 0
            ),
            min_bytes=self.config["fetch.min.bytes"],
            max_bytes=self.config["fetch.max.bytes"],
            isolation_level=self.isolation,
            session_id=0,
            session_epoch=-1,
            topics=tuple(
                request_entity(FETCH, version, "FetchTopic", topic=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        response = await connection.send(request)
        if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
            raise KafkaError(response.error_code, "fetch")
        refresh = False
        got = False
        for topic in response.responses:
            for p in topic.partitions:
                tp = (topic.topic, p.partition_index)
                part = self._parts.get(tp)
                if part is None or sent.get(tp) != (part.position, part.epoch):
                    continue  # unassigned or sought while the fetch was in flight
                if p.error_code == ErrorCode.none:
                    part.high_watermark = p.high_watermark
                    part.last_stable = p.last_stable_offset
                    got = bool(p.records) or got
                    self._add_records(tp, part, p)
                elif p.error_code == ErrorCode.offset_out_of_range:
                    logger.info("%s-%s: offset %s out of range", *tp, part.position)
                    part.position, part.reset_to = None, self.reset_policy
                    # No epoch bump: records drained before it are still valid and a
                    # prefetching face hands them out (its consumed mark moves on).
                    if self.reset_policy is None:
                        self._error = KafkaError(p.error_code, f"{tp[0]}-{tp[1]}")
                        self._notify_data()
                elif p.error_code in _REFRESH_ERRORS:
                    refresh = True
                else:
                    self._error = KafkaError(p.error_code, f"{tp[0]}-{tp[1]}")
                    self._notify_data()
        if refresh:
            await asyncio.sleep(self.cluster.retry_backoff_s)
            await self.cluster.refresh()
            self._spawn_fetchers()
        return got

    def _add_records(self, tp: TP, state: _PartState, p: Any) -> None:
        data = p.records
        if not data or state.position is None:
            return
        aborted = None
        if self.isolation == 1:
            aborted = [(a.producer_id, a.first_offset) for a in (p.aborted_transactions or ())]
        records = decode_fetch(
            tp[0], tp[1], bytes(data), state.position, aborted, self.config["check.crcs"]
        )
        if records:
            self._buffer[tp] = _Buffered(records, records.next_offset, state.epoch)
            self._notify_data()
        elif records.next_offset > state.position:
            # Only control or aborted batches: skip them, and if the application has
            # everything before them, its committable position moves on too.
            if state.consumed == (state.epoch, state.position):
                state.consumed = (state.epoch, records.next_offset)
            state.position = records.next_offset

    def _drain(
        self,
        max_records: int,
        marks: list[Any] | None = None,
        only: Collection[TP] | None = None,
    ) -> list[Any]:
        """Hand out up to ``max_records`` buffered records, round robin between
        partitions, each partition's a contiguous run (of ``only``'s partitions when
        given); ``marks`` gets (tp, state, count) per run. In prefetch mode a
        partition's committable position stays put."""
        out: list[Any] = []
        for tp in list(self._buffer):
            if only is not None and tp not in only:
                continue
            buffered = self._buffer[tp]
            state = self._parts.get(tp)
            if state is None or buffered.epoch != state.epoch:
                del self._buffer[tp]
                continue
            if state.paused or state.revoking:
                continue
            if self.prefetch:
                consumed = state.consumed
                if (consumed is None or consumed[0] != state.epoch) and state.position is not None:
                    state.consumed = (state.epoch, state.position)
            taken = buffered.records.take(max_records - len(out), self.record_type)
            if taken:
                out += taken
                state.position = buffered.records.position
                if marks is not None:
                    marks.append((tp, state, len(taken)))
            del self._buffer[tp]  # re-inserted at the end: round robin between partitions
            if buffered.records:
                self._buffer[tp] = buffered
            else:
                state.position = max(state.position or 0, buffered.next_offset)
                self._notify_state()
            if len(out) >= max_records:
                break
        return out

    async def getmany(
        self,
        max_records: int,
        timeout_s: float,
        marks: list[Any] | None = None,
        only: Collection[TP] | None = None,
    ) -> list[Any]:
        """Up to ``max_records`` buffered records, waiting up to ``timeout_s`` for some
        (``marks``, ``only``: see ``_drain``)."""
        self._raise_error()
        deadline = time.monotonic() + timeout_s
        while True:
            records = self._drain(max_records, marks, only)
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                return []
            event = self._data_event
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
            self._raise_error()

    # -- coordinator, commits (offsets.py) ------------------------------------
    def coordinator_error(self, code: ErrorCode, what: str) -> KafkaError:
        return self.offsets.coordinator_error(code, what)

    async def coordinator(self) -> BrokerConnection:
        return await self.offsets.coordinator()

    async def committed(self, partitions: Iterable[TP]) -> dict[TP, tuple[int, str | None]]:
        """(offset, metadata) committed by the group; offset -1 when none."""
        return await self.offsets.committed(partitions)

    def store_offsets(self, offsets: Mapping[TP, int]) -> list[TP]:
        """Store offsets to commit later (``enable.auto.offset.store=false``); returns
        the partitions left out because they are not assigned."""
        missing = []
        for tp, offset in offsets.items():
            state = self._parts.get(tp)
            if state is None:
                missing.append(tp)
            else:
                state.stored = offset
        return missing

    def current_offsets(
        self,
        partitions: Iterable[TP] | None = None,
        changed_only: bool = False,
        consumed_only: bool = False,
    ) -> dict[TP, int]:
        """What a commit without offsets commits: the positions, or with
        ``enable.auto.offset.store=false`` the offsets the application stored;
        ``changed_only`` leaves out those the group has committed already, and
        ``consumed_only`` positions no record moved since a reset (librdkafka commits
        only offsets stored by consuming)."""
        wanted = self._parts if partitions is None else partitions
        out = {}
        for tp in wanted:
            state = self._parts.get(tp)
            if state is None:
                continue
            offset = committable_position(state) if self.auto_store else state.stored
            if offset is None or (changed_only and offset == state.committed):
                continue
            if consumed_only and self.auto_store and offset == state.reset_position:
                continue
            out[tp] = offset
        return out

    async def commit(
        self,
        offsets: Mapping[TP, int] | None = None,
        metadata: str = "",
        partitions: Iterable[TP] | None = None,
        changed_only: bool = False,
        consumed_only: bool = False,
        report: bool = True,
    ) -> dict[TP, int]:
        """Commit ``offsets`` (default: ``current_offsets(partitions, changed_only,
        consumed_only)``); returns what was committed. ``report``: tell the
        ``commit_listener`` the outcome."""
        listener = self.commit_listener if report else None
        if offsets is None:
            offsets = self.current_offsets(partitions, changed_only, consumed_only)
        to_commit = dict(offsets)
        if to_commit:
            try:
                await self.offsets.commit(to_commit, metadata)
            except Exception as error:
                if listener is not None:
                    listener(error, to_commit)
                raise
            for tp, offset in to_commit.items():
                state = self._parts.get(tp)
                if state is not None:
                    state.committed = offset
            if listener is not None:
                listener(None, to_commit)
        return to_commit

    async def close(self) -> None:
        self.closed = True
        tasks = list(self._fetchers.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for connection in list(self.cluster._connections.values()):
            for future, _schema in list(connection._pending.values()):
                future.cancel()  # abandoned fetches: nobody will read their failure
        await self.offsets.close()
        await self.cluster.close()
        self._notify_data()

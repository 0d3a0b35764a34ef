"""The follower side of replication, sans-IO: one fetcher's partitions and their state.

How this works and why: a follower copies each partition it hosts from the partition's
leader with Fetch requests, as Kafka's replica fetcher threads do (KIP-101, KIP-279,
KIP-595's fetch semantics). ``FetcherCore`` holds one fetcher's partitions — all led
by one source broker — and decides everything; the asyncio adapter (fetcher.py) only
moves its requests and responses and sleeps until ``next_wakeup_ms``. Time comes from
an injected clock, so every rule here is tested without sockets or sleeps.

Each partition has a ``FetchStart`` (leader, leader epoch, topic id) and a state:

- FETCHING: sent in the next Fetch with ``fetch_offset`` = the follower's log end,
  ``last_fetched_epoch`` = the epoch of its last batch and ``current_leader_epoch`` =
  the FetchStart's epoch. The leader's batches are appended unchanged
  (``append_as_follower``: offsets and epochs as the leader stamped them, so replicas
  are byte-identical), then the follower's high watermark and log start offset follow
  the leader's.
- Reconciliation (seeds/000 副本调和): a partition whose response carries
  ``diverging_epoch`` (epoch E, end offset O) has records the leader does not. The
  follower truncates to min(O, its own end offset for E) — the end of the last epoch
  both logs hold — if it has E; if not, to the end of its largest epoch below E (O
  would fall among its own records, even inside a batch) — and fetches again from
  there; the next fetch names its new last epoch, so a deeper divergence is found by
  the next round. It never truncates to its
  high watermark: that can lag the leader's (seeds/000 "Watermark 滞后"), and records
  above it may be committed. Only when the leader knows no epoch at all (-1, -1) is the
  high watermark the fallback, as in KIP-101.
- TRUNCATING: the fetch offset was out of the leader's range (OFFSET_OUT_OF_RANGE).
  Kafka's rule: ask the leader its log end (ListOffsets LATEST); if that is below the
  follower's log end (an unclean election left the follower ahead), truncate to it;
  otherwise ask its log start (EARLIEST) and, if the follower's log end is below it,
  empty the log and restart it there (``truncate_fully_and_start_at``). Then FETCHING
  — after a backoff if neither applied, so a leader that keeps answering
  OFFSET_OUT_OF_RANGE for an offset it holds is not asked again in a tight loop.
- TIERED (KIP-405, Kafka's ReplicaFetcherTierStateMachine): the leader answered
  OFFSET_MOVED_TO_TIERED_STORAGE — what this follower would fetch next is only in
  remote storage. Fetching it from there record by record would be pointless (the
  leader keeps only its local tail), so the follower asks the leader's local log
  start and its epoch (ListOffsets EARLIEST_LOCAL, -4), hands them to the broker's
  tier state builder (``ApplyResult.tiered``; storage/remote/follower_state.py builds
  the epochs, producer state and log start from the remote segment ending just below
  that offset and restarts the log there) and, told the outcome by
  ``tier_state_built``, fetches from the leader's local start — or asks again after
  a backoff when the remote metadata was not there yet.
- DELAYED: an error the partition may recover from by itself (NOT_LEADER_OR_FOLLOWER
  and UNKNOWN_LEADER_EPOCH while the leader catches up with the metadata,
  UNKNOWN_TOPIC_ID, a storage error, a failed connection): skipped for
  ``replica.fetch.backoff.ms``, then back to what it was doing.
- FENCED: FENCED_LEADER_EPOCH says this follower's epoch is older than the leader's;
  retrying cannot help, so the partition waits for the metadata delta that brings a
  newer FetchStart.

A FetchStart with an older epoch than the current one is ignored; a newer one (or a
new leader) restarts the partition in FETCHING. A response is applied to a partition
only if nothing changed since its request was built (same FetchStart, same state,
same log end): an answer to a superseded request is dropped, as Kafka drops it.
"""

from __future__ import annotations

import datetime
import enum
import functools
import logging
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_module
from odradek.protocol.build import make
from odradek.protocol.fetch_codec import RawFetchResponse
from odradek.records.errors import CodedError
from odradek.replica.interfaces import FetchStart, FollowerLog, TopicPartition
from odradek.replica.replication_quota import ReplicationQuota, should_follower_throttle
from odradek.storage.errors import StorageError

logger = logging.getLogger(__name__)

FETCH_KEY: Final = 1
LIST_OFFSETS_KEY: Final = 2
# Fetch v12 brought diverging_epoch; a follower never fetches with less. It sends the
# highest version the leader advertises in ApiVersions up to v17: topic ids from v13
# (KIP-516), replica_state with its broker epoch from v15 (KIP-903), v17's per-partition
# replica_directory_id tag (KIP-853) left out (null: partition replication has no use
# for it).
MIN_FETCH_VERSION: Final = 12
MAX_FETCH_VERSION: Final = 17
# ListOffsets v4 brought current_leader_epoch (fencing a stale leader's answer).
MIN_LIST_OFFSETS_VERSION: Final = 4
MAX_LIST_OFFSETS_VERSION: Final = 8
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
EARLIEST_LOCAL_TIMESTAMP: Final = -4  # KIP-405: the leader's local log start
NO_SESSION_EPOCH: Final = -1  # a full fetch without a session (the broker declines them)
_BATCH_LENGTH: Final = struct.Struct(">i")
_LOG_OVERHEAD: Final = 12  # base offset + batch length
_MIN_BATCH: Final = 61  # the v2 batch header


@functools.cache
def _entity_class(api_key: int, version: int, class_name: str) -> Any:
    """A request's kio class (or a nested entity's) by name, looked up once: kio
    resolves its modules by name on every call, and a follower builds a Fetch per
    round trip of the replication chain."""
    module = request_module(api_key, version)
    if class_name:
        return getattr(module, class_name)
    (request,) = (
        value
        for name, value in vars(module).items()
        if name.endswith("Request") and getattr(value, "__api_key__", None) == api_key
    )
    return request


def request_entity(api_key: int, version: int, class_name: str = "", **fields: Any) -> Any:
    """``client.connection.request_entity`` with the class lookups cached."""
    return make(_entity_class(api_key, version, class_name), **fields)


class FetchState(enum.Enum):
    FETCHING = "fetching"
    TRUNCATING = "truncating"
    TIERED = "tiered"
    DELAYED = "delayed"
    FENCED = "fenced"


# Every state may restart in FETCHING (a new FetchStart, the end of a delay).
LEGAL_TRANSITIONS: Final[Mapping[FetchState, frozenset[FetchState]]] = {
    FetchState.FETCHING: frozenset(FetchState),
    FetchState.TRUNCATING: frozenset(FetchState),
    FetchState.TIERED: frozenset(FetchState),
    FetchState.DELAYED: frozenset({FetchState.FETCHING, FetchState.TRUNCATING, FetchState.TIERED}),
    FetchState.FENCED: frozenset({FetchState.FETCHING}),
}


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """The replica.* configs a fetcher obeys (Kafka's names in the comments)."""

    replica_id: int  # node.id
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1_048_576  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms


@dataclass(slots=True)
class PartitionFetch:
    """One partition as this fetcher sees it."""

    tp: TopicPartition
    start: FetchStart
    state: FetchState = FetchState.FETCHING
    delayed_until_ms: int = 0
    resume: FetchState = FetchState.FETCHING  # where a DELAYED partition goes back to
    leader_end_offset: int | None = None  # TRUNCATING: LATEST answered, EARLIEST next
    # TIERED: the leader's (local log start, its epoch) being built from, once answered
    tier_target: tuple[int, int] | None = None
    last_error: str = "NONE"
    generation: int = 0  # bumped on every change, so stale answers are recognised
    in_sync: bool = False  # KIP-73: caught up with the leader's HW at the last answer


@dataclass(frozen=True, slots=True)
class SentPartition:
    """What a request asked for one partition, to check its answer still applies."""

    generation: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """A request built by the core and the partitions it covers."""

    api_key: int
    version: int
    request: Any
    partitions: Mapping[TopicPartition, SentPartition]
    timestamp: int = 0  # ListOffsets: LATEST, EARLIEST or EARLIEST_LOCAL


@dataclass(slots=True)
class ApplyResult:
    """What a response did, per partition (for logs, metrics and tests)."""

    appended_bytes: dict[TopicPartition, int] = field(default_factory=dict)
    truncated: dict[TopicPartition, int] = field(default_factory=dict)
    errors: dict[TopicPartition, str] = field(default_factory=dict)
    stale: list[TopicPartition] = field(default_factory=list)
    # TIERED: build the state from remote storage for (leader's local start, epoch)
    tiered: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)


class FetcherCore:
    """One fetcher's partitions (all led by ``source_id``) and its request/response rules."""

    def __init__(
        self,
        source_id: int,
        settings: FetcherSettings,
        logs: Callable[[TopicPartition], FollowerLog | None],
        clock: Callable[[], int],
        quota: ReplicationQuota | None = None,
    ) -> None:
        self.source_id = source_id
        self.quota = quota  # follower.replication.throttled.rate (replication_quota.py)
        self.settings = settings
        self._logs = logs
        self._clock = clock
        self._partitions: dict[TopicPartition, PartitionFetch] = {}

    # -- membership ------------------------------------------------------------------
    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionFetch]:
        return self._partitions

    def __len__(self) -> int:
        return len(self._partitions)

    def assign(self, tp: TopicPartition, start: FetchStart) -> bool:
        """Fetch ``tp`` as ``start`` says; False (ignored) for a stale or repeated one."""
        current = self._partitions.get(tp)
        if current is not None:
            if start.leader_epoch < current.start.leader_epoch or start == current.start:
                return False
            self._transition(current, FetchState.FETCHING, f"new fetch start {start}")
            current.start = start
            current.leader_end_offset = None
            current.tier_target = None
            current.last_error = "NONE"
            return True
        self._partitions[tp] = PartitionFetch(tp, start)
        return True

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._partitions.pop(tp, None)

    # -- timing ----------------------------------------------------------------------
    def next_wakeup_ms(self) -> int | None:
        """When the earliest delayed partition may be retried (None: none is delayed)."""
        times = [
            p.delayed_until_ms for p in self._partitions.values() if p.state is FetchState.DELAYED
        ]
        return min(times) if times else None

    def _wake_delayed(self) -> None:
        now = self._clock()
        for partition in self._partitions.values():
            if partition.state is FetchState.DELAYED and partition.delayed_until_ms <= now:
                self._transition(partition, partition.resume, "backoff over")

    def _delay(self, partition: PartitionFetch, error: str) -> None:
        if partition.state is not FetchState.DELAYED:
            partition.resume = (
                partition.state
                if partition.state in (FetchState.TRUNCATING, FetchState.TIERED)
                else FetchState.FETCHING
            )
        partition.last_error = error
        partition.delayed_until_ms = self._clock() + self.settings.backoff_ms
        self._transition(partition, FetchState.DELAYED, error)

    def _transition(self, partition: PartitionFetch, to: FetchState, reason: str) -> None:
        assert to in LEGAL_TRANSITIONS[partition.state], (
            f"{partition.tp}: illegal transition {partition.state.value} -> {to.value}"
        )
        if to is not partition.state:
            logger.debug(
                "fetcher %d %s-%d: %s -> %s: %s",
                self.source_id,
                *partition.tp,
                partition.state.value,
                to.value,
                reason,
            )
        partition.state = to
        partition.generation += 1

    def has_work(self) -> bool:
        """Whether a request is due now (after waking partitions whose backoff is over)."""
        self._wake_delayed()
        return any(
            p.state in (FetchState.FETCHING, FetchState.TRUNCATING)
            or (p.state is FetchState.TIERED and p.tier_target is None)
            for p in self._partitions.values()
        )

    # -- Fetch -----------------------------------------------------------------------
    def build_fetch(self, version: int, broker_epoch: int) -> RequestPlan | None:
        """The next Fetch for every FETCHING partition (None when there is none)."""
        assert MIN_FETCH_VERSION <= version <= MAX_FETCH_VERSION, version
        self._wake_delayed()
        settings = self.settings
        by_topic: dict[str, list[tuple[PartitionFetch, FollowerLog]]] = {}
        for partition in self._partitions.values():
            if partition.state is not FetchState.FETCHING:
                continue
            if should_follower_throttle(self.quota, *partition.tp, partition.in_sync):
                continue  # KIP-73 hook: left out while the follower quota is exceeded
            log = self._logs(partition.tp)
            if log is None:
                self._delay(partition, "REPLICA_NOT_AVAILABLE")
                continue
            by_topic.setdefault(partition.tp[0], []).append((partition, log))
        if not by_topic:
            return None
        sent: dict[TopicPartition, SentPartition] = {}
        topics = []
        for name, members in by_topic.items():
            entries = []
            for partition, log in members:
                offset = log.log_end_offset
                last_epoch = log.latest_epoch()
                entries.append(
                    request_entity(
                        FETCH_KEY,
                        version,
                        "FetchPartition",
                        partition=partition.tp[1],
                        current_leader_epoch=partition.start.leader_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=-1 if last_epoch is None else last_epoch,
                        log_start_offset=log.log_start_offset,
                        partition_max_bytes=settings.partition_max_bytes,
                    )
                )
                sent[partition.tp] = SentPartition(partition.generation, offset)
            topics.append(
                request_entity(
                    FETCH_KEY,
                    version,
                    "FetchTopic",
                    topic=name,
                    topic_id=members[0][0].start.topic_id,
                    partitions=tuple(entries),
                )
            )
        request = request_entity(
            FETCH_KEY,
            version,
            replica_id=settings.replica_id,
            replica_state=request_entity(
                FETCH_KEY,
                version,
                "ReplicaState",
                replica_id=settings.replica_id,
                replica_epoch=broker_epoch,
            )
            if version >= 15
            else None,
            max_wait=datetime.timedelta(milliseconds=settings.max_wait_ms),
            min_bytes=settings.min_bytes,
            max_bytes=settings.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=NO_SESSION_EPOCH,
            topics=tuple(topics),
            forgotten_topics_data=(),
            rack_id="",
        )
        return RequestPlan(FETCH_KEY, version, request, sent)

    def apply_fetch(self, plan: RequestPlan, response: RawFetchResponse) -> ApplyResult:
        """Apply a parsed FetchResponse to the partitions ``plan`` asked for."""
        result = ApplyResult()
        if response.error_code != 0:
            self.request_failed(plan, _error_name(response.error_code))
            result.errors = dict.fromkeys(plan.partitions, _error_name(response.error_code))
            return result
        by_id = {p.start.topic_id: tp[0] for tp, p in self._partitions.items()}
        for topic, partitions in response.topics:
            # v13+ names topics by id; a decoder that gives ids is mapped back to names.
            name = by_id.get(topic, str(topic)) if isinstance(topic, uuid.UUID) else topic
            for raw in partitions:
                tp = (name, raw.partition_index)
                asked = plan.partitions.get(tp)
                partition = self._partitions.get(tp)
                if asked is None or partition is None or partition.generation != asked.generation:
                    result.stale.append(tp)
                    continue
                log = self._logs(tp)
                if log is None or log.log_end_offset != asked.fetch_offset:
                    result.stale.append(tp)
                    continue
                self._apply_partition(partition, log, raw, result)
        return result

    def _apply_partition(
        self, partition: PartitionFetch, log: FollowerLog, raw: Any, result: ApplyResult
    ) -> None:
        tp = partition.tp
        error = raw.error_code
        if error == 0:
            try:
                if raw.diverging_epoch is not None:
                    target = self._reconcile(partition, log, *raw.diverging_epoch)
                    result.truncated[tp] = target
                    partition.generation += 1
                    return
                size = self._append(log, raw.records)
                if raw.high_watermark >= 0:
                    log.update_follower_high_watermark(raw.high_watermark)
                if raw.log_start_offset >= 0:
                    log.update_follower_log_start_offset(raw.log_start_offset)
            except _LOG_ERRORS as failure:
                self._log_failed(partition, failure, result)
                return
            partition.in_sync = raw.high_watermark <= log.log_end_offset  # KIP-73 hook
            if size and self.quota is not None and self.quota.is_throttled(*tp):
                self.quota.record(size)  # KIP-73 hook: fetched bytes count
            if size:
                result.appended_bytes[tp] = size
                partition.generation += 1
            partition.last_error = "NONE"
            return
        name = _error_name(error)
        result.errors[tp] = name
        if error == ErrorCode.offset_out_of_range:
            partition.leader_end_offset = None
            partition.last_error = name
            self._transition(partition, FetchState.TRUNCATING, "fetch offset out of range")
        elif error == ErrorCode.offset_moved_to_tiered_storage:
            partition.tier_target = None
            partition.last_error = name
            self._transition(partition, FetchState.TIERED, "fetch offset in remote storage")
        elif error == ErrorCode.fenced_leader_epoch:
            partition.last_error = name
            self._transition(partition, FetchState.FENCED, name)
        else:
            self._delay(partition, name)

    def tier_state_built(self, tp: TopicPartition, built: bool) -> None:
        """The broker's answer for ``ApplyResult.tiered``: fetch from the leader's local
        start, or (the remote metadata not there yet, a store error) ask again later."""
        partition = self._partitions.get(tp)
        if partition is None or partition.state is not FetchState.TIERED:
            return  # a new FetchStart meanwhile: it decides
        partition.tier_target = None
        if built:
            self._transition(partition, FetchState.FETCHING, "state built from remote storage")
        else:
            self._delay(partition, "OFFSET_MOVED_TO_TIERED_STORAGE")

    def _reconcile(
        self, partition: PartitionFetch, log: FollowerLog, epoch: int, leader_end: int
    ) -> int:
        """Truncate to the end of the last epoch both logs hold; returns the new log end."""
        end = log.log_end_offset
        if epoch < 0 or leader_end < 0:
            target = min(log.high_watermark, end)  # the leader knows no epoch (KIP-101)
        else:
            own_epoch, own_end = log.end_offset_for_epoch(epoch)
            if own_epoch < 0:  # the follower tracks no epoch: the leader's end (Kafka's too)
                target = min(leader_end, end)
            elif own_epoch != epoch:
                # The follower never had epoch E: its largest epoch below E ends at own_end,
                # and leader_end (the end of E on the leader) means nothing in this log —
                # it can fall inside one of its own divergent batches (Kafka's
                # AbstractFetcherThread: an intermediate truncation to min(own end, log end),
                # the next fetch names the older epoch and finds the real divergence).
                target = min(own_end, end)
            else:
                target = min(leader_end, own_end, end)
        target = max(target, 0)
        logger.info(
            "replica fetcher %d: %s-%d diverges from leader %d at epoch %d "
            "(leader's end %d): truncating from %d to %d",
            self.source_id,
            *partition.tp,
            partition.start.leader_id,
            epoch,
            leader_end,
            end,
            target,
        )
        log.truncate_to(target)
        return target

    def _log_failed(
        self, partition: PartitionFetch, failure: Exception, result: ApplyResult
    ) -> None:
        """The follower's log refused (bad data, a role change, an I/O error): back off."""
        logger.warning(
            "replica fetcher %d: %s-%d: %s: %s",
            self.source_id,
            *partition.tp,
            type(failure).__name__,
            failure,
        )
        self._delay(partition, "KAFKA_STORAGE_ERROR")
        result.errors[partition.tp] = "KAFKA_STORAGE_ERROR"

    @staticmethod
    def _append(log: FollowerLog, records: memoryview | None) -> int:
        """Append the whole batches of ``records``; a cut-off last batch is left for the
        next fetch (a fetch size limit may end mid-batch)."""
        if records is None or not len(records):
            return 0
        size = _whole_batches_size(records)
        if size == 0:
            raise ValueError(f"{len(records)} bytes hold no whole batch")
        log.append_as_follower(records[:size])
        return size

    # -- ListOffsets (out-of-range resets) -------------------------------------------
    def build_list_offsets(self, version: int) -> RequestPlan | None:
        """ListOffsets for TRUNCATING partitions: LATEST first, then EARLIEST (Kafka's
        out-of-range rule needs both, and one request may not name a partition twice)."""
        assert MIN_LIST_OFFSETS_VERSION <= version <= MAX_LIST_OFFSETS_VERSION, version
        self._wake_delayed()
        waiting = [
            p
            for p in self._partitions.values()
            if p.state is FetchState.TRUNCATING and self._logs(p.tp) is not None
        ]
        tiered = [
            p
            for p in self._partitions.values()
            if p.state is FetchState.TIERED
            and p.tier_target is None
            and self._logs(p.tp) is not None
        ]
        if not waiting and not tiered:
            return None
        latest = [p for p in waiting if p.leader_end_offset is None]
        if latest or waiting:
            members = latest or waiting
            timestamp = LATEST_TIMESTAMP if latest else EARLIEST_TIMESTAMP
        else:
            members, timestamp = tiered, EARLIEST_LOCAL_TIMESTAMP
        by_topic: dict[str, list[Any]] = {}
        sent: dict[TopicPartition, SentPartition] = {}
        for partition in members:
            log = self._logs(partition.tp)
            assert log is not None
            by_topic.setdefault(partition.tp[0], []).append(
                request_entity(
                    LIST_OFFSETS_KEY,
                    version,
                    "ListOffsetsPartition",
                    partition_index=partition.tp[1],
                    current_leader_epoch=partition.start.leader_epoch,
                    timestamp=timestamp,
                )
            )
            sent[partition.tp] = SentPartition(partition.generation, log.log_end_offset)
        request = request_entity(
            LIST_OFFSETS_KEY,
            version,
            replica_id=self.settings.replica_id,
            isolation_level=0,
            topics=tuple(
                request_entity(
                    LIST_OFFSETS_KEY, version, "ListOffsetsTopic", name=name, partitions=tuple(ps)
                )
                for name, ps in by_topic.items()
            ),
        )
        return RequestPlan(LIST_OFFSETS_KEY, version, request, sent, timestamp)

    def apply_list_offsets(self, plan: RequestPlan, response: Any) -> ApplyResult:
        """Apply a ListOffsets response (kio entity) by Kafka's out-of-range rule."""
        result = ApplyResult()
        for topic in response.topics:
            for answer in topic.partitions:
                tp = (topic.name, int(answer.partition_index))
                asked = plan.partitions.get(tp)
                partition = self._partitions.get(tp)
                log = self._logs(tp)
                if (
                    asked is None
                    or partition is None
                    or partition.generation != asked.generation
                    or log is None
                    or log.log_end_offset != asked.fetch_offset
                ):
                    result.stale.append(tp)
                    continue
                if answer.error_code != ErrorCode.none:
                    name = ErrorCode(answer.error_code).name.upper()
                    result.errors[tp] = name
                    if answer.error_code == ErrorCode.fenced_leader_epoch:
                        self._transition(partition, FetchState.FENCED, name)
                    else:
                        self._delay(partition, name)
                    continue
                if plan.timestamp == EARLIEST_LOCAL_TIMESTAMP:
                    if partition.state is FetchState.TIERED:
                        target = (int(answer.offset), int(answer.leader_epoch))
                        partition.tier_target = target
                        partition.generation += 1
                        result.tiered[tp] = target
                    continue
                try:
                    self._reset_out_of_range(
                        partition, log, plan.timestamp, int(answer.offset), result
                    )
                except _LOG_ERRORS as failure:
                    self._log_failed(partition, failure, result)
        return result

    def _reset_out_of_range(
        self,
        partition: PartitionFetch,
        log: FollowerLog,
        timestamp: int,
        offset: int,
        result: ApplyResult,
    ) -> None:
        end = log.log_end_offset
        if timestamp == LATEST_TIMESTAMP:
            if offset < end:
                # The leader's log ends below ours (an unclean election): its end is
                # the last offset both can hold.
                logger.warning(
                    "replica fetcher %d: %s-%d: leader %d ends at %d, below this "
                    "replica's %d: truncating",
                    self.source_id,
                    *partition.tp,
                    partition.start.leader_id,
                    offset,
                    end,
                )
                log.truncate_to(max(offset, 0))
                result.truncated[partition.tp] = max(offset, 0)
                self._transition(partition, FetchState.FETCHING, "reset to the leader's end")
            else:
                partition.leader_end_offset = offset
                partition.generation += 1  # EARLIEST is asked next
            return
        if offset > end:
            logger.info(
                "replica fetcher %d: %s-%d: leader %d starts at %d, past this replica's "
                "end %d: restarting the log there",
                self.source_id,
                *partition.tp,
                partition.start.leader_id,
                offset,
                end,
            )
            log.truncate_fully_and_start_at(offset)
            result.truncated[partition.tp] = offset
            partition.leader_end_offset = None
            self._transition(partition, FetchState.FETCHING, "offsets reset")
            return
        # Our end is within the leader's range after all (it moved meanwhile, or its
        # epoch history lacks ours): fetch again, after a backoff rather than at once,
        # so a leader that keeps answering OFFSET_OUT_OF_RANGE is not asked in a loop.
        partition.leader_end_offset = None
        self._transition(partition, FetchState.FETCHING, "offsets in range")
        self._delay(partition, "OFFSET_OUT_OF_RANGE")

    # -- failures --------------------------------------------------------------------
    def request_failed(self, plan: RequestPlan, error: str) -> None:
        """The request got no usable answer (connection lost, timeout): back off its
        partitions, unless they changed meanwhile."""
        for tp, asked in plan.partitions.items():
            partition = self._partitions.get(tp)
            if partition is not None and partition.generation == asked.generation:
                self._delay(partition, error)


# What a follower's log may raise: bad data, a partition that stopped following
# (replica-core's NotFollowerError is a StorageError), a failed write.
_LOG_ERRORS: Final = (StorageError, CodedError, ValueError, OSError)


def _known(code: int) -> bool:
    try:
        ErrorCode(code)
    except ValueError:
        return False
    return True


def _error_name(code: int) -> str:
    return ErrorCode(code).name.upper() if _known(code) else f"ERROR_{code}"


def _whole_batches_size(records: memoryview) -> int:
    """Bytes of ``records`` that form whole batches (size prefix walk, no decoding)."""
    position, total = 0, len(records)
    while total - position >= _LOG_OVERHEAD:
        (length,) = _BATCH_LENGTH.unpack_from(records, position + 8)
        if length < _MIN_BATCH - _LOG_OVERHEAD:
            raise ValueError(f"batch at byte {position} has length {length}")
        if position + _LOG_OVERHEAD + length > total:
            break
        position += _LOG_OVERHEAD + length
    return position

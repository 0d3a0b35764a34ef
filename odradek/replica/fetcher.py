"""Replica fetchers: the asyncio side of the follower, and the manager the ReplicaManager drives.

How this works and why: ``FetcherCore`` (fetcher_state.py) decides what to fetch and
what a response means; a ``ReplicaFetcher`` only moves its requests over one
connection to the source broker, as Kafka's ReplicaFetcherThread does for its
AbstractFetcherThread. Its task loops: ListOffsets for partitions resetting an
out-of-range offset (decoded by kio), else one Fetch for every fetching partition,
sent raw and parsed by ``protocol/fetch_codec.parse_fetch_response`` so the records
reach ``append_as_follower`` as a view of the received frame, never decoded or copied
by kio. The leader long-polls the fetch (``replica.fetch.wait.max.ms``), so the loop
never spins; when no partition is due (all backing off, or fenced) it sleeps until
the core's next wake-up or until a partition is added.

The connection goes to the source broker's inter-broker listener, looked up with
``endpoint(broker_id)`` each time it is (re)made, so a broker that re-registered on
another port is found. A connection that fails or times out
(``replica.socket.timeout.ms`` beyond the long poll) fails the request's partitions
into backoff and is made again after ``replica.fetch.backoff.ms``. Versions are the
highest both sides know: Fetch 12 (``diverging_epoch``) up to what the codec decodes,
ListOffsets 4 (``current_leader_epoch``) up to 8.

``ReplicaFetcherManager`` implements ``ReplicaFetching``: each partition goes to
fetcher (leader id, crc32(topic)·31 + partition mod ``num.replica.fetchers``) — a
stable hash, so a partition stays with its fetcher across restarts of the process. A
newer FetchStart for another leader moves the partition to that leader's fetcher; an
older one is ignored. A fetcher left with no partitions stops and is forgotten.
``close`` cancels every fetcher's task at once: shutdown does not wait for a long
poll to return.

Tiered storage (KIP-405): a partition the leader answers OFFSET_MOVED_TO_TIERED_STORAGE
gets its state built from remote storage by ``tier_state(tp, leader's local start,
its epoch)`` (the broker's: storage/remote/follower_state.py), awaited by the
fetcher between rounds, like Kafka's fetcher thread builds it; without one (tiering
disabled) the partition backs off and asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final

from odradek.client._core.connection import (
    API_VERSIONS_KEY,
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
)
from odradek.protocol import fetch_codec
from odradek.replica.fetcher_state import (
    FETCH_KEY,
    LIST_OFFSETS_KEY,
    MAX_FETCH_VERSION,
    MAX_LIST_OFFSETS_VERSION,
    MIN_FETCH_VERSION,
    MIN_LIST_OFFSETS_VERSION,
    FetcherCore,
    FetcherSettings,
    PartitionFetch,
    RequestPlan,
)
from odradek.replica.interfaces import FetchStart, FollowerLog, TopicPartition
from odradek.replica.replication_quota import ReplicationQuota

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials

logger = logging.getLogger(__name__)

CLIENT_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    API_VERSIONS_KEY: (0, 3),
    FETCH_KEY: (MIN_FETCH_VERSION, min(MAX_FETCH_VERSION, fetch_codec.MAX_VERSION)),
    LIST_OFFSETS_KEY: (MIN_LIST_OFFSETS_VERSION, MAX_LIST_OFFSETS_VERSION),
}
IDLE_WAIT_S: Final = 60.0  # nothing due and nothing scheduled: sleep until woken

Endpoint = Callable[[int], tuple[str, int] | None]
# (partition, the leader's local log start, its epoch) -> built (False: ask again later)
TierStateBuilder = Callable[[TopicPartition, int, int], Awaitable[bool]]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def fetcher_index(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a source broker's fetchers copies ``tp`` (stable across processes)."""
    return (zlib.crc32(tp[0].encode()) * 31 + tp[1]) % num_fetchers


class ReplicaFetcher:
    """One connection to one source broker and the partitions fetched over it."""

    def __init__(
        self,
        source_id: int,
        index: int,
        settings: FetcherSettings,
        *,
        endpoint: Endpoint,
        partition: Callable[[TopicPartition], FollowerLog | None],
        broker_epoch: Callable[[], int],
        socket_timeout_ms: int,
        clock: Callable[[], int] = monotonic_ms,
        quota: ReplicationQuota | None = None,
        tier_state: TierStateBuilder | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.source_id = source_id
        self.ssl_context = ssl_context  # a TLS inter-broker listener
        self.sasl = sasl  # a SASL inter-broker listener: this broker's login
        self._tier_state = tier_state
        self.index = index
        self.core = FetcherCore(source_id, settings, partition, clock, quota)
        self._settings = settings
        self._endpoint = endpoint
        self._broker_epoch = broker_epoch
        self._socket_timeout_s = socket_timeout_ms / 1000
        self._clock = clock
        self._connection: BrokerConnection | None = None
        self._connect_after_ms = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._failures = 0
        self.fetches = 0  # requests answered (tests and metrics)

    @property
    def name(self) -> str:
        return f"ReplicaFetcher-{self.core.settings.replica_id}-{self.source_id}-{self.index}"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def assign(self, tp: TopicPartition, start: FetchStart) -> None:
        if self.core.assign(tp, start):
            self._wake.set()
        if not self.running and not self._stopping:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        self.core.remove(tps)
        self._wake.set()

    def states(self) -> Mapping[TopicPartition, PartitionFetch]:
        return self.core.partitions

    async def close(self) -> None:
        # The flag as well as the cancellation: asyncio.wait_for (3.11) can swallow a
        # cancel that lands as the response arrives, and the loop must still end.
        self._stopping = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop_connection()

    # -- the loop --------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while len(self.core) and not self._stopping:
                if not self.core.has_work():
                    await self._sleep(self.core.next_wakeup_ms())
                    continue
                connection = await self._connect()
                if connection is None:
                    await self._sleep(self._connect_after_ms)
                    continue
                await self._round(connection)
        finally:
            await self._drop_connection()

    async def _build(self, tp: TopicPartition, local_start: int, epoch: int) -> bool:
        if self._tier_state is None:
            return False
        try:
            return await self._tier_state(tp, local_start, epoch)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the store or the metadata failing: ask again later
            logger.warning("%s: %s-%d: building from remote storage: %s", self.name, *tp, error)
            return False

    async def _sleep(self, until_ms: int | None) -> None:
        self._wake.clear()
        timeout = IDLE_WAIT_S if until_ms is None else max(until_ms - self._clock(), 0) / 1000
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _round(self, connection: BrokerConnection) -> None:
        plan: RequestPlan | None = None
        try:
            plan = self.core.build_list_offsets(connection.version_for(LIST_OFFSETS_KEY))
            if plan is not None:
                response = await connection.send(plan.request, timeout_s=self._socket_timeout_s)
                result = self.core.apply_list_offsets(plan, response)
                self.fetches += 1
                for tp, (local_start, epoch) in result.tiered.items():
                    self.core.tier_state_built(tp, await self._build(tp, local_start, epoch))
                return
            plan = self.core.build_fetch(connection.version_for(FETCH_KEY), self._broker_epoch())
            if plan is None:  # every fetching partition throttled (KIP-73): back off, as
                # Kafka's fetcher does on an empty request, then ask the quota again
                await self._sleep(self._clock() + self._settings.backoff_ms)
                return
            wait_s = self._settings.max_wait_ms / 1000
            frame = await connection.send(
                plan.request, timeout_s=self._socket_timeout_s + wait_s, raw=True
            )
            parsed = fetch_codec.parse_fetch_response(frame, plan.version)
            self.core.apply_fetch(plan, parsed)
            self.fetches += 1
            self._failures = 0
        except (KafkaConnectionError, OSError, fetch_codec.FetchParseError) as error:
            self._failed(plan, "NETWORK_EXCEPTION", error)
            await self._drop_connection()
        except UnsupportedVersionError as error:
            self._failed(plan, "UNSUPPORTED_VERSION", error)
            await self._drop_connection()
        except Exception as error:  # a bug: logged whole, the partitions back off
            logger.exception("%s: fetch round failed", self.name)
            self._failed(plan, "UNKNOWN_SERVER_ERROR", error)
            await self._drop_connection()

    def _failed(self, plan: RequestPlan | None, name: str, error: Exception) -> None:
        self._failures += 1
        log = logger.warning if self._failures == 1 else logger.debug
        log("%s: request to broker %d failed: %s", self.name, self.source_id, error)
        if plan is not None:
            self.core.request_failed(plan, name)
        self._connect_after_ms = self._clock() + self._settings.backoff_ms

    async def _connect(self) -> BrokerConnection | None:
        connection = self._connection
        if connection is not None and not connection.closed:
            return connection
        if self._clock() < self._connect_after_ms:
            return None
        address = self._endpoint(self.source_id)
        if address is None:
            self._failed(None, "BROKER_NOT_AVAILABLE", LookupError("no endpoint known"))
            return None
        connection = BrokerConnection(
            BrokerAddress(self.source_id, address[0], address[1]),
            client_id=self.name,
            request_timeout_s=self._socket_timeout_s,
            client_versions=CLIENT_VERSIONS,
            ssl_context=self.ssl_context,
            sasl=self.sasl,
        )
        try:
            await connection.connect()
        except (KafkaConnectionError, OSError) as error:
            self._failed(None, "NETWORK_EXCEPTION", error)
            return None
        self._connection = connection
        return connection

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()


class ReplicaFetcherManager:
    """``ReplicaFetching``: the fetchers of this node, ``num.replica.fetchers`` per source."""

    def __init__(
        self,
        settings: FetcherSettings,
        *,
        num_fetchers: int,
        socket_timeout_ms: int,
        endpoint: Endpoint,
        partition: Callable[[TopicPartition], FollowerLog | None],
        broker_epoch: Callable[[], int],
        clock: Callable[[], int] = monotonic_ms,
        quota: ReplicationQuota | None = None,
        tier_state: TierStateBuilder | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.settings = settings
        self.ssl_context = ssl_context  # for each fetcher: a TLS inter-broker listener
        self.sasl = sasl  # for each fetcher: a SASL inter-broker listener's login
        self.tier_state = tier_state  # KIP-405, set by the broker once it has the RLM
        self.quota = quota  # follower.replication.throttled.rate, shared by the fetchers
        self.num_fetchers = max(num_fetchers, 1)
        self._socket_timeout_ms = socket_timeout_ms
        self._endpoint = endpoint
        self._partition = partition
        self._broker_epoch = broker_epoch
        self._clock = clock
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[TopicPartition, tuple[FetchStart, tuple[int, int]]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.closed = False

    @property
    def fetchers(self) -> Mapping[tuple[int, int], ReplicaFetcher]:
        return self._fetchers

    def fetch_start(self, tp: TopicPartition) -> FetchStart | None:
        entry = self._assigned.get(tp)
        return None if entry is None else entry[0]

    def add_partitions(self, partitions: Mapping[TopicPartition, FetchStart]) -> None:
        if self.closed:
            return
        moved: dict[tuple[int, int], list[TopicPartition]] = {}
        for tp, start in partitions.items():
            current = self._assigned.get(tp)
            if current is not None and (
                start.leader_epoch < current[0].leader_epoch or start == current[0]
            ):
                continue  # stale or repeated
            key = (start.leader_id, fetcher_index(tp, self.num_fetchers))
            if current is not None and current[1] != key:
                moved.setdefault(current[1], []).append(tp)
            self._assigned[tp] = (start, key)
            fetcher = self._fetchers.get(key)
            if fetcher is None or (not fetcher.running and not len(fetcher.core)):
                fetcher = self._fetchers[key] = ReplicaFetcher(
                    key[0],
                    key[1],
                    self.settings,
                    endpoint=self._endpoint,
                    partition=self._partition,
                    broker_epoch=self._broker_epoch,
                    socket_timeout_ms=self._socket_timeout_ms,
                    clock=self._clock,
                    quota=self.quota,
                    tier_state=self.tier_state,
                    ssl_context=self.ssl_context,
                    sasl=self.sasl,
                )
            fetcher.assign(tp, start)
        for key, tps in moved.items():
            self._remove_from(key, tps)

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        by_fetcher: dict[tuple[int, int], list[TopicPartition]] = {}
        for tp in partitions:
            entry = self._assigned.pop(tp, None)
            if entry is not None:
                by_fetcher.setdefault(entry[1], []).append(tp)
        for key, tps in by_fetcher.items():
            self._remove_from(key, tps)

    def _remove_from(self, key: tuple[int, int], tps: list[TopicPartition]) -> None:
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            return
        fetcher.remove(tps)
        if not len(fetcher.core):
            del self._fetchers[key]
            task = asyncio.get_running_loop().create_task(fetcher.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self.closed = True
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._assigned.clear()
        await asyncio.gather(
            *(f.close() for f in fetchers), *list(self._closing), return_exceptions=True
        )

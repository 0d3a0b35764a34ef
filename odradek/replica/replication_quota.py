"""Replication quotas (KIP-73): byte-rate throttles on the leader's and the follower's side.

How this works and why: moving a replica (a reassignment, a broker back after a long
absence) copies a partition's whole log over the same links and disks clients use;
Kafka bounds that copy with two per-broker rates, ``leader.replication.throttled.rate``
(bytes a leader sends to followers) and ``follower.replication.throttled.rate`` (bytes
a follower fetches), applied only to the replicas two topic configs name:
``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas``,
each ``*`` or a list of ``partition:brokerId``. Broker B throttles partition p of
topic t as a leader when ``p:B`` (or ``*``) is in t's leader list, as a follower when
it is in t's follower list — so a reassignment throttles the current replicas (the
senders) and the adding ones (the receivers), nothing else.

The pieces, all sans-IO with the clock injected:

- ``SampledRate``: Kafka's windowed rate — ``replication.quota.window.num`` windows of
  ``replication.quota.window.size.seconds``; the rate is the bytes in the live windows
  over the time they span, counted as at least ``num - 1`` full windows, so a fresh
  quota is not exceeded by its first byte (the first ~``num - 1`` windows' worth of
  bytes goes at once, then the rate holds). Exceeded means the rate is above the bound.
- ``ReplicationQuota``: one side's rate and its throttled partitions per topic
  (Kafka's ReplicationQuotaManager): ``is_throttled``, ``is_quota_exceeded``,
  ``record``. A rate of Long.MAX (the default) is unthrottled.
- The two rules, as Kafka's replica manager and fetcher apply them. Replicas in sync
  are never throttled — holding them back would shrink the ISR and stall acks=all
  producers — so: the leader answers a follower's fetch of a throttled partition with
  no records (its watermarks, no error) while the leader quota is exceeded and that
  follower is not in the ISR (``should_leader_throttle``), and counts the bytes it
  sends for throttled partitions whether in sync or not (``throttled_bytes``); the
  follower leaves a throttled partition out of its Fetch while its quota is exceeded
  and it has not caught up with the leader's high watermark
  (``should_follower_throttle``), and counts what it appends for throttled partitions.
  A throttled partition thus still moves at the rate, never stops: the windows age
  and let the next fetch through.
- ``ReplicationQuotas``: the broker's three quotas (leader, follower, and
  ``replica.alter.log.dirs.io.max.bytes.per.second`` for AlterReplicaLogDirs' copies)
  rebuilt from a metadata image's configs — the rates from the dynamic broker configs
  (this node's over the cluster default over the static file), the throttled lists
  from every topic's configs — whenever a delta changes a config.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from odradek.replica.reads import FetchResults, PartitionRead

LONG_MAX: Final = 2**63 - 1
UNLIMITED: Final = LONG_MAX  # Kafka's default rate: no throttle
LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
WINDOW_NUM: Final = "replication.quota.window.num"
WINDOW_SIZE_SECONDS: Final = "replication.quota.window.size.seconds"
ALL_REPLICAS: Final = "*"

# Which partitions of a topic are throttled: every one, or a set of partition indexes.
Throttled = frozenset[int] | str


# -- the topic configs (checked by storage/log_config.py's parse_throttled_replicas) ----
def throttled_partitions(value: str, broker_id: int) -> Throttled:
    """The partitions a throttled-replicas value names on ``broker_id``."""
    text = value.strip()
    if text == ALL_REPLICAS:
        return ALL_REPLICAS
    found = set()
    for entry in text.split(","):
        partition, _, broker = entry.partition(":")
        if broker.strip().isdigit() and int(broker) == broker_id and partition.strip().isdigit():
            found.add(int(partition))
    return frozenset(found)


def replicas_value(replicas: Iterable[tuple[int, int]]) -> str:
    """``partition:broker`` pairs as a config value, sorted (the reassign tool's lists)."""
    return ",".join(f"{p}:{b}" for p, b in sorted(set(replicas)))


# -- the rate ------------------------------------------------------------------------
@dataclass(slots=True)
class _Window:
    start_ms: int
    value: float = 0.0


class SampledRate:
    """Bytes per second over ``samples`` windows of ``window_ms`` (module doc)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError(f"need at least one window of at least 1 ms: {samples}, {window_ms}")
        self.samples = samples
        self.window_ms = window_ms
        self._windows: list[_Window] = []

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self._windows or now_ms - self._windows[-1].start_ms >= self.window_ms:
            self._windows.append(_Window(now_ms))
            del self._windows[: -self.samples]
        self._windows[-1].value += value

    def rate(self, now_ms: int) -> float:
        """Bytes per second now: the live windows' total over their span, the span
        counted as at least ``samples - 1`` full windows."""
        self._purge(now_ms)
        total = sum(w.value for w in self._windows)
        if total == 0:
            return 0.0
        elapsed = now_ms - self._windows[0].start_ms
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return total * 1000 / max(elapsed, 1)

    def _purge(self, now_ms: int) -> None:
        """Forget windows that started ``samples`` windows or more ago."""
        horizon = now_ms - self.samples * self.window_ms
        while self._windows and self._windows[0].start_ms <= horizon:
            self._windows.pop(0)


# -- one side's quota ----------------------------------------------------------------
class ReplicationQuota:
    """A byte-rate bound and the partitions it applies to (Kafka's ReplicaQuota)."""

    def __init__(
        self,
        clock: Callable[[], int],
        *,
        rate: int = UNLIMITED,
        samples: int = 11,
        window_ms: int = 1000,
    ) -> None:
        self._clock = clock
        self._rate = SampledRate(samples, window_ms)
        self.bound = rate
        self._throttled: dict[str, Throttled] = {}

    @property
    def unlimited(self) -> bool:
        return self.bound >= UNLIMITED

    def update_rate(self, rate: int) -> None:
        self.bound = rate

    def mark_throttled(self, topic: str, partitions: Throttled) -> None:
        if partitions:
            self._throttled[topic] = partitions
        else:
            self._throttled.pop(topic, None)

    def set_throttled(self, throttled: Mapping[str, Throttled]) -> None:
        self._throttled = {t: p for t, p in throttled.items() if p}

    @property
    def has_throttled(self) -> bool:
        return bool(self._throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        found = self._throttled.get(topic)
        if found is None:
            return False
        return found == ALL_REPLICAS or partition in found

    def is_quota_exceeded(self) -> bool:
        if self.unlimited:
            return False
        return self._rate.rate(self._clock()) > self.bound

    def record(self, size: int) -> None:
        if size > 0:
            self._rate.record(size, self._clock())

    def rate(self) -> float:
        """The measured bytes per second (tests, logs)."""
        return self._rate.rate(self._clock())


# -- the two rules -------------------------------------------------------------------
def should_leader_throttle(
    quota: ReplicationQuota | None, topic: str, partition: int, isr: Iterable[int], replica: int
) -> bool:
    """The leader leaves this follower's fetch of the partition empty (module doc)."""
    return (
        quota is not None
        and replica not in isr
        and quota.is_throttled(topic, partition)
        and quota.is_quota_exceeded()
    )


def should_follower_throttle(
    quota: ReplicationQuota | None, topic: str, partition: int, in_sync: bool
) -> bool:
    """The follower leaves the partition out of its next Fetch (module doc)."""
    return (
        quota is not None
        and not in_sync
        and quota.is_throttled(topic, partition)
        and quota.is_quota_exceeded()
    )


def throttled_bytes(quota: ReplicationQuota, sizes: Iterable[tuple[str, int, int]]) -> int:
    """The bytes among (topic, partition, size) that count against ``quota``."""
    return sum(size for topic, index, size in sizes if quota.is_throttled(topic, index))


def leader_throttled(
    quota: ReplicationQuota | None,
    topic: str,
    partition: int,
    isr: Iterable[int],
    replica: int,
    read: PartitionRead,
) -> PartitionRead:
    """A follower's read as the leader answers it: ``read`` itself, or — throttled —
    the same watermarks and no records (not an error: the follower simply fetches the
    same offset again once the quota allows)."""
    if not read.ranges or not should_leader_throttle(quota, topic, partition, isr, replica):
        return read
    return replace(read, ranges=[])


def record_sent(quota: ReplicationQuota | None, results: FetchResults) -> None:
    """Count the bytes of throttled partitions in a follower's Fetch answer."""
    if quota is None or not quota.has_throttled:
        return
    quota.record(throttled_bytes(quota, ((t, i, r.size) for t, reads in results for i, r in reads)))


# -- the broker's quotas -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QuotaSettings:
    """replication.quota.window.num and replication.quota.window.size.seconds, with
    the static rates (the dynamic ones from the image take precedence)."""

    samples: int = 11
    window_seconds: int = 1
    static_rates: Mapping[str, int] | None = None


class ReplicationQuotas:
    """This broker's leader, follower and alter-log-dirs quotas, kept in step with the
    metadata image's configs (``apply``)."""

    def __init__(
        self, node_id: int, clock: Callable[[], int], settings: QuotaSettings | None = None
    ) -> None:
        settings = settings or QuotaSettings()
        self.node_id = node_id
        self.settings = settings
        window_ms = settings.window_seconds * 1000

        def quota() -> ReplicationQuota:
            return ReplicationQuota(clock, samples=settings.samples, window_ms=window_ms)

        self.leader = quota()
        self.follower = quota()
        self.alter_log_dirs = quota()

    def apply(
        self,
        broker_configs: Mapping[str, str],
        topic_configs: Mapping[str, Mapping[str, str]],
    ) -> None:
        """Rates from the broker's dynamic configs (merged cluster default then this
        node), throttled partitions from each topic's configs."""
        static = self.settings.static_rates or {}
        for name, quota in (
            (LEADER_RATE, self.leader),
            (FOLLOWER_RATE, self.follower),
            (ALTER_LOG_DIRS_RATE, self.alter_log_dirs),
        ):
            quota.update_rate(_rate(broker_configs.get(name), static.get(name, UNLIMITED)))
        for name, quota in ((LEADER_REPLICAS, self.leader), (FOLLOWER_REPLICAS, self.follower)):
            quota.set_throttled(
                {
                    topic: throttled_partitions(configs[name], self.node_id)
                    for topic, configs in topic_configs.items()
                    if configs.get(name)
                }
            )


def _rate(raw: str | None, default: int) -> int:
    """A rate config's value; one the controller accepted is a long >= 0, anything
    else (never expected) leaves the default rather than failing a metadata apply."""
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        return default
    return value if value >= 0 else default

"""Replication quotas (KIP-73), sans-IO on an injected clock.

- the windowed rate: bytes over the live windows' span, counted as at least
  ``num - 1`` windows, windows forgotten ``num`` windows on; a sender obeying the
  quota averages the bound over a minute;
- the throttled-replica lists: Kafka's syntax checked by LogConfig, ``*`` or the
  partitions named for this broker;
- the leader's rule on a real ReplicaManager: a throttled partition's fetch by a
  follower outside the ISR answers no records (watermarks, no error) while the quota
  is exceeded; an in-sync follower, a consumer and an unthrottled partition read as
  always; the bytes sent for throttled partitions are counted;
- the follower's rule on a real FetcherCore: a throttled partition is left out of the
  Fetch while the quota is exceeded and it has not caught up, included once the
  windows age, and never left out once in sync;
- the broker's quotas rebuilt from configs (rates per node over the cluster default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.replica.fetcher_state import FetcherCore, FetcherSettings
from odradek.replica.interfaces import FetchStart
from odradek.replica.partition import Partition
from odradek.replica.reads import FetchParams, FetchPosition, PartitionRead
from odradek.replica.replica_manager import ReplicaManager
from odradek.replica.replication_quota import (
    ALL_REPLICAS,
    UNLIMITED,
    QuotaSettings,
    ReplicationQuota,
    ReplicationQuotas,
    SampledRate,
    replicas_value,
    should_follower_throttle,
    should_leader_throttle,
    throttled_partitions,
)
from odradek.storage.errors import LogConfigError
from odradek.storage.log_config import LogConfig
from tests.replica.partition_support import F2, F3, LEADER, REPLICAS, batch, partition_on
from tests.replica.partition_support import new_log as partition_log
from tests.storage.conftest import FakeClock

from .fetcher_support import TOPIC, TOPIC_ID, TP, FollowerReplica, LeaderReplica, new_log, step

T0 = 1_700_000_000_000


# -- the rate ----------------------------------------------------------------------------
def test_rate_spans_at_least_num_minus_one_windows_and_forgets_old_ones() -> None:
    rate = SampledRate(11, 1000)
    assert rate.rate(T0) == 0.0
    rate.record(1000, T0)
    assert rate.rate(T0) == 100.0  # 1000 bytes over (11 - 1) windows, not over 0 s
    assert rate.rate(T0 + 5_000) == 100.0
    assert rate.rate(T0 + 10_500) == pytest.approx(1000 / 10.5)  # past 10 windows: real span
    assert rate.rate(T0 + 11_000) == 0.0  # the window is 11 windows old: forgotten
    rate.record(500, T0 + 11_000)
    rate.record(500, T0 + 11_999)  # same window
    rate.record(1000, T0 + 12_000)  # the next
    assert rate.rate(T0 + 12_000) == 200.0


def test_a_window_count_or_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        SampledRate(0, 1000)
    with pytest.raises(ValueError):
        SampledRate(11, 0)


def test_quota_is_exceeded_only_above_its_bound_and_unlimited_never() -> None:
    clock = FakeClock(T0)
    quota = ReplicationQuota(clock, rate=100)
    quota.record(1000)
    assert not quota.is_quota_exceeded()  # exactly 100 B/s
    quota.record(1)
    assert quota.is_quota_exceeded()
    clock.advance(11_000)
    assert not quota.is_quota_exceeded()
    quota.update_rate(UNLIMITED)
    quota.record(10**12)
    assert quota.unlimited and not quota.is_quota_exceeded()


@pytest.mark.parametrize(("bound", "chunk"), [(20_000, 10_000), (100_000, 65_536)])
def test_a_sender_obeying_the_quota_averages_its_bound(bound: int, chunk: int) -> None:
    """Every 100 ms a sender asks the quota and, if allowed, sends a chunk (as a leader
    answers fetches): over ten minutes it moves the bound per second, plus the first
    windows' burst and at most one chunk."""
    clock = FakeClock(T0)
    quota = ReplicationQuota(clock, rate=bound)
    sent, seconds = 0, 600
    for _ in range(seconds * 10):
        if not quota.is_quota_exceeded():
            quota.record(chunk)
            sent += chunk
        clock.advance(100)
    assert bound * seconds * 0.95 <= sent <= bound * (seconds + 10) * 1.02 + chunk


# -- the throttled-replica lists ---------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "stored"),
    [("", ""), ("*", "*"), (" 0:1 , 1:2", "0:1,1:2"), ("12:103", "12:103")],
)
def test_throttled_replica_lists_take_kafkas_syntax(raw: str, stored: str) -> None:
    config = LogConfig.from_properties(
        {
            "leader.replication.throttled.replicas": raw,
            "follower.replication.throttled.replicas": raw,
        }
    )
    assert config.leader_replication_throttled_replicas == stored
    assert config.follower_replication_throttled_replicas == stored


@pytest.mark.parametrize("raw", ["0-1", "a:1", "*,0:1", "0:1,", "0:1:2", "-1:2", "all"])
def test_a_bad_throttled_replica_list_is_invalid_config(raw: str) -> None:
    with pytest.raises(LogConfigError) as caught:
        LogConfig.from_properties({"leader.replication.throttled.replicas": raw})
    assert caught.value.code == "INVALID_CONFIG"
    assert "[partitionId]:[brokerId]" in str(caught.value)


def test_each_broker_throttles_the_partitions_named_for_it() -> None:
    value = "0:1, 1:2,2:1,3:3"
    assert throttled_partitions(value, 1) == frozenset({0, 2})
    assert throttled_partitions(value, 2) == frozenset({1})
    assert throttled_partitions(value, 4) == frozenset()
    assert throttled_partitions("*", 9) == ALL_REPLICAS
    assert throttled_partitions("", 1) == frozenset()
    assert replicas_value([(1, 3), (0, 2), (0, 1), (0, 2)]) == "0:1,0:2,1:3"


def test_the_two_rules_throttle_only_out_of_sync_throttled_replicas_over_quota() -> None:
    clock = FakeClock(T0)
    quota = ReplicationQuota(clock, rate=100)
    quota.mark_throttled("t", frozenset({0}))
    isr = (LEADER, F2)
    assert not should_leader_throttle(quota, "t", 0, isr, F3)  # not exceeded yet
    quota.record(10_000)
    assert should_leader_throttle(quota, "t", 0, isr, F3)
    assert not should_leader_throttle(quota, "t", 0, isr, F2)  # in the ISR
    assert not should_leader_throttle(quota, "t", 1, isr, F3)  # partition not listed
    assert not should_leader_throttle(quota, "u", 0, isr, F3)  # topic not listed
    assert not should_leader_throttle(None, "t", 0, isr, F3)
    assert should_follower_throttle(quota, "t", 0, in_sync=False)
    assert not should_follower_throttle(quota, "t", 0, in_sync=True)
    quota.mark_throttled("t", frozenset())
    assert not should_follower_throttle(quota, "t", 0, in_sync=False)


def test_the_brokers_quotas_follow_the_configs() -> None:
    clock = FakeClock(T0)
    quotas = ReplicationQuotas(
        2,
        clock,
        QuotaSettings(
            samples=5, window_seconds=2, static_rates={"leader.replication.throttled.rate": 7}
        ),
    )
    quotas.apply({}, {})
    assert (quotas.leader.bound, quotas.follower.bound) == (7, UNLIMITED)
    quotas.apply(
        {
            "leader.replication.throttled.rate": "1000",
            "follower.replication.throttled.rate": "2000",
            "replica.alter.log.dirs.io.max.bytes.per.second": "3000",
        },
        {
            "a": {"leader.replication.throttled.replicas": "0:1,0:2,1:2"},
            "b": {"follower.replication.throttled.replicas": "*"},
            "c": {"follower.replication.throttled.replicas": "0:1", "retention.ms": "5"},
        },
    )
    assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == (
        1000,
        2000,
        3000,
    )
    assert quotas.leader.is_throttled("a", 0) and quotas.leader.is_throttled("a", 1)
    assert not quotas.leader.is_throttled("b", 0)
    assert quotas.follower.is_throttled("b", 7) and quotas.follower.has_throttled
    assert not quotas.follower.is_throttled("c", 0)  # 0:1 is broker 1's
    quotas.apply({}, {})  # every config deleted: back to the static rates, nothing throttled
    assert quotas.leader.bound == 7 and quotas.follower.unlimited
    assert not quotas.leader.has_throttled and not quotas.follower.has_throttled


# -- the leader's rule on a ReplicaManager -----------------------------------------------
@pytest.fixture
def leader(
    tmp_path: Path,
) -> Iterator[tuple[ReplicaManager, Partition, ReplicationQuota, FakeClock]]:
    clock = FakeClock(T0)
    quota = ReplicationQuota(clock, rate=100)
    log = partition_log(tmp_path / "t-0")
    partition = partition_on(log)
    partition.become_leader(1, 0, REPLICAS, (LEADER, F2), now_ms=0)  # F3 is catching up
    manager = ReplicaManager(LEADER, None, leader_quota=quota)  # type: ignore[arg-type]
    manager.partitions[("t", 0)] = partition
    manager.append("t", 0, batch(b"x" * 2000), 1)
    yield manager, partition, quota, clock
    log.close()


def _fetch(manager: ReplicaManager, replica: int) -> PartitionRead:
    params = FetchParams(replica, 0, 1, 1 << 20, [("t", [(0, FetchPosition(0, 1 << 20))])])
    ((_, [(_, read)]),) = asyncio.run(manager.fetch(params))
    return read


def test_the_leader_answers_a_throttled_out_of_sync_follower_with_no_records(
    leader: tuple[ReplicaManager, Partition, ReplicationQuota, FakeClock],
) -> None:
    manager, _, quota, clock = leader
    quota.mark_throttled("t", ALL_REPLICAS)
    first = _fetch(manager, F3)
    assert first.size > 2000  # the quota was not exceeded: the batch goes
    assert quota.rate() == first.size / 10  # and is counted
    throttled = _fetch(manager, F3)
    assert throttled.error == "NONE" and throttled.size == 0
    assert throttled.high_watermark == first.high_watermark
    assert throttled.log_start_offset == 0
    assert _fetch(manager, F2).size == first.size  # in the ISR: never throttled
    clock.advance(11_000)  # the windows aged out
    assert _fetch(manager, F3).size == first.size


def test_the_leader_counts_only_throttled_partitions(
    leader: tuple[ReplicaManager, Partition, ReplicationQuota, FakeClock],
) -> None:
    manager, _, quota, _ = leader
    quota.mark_throttled("t", frozenset({1}))  # another partition of the topic
    for _ in range(3):
        assert _fetch(manager, F3).size > 2000
    assert quota.rate() == 0.0
    quota.mark_throttled("t", frozenset({0}))
    _fetch(manager, F2)  # an in-sync follower's bytes count, though never held back
    assert quota.rate() > 0


def test_a_throttled_partition_does_not_end_a_followers_long_poll(
    leader: tuple[ReplicaManager, Partition, ReplicationQuota, FakeClock],
) -> None:
    """Held back, the partition's bytes do not count toward min_bytes: the fetch waits
    its max_wait (as Kafka's DelayedFetch leaves throttled partitions out of its sum)
    and then answers with no records; a record appended meanwhile does not end it."""
    manager, _, quota, _ = leader
    quota.mark_throttled("t", ALL_REPLICAS)
    quota.record(10_000)
    params = FetchParams(F3, 300, 1, 1 << 20, [("t", [(0, FetchPosition(0, 1 << 20))])])

    async def run() -> tuple[float, PartitionRead]:
        loop = asyncio.get_running_loop()
        began = loop.time()
        fetching = asyncio.create_task(manager.fetch(params))
        await asyncio.sleep(0.05)
        manager.append("t", 0, batch(b"y"), 1)  # wakes the poll; still throttled
        ((_, [(_, read)]),) = await asyncio.wait_for(fetching, 30)
        return loop.time() - began, read

    waited, read = asyncio.run(run())
    assert read.error == "NONE" and read.size == 0
    assert waited >= 0.25  # the whole max_wait (300 ms, less the loop's timer slack)


# -- the follower's rule on a FetcherCore ------------------------------------------------
def test_the_follower_leaves_a_throttled_partition_out_until_the_windows_age(
    tmp_path: Path,
) -> None:
    """At 100 B/s a follower copying ~7 KB in one-batch fetches spends ~70 s doing it:
    each fetch waits until the windows have aged below the bound."""
    clock = FakeClock(T0)
    quota = ReplicationQuota(clock, rate=100)
    quota.mark_throttled(TOPIC, ALL_REPLICAS)
    source = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    source.become_leader(0)
    source.append(count=20, records=10)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    settings = FetcherSettings(replica_id=1, partition_max_bytes=400)
    core = FetcherCore(2, settings, lambda tp: follower if tp == TP else None, clock, quota)
    core.assign(TP, FetchStart(TOPIC_ID, 2, 0))
    result = step(core, source)
    assert result is not None
    moved = result.appended_bytes[TP]
    assert not quota.is_quota_exceeded()  # one batch, under 100 B/s over 10 windows
    quota.record(1000)  # another fetcher's throttled bytes: the quota is the broker's
    assert quota.is_quota_exceeded() and not core.partitions[TP].in_sync
    assert core.build_fetch(12, broker_epoch=5) is None  # left out while over quota
    started = clock()
    while follower.log_end_offset < source.log.log_end_offset:
        clock.advance(1000)
        result = step(core, source)
        if result is not None:
            moved += result.appended_bytes.get(TP, 0)
        assert clock() - started < 3_600_000, "no progress"
    elapsed_s = (clock() - started) / 1000
    assert moved > 5000
    assert (moved + 1000 - 100 * 10 - 400) / 100 <= elapsed_s <= (moved + 1000) / 100 * 1.2
    assert core.partitions[TP].in_sync
    # In sync now: more records go at once, over quota or not.
    source.append(count=3, records=10)
    assert quota.is_quota_exceeded()
    end = follower.log_end_offset
    assert step(core, source) is not None and follower.log_end_offset > end


def test_an_unthrottled_follower_ignores_the_quota(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    quota = ReplicationQuota(clock, rate=1)
    quota.mark_throttled("other", ALL_REPLICAS)
    source = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    source.become_leader(0)
    source.append(count=20, records=10)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    settings = FetcherSettings(replica_id=1, partition_max_bytes=600)
    core = FetcherCore(2, settings, lambda tp: follower if tp == TP else None, clock, quota)
    core.assign(TP, FetchStart(TOPIC_ID, 2, 0))
    for _ in range(100):
        if follower.log_end_offset == source.log.log_end_offset:
            break
        step(core, source)
    assert follower.log_end_offset == source.log.log_end_offset
    assert quota.rate() == 0.0

"""The replica fetcher's sans-IO core against real logs on both sides.

- catch-up copies the leader's batches byte for byte (segment files identical, across
  rolls and epochs) and the follower's high watermark follows the leader's;
- reconciliation on a diverging epoch in the seeds' two cases (seeds/000): a follower
  whose high watermark lags keeps the committed records above it ("Watermark 滞后"),
  and an old leader's uncommitted records are cut at the end of the last common epoch
  ("未提交数据不一致") — never at the high watermark;
- OFFSET_OUT_OF_RANGE follows Kafka's rule (leader's end below ours: truncate to it;
  leader's start past ours: restart the log there);
- OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405): the leader's local start and epoch are
  asked (ListOffsets EARLIEST_LOCAL) and handed to the broker's tier state builder;
  fetching resumes from there once built, or the question is asked again after a
  backoff;
- errors back off for replica.fetch.backoff.ms on an injected clock; FENCED_LEADER_EPOCH
  waits for newer metadata; a stale FetchStart is ignored; an answer to a superseded
  request is dropped;
- the requests are Kafka's: replica_id (v12) or replica_state (v15+), topic ids v13+,
  last_fetched_epoch, session 0 / epoch -1, and they encode with kio.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from odradek.protocol.fetch_codec import RawFetchResponse, RawPartition
from odradek.replica.fetcher_state import FetcherCore, FetcherSettings, FetchState
from odradek.replica.interfaces import FetchStart
from tests.storage.conftest import FakeClock

from .fetcher_support import (
    TOPIC,
    TOPIC_ID,
    TP,
    FollowerReplica,
    LeaderReplica,
    batch,
    batches_from,
    catch_up,
    log_bytes,
    new_log,
    step,
)

BACKOFF = 1000
LEADER_ID = 2


def make_core(follower: FollowerReplica, clock: FakeClock, **settings: int) -> FetcherCore:
    options = {"replica_id": 1, "backoff_ms": BACKOFF, **settings}
    core = FetcherCore(
        LEADER_ID,
        FetcherSettings(**options),
        lambda tp: follower if tp == TP else None,
        clock,
    )
    return core


def start(epoch: int) -> FetchStart:
    return FetchStart(TOPIC_ID, LEADER_ID, epoch)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.mark.parametrize("version", [12, 13, 15, 17])
def test_catch_up_makes_byte_identical_segments(
    tmp_path: Path, clock: FakeClock, version: int
) -> None:
    """At every Fetch version a follower may use: v13+ topics go by id both ways."""
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock, segment_bytes=4096), 0)
    for epoch in (0, 1, 3):
        leader.become_leader(epoch)
        leader.append(count=25, records=4)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock, segment_bytes=4096))
    core = make_core(follower, clock, partition_max_bytes=1500)
    core.assign(TP, start(3))
    catch_up(core, leader, follower, version=version)
    assert len(leader.log.segments) > 3  # the copy crossed segment rolls
    assert log_bytes(follower.log) == log_bytes(leader.log)
    assert follower.log.epoch_cache.entries == leader.log.epoch_cache.entries[:3]
    assert follower.high_watermark == leader.log.log_end_offset
    assert follower.truncations == []


def test_follower_high_watermark_follows_the_leaders(tmp_path: Path, clock: FakeClock) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=4)  # 12 records
    leader.high_watermark = 5
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    step(core, leader)
    assert follower.log_end_offset == 12
    assert follower.high_watermark == 5
    leader.high_watermark = 12
    step(core, leader)
    assert follower.high_watermark == 12


def test_watermark_lag_keeps_committed_records_above_the_followers_hw(
    tmp_path: Path, clock: FakeClock
) -> None:
    """seeds/000 "Watermark 滞后" (KIP-101 case 1): the follower holds offsets 0..8 of
    epoch 0 with its HW at 3 (the leader's last fetch response never arrived). The new
    leader (epoch 1) has the same 0..8: nothing of them may be dropped."""
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=3)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    for data in batches_from(leader.log, 0):
        follower.append_as_follower(data)
    follower.log.high_watermark = 3
    leader.become_leader(1)
    leader.append(count=2)
    core = make_core(follower, clock)
    core.assign(TP, start(1))
    catch_up(core, leader, follower)
    assert follower.truncations == []
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_uncommitted_records_of_an_old_leader_are_cut_at_the_last_common_epoch(
    tmp_path: Path, clock: FakeClock
) -> None:
    """seeds/000 "未提交数据不一致": the old leader (now a follower) wrote offsets 6..11
    in epoch 0 that never reached the new leader, which took over in epoch 1 with 0..5
    and wrote its own 6..14. The follower must drop exactly its 6..11 (its HW of 3 would
    have dropped committed 3..5 too, and keeping 6..11 would fork the partition)."""
    old = new_log(tmp_path / "follower" / "t-0", clock)
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=2)  # 0..5, replicated to both
    for data in batches_from(leader.log, 0):
        old.append_as_follower(data)
    old.append_as_leader(batch(3), 0)
    old.append_as_leader(batch(3), 0)  # 6..11 only on the old leader
    old.high_watermark = 3
    leader.become_leader(1)
    leader.append(count=3)  # 6..14 in epoch 1
    follower = FollowerReplica(old)
    core = make_core(follower, clock)
    core.assign(TP, start(1))
    first = step(core, leader)
    assert first is not None and first.truncated == {TP: 6}
    catch_up(core, leader, follower)
    assert follower.truncations == [6]
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_truncation_uses_the_followers_own_end_for_the_epoch(
    tmp_path: Path, clock: FakeClock
) -> None:
    """KIP-279: the leader knows epoch 1 ending at 9, the follower's epoch 1 ended at 6
    (then its own epoch 2): truncate to min(9, 6), not to the leader's 9."""
    follower_log = new_log(tmp_path / "follower" / "t-0", clock)
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=1)  # 0..2 in epoch 0
    leader.become_leader(1)
    leader.append(count=1)  # 3..5 in epoch 1
    for data in batches_from(leader.log, 0):
        follower_log.append_as_follower(data)
    follower_log.append_as_leader(batch(3), 2)  # 6..8 in epoch 2, only here
    leader.append(count=1)  # 6..8 in epoch 1 on the leader
    leader.become_leader(3)
    leader.append(count=1)
    follower = FollowerReplica(follower_log)
    core = make_core(follower, clock)
    core.assign(TP, start(3))
    first = step(core, leader)
    assert first is not None and first.truncated == {TP: 6}
    catch_up(core, leader, follower)
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_offset_out_of_range_below_the_leaders_start_restarts_the_log(
    tmp_path: Path, clock: FakeClock
) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock, segment_bytes=2048), 0)
    leader.become_leader(0)
    leader.append(count=30)
    leader.log.high_watermark = leader.log.log_end_offset
    leader.log.increment_log_start_offset(60)
    assert leader.log.log_start_offset == 60
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock, segment_bytes=2048))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    result = step(core, leader)
    assert result is not None and result.errors == {TP: "OFFSET_OUT_OF_RANGE"}
    assert core.partitions[TP].state is FetchState.TRUNCATING
    step(core, leader)  # LATEST: 90, not below our end
    step(core, leader)  # EARLIEST: 60, past our end 0
    assert follower.truncations == [60]
    assert follower.log_start_offset == 60
    assert core.partitions[TP].state is FetchState.FETCHING
    catch_up(core, leader, follower)
    assert batches_from(follower.log, 60) == batches_from(leader.log, 60)


def test_offset_out_of_range_above_the_leaders_end_truncates_to_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    """An unclean election: the leader's log ends below the follower's."""
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=2)
    follower_log = new_log(tmp_path / "follower" / "t-0", clock)
    for data in batches_from(leader.log, 0):
        follower_log.append_as_follower(data)
    follower_log.append_as_leader(batch(3), 0)  # 6..8, beyond the leader's end
    follower = FollowerReplica(follower_log)
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    plan = core.build_fetch(12, broker_epoch=5)
    assert plan is not None
    core.apply_fetch(plan, _error_response(ErrorCode.offset_out_of_range))
    assert core.partitions[TP].state is FetchState.TRUNCATING
    step(core, leader)  # LATEST: 6 < 9
    assert follower.truncations == [6]
    assert core.partitions[TP].state is FetchState.FETCHING
    catch_up(core, leader, follower)
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_offset_moved_to_tiered_storage_builds_from_the_leaders_local_start(
    tmp_path: Path, clock: FakeClock
) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock, segment_bytes=2048), 0)
    leader.become_leader(4)
    leader.append(count=30)
    leader.local_start = 45  # 0..44 are only in remote storage
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(4))
    result = step(core, leader)
    assert result is not None and result.errors == {TP: "OFFSET_MOVED_TO_TIERED_STORAGE"}
    assert core.partitions[TP].state is FetchState.TIERED
    plan = core.build_list_offsets(8)
    assert plan is not None and plan.timestamp == -4  # EARLIEST_LOCAL
    result = core.apply_list_offsets(plan, leader.list_offsets(plan))
    assert result.tiered == {TP: (45, 4)}
    assert not core.has_work()  # the builder runs; nothing is asked meanwhile
    # The remote metadata is not there yet: asked again after the backoff.
    core.tier_state_built(TP, False)
    assert core.partitions[TP].state is FetchState.DELAYED
    assert not core.has_work()
    clock.advance(BACKOFF)
    assert core.has_work() and core.partitions[TP].state is FetchState.TIERED
    result = step(core, leader)
    assert result is not None and result.tiered == {TP: (45, 4)}
    follower.truncate_fully_and_start_at(45)  # what the builder does (and more)
    core.tier_state_built(TP, True)
    assert core.partitions[TP].state is FetchState.FETCHING
    catch_up(core, leader, follower)
    assert batches_from(follower.log, 45) == batches_from(leader.log, 45)
    assert follower.truncations == [45]


def _error_response(code: int) -> RawFetchResponse:
    partition = RawPartition(0, code, -1, -1, -1, None, -1, None)
    return RawFetchResponse(1, 0, 0, 0, [(TOPIC, [partition])])


@pytest.mark.parametrize(
    "error", ["NOT_LEADER_OR_FOLLOWER", "UNKNOWN_LEADER_EPOCH", "UNKNOWN_TOPIC_ID"]
)
def test_errors_back_off_on_the_injected_clock(
    tmp_path: Path, clock: FakeClock, error: str
) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=2)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    leader.errors[0] = error
    result = step(core, leader)
    assert result is not None and result.errors == {TP: error}
    assert core.partitions[TP].state is FetchState.DELAYED
    assert core.next_wakeup_ms() == clock() + BACKOFF
    assert not core.has_work()
    clock.advance(BACKOFF - 1)
    assert core.build_fetch(12, 5) is None
    del leader.errors[0]
    clock.advance(1)
    assert core.has_work()
    catch_up(core, leader, follower)
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_a_new_fetch_start_ends_a_delay_at_once(tmp_path: Path, clock: FakeClock) -> None:
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    plan = core.build_fetch(12, 5)
    assert plan is not None
    core.apply_fetch(plan, _error_response(ErrorCode.not_leader_or_follower))
    assert core.partitions[TP].state is FetchState.DELAYED
    assert core.assign(TP, start(1))
    assert core.partitions[TP].state is FetchState.FETCHING
    assert core.build_fetch(12, 5) is not None


def test_fenced_leader_epoch_waits_for_newer_metadata(tmp_path: Path, clock: FakeClock) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(4)
    leader.append(count=2)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(3))  # this node has not yet seen epoch 4
    result = step(core, leader)
    assert result is not None and result.errors == {TP: "FENCED_LEADER_EPOCH"}
    assert core.partitions[TP].state is FetchState.FENCED
    clock.advance(10 * BACKOFF)
    assert core.next_wakeup_ms() is None
    assert core.build_fetch(12, 5) is None  # no retry: retrying cannot help
    assert not core.assign(TP, start(2))  # stale: ignored
    assert core.partitions[TP].state is FetchState.FENCED
    assert core.assign(TP, start(4))
    catch_up(core, leader, follower)
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_a_stale_fetch_start_is_ignored(tmp_path: Path, clock: FakeClock) -> None:
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    assert core.assign(TP, start(5))
    assert not core.assign(TP, start(4))
    assert not core.assign(TP, start(5))  # the same one again changes nothing
    assert core.partitions[TP].start.leader_epoch == 5
    plan = core.build_fetch(12, 5)
    assert plan is not None
    (topic,) = plan.request.topics
    assert topic.partitions[0].current_leader_epoch == 5


def test_an_answer_to_a_superseded_request_is_dropped(tmp_path: Path, clock: FakeClock) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(1)
    leader.append(count=2)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(1))
    plan = core.build_fetch(12, 5)
    assert plan is not None
    response = leader.fetch(plan)
    core.assign(TP, start(2))  # the metadata moved on while the fetch was out
    result = core.apply_fetch(plan, response)
    assert result.stale == [TP]
    assert follower.log_end_offset == 0
    core.remove([TP])
    assert core.apply_fetch(plan, response).stale == [TP]
    assert core.build_fetch(12, 5) is None


def test_a_cut_off_last_batch_waits_for_the_next_fetch(tmp_path: Path, clock: FakeClock) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=3)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    plan = core.build_fetch(12, 5)
    assert plan is not None
    whole = leader.fetch(plan)
    raw = whole.topics[0][1][0]
    assert raw.records is not None
    raw.records = raw.records[: len(raw.records) - 10]
    result = core.apply_fetch(plan, whole)
    assert result.errors == {}
    assert follower.log_end_offset == 6  # two whole batches of three
    catch_up(core, leader, follower)
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_a_corrupt_batch_backs_off(tmp_path: Path, clock: FakeClock) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=1)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    plan = core.build_fetch(12, 5)
    assert plan is not None
    response = leader.fetch(plan)
    raw = response.topics[0][1][0]
    assert raw.records is not None
    broken = bytearray(raw.records)
    broken[-1] ^= 0xFF  # the CRC no longer matches
    raw.records = memoryview(bytes(broken))
    result = core.apply_fetch(plan, response)
    assert result.errors == {TP: "KAFKA_STORAGE_ERROR"}
    assert follower.log_end_offset == 0
    assert core.partitions[TP].state is FetchState.DELAYED


def test_a_failed_request_delays_its_partitions(tmp_path: Path, clock: FakeClock) -> None:
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    plan = core.build_fetch(12, 5)
    assert plan is not None
    core.request_failed(plan, "NETWORK_EXCEPTION")
    assert core.partitions[TP].state is FetchState.DELAYED
    assert core.partitions[TP].last_error == "NETWORK_EXCEPTION"


@pytest.mark.parametrize("version", [12, 13, 14, 15, 16, 17])
def test_requests_carry_kafkas_follower_fields(
    tmp_path: Path, clock: FakeClock, version: int
) -> None:
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(2)
    leader.append(count=2)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    for data in batches_from(leader.log, 0):
        follower.append_as_follower(data)
    core = make_core(
        follower, clock, max_wait_ms=250, min_bytes=7, max_bytes=9000, partition_max_bytes=3000
    )
    core.assign(TP, start(2))
    plan = core.build_fetch(version, broker_epoch=42)
    assert plan is not None
    request = plan.request
    assert request.__version__ == version
    if version >= 15:
        assert request.replica_state.replica_id == 1
        assert request.replica_state.replica_epoch == 42
    else:
        assert request.replica_id == 1
    assert request.max_wait.total_seconds() == 0.25
    assert (request.min_bytes, request.max_bytes) == (7, 9000)
    assert (request.session_id, request.session_epoch) == (0, -1)
    (topic,) = request.topics
    if version >= 13:
        assert topic.topic_id == TOPIC_ID
    else:
        assert topic.topic == TOPIC
    (partition,) = topic.partitions
    assert partition.fetch_offset == 6
    assert partition.last_fetched_epoch == 2
    assert partition.current_leader_epoch == 2
    assert partition.log_start_offset == 0
    assert partition.partition_max_bytes == 3000
    if version >= 17:
        assert partition.replica_directory_id is None  # KIP-853's tag: left out
    buffer = io.BytesIO()
    entity_writer(type(request))(buffer, request)  # kio can put it on the wire
    assert buffer.getvalue()


def test_an_empty_follower_sends_no_last_fetched_epoch(tmp_path: Path, clock: FakeClock) -> None:
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    plan = core.build_fetch(12, 5)
    assert plan is not None
    assert plan.request.topics[0].partitions[0].last_fetched_epoch == -1


def test_a_partition_without_a_log_is_delayed(tmp_path: Path, clock: FakeClock) -> None:
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(("other", 0), start(0))
    assert core.build_fetch(12, 5) is None
    assert core.partitions[("other", 0)].state is FetchState.DELAYED


def test_an_out_of_range_answer_for_an_offset_in_range_backs_off(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The leader says OFFSET_OUT_OF_RANGE, yet its start <= our end <= its end: nothing
    to truncate, and the next fetch waits a backoff instead of looping at once."""
    leader = LeaderReplica(new_log(tmp_path / "leader" / "t-0", clock), 0)
    leader.become_leader(0)
    leader.append(count=2)
    follower = FollowerReplica(new_log(tmp_path / "follower" / "t-0", clock))
    core = make_core(follower, clock)
    core.assign(TP, start(0))
    plan = core.build_fetch(12, broker_epoch=5)
    assert plan is not None
    core.apply_fetch(plan, _error_response(ErrorCode.offset_out_of_range))
    step(core, leader)  # LATEST 6 >= 0
    step(core, leader)  # EARLIEST 0 <= 0
    assert follower.truncations == []
    assert core.partitions[TP].state is FetchState.DELAYED
    assert core.build_fetch(12, 5) is None
    clock.advance(BACKOFF)
    catch_up(core, leader, follower)
    assert log_bytes(follower.log) == log_bytes(leader.log)


def test_request_classes_are_kios_for_every_version() -> None:
    """The follower's cached class lookup names the same kio classes as kio's index,
    for every Fetch and ListOffsets version a fetcher may send."""
    from kio.index import load_payload_module, load_request_schema
    from kio.static.constants import EntityType

    from odradek.replica.fetcher_state import (
        FETCH_KEY,
        LIST_OFFSETS_KEY,
        MAX_FETCH_VERSION,
        MAX_LIST_OFFSETS_VERSION,
        MIN_FETCH_VERSION,
        MIN_LIST_OFFSETS_VERSION,
        _entity_class,
    )

    for key, low, high, nested in (
        (FETCH_KEY, MIN_FETCH_VERSION, MAX_FETCH_VERSION, "FetchPartition"),
        (LIST_OFFSETS_KEY, MIN_LIST_OFFSETS_VERSION, MAX_LIST_OFFSETS_VERSION, "ListOffsetsTopic"),
    ):
        for version in range(low, high + 1):
            assert _entity_class(key, version, "") is load_request_schema(key, version)
            module = load_payload_module(key, version, EntityType.request)
            assert _entity_class(key, version, nested) is getattr(module, nested)

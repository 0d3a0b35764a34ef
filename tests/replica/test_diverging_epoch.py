"""Reconciliation from the leader's side (KIP-101, KIP-279; Fetch v12+ diverging epoch).

Two logs with different epoch histories, as in seeds/000:

- "Watermark 滞后": the follower had every record but an HW that lagged. It does not
  truncate to its HW; it fetches with its last epoch, the leader finds no divergence,
  and nothing acknowledged is lost.
- "未提交数据不一致": the old leader wrote a record no one else had; the new leader
  wrote a different one at the same offset in a later epoch. The old leader, now a
  follower, is told the diverging epoch, truncates to its end, and ends byte-identical.
"""

from __future__ import annotations

from pathlib import Path

from odradek.replica.partition import Partition
from tests.replica.partition_support import (
    F2,
    LEADER,
    batch,
    follower_fetch,
    new_log,
    partition_on,
    records_bytes,
)

REPLICAS = (LEADER, F2)
T0 = 1_700_000_000_000  # the same m0 on both: what both got from one leader


def _leader_with(tmp_path: Path, history: list[tuple[bytes, int]], epoch: int) -> Partition:
    log = new_log(tmp_path / "leader" / "t-0")
    for value, batch_epoch in history:
        log.append_as_leader(batch(value, timestamp=T0), batch_epoch)
    partition = partition_on(log)
    partition.become_leader(epoch, 0, REPLICAS, REPLICAS, now_ms=0)
    return partition


def _follower_with(tmp_path: Path, history: list[tuple[bytes, int]], epoch: int) -> Partition:
    log = new_log(tmp_path / "follower" / "t-0")
    for value, batch_epoch in history:
        log.append_as_leader(batch(value, timestamp=T0), batch_epoch)
    partition = partition_on(log, local_id=F2)
    partition.become_follower(LEADER, epoch, 0, REPLICAS, REPLICAS)
    return partition


def test_watermark_lag_loses_nothing(tmp_path: Path) -> None:
    # Both have m0 and m1 from epoch 0; the follower's HW was 1 when it restarted.
    leader = _leader_with(tmp_path, [(b"m0", 0), (b"m1", 0)], epoch=1)
    follower = _follower_with(tmp_path, [(b"m0", 0), (b"m1", 0)], epoch=1)
    follower.log.high_watermark = 1
    read = follower_fetch(
        leader, F2, follower.log_end_offset, 1, last_fetched_epoch=follower.latest_epoch() or 0
    )
    assert read.error == "NONE" and read.diverging_epoch is None
    assert follower.log_end_offset == 2  # m1 kept: truncating to the HW would have lost it
    assert leader.high_watermark == 2  # and the leader counts it as replicated


def test_uncommitted_divergence_is_truncated_to_the_last_common_epoch(tmp_path: Path) -> None:
    # The old leader (now follower) wrote m1 in epoch 0 that no one else had; the new
    # leader wrote n1 at offset 1 in epoch 1.
    leader = _leader_with(tmp_path, [(b"m0", 0), (b"n1", 1)], epoch=1)
    follower = _follower_with(tmp_path, [(b"m0", 0), (b"m1", 0)], epoch=1)
    read = follower_fetch(leader, F2, 2, 1, last_fetched_epoch=0)
    assert read.diverging_epoch == (0, 1) and read.ranges == []
    assert leader.high_watermark == 0  # a diverging fetch is not a position report
    epoch, end = read.diverging_epoch
    follower.truncate_to(min(end, follower.end_offset_for_epoch(epoch)[1]))
    assert follower.log_end_offset == 1
    again = follower_fetch(leader, F2, 1, 2, last_fetched_epoch=0)
    assert again.diverging_epoch is None
    follower.append_as_follower(records_bytes(again))
    follower.update_follower_high_watermark(again.high_watermark)
    assert list(follower.log.read_batches(0)) == list(leader.log.read_batches(0))
    follower_fetch(leader, F2, 2, 3, last_fetched_epoch=1)
    assert leader.high_watermark == 2


def test_a_follower_that_knows_an_epoch_the_leader_never_had_diverges(tmp_path: Path) -> None:
    # The leader has epochs 0 and 3; the follower's last batch is from epoch 2, which
    # this leader never saw: (0, start of 3) is where they last agree.
    leader = _leader_with(tmp_path, [(b"a", 0), (b"b", 0), (b"c", 3)], epoch=3)
    read = follower_fetch(leader, F2, 3, 1, last_fetched_epoch=2)
    assert read.diverging_epoch == (0, 2)


def test_a_last_fetched_epoch_above_the_leader_s_is_out_of_range(tmp_path: Path) -> None:
    leader = _leader_with(tmp_path, [(b"a", 0)], epoch=1)
    assert follower_fetch(leader, F2, 1, 1, last_fetched_epoch=5).error == "OFFSET_OUT_OF_RANGE"


def test_an_epoch_led_without_records_is_forgotten_at_the_log_end(tmp_path: Path) -> None:
    # The chaos harness's loop (seed 7104): this replica became leader in epoch 2 at
    # offset 2 (its cache got 2@2) and lost the lead before appending anything; the new
    # leader never had epoch 2 and leads epoch 3 from offset 2. The follower's first
    # fetch names epoch 2; the leader answers the divergence at the end of epoch 0,
    # offset 2 — the follower's own log end. Truncating "to" its log end must still drop
    # the empty epoch, else every later fetch names epoch 2 and loops on the same answer.
    leader = _leader_with(tmp_path, [(b"m0", 0), (b"m1", 0)], epoch=3)
    follower = _follower_with(tmp_path, [(b"m0", 0), (b"m1", 0)], epoch=3)
    follower.log.epoch_cache.assign(2, 2)  # what become_leader(2) wrote at the log end
    assert follower.latest_epoch() == 2
    read = follower_fetch(leader, F2, 2, 1, last_fetched_epoch=2)
    assert read.diverging_epoch == (0, 2)
    epoch, end = read.diverging_epoch
    follower.truncate_to(min(end, follower.end_offset_for_epoch(epoch)[1]))
    assert follower.log_end_offset == 2  # nothing to remove ...
    assert follower.latest_epoch() == 0  # ... but the empty epoch is gone
    again = follower_fetch(leader, F2, 2, 2, last_fetched_epoch=follower.latest_epoch() or 0)
    assert again.diverging_epoch is None and again.error == "NONE"

"""A follower built from remote storage (follower_state.py): the leader copied its
rolled segments; an empty follower restarts at the leader's local start with the
epochs and producer state of the remote segment ending just below it, the log start
at the remote start, and then appends the leader's batches from there; a local start
inside a remote segment restarts at that segment's end; with no segment holding the
offset below it, it waits (False)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.storage.remote.follower_state import (
    build_follower_state,
    parse_epoch_checkpoint,
    segment_ending_before,
)
from odradek.storage.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from tests.storage.conftest import FakeClock, make_batch
from tests.storage.remote.test_log_manager import TP, inactive_ranges, new_log, new_manager


def test_an_empty_follower_restarts_at_the_leaders_local_start(
    tmp_path: Path, clock: FakeClock
) -> None:
    leader = new_log(tmp_path / "leader", clock)
    sequence = 0
    for epoch in (1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3):
        for _ in range(2):
            # An idempotent producer writes the first part only: its state at the
            # follower's restart comes from the remote producer snapshot alone.
            idempotent = sequence < 40
            ids = {"producer_id": 77, "producer_epoch": 0, "base_sequence": sequence}
            leader.append_as_leader(
                make_batch(5, size=40, **(ids if idempotent else {})), leader_epoch=epoch
            )
            sequence += 5
    leader.high_watermark = leader.log_end_offset
    rlm = new_manager(tmp_path, clock, leader)
    asyncio.run(rlm.run_once())
    ranges = inactive_ranges(leader)
    assert rlm.rlmm.list_remote_log_segments(TP)  # copied
    local_start = ranges[2][1] + 1  # as if local retention deleted three segments
    follower = new_log(tmp_path / "follower", clock)

    built = asyncio.run(build_follower_state(rlm.rlmm, rlm.rsm, TP, follower, local_start, 3))
    assert built
    assert follower.log_end_offset == follower.local_log_start_offset == local_start
    assert follower.log_start_offset == 0  # the remote start
    assert follower.high_watermark == local_start
    assert follower.highest_offset_in_remote == ranges[-1][1]
    expected = [
        (e.epoch, e.start_offset)
        for e in leader.epoch_cache.entries
        if e.start_offset < local_start
    ]
    assert [(e.epoch, e.start_offset) for e in follower.epoch_cache.entries] == expected
    restored = follower.producer_state.producers[77]
    assert restored.last_seq == leader.producer_state.producers[77].last_seq == 39
    # Then it appends the leader's batches from there, as a fetch brings them.
    for data in leader.read_batches(local_start):
        follower.append_as_follower(data)
    assert list(follower.read_batches(local_start)) == list(leader.read_batches(local_start))
    assert follower.epoch_cache.entries == leader.epoch_cache.entries

    # A leader whose local log starts inside a remote segment (that segment was copied
    # by a later leader): the follower starts at that segment's end.
    other = new_log(tmp_path / "other", clock)
    inside = ranges[1][0] + 3
    assert asyncio.run(build_follower_state(rlm.rlmm, rlm.rsm, TP, other, inside, 3))
    assert other.log_end_offset == ranges[1][1] + 1
    # Nothing remote holds the offset below the leader's local start (yet): False.
    past = new_log(tmp_path / "past", clock)
    beyond = ranges[-1][1] + 10
    assert not asyncio.run(build_follower_state(rlm.rlmm, rlm.rsm, TP, past, beyond, 3))
    assert past.log_end_offset == 0
    rlm.close()


def test_the_segment_on_the_leaders_lineage_is_chosen() -> None:
    def seg(start: int, end: int, epochs: dict[int, int], ts: int) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(TP), start, end, 0, 1, ts, 10, epochs
        )

    old = seg(0, 99, {1: 0}, 1)
    diverged = seg(50, 99, {1: 50, 5: 60}, 2)  # an epoch the leader never had
    overlap = seg(40, 99, {1: 40, 2: 70}, 3)
    assert segment_ending_before([old, diverged, overlap], 100, 2) is overlap
    assert segment_ending_before([old, diverged], 100, 2) is old
    assert segment_ending_before([old], 50, 2) is old  # holds 49: restart at 100
    assert segment_ending_before([old], 150, 2) is None
    assert parse_epoch_checkpoint(b"0\n2\n1 0\n2 70\n") == [(1, 0), (2, 70)]

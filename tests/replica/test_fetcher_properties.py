"""Reconciliation as a property: any two histories that share a prefix end identical.

Hypothesis draws a common prefix of epochs and batches, then two divergent suffixes — the
follower's (an old leader's unreplicated writes) and the leader's — in epochs only one
of them led (an epoch has one leader; a leader may have lost the lead before it appended
anything, leaving only its epoch at its log end), and the leader's current epoch above
them all.
After the fetcher has run, the follower's segment files equal the leader's byte for
byte, it never cut into the common prefix (it truncates to the end of the last common
epoch, not further), and catching up took a bounded number of rounds.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.replica.fetcher_state import FetcherCore, FetcherSettings
from odradek.replica.interfaces import FetchStart
from odradek.storage.log import Log
from tests.storage.conftest import FakeClock

from .fetcher_support import (
    TOPIC_ID,
    TP,
    FollowerReplica,
    LeaderReplica,
    batch,
    batches_from,
    catch_up,
    log_bytes,
    new_log,
)

Run = tuple[int, list[int]]  # (epoch, record counts of its batches; none: led, no write)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Run], list[Run], list[Run], int, int]:
    counts = st.lists(st.integers(1, 5), min_size=1, max_size=3)
    prefix_epochs = sorted(draw(st.sets(st.integers(0, 6), max_size=3)))
    prefix = [(epoch, draw(counts)) for epoch in prefix_epochs]
    last = prefix_epochs[-1] if prefix_epochs else -1
    later = sorted(draw(st.sets(st.integers(last + 1, last + 8), max_size=4)))
    owners = draw(st.lists(st.booleans(), min_size=len(later), max_size=len(later)))
    led = st.lists(st.integers(1, 5), min_size=0, max_size=3)  # [] = led, wrote nothing
    follower = [(e, draw(led)) for e, mine in zip(later, owners, strict=True) if mine]
    leader = [(e, draw(led)) for e, mine in zip(later, owners, strict=True) if not mine]
    # The last prefix epoch's leader may have gone on writing in it: on one side only.
    continuing = draw(st.sampled_from(["none", "follower", "leader"])) if last >= 0 else "none"
    if continuing == "follower":
        follower.insert(0, (last, draw(counts)))
    elif continuing == "leader":
        leader.insert(0, (last, draw(counts)))
    current = max([last, *later]) + 1
    segment_bytes = draw(st.sampled_from([600, 1200, 1 << 20]))
    return prefix, follower, leader, current, segment_bytes


def _write(log: Log, runs: list[Run]) -> None:
    for epoch, batch_sizes in runs:
        if not batch_sizes:  # became leader (the epoch at the log end), then lost it
            log.epoch_cache.assign(epoch, log.log_end_offset)
        for count in batch_sizes:
            log.append_as_leader(batch(count, size=30), epoch)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    history=histories(),
    partition_max_bytes=st.sampled_from([100, 700, 1 << 20]),
    new_writes=st.integers(0, 3),
)
def test_divergent_histories_reconcile_to_the_leaders_bytes(
    history: tuple[list[Run], list[Run], list[Run], int, int],
    partition_max_bytes: int,
    new_writes: int,
) -> None:
    prefix, follower_runs, leader_runs, current, segment_bytes = history
    root = Path(tempfile.mkdtemp(prefix="fetcher-prop-"))
    try:
        clock = FakeClock()
        leader_log = new_log(root / "leader" / "t-0", clock, segment_bytes=segment_bytes)
        follower_log = new_log(root / "follower" / "t-0", clock, segment_bytes=segment_bytes)
        _write(leader_log, prefix)
        for data in batches_from(leader_log, 0):
            follower_log.append_as_follower(data)
        prefix_end = leader_log.log_end_offset
        follower_log.high_watermark = prefix_end // 2  # a lagging HW must not matter
        _write(follower_log, follower_runs)
        _write(leader_log, leader_runs)
        leader = LeaderReplica(leader_log, 0)
        leader.become_leader(current)
        leader.append(count=new_writes)
        follower = FollowerReplica(follower_log)
        core = FetcherCore(
            2,
            FetcherSettings(replica_id=1, partition_max_bytes=partition_max_bytes),
            lambda tp: follower if tp == TP else None,
            clock,
        )
        core.assign(TP, FetchStart(TOPIC_ID, 2, current))
        catch_up(core, leader, follower, rounds=2000)
        assert log_bytes(follower.log) == log_bytes(leader.log)
        # Epochs holding records agree; one at the log end holds none (a follower that
        # led an epoch without writing keeps it until a record supersedes it — Kafka's
        # cache does the same when the leader finds no divergence).
        end = leader_log.log_end_offset
        assert [e for e in follower.log.epoch_cache.entries if e.start_offset < end] == [
            e for e in leader.log.epoch_cache.entries if e.start_offset < end
        ]
        assert all(offset >= prefix_end for offset in follower.truncations)
        follower.log.close()
        leader.log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

"""Property: under any sequence of appends, follower fetches, ISR changes and elections,
the leader's high watermark never decreases and never exceeds the log end offset of
any member of the ISR, or of a replica a pending proposal adds to it (the followers'
real log ends, which the leader only learns from their fetches) — so nothing counted
as committed is missing from an ISR member.

ISR changes come the ways a leader sees them: its own proposals (shrink after the lag
time, expand at the HW) accepted or refused by the controller, the controller removing
a replica (a fenced broker) in a newer partition epoch, and re-election in a new
leader epoch, which forgets the followers' positions.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.replica.interfaces import IsrOutcome
from tests.replica.partition_support import F2, F3, LEADER, REPLICAS, batch, partition_on

FOLLOWERS = (F2, F3)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("replicate"), st.sampled_from(FOLLOWERS), st.integers(0, 4)),
        st.tuples(st.just("tick"), st.integers(0, 1_500)),
        st.tuples(st.just("outcome"), st.sampled_from(["NONE", "INVALID_UPDATE_VERSION"])),
        st.tuples(st.just("not_attempted")),
        st.tuples(st.just("fence"), st.sampled_from(FOLLOWERS)),
        st.tuples(st.just("reelect")),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(LEADER,), (LEADER, F2), REPLICAS]), ops)
def test_hw_never_decreases_nor_passes_an_isr_member(
    isr: tuple[int, ...], steps: list[tuple[object, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        from odradek.storage.log_config import LogConfig
        from odradek.storage.log_loader import open_log

        log, _ = open_log(Path(directory) / "t-0", LogConfig())
        try:
            _run(log, isr, steps)
        finally:
            log.close()


def _run(log: object, isr: tuple[int, ...], steps: list[tuple[object, ...]]) -> None:
    from odradek.storage.log import Log

    assert isinstance(log, Log)
    partition = partition_on(log, lag_ms=1_000)
    now = 0
    leader_epoch, partition_epoch = 1, 0
    partition.become_leader(leader_epoch, partition_epoch, REPLICAS, isr, now)
    real = dict.fromkeys(FOLLOWERS, 0)  # each follower's actual log end offset
    last_hw = partition.high_watermark
    for step in steps:
        kind = step[0]
        if kind == "append":
            partition.append_as_leader(batch(*[b"v"] * int(step[1])), 1)  # type: ignore[call-overload]
        elif kind == "replicate":
            replica, count = int(step[1]), int(step[2])  # type: ignore[call-overload]
            real[replica] = min(partition.log_end_offset, real[replica] + count)
            partition.update_follower_fetch_state(replica, real[replica], 1, now)
        elif kind == "tick":
            now += int(step[1])  # type: ignore[call-overload]
            partition.maybe_shrink_isr(now)
        elif kind == "outcome" and partition.pending is not None:
            sent = partition.take_proposal() or partition.pending
            if step[1] == "NONE":
                partition_epoch = max(partition_epoch, partition.partition_epoch) + 1
                accepted = IsrOutcome("NONE", LEADER, leader_epoch, partition_epoch, sent.new_isr)
                partition.on_isr_outcome(sent, accepted)
            else:
                partition.on_isr_outcome(sent, IsrOutcome(str(step[1])))
        elif kind == "not_attempted" and partition.pending is not None:
            sent = partition.take_proposal() or partition.pending
            partition.on_isr_outcome(sent, IsrOutcome("OPERATION_NOT_ATTEMPTED"))
        elif kind == "fence":
            partition_epoch = max(partition_epoch, partition.partition_epoch) + 1
            isr = tuple(r for r in partition.isr if r != step[1])
            partition.become_leader(leader_epoch, partition_epoch, REPLICAS, isr, now)
        elif kind == "reelect":
            leader_epoch += 1
            partition_epoch = max(partition_epoch, partition.partition_epoch) + 1
            partition.become_leader(leader_epoch, partition_epoch, REPLICAS, partition.isr, now)
        hw = partition.high_watermark
        assert hw >= last_hw, f"HW moved back from {last_hw} to {hw} at {step}"
        assert hw <= partition.log_end_offset
        # The maximal ISR (committed, plus a member being added) includes the ISR.
        for member in partition.maximal_isr:
            if member != LEADER:
                assert hw <= real[member], f"HW {hw} above ISR member {member}'s {real[member]}"
        assert LEADER in partition.isr
        last_hw = hw

"""KIP-890 part 1 in the log: a transactional batch that would open a transaction is
appended only while the verification guard the leader took before asking the
coordinator is still the producer's; any marker for the producer (leader or follower
path) drops it, and a batch continuing an open transaction needs none."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage.errors import InvalidTxnStateError
from odradek.storage.log import Log

from .conftest import FakeClock, make_batch
from .test_transactions import Producer, open_test_log

PID = 7


def send(log: Log, clock: FakeClock, sequence: int, guard: object | None) -> None:
    batch = make_batch(
        1,
        timestamp=clock(),
        producer_id=PID,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=True,
    )
    log.append_as_leader(batch, leader_epoch=0, verification_guard=guard)


def test_a_marker_between_verification_and_append_refuses_the_batch(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_test_log(tmp_path / "t-0", clock)
    state = log.producer_state
    guard = state.verification_guard(PID)
    assert state.verification_guard(PID) is guard  # one per producer until dropped
    assert not state.transaction_open(PID, 0)
    send(log, clock, 0, guard)  # opens the transaction
    assert state.transaction_open(PID, 0)
    send(log, clock, 1, object())  # continues it: the guard does not matter
    producer = Producer(log, clock, PID)
    producer.end(commit=False)
    assert PID not in state.verification_guards
    with pytest.raises(InvalidTxnStateError):
        send(log, clock, 2, guard)  # the late write after the abort
    log.high_watermark = log.log_end_offset
    assert log.first_unstable_offset is None  # the refused batch opened nothing
    fresh = state.verification_guard(PID)
    assert fresh is not guard
    send(log, clock, 2, fresh)  # verified again (the next transaction): accepted
    assert state.transaction_open(PID, 0)
    log.close()


def test_no_guard_means_no_check(tmp_path: Path, clock: FakeClock) -> None:
    """Verification disabled (or a coordinator's own append): None skips the check."""
    log = open_test_log(tmp_path / "t-0", clock)
    send(log, clock, 0, None)
    assert log.producer_state.transaction_open(PID, 0)
    log.close()


def test_follower_markers_drop_guards_too(tmp_path: Path, clock: FakeClock) -> None:
    leader = open_test_log(tmp_path / "leader", clock)
    follower = open_test_log(tmp_path / "follower", clock)
    guard = follower.producer_state.verification_guard(PID)
    send(leader, clock, 0, None)
    Producer(leader, clock, PID).end(commit=True)
    follower.append_as_follower(b"".join(leader.read_batches(0)))
    assert PID not in follower.producer_state.verification_guards
    with pytest.raises(InvalidTxnStateError):
        send(follower, clock, 1, guard)
    leader.close()
    follower.close()

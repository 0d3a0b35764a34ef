"""The transaction state table: every move outside it is refused, every move in it
works, and a transit changes nothing until it completes."""

from __future__ import annotations

import itertools

import pytest

from odradek.coordinator.transaction.state import (
    LEGAL_TRANSITIONS,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
)

S = TxnState
PAIRS = list(itertools.product(TxnState, TxnState))


def metadata(state: TxnState) -> TransactionMetadata:
    return TransactionMetadata("id", 1, 0, 1000, 0, state=state)


def test_table_covers_every_state() -> None:
    assert set(LEGAL_TRANSITIONS) == set(TxnState)
    assert LEGAL_TRANSITIONS[S.DEAD] == frozenset()


@pytest.mark.parametrize(
    ("source", "target"), PAIRS, ids=[f"{a.value}->{b.value}" for a, b in PAIRS]
)
def test_transition(source: TxnState, target: TxnState) -> None:
    m = metadata(source)
    transit = m.transit(target, 5)
    if target in LEGAL_TRANSITIONS[source]:
        m.prepare(transit)
        assert m.state is source and m.pending is transit  # nothing moved yet
        m.complete(transit)
        assert m.state is target and m.pending is None and m.update_ms == 5
    else:
        with pytest.raises(IllegalTransition):
            m.prepare(transit)
        assert m.state is source and m.pending is None
        with pytest.raises(IllegalTransition):
            m._transition(target)


def test_kafka_moves() -> None:
    legal = LEGAL_TRANSITIONS
    assert S.PREPARE_COMMIT in legal[S.ONGOING] and S.PREPARE_ABORT in legal[S.ONGOING]
    assert legal[S.PREPARE_COMMIT] == {S.COMPLETE_COMMIT}
    assert legal[S.PREPARE_ABORT] == {S.COMPLETE_ABORT}
    assert S.PREPARE_COMMIT not in legal[S.EMPTY]  # EndTxn needs an ongoing transaction
    assert S.DEAD not in legal[S.ONGOING]  # an open transaction never expires


def test_abandon_leaves_metadata_unchanged() -> None:
    m = metadata(S.ONGOING)
    m.partitions = {("t", 0)}
    transit = m.transit(S.PREPARE_COMMIT, 9, producer_epoch=3)
    m.prepare(transit)
    m.abandon(transit)
    assert (m.state, m.producer_epoch, m.pending, m.partitions) == (S.ONGOING, 0, None, {("t", 0)})


def test_fence_and_unfence() -> None:
    m = metadata(S.ONGOING)
    m.fence()
    assert m.state is S.PREPARE_EPOCH_FENCE
    m.unfence()
    assert m.state is S.ONGOING
    with pytest.raises(IllegalTransition):
        metadata(S.EMPTY).fence()


def test_a_second_write_in_flight_is_a_bug() -> None:
    m = metadata(S.EMPTY)
    m.prepare(m.transit(S.ONGOING, 1))
    with pytest.raises(AssertionError):
        m.prepare(m.transit(S.ONGOING, 2))

"""The transactional producer's sans-IO state machine and error classes (transactions.py)."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import KafkaError
from odradek.client.producer.transactions import (
    TRANSITIONS,
    ErrorClass,
    TransactionState,
    TxnState,
    abortable_error,
    classify,
    classify_produce,
    fatal_error,
)

S = TxnState


def at(state: TxnState) -> TransactionState:
    txn = TransactionState("t")
    txn.state = state
    return txn


LEGAL = {
    (S.UNINITIALIZED, S.INITIALIZING),
    (S.INITIALIZING, S.READY),
    (S.READY, S.IN_TRANSACTION),
    (S.READY, S.INITIALIZING),
    (S.IN_TRANSACTION, S.COMMITTING),
    (S.IN_TRANSACTION, S.ABORTING),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
    (S.COMMITTING, S.READY),
    (S.COMMITTING, S.ABORTABLE_ERROR),
    (S.ABORTING, S.READY),
    (S.ABORTING, S.INITIALIZING),
    (S.ABORTABLE_ERROR, S.ABORTING),
    (S.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
}


@pytest.mark.parametrize(("origin", "target"), list(itertools.product(TxnState, TxnState)))
def test_transition_table(origin: TxnState, target: TxnState) -> None:
    txn = at(origin)
    legal = target is S.FATAL_ERROR or (origin, target) in LEGAL
    assert legal == (target is S.FATAL_ERROR or target in TRANSITIONS[origin])
    if legal:
        txn.transition(target)
        assert txn.state is target
    else:
        with pytest.raises(KafkaError) as raised:
            txn.transition(target)
        assert raised.value.code() == KafkaError._STATE
        assert txn.state is origin


def test_fatal_is_final_and_raises_its_error() -> None:
    txn = at(S.IN_TRANSACTION)
    error = fatal_error(ErrorCode.producer_fenced, "EndTxn")
    txn.set_fatal(error)
    for call in (txn.begin, txn.start_commit, txn.start_abort):
        with pytest.raises(KafkaError) as raised:
            call()
        assert raised.value is error
    assert error.fatal() and error.code() == KafkaError._FENCED
    assert not error.txn_requires_abort()


def test_abortable_error_allows_only_abort() -> None:
    txn = TransactionState("t")
    txn.transition(S.INITIALIZING)
    txn.transition(S.READY)
    txn.begin()
    first = abortable_error(ErrorCode.topic_authorization_failed, "produce")
    txn.set_abortable(first)
    txn.set_abortable(abortable_error(ErrorCode.unknown_server_error, "later"))
    assert txn.state is S.ABORTABLE_ERROR and txn.error is first  # the first one is kept
    with pytest.raises(KafkaError) as raised:
        txn.start_commit()
    assert raised.value is first and first.txn_requires_abort() and not first.fatal()
    txn.start_abort()
    txn.completed()
    assert txn.state is S.READY and txn.error is None
    txn.begin()
    assert txn.state is S.IN_TRANSACTION


def test_abortable_errors_do_not_disturb_an_abort_or_idle_producer() -> None:
    for state in (S.ABORTING, S.READY, S.INITIALIZING):
        txn = at(state)
        txn.set_abortable(abortable_error(ErrorCode.unknown_server_error, "x"))
        assert txn.state is state


def test_partitions_are_pending_until_added_and_batched() -> None:
    txn = at(S.READY)
    assert not txn.sendable(("a", 0))  # not in a transaction: never sendable, not pending
    assert not txn.pending
    txn.begin()
    assert not txn.has_content
    assert not txn.sendable(("a", 0)) and not txn.sendable(("b", 1))
    assert txn.take_pending() == [("a", 0), ("b", 1)]  # one request for both
    assert not txn.sendable(("c", 0))  # arrives while the request is in flight
    assert txn.take_pending() == []  # waits for the next request
    assert txn.has_content  # in flight: the coordinator may know them already
    txn.partitions_added([("a", 0)])
    txn.partitions_failed([("b", 1)], retry=True)
    assert txn.sendable(("a", 0)) and not txn.sendable(("b", 1))
    assert txn.take_pending() == [("b", 1), ("c", 0)]
    txn.partitions_added([("b", 1), ("c", 0)])
    txn.start_commit()
    assert txn.sendable(("c", 0))  # batches still flow while committing
    txn.completed()
    assert not txn.added and not txn.has_content and not txn.sendable(("a", 0))


def test_an_aborting_transaction_sends_nothing_more() -> None:
    txn = at(S.READY)
    txn.begin()
    txn.partitions_added([("a", 0)])
    txn.start_abort()
    assert not txn.sendable(("a", 0)) and not txn.sendable(("z", 0))
    assert txn.take_pending() == []


def test_offsets_alone_make_the_transaction_known() -> None:
    txn = at(S.READY)
    txn.begin()
    txn.offsets_added = True
    assert txn.has_content


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (ErrorCode.producer_fenced, ErrorClass.FATAL),
        (ErrorCode.invalid_producer_epoch, ErrorClass.FATAL),
        (ErrorCode.transactional_id_authorization_failed, ErrorClass.FATAL),
        (ErrorCode.invalid_txn_state, ErrorClass.FATAL),
        (ErrorCode.unknown_server_error, ErrorClass.FATAL),
        (ErrorCode.coordinator_not_available, ErrorClass.REFIND),
        (ErrorCode.not_coordinator, ErrorClass.REFIND),
        (ErrorCode.coordinator_load_in_progress, ErrorClass.RETRY),
        (ErrorCode.concurrent_transactions, ErrorClass.RETRY),
        (ErrorCode.operation_not_attempted, ErrorClass.RETRY),
        (ErrorCode.topic_authorization_failed, ErrorClass.ABORTABLE),
        (ErrorCode.group_authorization_failed, ErrorClass.ABORTABLE),
        (ErrorCode.illegal_generation, ErrorClass.ABORTABLE),
        (ErrorCode.unknown_member_id, ErrorClass.ABORTABLE),
        (ErrorCode.fenced_instance_id, ErrorClass.ABORTABLE),
    ],
)
def test_coordinator_error_classes(code: ErrorCode, kind: ErrorClass) -> None:
    assert classify(code) is kind


def test_produce_error_classes() -> None:
    assert classify_produce(ErrorCode.producer_fenced) is ErrorClass.FATAL
    assert classify_produce(ErrorCode.invalid_producer_epoch) is ErrorClass.FATAL
    assert classify_produce(ErrorCode.transactional_id_authorization_failed) is ErrorClass.FATAL
    for code in (
        ErrorCode.topic_authorization_failed,
        ErrorCode.message_too_large,
        ErrorCode.request_timed_out,
        ErrorCode.out_of_order_sequence_number,
        None,
    ):
        assert classify_produce(code) is ErrorClass.ABORTABLE


def test_kafka_error_flags_like_confluent_kafka() -> None:
    plain = KafkaError(ErrorCode.not_coordinator)
    assert plain.retriable() and not plain.fatal() and not plain.txn_requires_abort()
    timed_out = KafkaError(KafkaError._TIMED_OUT, "x", retriable=True)
    assert timed_out.retriable() and timed_out.name() == "_TIMED_OUT"
    not_retriable = KafkaError(ErrorCode.not_coordinator, retriable=False)
    assert not not_retriable.retriable()
    fatal = fatal_error(ErrorCode.invalid_txn_state, "EndTxn")
    assert fatal.fatal() and fatal.code() == ErrorCode.invalid_txn_state

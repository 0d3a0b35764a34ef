"""The transactional checkers on hand-made histories: a clean one passes, and each
planted fault is caught by name (and only by the names it should be).

``clean()`` is one producer's five transactions over two partitions, laid out as a
broker writes them (each transaction's records, then its marker in each partition):
a commit acknowledged, an abort acknowledged, two commits in doubt (one ended up
committed, one aborted) and a last commit acknowledged; a read_committed consumer read
the first two during the run; offsets were sent with each.
"""

from __future__ import annotations

from collections import Counter

from tests.chaos.txn_checks import (
    ABANDONED,
    ABORTED,
    COMMITTED,
    FAILED,
    UNANSWERED,
    Read,
    TxnHistory,
    TxnKey,
    TxnOutcome,
    check_transactions,
    decode_value,
    encode_value,
    summary,
)

P = "tx-1"
# index -> (meant to commit, records, result, visible in the end)
PLAN = {
    0: (True, 3, COMMITTED, True),
    1: (False, 2, ABORTED, False),
    2: (True, 2, FAILED, True),
    3: (True, 4, FAILED, False),
    4: (True, 3, COMMITTED, True),
}


def layout(
    plan: dict[int, tuple[bool, int, str, bool]], producer: str = P
) -> tuple[list[Read], list[Read]]:
    """(read_committed, read_uncommitted) of the plan's transactions, record ``n`` in
    partition ``n % 2``, a marker after each transaction in each of its partitions."""
    next_offset = {0: 0, 1: 0}
    committed: list[Read] = []
    everything: list[Read] = []
    for index, (commit, size, _, visible) in plan.items():
        for number in range(size):
            partition = number % 2
            read = (
                partition,
                next_offset[partition],
                encode_value(producer, index, commit, number, size),
            )
            next_offset[partition] += 1
            everything.append(read)
            if visible:
                committed.append(read)
        for partition in {n % 2 for n in range(size)}:
            next_offset[partition] += 1  # the marker
    return sorted(committed), sorted(everything)


def index_of(read: Read) -> int:
    record = decode_value(read[2])
    assert record is not None
    return record.index


def clean() -> TxnHistory:
    committed, everything = layout(PLAN)
    outcomes = {(P, i): TxnOutcome(c, size, result) for i, (c, size, result, _) in PLAN.items()}
    return TxnHistory(
        outcomes=outcomes,
        reads=[r for r in committed if index_of(r) < 2],
        committed=committed,
        uncommitted=everything,
        offsets={P: 5},
    )


def kinds(history: TxnHistory) -> Counter[str]:
    return check_transactions(history).counts


def test_values_round_trip() -> None:
    value = encode_value("chaos-txn-2", 17, False, 3, 8)
    record = decode_value(value)
    assert record is not None
    assert (record.key, record.commit, record.number, record.size) == (
        ("chaos-txn-2", 17),
        False,
        3,
        8,
    )
    assert decode_value(value + b"|padding") == record
    for junk in (b"", b"\x00\x00\x00\x01", b"txn:x:1:c:8/8", b"txn:x:1:q:1/2", b"hello"):
        assert decode_value(junk) is None


def test_a_clean_history_passes() -> None:
    history = clean()
    report = check_transactions(history)
    assert report.ok, report.examples
    assert report.verified == 2  # the acknowledged commits, whole
    assert summary(history.outcomes, history.committed) == (
        "5 transactions (abort->aborted 1, commit->committed 2, commit->failed 2); 3 visible"
    )


def test_an_aborted_transaction_read_under_read_committed() -> None:
    history = clean()
    aborted = [r for r in history.uncommitted if index_of(r) == 1]
    history.reads = [*history.reads, aborted[0]]
    history.committed = sorted([*history.committed, *aborted])
    found = kinds(history)
    # once in the run's reads, twice in the final read
    assert found == Counter({"aborted_read": 3})


def test_an_acknowledged_abort_that_became_visible_even_if_meant_to_commit() -> None:
    plan = {**PLAN, 3: (True, 4, ABORTED, True)}
    committed, everything = layout(plan)
    history = TxnHistory(
        outcomes={(P, i): TxnOutcome(c, s, r) for i, (c, s, r, _) in plan.items()},
        committed=committed,
        uncommitted=everything,
    )
    assert kinds(history) == Counter({"aborted_read": 4})


def test_an_abandoned_transaction_must_stay_invisible() -> None:
    plan = {**PLAN, 5: (True, 2, ABANDONED, False)}
    committed, everything = layout(plan)
    outcomes = {(P, i): TxnOutcome(c, s, r) for i, (c, s, r, _) in plan.items()}
    history = TxnHistory(outcomes=outcomes, committed=committed, uncommitted=everything)
    assert check_transactions(history).ok
    plan[5] = (True, 2, ABANDONED, True)
    committed, everything = layout(plan)
    history = TxnHistory(outcomes=outcomes, committed=committed, uncommitted=everything)
    assert kinds(history) == Counter({"aborted_read": 2})


def test_a_partly_visible_transaction() -> None:
    history = clean()
    # the marker of transaction 2 reached partition 0 only: its record 1 is not visible
    history.committed = [r for r in history.committed if not (index_of(r) == 2 and r[0] == 1)]
    assert kinds(history) == Counter({"partial_txn": 1})


def test_an_acknowledged_commit_not_visible() -> None:
    history = clean()
    history.committed = [r for r in history.committed if index_of(r) != 4]
    history.offsets = {P: 3}  # the group's offset went with it
    assert kinds(history) == Counter({"commit_lost": 1})
    history.committed = [r for r in clean().committed if r[1] != 0 or r[0] != 0]
    history.offsets = {P: 5}
    # transaction 0 lost one record: partly visible, and an acknowledged commit lost;
    # the consumer had read it (it vanished)
    assert kinds(history) == Counter({"partial_txn": 1, "commit_lost": 1, "read_vanished": 1})


def test_a_read_that_vanished() -> None:
    history = clean()
    undecided = [r for r in history.uncommitted if index_of(r) == 3]
    history.reads = [*history.reads, undecided[0]]  # read above the LSO, then aborted
    assert kinds(history) == Counter({"read_vanished": 1})


def test_control_records_and_garbage_are_unreadable() -> None:
    history = clean()
    marker = b"\x00\x00\x00\x00"  # a control record's key as an application would see it
    history.uncommitted = [*history.uncommitted, (0, 99, marker)]
    history.committed = [*history.committed, (1, 99, b"garbage")]
    history.reads = [*history.reads, (1, 99, b"garbage")]
    assert kinds(history) == Counter({"unreadable": 3})


def test_duplicates_at_either_isolation_level() -> None:
    history = clean()
    first = history.committed[0]
    history.committed = sorted([*history.committed, (first[0], 1000, first[2])])
    history.uncommitted = sorted([*history.uncommitted, (first[0], 1000, first[2])])
    assert kinds(history) == Counter({"duplicate": 2})


def test_a_phantom_transaction() -> None:
    history = clean()
    history.committed = [*history.committed, (0, 500, encode_value("tx-9", 0, True, 0, 1))]
    assert kinds(history) == Counter({"phantom": 1})


def test_an_unanswered_end() -> None:
    history = clean()
    history.outcomes = {**history.outcomes, (P, 5): TxnOutcome(True, 2, UNANSWERED)}
    assert kinds(history) == Counter({"unanswered": 1})


def test_offsets_must_follow_the_last_visible_transaction() -> None:
    history = clean()
    history.offsets = {P: 4}  # transaction 3's offsets (aborted) were committed
    assert kinds(history) == Counter({"offsets_mismatch": 1})
    history.offsets = {}  # none at all
    assert kinds(history) == Counter({"offsets_mismatch": 1})
    history.offsets = None  # a run without offsets: not checked
    assert check_transactions(history).ok


def test_many_producers_are_judged_apart() -> None:
    first, second = clean(), clean()
    committed, everything = layout(PLAN, producer="tx-2")
    outcomes: dict[TxnKey, TxnOutcome] = dict(first.outcomes)
    outcomes.update({("tx-2", k[1]): o for k, o in second.outcomes.items()})
    history = TxnHistory(
        outcomes=outcomes,
        committed=sorted(first.committed + [(p + 2, o, v) for p, o, v in committed]),
        uncommitted=sorted(first.uncommitted + [(p + 2, o, v) for p, o, v in everything]),
        offsets={P: 5, "tx-2": 5},
    )
    assert check_transactions(history).ok
    history.offsets = {P: 5}
    assert kinds(history) == Counter({"offsets_mismatch": 1})

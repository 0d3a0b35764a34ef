"""Checkers for transactional runs: what KIP-98 promises a read_committed consumer.

Pure functions from a ``TxnHistory`` to violations, in ``checks.py``'s style (its
``Violation`` and ``Report``). Every record a transactional producer sends names its
transaction and what the producer meant to do with it (``encode_value``): producer,
transaction index, intended outcome, the record's number in the transaction and how
many it has. The properties, whatever was killed or cut in between:

- ``aborted_read``: a record read under read_committed (during the run or in the final
  read) belongs to a transaction the producer aborted, meant to abort, or abandoned
  before ending it: a producer never commits one it called abort_transaction on (or
  never called commit_transaction for), so no such record may be visible;
- ``partial_txn``: the final read_committed read holds some but not all records of a
  transaction (a marker written to some of its partitions and not to others, or a
  record lost under a commit marker);
- ``commit_lost``: a transaction whose commit was acknowledged (commit_transaction
  returned) is not entirely visible in the final read_committed read;
- ``read_vanished``: a record read under read_committed during the run is not at that
  offset in the final read_committed read (the consumer was handed something above
  the last stable offset that was later aborted or replaced);
- ``duplicate``: one record of a transaction is in a final read more than once;
- ``unreadable``: a value read (under either isolation level) that is not a record
  the producers write — a control record handed to the application, or garbage;
- ``phantom``: a record of a transaction the producers never began;
- ``unanswered``: a transaction whose commit or abort call never returned (the
  producer must get success or an error);
- ``offsets_mismatch``: a producer's group offset (sent with each transaction,
  ``index + 1``) is not that of its last visible transaction: offsets sent with the
  transaction must commit and abort with it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tests.chaos.checks import Report, Violation

TXN_KINDS = (
    "aborted_read",
    "partial_txn",
    "commit_lost",
    "read_vanished",
    "duplicate",
    "unreadable",
    "phantom",
    "unanswered",
    "offsets_mismatch",
)

# A transaction's result as its producer saw it.
COMMITTED = "committed"  # commit_transaction returned
ABORTED = "aborted"  # abort_transaction returned
FAILED = "failed"  # the end call raised an error it could not retry: in doubt
UNANSWERED = "unanswered"  # the end call was made and never returned
# the producer never ended it (its client blocked in a call before: librdkafka#5456);
# only an abort (a timeout, a fence) can end it, so it must stay invisible
ABANDONED = "abandoned"
RESULTS = (COMMITTED, ABORTED, FAILED, UNANSWERED, ABANDONED)

_VALUE = re.compile(rb"txn:([A-Za-z0-9_.-]+):(\d+):([ca]):(\d+)/(\d+)(?:\|.*)?", re.DOTALL)

TxnKey = tuple[str, int]  # (producer / transactional id, transaction index)


@dataclass(frozen=True)
class TxnRecord:
    producer: str
    index: int
    commit: bool  # the outcome the producer meant
    number: int  # 0 .. size - 1
    size: int  # records in the transaction

    @property
    def key(self) -> TxnKey:
        return (self.producer, self.index)


def encode_value(producer: str, index: int, commit: bool, number: int, size: int) -> bytes:
    return b"txn:%s:%d:%s:%d/%d" % (
        producer.encode(),
        index,
        b"c" if commit else b"a",
        number,
        size,
    )


def decode_value(value: bytes | None) -> TxnRecord | None:
    match = _VALUE.fullmatch(value or b"")
    if match is None:
        return None
    producer, index, intent, number, size = match.groups()
    record = TxnRecord(producer.decode(), int(index), intent == b"c", int(number), int(size))
    return record if 0 <= record.number < record.size else None


@dataclass(frozen=True)
class TxnOutcome:
    commit: bool  # what the producer meant
    size: int  # records sent in it
    result: str  # one of RESULTS
    error: str = ""  # the error of a FAILED one


Read = tuple[int, int, bytes]  # (partition, offset, value)


@dataclass
class TxnHistory:
    """What a transactional run saw:

    - ``outcomes``: every transaction a producer began (it may have sent records),
      by (producer, index), with what it meant and what it got;
    - ``reads``: (partition, offset, value) a read_committed consumer was handed
      during the run;
    - ``committed``/``uncommitted``: the topic read back after healing with
      read_committed and read_uncommitted;
    - ``offsets``: producer -> the final committed offset of its group (absent: none),
      for runs whose producers send offsets with their transactions.
    """

    outcomes: Mapping[TxnKey, TxnOutcome]
    reads: Sequence[Read] = ()
    committed: Sequence[Read] = ()
    uncommitted: Sequence[Read] = ()
    offsets: Mapping[str, int] | None = None


def _decoded(
    reads: Iterable[Read], where: str
) -> tuple[list[tuple[Read, TxnRecord]], list[Violation]]:
    good, bad = [], []
    for read in reads:
        record = decode_value(read[2])
        if record is None:
            bad.append(
                Violation(
                    "unreadable",
                    read[0],
                    f"{where} offset {read[1]}: {read[2][:60]!r} is no record",
                )
            )
        else:
            good.append((read, record))
    return good, bad


def check_readable(history: TxnHistory) -> list[Violation]:
    """Every value handed out, at either isolation level, is a producer's record."""
    violations = []
    for reads, where in (
        (history.reads, "read_committed read at"),
        (history.committed, "final read_committed at"),
        (history.uncommitted, "final read_uncommitted at"),
    ):
        violations += _decoded(reads, where)[1]
    return violations


def check_no_aborted_read(history: TxnHistory) -> list[Violation]:
    """No read_committed read holds a record of a transaction meant to abort, or
    whose abort was acknowledged; nor one of a transaction never begun."""
    violations = []
    seen: set[tuple[TxnKey, int, str]] = set()
    for reads, where in ((history.reads, "read"), (history.committed, "final read")):
        for (partition, offset, _), record in _decoded(reads, where)[0]:
            outcome = history.outcomes.get(record.key)
            tag = (record.key, record.number, where)
            if tag in seen:
                continue
            seen.add(tag)
            if outcome is None:
                violations.append(
                    Violation(
                        "phantom",
                        partition,
                        f"{where} offset {offset}: transaction {record.key} was never begun",
                    )
                )
            elif not record.commit or not outcome.commit or outcome.result in (ABORTED, ABANDONED):
                meant = "meant to abort" if not record.commit else f"{outcome.result}"
                violations.append(
                    Violation(
                        "aborted_read",
                        partition,
                        f"{where} offset {offset}: record {record.number} of transaction "
                        f"{record.key} ({meant}) under read_committed",
                    )
                )
    return violations


def _visible(reads: Sequence[Read]) -> dict[TxnKey, Counter[int]]:
    """Per transaction, how many times each of its record numbers was read."""
    found: dict[TxnKey, Counter[int]] = {}
    for _, record in _decoded(reads, "")[0]:
        found.setdefault(record.key, Counter())[record.number] += 1
    return found


def check_all_or_nothing(history: TxnHistory) -> list[Violation]:
    """Each transaction is entirely visible to read_committed, or not at all; each one
    acknowledged as committed, entirely."""
    violations = []
    visible = _visible(history.committed)
    for key in sorted(set(visible) | set(history.outcomes)):
        outcome = history.outcomes.get(key)
        numbers = visible.get(key, Counter())
        size = outcome.size if outcome is not None else None
        if outcome is None:
            continue  # a phantom: check_no_aborted_read names it
        if numbers and len(numbers) < outcome.size:
            missing = sorted(set(range(outcome.size)) - set(numbers))
            violations.append(
                Violation(
                    "partial_txn",
                    -1,
                    f"transaction {key} ({outcome.result}): {len(numbers)} of {size} records "
                    f"visible, missing {missing[:10]}",
                )
            )
        if outcome.result == COMMITTED and len(numbers) < outcome.size:
            violations.append(
                Violation(
                    "commit_lost",
                    -1,
                    f"transaction {key}: commit acknowledged, {len(numbers)} of {size} "
                    "records visible",
                )
            )
    return violations


def check_no_duplicates(history: TxnHistory) -> list[Violation]:
    violations = []
    for reads, where in ((history.committed, "read_committed"), (history.uncommitted, "all")):
        for key, numbers in sorted(_visible(reads).items()):
            twice = sorted(n for n, count in numbers.items() if count > 1)
            if twice:
                violations.append(
                    Violation(
                        "duplicate",
                        -1,
                        f"{where}: records {twice[:10]} of transaction {key} read more than once",
                    )
                )
    return violations


def check_reads_stable(history: TxnHistory) -> list[Violation]:
    """What a read_committed consumer was handed stays: the final read holds the same
    record at the same offset."""
    final = {(p, o): v for p, o, v in history.committed}
    violations = []
    for partition, offset, value in history.reads:
        held = final.get((partition, offset))
        if held != value:
            record = decode_value(value)
            name = record.key if record is not None else value[:40]
            violations.append(
                Violation(
                    "read_vanished",
                    partition,
                    f"offset {offset}: read {name!r} under read_committed; the final read "
                    + ("has no record there" if held is None else f"holds {held[:40]!r}"),
                )
            )
    return violations


def check_answered(history: TxnHistory) -> list[Violation]:
    return [
        Violation("unanswered", -1, f"transaction {key}: its end call never returned")
        for key, outcome in sorted(history.outcomes.items())
        if outcome.result == UNANSWERED
    ]


def check_offsets(history: TxnHistory) -> list[Violation]:
    """A producer's group offset is ``index + 1`` of its last visible transaction (none
    visible: no offset), when the run's producers send offsets."""
    if history.offsets is None:
        return []
    last: dict[str, int] = {}
    for producer, index in _visible(history.committed):
        last[producer] = max(last.get(producer, -1), index)
    producers = {producer for producer, _ in history.outcomes}
    violations = []
    for producer in sorted(producers):
        expected = last[producer] + 1 if producer in last else None
        found = history.offsets.get(producer)
        if found != expected:
            violations.append(
                Violation(
                    "offsets_mismatch",
                    -1,
                    f"{producer}: group offset {found}, its last visible transaction "
                    f"says {expected}",
                )
            )
    return violations


def check_transactions(history: TxnHistory) -> Report:
    """Every check over one transactional run's history."""
    report = Report(Counter(), [], 0)
    report.add(check_readable(history))
    report.add(check_no_aborted_read(history))
    report.add(check_all_or_nothing(history))
    report.add(check_no_duplicates(history))
    report.add(check_reads_stable(history))
    report.add(check_answered(history))
    report.add(check_offsets(history))
    visible = _visible(history.committed)
    report.verified = sum(
        1
        for key, outcome in history.outcomes.items()
        if outcome.result == COMMITTED and len(visible.get(key, ())) == outcome.size
    )
    return report


def summary(outcomes: Mapping[TxnKey, TxnOutcome], committed: Sequence[Read] = ()) -> str:
    """One line: transactions by intent and result, and how many are visible."""
    counts = Counter(f"{'commit' if o.commit else 'abort'}->{o.result}" for o in outcomes.values())
    visible = len(_visible(committed))
    parts = [f"{name} {n}" for name, n in sorted(counts.items())]
    return f"{len(outcomes)} transactions ({', '.join(parts) or '-'}); {visible} visible"

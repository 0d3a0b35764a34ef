"""The tables ``odradek transactions`` prints, apart from how it gets their rows.

How this works and why: kafka-transactions.sh prints a header row and one row per
entry, every column left-aligned and padded to its widest cell, columns separated by a
tab; an absent value (no open transaction, no coordinator epoch seen yet) is ``None``.
Keeping the formatting here, as pure functions of plain rows, lets it be tested without
a broker and keeps transactions.py about the requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

NONE_TEXT: Final = "None"  # an absent value, as Kafka's tool prints an empty Optional

LIST_HEADERS: Final = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS: Final = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
    "TopicPartitions",
)  # fmt: skip
PRODUCER_HEADERS: Final = (
    "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
    "CurrentTransactionStartOffset",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int  # -1: no transaction under way
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int  # -1: no marker seen yet
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int  # -1: no open transaction


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned columns, each but the last as wide as its widest cell, separated by
    a tab."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    widths[-1] = 0  # the last column is not padded: no trailing blanks
    return ["\t".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]


def list_lines(transactions: Sequence[ListedTransaction]) -> list[str]:
    rows = [
        (t.transactional_id, t.coordinator, t.producer_id, t.state)
        for t in sorted(transactions, key=lambda t: (t.coordinator, t.transactional_id))
    ]
    return format_table(LIST_HEADERS, rows)


def describe_lines(txn: DescribedTransaction, now_ms: int) -> list[str]:
    started = txn.start_ms >= 0
    partitions = ",".join(f"{topic}-{index}" for topic, index in sorted(txn.partitions))
    row = (
        txn.coordinator,
        txn.transactional_id,
        txn.producer_id,
        txn.producer_epoch,
        txn.state,
        txn.timeout_ms,
        txn.start_ms if started else NONE_TEXT,
        max(0, now_ms - txn.start_ms) if started else NONE_TEXT,
        partitions,
    )
    return format_table(DESCRIBE_HEADERS, [row])


def producer_lines(producers: Sequence[ActiveProducer]) -> list[str]:
    rows = [
        (
            p.producer_id,
            p.producer_epoch,
            p.coordinator_epoch if p.coordinator_epoch >= 0 else NONE_TEXT,
            p.last_sequence,
            p.last_timestamp,
            p.txn_start_offset if p.txn_start_offset >= 0 else NONE_TEXT,
        )
        for p in sorted(producers, key=lambda p: p.producer_id)
    ]
    return format_table(PRODUCER_HEADERS, rows)

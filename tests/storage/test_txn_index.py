"""The ``.txnindex`` file: Kafka's 34-byte entries, lazy creation, torn tails, truncation."""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from odradek.storage.txn_index import (
    TXN_ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    decode_entries,
    read_txn_index,
)

INT64 = st.integers(-(2**63), 2**63 - 1)


def test_entry_layout_is_kafkas() -> None:
    entry = AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)
    data = entry.encode()
    assert len(data) == TXN_ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 7, 10, 20, 21)


@given(st.lists(st.tuples(INT64, INT64, INT64, INT64), max_size=20))
def test_round_trip(fields: list[tuple[int, int, int, int]]) -> None:
    entries = [AbortedTxn(*f) for f in fields]
    data = b"".join(e.encode() for e in entries)
    assert decode_entries(data) == (entries, len(data))


@given(st.integers(1, TXN_ENTRY_SIZE - 1))
def test_torn_tail_is_dropped(cut: int) -> None:
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)]
    data = b"".join(e.encode() for e in entries)
    assert decode_entries(data[: len(data) - cut]) == (entries[:1], TXN_ENTRY_SIZE)


def test_unknown_version_ends_the_file() -> None:
    good = AbortedTxn(1, 0, 5, 6).encode()
    bad = struct.pack(">hqqqq", 1, 2, 3, 9, 10)
    assert decode_entries(good + bad + good) == ([AbortedTxn(1, 0, 5, 6)], TXN_ENTRY_SIZE)


def test_file_is_created_lazily_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    index = TransactionIndex(path)
    assert not path.exists() and not index.exists
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    assert path.stat().st_size == 2 * TXN_ENTRY_SIZE
    index.close()
    assert TransactionIndex(path).entries == [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)]
    assert read_txn_index(path) == TransactionIndex(path).entries


def test_torn_file_is_cut_on_load_and_appends_continue(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 5, 6).encode() + AbortedTxn(2, 3, 9, 10).encode()[:20])
    index = TransactionIndex(path)
    assert index.entries == [AbortedTxn(1, 0, 5, 6)]
    assert path.stat().st_size == TXN_ENTRY_SIZE
    index.append(AbortedTxn(3, 7, 12, 13))
    index.close()
    assert read_txn_index(path) == [AbortedTxn(1, 0, 5, 6), AbortedTxn(3, 7, 12, 13)]


def test_truncate_drops_entries_at_or_past_the_offset(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    index = TransactionIndex(path)
    for last in (5, 9, 12):
        index.append(AbortedTxn(last, 0, last, last + 1))
    index.truncate_to(9)
    assert [e.last_offset for e in index.entries] == [5]
    assert path.stat().st_size == TXN_ENTRY_SIZE
    index.truncate_to(100)
    assert [e.last_offset for e in index.entries] == [5]
    index.reset()
    assert not path.exists() and index.entries == []
    index.close()


def test_collect_stops_at_proof_of_completeness(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / f"{0:020d}.txnindex")
    index.append(AbortedTxn(1, 0, 5, 3))  # another txn open from 3 when this ended
    index.append(AbortedTxn(2, 3, 9, 10))
    index.append(AbortedTxn(3, 11, 12, 13))
    found: list[AbortedTxn] = []
    assert index.collect(0, 10, found)
    assert [e.producer_id for e in found] == [1, 2]
    found = []
    assert not index.collect(6, 20, found)
    assert [e.producer_id for e in found] == [2, 3]
    index.close()

"""read_committed decoding: aborted transactions skipped, control records never handed out.

Fetch responses are built by hand from batches of several producers, interleaved,
with COMMIT/ABORT markers, and decoded with the response's aborted list as a
read_committed consumer does (Kafka's algorithm: an aborted transaction's producer
becomes *aborted* once its first offset is reached, and stays so until its ABORT
marker) and without it (read_uncommitted: everything but control records).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from odradek.client import AIOKafkaConsumer
from odradek.client._core.config import ClientConfig, ConfigError
from odradek.client.consumer.core import ConsumerCore, _PartState
from odradek.client.consumer.fetch_decode import FetchedRecords, decode_fetch
from odradek.records.batch import GZIP, NO_COMPRESSION
from odradek.records.codec import Record, encode_batch, encode_end_txn_marker

ABORT, COMMIT = False, True


def data(
    pid: int, first: int, count: int = 1, *, txn: bool = True, compression: int = NO_COMPRESSION
) -> bytes:
    records = [
        Record(first + i, 1000 + first + i, None, f"p{pid}@{first + i}".encode())
        for i in range(count)
    ]
    return encode_batch(
        records,
        base_offset=first,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=first,
        is_transactional=txn,
        compression=compression,
    )


def marker(pid: int, offset: int, commit: bool) -> bytes:
    return encode_batch(
        [encode_end_txn_marker(commit, 0, offset=offset, timestamp=1000 + offset)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )


def offsets(fetched: FetchedRecords) -> list[int]:
    return [r[2] for r in fetched.take(len(fetched), tuple)]


def interleaved() -> bytes:
    """P1 aborts (0, 1-2, 5), P2 commits (3-4), P3 writes without transactions (7),
    P1 starts a new transaction that commits (8, marker 9), P2 aborts (10, marker 11)."""
    return b"".join(
        [
            data(1, 0),
            data(1, 1, 2),
            data(2, 3, 2),
            data(1, 5),
            marker(2, 6, COMMIT),
            data(3, 7, txn=False),
            marker(1, 8, ABORT),
            data(1, 9),
            data(2, 10),
            marker(1, 11, COMMIT),
            marker(2, 12, ABORT),
        ]
    )


def test_read_committed_skips_aborted_transactions_of_interleaved_producers() -> None:
    fetched = decode_fetch("t", 0, interleaved(), 0, [(1, 0), (2, 10)])
    assert offsets(fetched) == [3, 4, 7, 9]
    assert fetched.next_offset == 13


def test_read_uncommitted_sees_every_data_record_but_no_control_record() -> None:
    fetched = decode_fetch("t", 0, interleaved(), 0, None)
    assert offsets(fetched) == [0, 1, 2, 3, 4, 5, 7, 9, 10]
    assert fetched.next_offset == 13


def test_aborted_list_order_does_not_matter() -> None:
    fetched = decode_fetch("t", 0, interleaved(), 0, [(2, 10), (1, 0)])
    assert offsets(fetched) == [3, 4, 7, 9]


def test_a_producer_aborting_twice_and_committing_between() -> None:
    response = b"".join(
        [
            data(1, 0),
            marker(1, 1, ABORT),
            data(1, 2),
            marker(1, 3, COMMIT),
            data(1, 4, 2),
            marker(1, 6, ABORT),
            data(1, 7),  # still open: not in the aborted list
        ]
    )
    fetched = decode_fetch("t", 0, response, 0, [(1, 0), (1, 4)])
    assert offsets(fetched) == [2, 7]
    assert fetched.next_offset == 8


def test_a_transaction_spanning_several_fetches() -> None:
    """The first fetch ends inside P1's aborted transaction (the broker cut the next
    batch at the size limit); the second starts there and still carries (P1, 0)."""
    first = data(1, 0) + data(2, 1) + marker(2, 2, COMMIT) + data(1, 3)
    cut = data(1, 4)[:-5]
    fetched = decode_fetch("t", 0, first + cut, 0, [(1, 0)])
    assert offsets(fetched) == [1]
    assert fetched.next_offset == 4
    second = data(1, 4) + marker(1, 5, ABORT) + data(2, 6) + marker(2, 7, COMMIT)
    fetched = decode_fetch("t", 0, second, 4, [(1, 0)])
    assert offsets(fetched) == [6]
    assert fetched.next_offset == 8


def test_only_aborted_and_control_batches_move_the_position_on() -> None:
    response = data(1, 0, 3) + marker(1, 3, ABORT)
    fetched = decode_fetch("t", 0, response, 0, [(1, 0)])
    assert len(fetched) == 0 and fetched.next_offset == 4
    fetched = decode_fetch("t", 0, marker(1, 3, ABORT), 3, [])
    assert len(fetched) == 0 and fetched.next_offset == 4


def test_fetched_from_the_middle_of_an_aborted_batch() -> None:
    response = data(1, 0, 4) + marker(1, 4, ABORT) + data(2, 5)
    fetched = decode_fetch("t", 0, response, 2, [(1, 0)])
    assert offsets(fetched) == [5]


def test_a_non_transactional_batch_of_an_aborted_producer_id_is_kept() -> None:
    response = data(1, 0) + data(1, 1, txn=False) + marker(1, 2, ABORT)
    fetched = decode_fetch("t", 0, response, 0, [(1, 0)])
    assert offsets(fetched) == [1]


def test_an_aborted_transaction_starting_after_the_fetched_data_changes_nothing() -> None:
    response = data(1, 0) + marker(1, 1, COMMIT)
    fetched = decode_fetch("t", 0, response, 0, [(1, 50)])
    assert offsets(fetched) == [0]


def test_compressed_transactional_batches() -> None:
    response = (
        data(1, 0, 3, compression=GZIP)
        + data(2, 3, 2, compression=GZIP)
        + marker(1, 5, ABORT)
        + marker(2, 6, COMMIT)
    )
    assert offsets(decode_fetch("t", 0, response, 0, [(1, 0)])) == [3, 4]
    assert offsets(decode_fetch("t", 0, response, 0, None)) == [0, 1, 2, 3, 4]


def consumer_core(isolation: str) -> ConsumerCore:
    return ConsumerCore(
        ClientConfig({"bootstrap.servers": "127.0.0.1:1", "isolation.level": isolation}, "consumer")
    )


def partition_data(records: bytes, aborted: list[tuple[int, int]]) -> SimpleNamespace:
    return SimpleNamespace(
        records=records,
        aborted_transactions=[SimpleNamespace(producer_id=p, first_offset=o) for p, o in aborted],
    )


def test_the_consumer_moves_past_a_fetch_of_only_aborted_and_control_batches() -> None:
    async def scenario() -> None:
        core = consumer_core("read_committed")
        assert core.isolation == 1
        state = _PartState(position=0)
        core._parts[("t", 0)] = state
        core._add_records(
            ("t", 0), state, partition_data(data(1, 0, 3) + marker(1, 3, ABORT), [(1, 0)])
        )
        assert state.position == 4 and not core._buffer
        core._add_records(("t", 0), state, partition_data(data(2, 4, 2) + marker(2, 6, COMMIT), []))
        buffered = core._buffer[("t", 0)]
        assert buffered.next_offset == 7 and len(buffered.records) == 2
        await core.cluster.close()

    asyncio.run(scenario())


def test_read_uncommitted_ignores_the_aborted_list() -> None:
    async def scenario() -> None:
        core = consumer_core("read_uncommitted")
        assert core.isolation == 0
        state = _PartState(position=0)
        core._parts[("t", 0)] = state
        core._add_records(
            ("t", 0), state, partition_data(data(1, 0, 3) + marker(1, 3, ABORT), [(1, 0)])
        )
        assert len(core._buffer[("t", 0)].records) == 3
        await core.cluster.close()

    asyncio.run(scenario())


def test_both_faces_take_the_isolation_level() -> None:
    aio = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", isolation_level="read_committed")
    assert aio.config["isolation.level"] == "read_committed"
    with pytest.raises(ConfigError):
        AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", isolation_level="read_all")
    with pytest.raises(ConfigError):
        ClientConfig({"bootstrap.servers": "x:1", "isolation.level": "uncommitted"}, "consumer")

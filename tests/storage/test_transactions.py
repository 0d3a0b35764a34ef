"""Transactions in the partition log: open transactions, markers, LSO, aborted lists.

Appends go through ``Log.append_as_leader`` (client batches) and ``Log.append_marker``
(the coordinator's COMMIT/ABORT), replicas copy them with ``append_as_follower``, and
the log is reopened after a clean close and after a simulated kill -9.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.records.batch import iter_batches
from odradek.records.codec import decode_batches, decode_end_txn_marker, encode_batch
from odradek.records.errors import CorruptRecordError
from odradek.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from odradek.storage.log import AppendInfo, Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, read_txn_index

from .conftest import FakeClock, make_batch


def open_test_log(directory: Path, clock: FakeClock, **kwargs: object) -> Log:
    config = kwargs.pop("config", None) or LogConfig(retention_ms=-1, file_delete_delay_ms=0)
    log, _ = open_log(directory, config, clock=clock, **kwargs)  # type: ignore[arg-type]
    return log


def abandon(log: Log) -> None:
    """What kill -9 leaves: files as they are, nothing flushed or written at close."""
    for segment in log.segments + [s for _, s in log.pending_deletions]:
        for fd in (segment.fd, segment.offset_index._fd, segment.time_index._fd):
            if fd >= 0:
                os.close(fd)
        segment.fd = segment.offset_index._fd = segment.time_index._fd = -1
        segment.txn_index.abandon()
    log.closed = True


class Producer:
    """A transactional producer writing to one log."""

    def __init__(self, log: Log, clock: FakeClock, producer_id: int, epoch: int = 0) -> None:
        self.log, self.clock = log, clock
        self.producer_id, self.epoch, self.sequence = producer_id, epoch, 0
        self.coordinator_epoch = 0

    def send(self, count: int = 2, *, transactional: bool = True) -> AppendInfo:
        batch = make_batch(
            count,
            timestamp=self.clock(),
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
            is_transactional=transactional,
        )
        info = self.log.append_as_leader(batch, leader_epoch=0)
        self.sequence += count
        return info

    def end(self, commit: bool) -> AppendInfo:
        return self.log.append_marker(
            self.producer_id, self.epoch, self.coordinator_epoch, commit, leader_epoch=0
        )


def test_transaction_holds_the_lso_until_its_marker_is_below_the_hw(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_test_log(tmp_path / "t-0", clock)
    log.append_as_leader(make_batch(3, timestamp=clock()), 0)  # offsets 0-2
    log.high_watermark = 3
    assert log.first_unstable_offset is None and log.last_stable_offset == 3
    p = Producer(log, clock, 100)
    p.send(2)  # 3-4
    p.send(1)  # 5
    log.high_watermark = log.log_end_offset
    assert log.first_unstable_offset == 3 and log.last_stable_offset == 3
    assert log.producer_state.producers[100].current_txn_first_offset == 3
    marker = p.end(commit=True)  # 6
    assert (marker.first_offset, marker.last_offset, marker.record_count) == (6, 6, 1)
    assert log.producer_state.producers[100].current_txn_first_offset == -1
    # Completed, but the marker is not replicated yet: still unstable.
    assert log.first_unstable_offset == 3
    log.high_watermark = 6
    assert log.last_stable_offset == 3
    log.high_watermark = 7
    assert log.first_unstable_offset is None and log.last_stable_offset == 7
    assert log.collect_aborted_transactions(0, 7) == []  # committed: not in the list


def test_interleaved_producers_and_abort_entries(tmp_path: Path, clock: FakeClock) -> None:
    log = open_test_log(tmp_path / "t-0", clock)
    a, b, c = Producer(log, clock, 1), Producer(log, clock, 2), Producer(log, clock, 3)
    a.send()  # 0-1
    b.send()  # 2-3
    a.send()  # 4-5
    c.send()  # 6-7
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 0
    a.end(commit=False)  # 8: B (2) is the oldest other open txn
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 2
    b.end(commit=True)  # 9
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 6
    c.end(commit=False)  # 10: nothing else open
    assert log.first_unstable_offset == 6  # marker 10 not below the HW yet
    log.high_watermark = log.log_end_offset
    assert log.first_unstable_offset is None and log.last_stable_offset == 11
    expected = [AbortedTxn(1, 0, 8, 2), AbortedTxn(3, 6, 10, 11)]
    assert log.collect_aborted_transactions(0, 11) == expected
    assert log.collect_aborted_transactions(9, 11) == expected[1:]
    assert log.collect_aborted_transactions(0, 6) == expected[:1]
    assert read_txn_index(tmp_path / "t-0" / f"{0:020d}{TXN_INDEX_SUFFIX}") == expected
    # The marker batch: Kafka's control format.
    data = b"".join(log.read_batches(8, 9))
    (batch,) = list(decode_batches(data))
    header = batch.header
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1, 0, -1)
    assert batch.records[0].key == b"\x00\x00\x00\x00"
    assert decode_end_txn_marker(batch.records[0]) == (False, 0)


def test_txn_errors(tmp_path: Path, clock: FakeClock) -> None:
    log = open_test_log(tmp_path / "t-0", clock)
    p = Producer(log, clock, 5, epoch=3)
    p.coordinator_epoch = 7
    p.send()
    with pytest.raises(InvalidTxnStateError) as error:
        p.send(transactional=False)
    assert error.value.code == "INVALID_TXN_STATE"
    p.sequence -= 2
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(5, 2, 7, True, 0)
    p.end(commit=True)
    with pytest.raises(TransactionCoordinatorFencedError) as fenced:
        log.append_marker(5, 3, 6, False, 0)
    assert fenced.value.code == "TRANSACTION_COORDINATOR_FENCED"
    assert log.log_end_offset == end + 1
    assert log.producer_state.producers[5].coordinator_epoch == 7
    old = Producer(log, clock, 5, epoch=2)
    with pytest.raises(InvalidProducerEpochError):
        old.send()
    # A marker for a producer with nothing open is written and completes nothing.
    p.end(commit=False)
    log.append_marker(99, 0, 0, False, 0)
    assert log.log_end_offset == end + 3
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    # After the commit, non-transactional batches are fine again.
    p.send(transactional=False)


def test_client_control_batches_stay_refused(tmp_path: Path, clock: FakeClock) -> None:
    from odradek.records.codec import encode_end_txn_marker
    from odradek.storage.errors import InvalidRecordError

    log = open_test_log(tmp_path / "t-0", clock)
    marker = encode_batch(
        [encode_end_txn_marker(True, 0, timestamp=clock())],
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(marker, 0)


def write_many(log: Log, clock: FakeClock, rounds: int) -> list[AbortedTxn]:
    """Interleaved producers, every third transaction aborted; the expected entries."""
    producers = [Producer(log, clock, pid) for pid in (10, 11, 12)]
    expected = []
    open_first: dict[int, int] = {}
    for i in range(rounds):
        p = producers[i % 3]
        info = p.send(3)
        open_first.setdefault(p.producer_id, info.first_offset)
        if i % 2 == 1:
            q = producers[(i // 2) % 3]
            if q.producer_id in open_first:
                first = open_first.pop(q.producer_id)
                abort = i % 3 == 0
                marker = q.end(commit=not abort).first_offset
                if abort:
                    stable = min(open_first.values(), default=marker + 1)
                    expected.append(AbortedTxn(q.producer_id, first, marker, stable))
    return expected


def brute_force(entries: list[AbortedTxn], start: int, upper: int) -> list[AbortedTxn]:
    return [e for e in entries if e.last_offset >= start and e.first_offset < upper]


@pytest.mark.parametrize("segment_bytes", [400, 1000, 1024 * 1024 * 1024])
def test_aborted_list_across_segments(tmp_path: Path, clock: FakeClock, segment_bytes: int) -> None:
    config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1)
    log = open_test_log(tmp_path / "t-0", clock, config=config)
    expected = write_many(log, clock, 60)
    assert expected
    if segment_bytes < 10_000:
        assert len(log.segments) > 5
        with_entries = [s for s in log.segments if s.txn_index.entries]
        assert len(with_entries) > 1
        # Each entry sits in the segment holding its marker; only those files exist.
        for segment in log.segments:
            for entry in segment.txn_index.entries:
                assert segment.base_offset <= entry.last_offset < segment.next_offset
        files = sorted(p.name for p in (tmp_path / "t-0").glob(f"*{TXN_INDEX_SUFFIX}"))
        assert files == [f"{s.base_offset:020d}{TXN_INDEX_SUFFIX}" for s in with_entries]
    end = log.log_end_offset
    for start in range(0, end, 7):
        for upper in range(start + 1, end + 1, 5):
            assert log.collect_aborted_transactions(start, upper) == brute_force(
                expected, start, upper
            ), (start, upper)
    log.close()
    log = open_test_log(tmp_path / "t-0", clock, config=config)
    assert log.collect_aborted_transactions(0, end) == expected


def test_truncation_drops_entries_and_reopens_transactions(
    tmp_path: Path, clock: FakeClock
) -> None:
    config = LogConfig(segment_bytes=500, retention_ms=-1)
    log = open_test_log(tmp_path / "t-0", clock, config=config)
    a, b = Producer(log, clock, 1), Producer(log, clock, 2)
    a.send()  # 0-1
    for _ in range(5):
        log.append_as_leader(make_batch(3, timestamp=clock()), 0)
    b.send()
    b_first = log.log_end_offset - 2
    marker = a.end(commit=False).first_offset
    log.append_as_leader(make_batch(3, timestamp=clock()), 0)
    log.high_watermark = log.log_end_offset
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(1, 0, marker, b_first)
    ]
    assert log.last_stable_offset == b_first
    log.truncate_to(marker)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert log.producer_state.producers[1].current_txn_first_offset == 0
    assert log.first_unstable_offset == 0 and log.last_stable_offset == 0
    assert not any(s.txn_index.entries for s in log.segments)
    # The abort is written again (a new leader's marker) and lands in the index again.
    again = a.end(commit=False).first_offset
    assert again == marker
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(1, 0, marker, b_first)
    ]
    log.truncate_fully_and_start_at(100)
    assert log.first_unstable_offset is None
    assert log.collect_aborted_transactions(100, 100) == []
    assert not list((tmp_path / "t-0").glob(f"*{TXN_INDEX_SUFFIX}"))


def test_follower_applies_markers_like_the_leader(tmp_path: Path, clock: FakeClock) -> None:
    config = LogConfig(segment_bytes=700, retention_ms=-1)
    leader = open_test_log(tmp_path / "leader", clock, config=config)
    follower = open_test_log(tmp_path / "follower", clock, config=config)
    expected = write_many(leader, clock, 40)
    open_p = Producer(leader, clock, 77)
    open_p.send()
    # Replicate in chunks of a few batches (a follower's fetches).
    data = b"".join(leader.read_batches(0))
    batches = [data[h.position : h.position + h.size] for h in iter_batches(data)]
    for i in range(0, len(batches), 3):
        follower.append_as_follower(b"".join(batches[i : i + 3]))
    for log in (leader, follower):
        log.high_watermark = log.log_end_offset
    end = leader.log_end_offset
    assert follower.log_end_offset == end
    assert follower.collect_aborted_transactions(0, end) == expected
    assert leader.collect_aborted_transactions(0, end) == expected
    opened = [e.current_txn_first_offset for e in leader.producer_state.producers.values()]
    oldest = min(o for o in opened if o >= 0)
    assert follower.last_stable_offset == leader.last_stable_offset == oldest
    lead_state = {
        p: (e.epoch, e.coordinator_epoch, e.current_txn_first_offset)
        for p, e in leader.producer_state.producers.items()
    }
    follow_state = {
        p: (e.epoch, e.coordinator_epoch, e.current_txn_first_offset)
        for p, e in follower.producer_state.producers.items()
    }
    assert follow_state == lead_state


def test_follower_refuses_an_undecodable_marker(tmp_path: Path, clock: FakeClock) -> None:
    from odradek.records.codec import Record

    follower = open_test_log(tmp_path / "f", clock)
    bad = encode_batch(
        [Record(0, clock(), b"\x00\x00\x00\x01", b"\x00")],  # COMMIT with a short value
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bad)
    assert follower.log_end_offset == 0 and follower.size == 0


@pytest.mark.parametrize("clean", [True, False])
def test_restart_keeps_open_transactions_and_aborted_lists(
    tmp_path: Path, clock: FakeClock, clean: bool
) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=600, retention_ms=-1)
    log = open_test_log(directory, clock, config=config)
    expected = write_many(log, clock, 50)
    still_open = Producer(log, clock, 55)
    first = still_open.send().first_offset
    opened = {p: e.current_txn_first_offset for p, e in log.producer_state.producers.items()}
    oldest = min(o for o in opened.values() if o >= 0)
    end = log.log_end_offset
    if clean:
        log.close()
        recovery_point = 0
    else:
        log.flush()  # recovery point at the end; then more unflushed work, then kill -9
        recovery_point = end
        more = Producer(log, clock, 56)
        more.send()
        more.end(commit=False)
        expected.append(AbortedTxn(56, end, end + 2, oldest))
        end = log.log_end_offset
        # The recovered segment's txnindex comes back from the log, not from the file.
        last = log.segments[-1]
        assert last.txn_index.entries
        last.txn_index.path.write_bytes(last.txn_index.path.read_bytes()[:-5])
        abandon(log)
    log = open_test_log(
        directory, clock, config=config, clean_shutdown=clean, recovery_point=recovery_point
    )
    assert log.log_end_offset == end
    log.high_watermark = end
    assert log.collect_aborted_transactions(0, end) == expected
    assert log.producer_state.producers[55].current_txn_first_offset == first
    now_open = {p: e.current_txn_first_offset for p, e in log.producer_state.producers.items()}
    assert {p: o for p, o in now_open.items() if o >= 0} == {
        p: o for p, o in opened.items() if o >= 0
    }
    assert log.first_unstable_offset == oldest and log.last_stable_offset == oldest
    for pid, first_offset in opened.items():
        if first_offset >= 0:
            log.append_marker(pid, 0, 0, True, 0)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.log_end_offset


def test_full_recovery_rebuilds_every_txn_index(tmp_path: Path, clock: FakeClock) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=600, retention_ms=-1)
    log = open_test_log(directory, clock, config=config)
    expected = write_many(log, clock, 50)
    end = log.log_end_offset
    abandon(log)
    for path in directory.glob(f"*{TXN_INDEX_SUFFIX}"):
        path.unlink()
    for path in directory.glob("*.snapshot"):
        path.unlink()
    log = open_test_log(directory, clock, config=config, clean_shutdown=False, recovery_point=0)
    assert log.collect_aborted_transactions(0, end) == expected
    assert sorted(directory.glob(f"*{TXN_INDEX_SUFFIX}"))


def test_retention_deletes_txn_indexes(tmp_path: Path, clock: FakeClock) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=600, retention_ms=-1, file_delete_delay_ms=0)
    log = open_test_log(directory, clock, config=config)
    write_many(log, clock, 50)
    log.high_watermark = log.log_end_offset
    before = {p.name for p in directory.glob(f"*{TXN_INDEX_SUFFIX}")}
    assert len(before) > 1
    last_base = log.segments[-1].base_offset
    log.increment_log_start_offset(last_base)
    log.purge_deleted_segments(force=True)
    after = {p.name for p in directory.glob(f"*{TXN_INDEX_SUFFIX}*")}
    assert after <= {f"{last_base:020d}{TXN_INDEX_SUFFIX}"}
    assert all(
        e.last_offset >= last_base
        for e in log.collect_aborted_transactions(last_base, log.log_end_offset)
    )

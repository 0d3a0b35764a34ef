"""Model-based test of Log: a real log in a temp dir against a simple in-memory model.

The model is the list of batches physically in the log (offsets, records, leader
epoch, producer fields, size) plus the log start offset, high watermark, log end
offset and the leader epoch entries. Segment boundaries are decided by the log (tiny
``segment.bytes``, small indexes, so rolls and index entries are frequent); the model
reads them back and checks they are consistent with its batches, then predicts
everything else: read results (decoded and compared record by record), truncation,
retention by time and size, DeleteRecords, timestamp lookups, idempotent producer
outcomes, and the state after clean and unclean reopen.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from odradek.records.batch import GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD
from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.storage.errors import (
    InvalidProducerEpochError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
)
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

T0 = 1_700_000_000_000
PIDS = (4000, 4001)


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class MBatch:
    """A batch as the model knows it."""

    base: int
    last: int
    records: list[Record]  # absolute offsets
    leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    max_timestamp: int
    size: int
    client_bytes: bytes
    request: int = 0  # batches sent in one produce request share this

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + (self.last - self.base)


def abandon(log: Log) -> None:
    """What a killed process leaves: files as they are, staged index entries lost."""
    for segment in log.segments + [s for _, s in log.pending_deletions]:
        for fd in (segment.fd, segment.offset_index._fd, segment.time_index._fd):
            if fd >= 0:
                os.close(fd)
        segment.fd = segment.offset_index._fd = segment.time_index._fd = -1
    log.closed = True


def truncate_epochs_from_start(entries: list[tuple[int, int]], start: int) -> list[tuple[int, int]]:
    index = max((i for i, e in enumerate(entries) if e[1] <= start), default=-1)
    if index < 0:
        return entries
    return [(entries[index][0], start), *entries[index + 1 :]]


class LogModel(RuleBasedStateMachine):
    # -- setup ------------------------------------------------------------------------
    @initialize(
        segment_bytes=st.integers(300, 2000),
        interval=st.integers(0, 200),
        index_bytes=st.sampled_from([10_485_760, 48, 96]),
        delete_delay=st.sampled_from([0, 5_000]),
    )
    def setup(self, segment_bytes: int, interval: int, index_bytes: int, delete_delay: int):
        self.root = Path(tempfile.mkdtemp(prefix="odradek-model-"))
        self.directory = self.root / "topic-0"
        self.clock = Clock()
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=interval,
            segment_index_bytes=index_bytes,
            retention_ms=-1,
            retention_bytes=-1,
            file_delete_delay_ms=delete_delay,
        )
        self.log, _ = open_log(self.directory, self.config, clock=self.clock)
        self.batches: list[MBatch] = []
        self.leo = 0
        self.lso = 0
        self.hw = 0
        self.epochs: list[tuple[int, int]] = []
        self.leader_epoch = 0
        self.max_producer_epoch = dict.fromkeys(PIDS, -1)
        self.requests = 0

    def teardown(self) -> None:
        log = getattr(self, "log", None)
        if log is not None and not log.closed:
            log.close()
        if hasattr(self, "root"):
            shutil.rmtree(self.root, ignore_errors=True)

    # -- model helpers ------------------------------------------------------------------
    def first_segment_base(self) -> int:
        return self.batches[0].base if self.batches else self.leo

    def retained_producers(self) -> dict[int, tuple[int, list[MBatch]]]:
        """Producer state implied by the batches at or above the log start offset."""
        state: dict[int, tuple[int, list[MBatch]]] = {}
        for b in self.batches:
            if b.last < self.lso or b.producer_id < 0:
                continue
            epoch, batches = state.get(b.producer_id, (-1, []))
            if b.producer_epoch != epoch:
                epoch, batches = b.producer_epoch, []
            state[b.producer_id] = (epoch, [*batches, b][-5:])
        return state

    def segment_groups(self) -> list[tuple[int, list[MBatch]]]:
        """The log's segment bases with the model batches each holds."""
        bases = [s.base_offset for s in self.log.segments]
        groups: list[tuple[int, list[MBatch]]] = [(b, []) for b in bases]
        for batch in self.batches:
            index = max(i for i, b in enumerate(bases) if b <= batch.base)
            groups[index][1].append(batch)
        return groups

    def set_hw(self, offset: int) -> None:
        self.hw = min(max(offset, self.lso), self.leo)

    # -- appends ----------------------------------------------------------------------
    def _records(self, data, count: int) -> list[Record]:
        # One draw per batch (record contents from a seeded RNG) keeps each step small,
        # so runs reach the full step count within Hypothesis's per-example budget.
        rng = random.Random(data.draw(st.integers(0, 2**32), label="records seed"))
        now = self.clock()
        records = []
        for i in range(count):
            timestamp = now - rng.choice([0, rng.randint(0, 2_000), rng.randint(0, 20_000)])
            key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 8))
            value = b"v" * rng.choice([0, rng.randint(0, 40), rng.randint(0, 160)])
            records.append(Record(i, timestamp, key, value))
        return records

    def _apply_append(self, client: bytes, records: list[Record], info, pid, pepoch, seq):
        assert not info.duplicate
        assert info.first_offset == self.leo
        assert info.last_offset == self.leo + len(records) - 1
        batch = MBatch(
            self.leo,
            info.last_offset,
            [replace(r, offset=r.offset + self.leo) for r in records],
            self.leader_epoch,
            pid,
            pepoch,
            seq,
            max(r.timestamp for r in records),
            len(client),
            client,
            self.requests,
        )
        self.batches.append(batch)
        if not self.epochs or self.leader_epoch > self.epochs[-1][0]:
            # A newer epoch starting at the same offset replaces the older entry (one
            # can be left at the log end by DeleteRecords up to the end).
            self.epochs = [e for e in self.epochs if e[1] < batch.base]
            self.epochs.append((self.leader_epoch, batch.base))
        self.leo = batch.last + 1
        if pid >= 0:
            self.max_producer_epoch[pid] = max(self.max_producer_epoch[pid], pepoch)

    @rule(
        data=st.data(),
        count=st.integers(1, 4),
        epoch_bump=st.sampled_from([0, 0, 0, 0, 1, 2]),
        compression=st.sampled_from([NO_COMPRESSION] * 6 + [GZIP, SNAPPY, LZ4, ZSTD]),
        two_batches=st.booleans(),
    )
    def append_plain(self, data, count, epoch_bump, compression, two_batches):
        self.leader_epoch += epoch_bump
        parts = [self._records(data, count)]
        if two_batches:
            parts.append(self._records(data, data.draw(st.integers(1, 3), label="count2")))
        clients = [encode_batch(p, compression=compression) for p in parts]
        info = self.log.append_as_leader(b"".join(clients), self.leader_epoch)
        self.requests += 1
        assert info.first_offset == self.leo
        assert info.record_count == sum(len(p) for p in parts)
        for client, records in zip(clients, parts, strict=True):
            first = self.leo
            self._apply_append(
                client,
                records,
                type(info)(first, first + len(records) - 1, 0, -1, 0, len(records), 0),
                -1,
                -1,
                -1,
            )
        assert info.last_offset == self.leo - 1

    @rule(
        data=st.data(),
        pid=st.sampled_from(PIDS),
        kind=st.sampled_from(
            ["next", "next", "next", "new_epoch", "retry", "retry", "gap", "old", "bad_new"]
        ),
        count=st.integers(1, 4),
    )
    def append_idempotent(self, data, pid, kind, count):
        known = self.retained_producers().get(pid)
        if known is None and kind != "new_epoch":
            kind = "next"
        records = self._records(data, count)
        event(f"idempotent append: {kind}")
        if kind == "retry":
            assert known is not None
            original = data.draw(st.sampled_from(known[1]), label="retried batch")
            info = self.log.append_as_leader(original.client_bytes, self.leader_epoch)
            assert info.duplicate
            assert (info.first_offset, info.last_offset) == (original.base, original.last)
            return
        new_epoch = self.max_producer_epoch[pid] + 1
        if kind == "next":
            pepoch, seq = (known[0], known[1][-1].last_sequence + 1) if known else (new_epoch, 0)
        elif kind == "new_epoch":
            pepoch, seq = new_epoch, 0
        elif kind == "gap":
            assert known is not None
            pepoch, seq = known[0], known[1][-1].last_sequence + 2
        elif kind == "old":
            assert known is not None
            if known[0] == 0:
                return
            pepoch, seq = known[0] - 1, 0
        else:  # a new epoch must start at sequence 0
            pepoch, seq = new_epoch, 3
        client = encode_batch(records, producer_id=pid, producer_epoch=pepoch, base_sequence=seq)
        if kind == "gap" or kind == "bad_new":
            with pytest.raises(OutOfOrderSequenceError):
                self.log.append_as_leader(client, self.leader_epoch)
            return
        if kind == "old":
            with pytest.raises(InvalidProducerEpochError):
                self.log.append_as_leader(client, self.leader_epoch)
            return
        info = self.log.append_as_leader(client, self.leader_epoch)
        self.requests += 1
        self._apply_append(client, records, info, pid, pepoch, seq)

    @rule(data=st.data(), appends=st.integers(2, 8))
    def append_several(self, data, appends):
        """Bursts of appends, so logs grow past many segments between the other rules."""
        for _ in range(appends):
            if data.draw(st.booleans(), label="idempotent"):
                self.append_idempotent(
                    data,
                    data.draw(st.sampled_from(PIDS), label="pid"),
                    data.draw(st.sampled_from(["next", "next", "next", "new_epoch", "retry"])),
                    data.draw(st.integers(1, 4), label="count"),
                )
            else:
                self.append_plain(
                    data,
                    data.draw(st.integers(1, 4), label="count"),
                    data.draw(st.sampled_from([0, 0, 0, 1]), label="epoch bump"),
                    data.draw(st.sampled_from([NO_COMPRESSION] * 4 + [LZ4]), label="codec"),
                    data.draw(st.booleans(), label="two batches"),
                )

    @rule()
    def roll(self):
        self.log.roll()

    # -- reads ------------------------------------------------------------------------
    def expected_read(self, offset, max_bytes, max_offset, min_one) -> list[MBatch] | None:
        """None means OffsetOutOfRangeError."""
        if offset < self.lso or offset > self.leo:
            return None
        limit = self.leo if max_offset is None else min(max_offset, self.leo)
        if offset >= limit:
            return []
        for _, group in self.segment_groups():
            candidates = [b for b in group if b.last >= offset]
            if candidates:
                break
        else:
            raise AssertionError(f"no batch holds offset {offset}")
        result: list[MBatch] = []
        total = 0
        for i, b in enumerate(candidates):
            if b.last >= limit:
                break
            if total + b.size > max_bytes and not (i == 0 and min_one):
                break
            result.append(b)
            total += b.size
            if i == 0 and b.size > max_bytes:
                break
        return result

    def do_read(self, offset, max_bytes, max_offset, min_one) -> list[MBatch] | None:
        expected = self.expected_read(offset, max_bytes, max_offset, min_one)
        if expected is None:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
            return None
        info = self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
        assert (info.log_start_offset, info.log_end_offset, info.high_watermark) == (
            self.lso,
            self.leo,
            self.hw,
        )
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.ranges)
        decoded = list(decode_batches(data))
        assert [d.header.base_offset for d in decoded] == [b.base for b in expected]
        for d, b in zip(decoded, expected, strict=True):
            assert d.records == b.records
            assert d.header.partition_leader_epoch == b.leader_epoch
            assert d.header.size == b.size
        assert info.first_batch_offset == (expected[0].base if expected else None)
        return expected

    @rule(
        data=st.data(),
        max_bytes=st.integers(1, 3000),
        min_one=st.booleans(),
        bounded=st.booleans(),
    )
    def read(self, data, max_bytes, min_one, bounded):
        offset = data.draw(st.integers(max(0, self.lso - 2), self.leo + 2), label="offset")
        max_offset = None
        if bounded:
            max_offset = data.draw(st.integers(0, self.leo + 2), label="max_offset")
        self.do_read(offset, max_bytes, max_offset, min_one)

    @rule(max_bytes=st.integers(1, 1500), to_hw=st.booleans())
    def walk(self, max_bytes, to_hw):
        """Reading on from the batch after the last one returned walks the whole log."""
        max_offset = self.hw if to_hw else None
        end = self.hw if to_hw else self.leo
        offset, seen = self.lso, []
        for _ in range(len(self.batches) + 2):
            if offset >= end:
                break
            got = self.do_read(offset, max_bytes, max_offset, True)
            if not got:
                break  # the HW falls inside the next batch
            seen.extend(got)
            offset = got[-1].last + 1
        visible = [b for b in self.batches if b.last >= self.lso and b.last < end]
        assert [b.base for b in seen] == [b.base for b in visible]

    @rule(data=st.data())
    def offset_for_timestamp(self, data):
        timestamps = [r.timestamp for b in self.batches for r in b.records]
        candidates = st.integers(T0 - 30_000, self.clock() + 10)
        if timestamps:
            candidates = st.one_of(
                candidates,
                st.sampled_from(timestamps),
                st.sampled_from(timestamps).map(lambda t: t + 1),
            )
        target = data.draw(candidates, label="timestamp")
        expected = None
        for b in self.batches:
            for r in b.records:
                if r.offset >= self.lso and r.timestamp >= target:
                    expected = (r.offset, r.timestamp)
                    break
            if expected:
                break
        assert self.log.offset_for_timestamp(target) == expected

    # -- truncation, HW, retention, log start -----------------------------------------
    @rule(data=st.data())
    def truncate(self, data):
        near_end = st.integers(max(0, self.leo - 12), self.leo + 1)
        offset = data.draw(st.one_of(near_end, st.integers(0, self.leo + 1)), label="truncate to")
        changed = self.log.truncate_to(offset)
        event(
            "truncate: "
            + (
                "none"
                if offset >= self.leo
                else "full"
                if offset <= self.first_segment_base()
                else "partial"
            )
        )
        if offset >= self.leo:
            assert not changed
            # nothing removed, but an epoch starting at the log end (one led without a
            # record, or the first epoch after the log start moved to the end) goes
            self.epochs = [e for e in self.epochs if e[1] < self.leo]
            return
        assert changed
        if offset <= self.first_segment_base():
            self.batches, self.leo, self.lso, self.epochs = [], offset, offset, []
        else:
            removed = [b for b in self.batches if b.last >= offset]
            self.batches = [b for b in self.batches if b.last < offset]
            self.leo = self.batches[-1].last + 1 if self.batches else removed[0].base
            self.epochs = [e for e in self.epochs if e[1] < self.leo]
            self.lso = min(self.lso, self.leo)
        self.hw = min(self.hw, self.leo)

    @rule(data=st.data())
    def high_watermark(self, data):
        anywhere = st.integers(max(0, self.lso - 2), self.leo + 2)
        offset = data.draw(st.one_of(st.just(self.leo), anywhere), label="hw")
        self.log.high_watermark = offset
        self.set_hw(offset)

    def _delete_front(self, groups, predicate) -> int:
        count = 0
        while len(groups) > 1:
            next_base = groups[1][0]
            if next_base > self.hw or not predicate(groups[0], next_base):
                break
            removed = groups.pop(0)
            self.batches = self.batches[len(removed[1]) :]
            count += 1
        if count:
            self.lso = max(self.lso, groups[0][0])
            self.epochs = truncate_epochs_from_start(self.epochs, self.lso)
        return count

    def _expected_retention(self, retention_ms: int, retention_bytes: int) -> int:
        groups = self.segment_groups()
        deleted = self._delete_front(groups, lambda g, next_base: next_base <= self.lso)
        now = self.clock()
        if retention_ms >= 0:
            deleted += self._delete_front(
                groups,
                lambda g, _: now - max(b.max_timestamp for b in g[1]) > retention_ms,
            )
        if retention_bytes >= 0:
            excess = sum(b.size for b in self.batches) - retention_bytes

            def over(g, _):
                nonlocal excess
                size = sum(b.size for b in g[1])
                if excess - size < 0:
                    return False
                excess -= size
                return True

            deleted += self._delete_front(groups, over)
        return deleted

    @rule(
        advance=st.sampled_from([0, 1_000, 10_000, 60_000]),
        retention_ms=st.sampled_from([-1, 0, 5_000, 20_000, 100_000]),
        retention_bytes=st.one_of(st.just(-1), st.integers(0, 4000)),
    )
    def retention(self, advance, retention_ms, retention_bytes):
        self.clock.now_ms += advance
        self.log.update_config(
            replace(self.config, retention_ms=retention_ms, retention_bytes=retention_bytes)
        )
        expected = self._expected_retention(retention_ms, retention_bytes)
        assert self.log.delete_old_segments() == expected
        event(f"retention deleted segments: {min(expected, 3)}")
        self.log.update_config(self.config)

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(max(0, self.lso - 1), self.hw + 2), label="new start")
        if offset > self.hw:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.increment_log_start_offset(offset)
            return
        groups = self.segment_groups()
        changed = self.log.increment_log_start_offset(offset)
        assert changed == (offset > self.lso)
        if not changed:
            return
        self.lso = offset
        self.epochs = truncate_epochs_from_start(self.epochs, offset)
        self._delete_front(groups, lambda g, next_base: next_base <= self.lso)
        # Reads below the new start are out of range.
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(offset - 1, 1000)

    @rule()
    def flush(self):
        self.log.flush()
        assert self.log.recovery_point == self.leo

    @rule(advance=st.sampled_from([0, 10_000]))
    def purge(self, advance):
        self.clock.now_ms += advance
        self.log.purge_deleted_segments()

    # -- restarts ---------------------------------------------------------------------
    def _reopen(self, clean: bool, recovery_point: int) -> None:
        log, stats = open_log(
            self.directory,
            self.config,
            recovery_point=recovery_point,
            log_start_offset=self.lso,
            clean_shutdown=clean,
            clock=self.clock,
        )
        self.log = log
        # Loading trims epochs to the log end (an entry may start at the end after
        # DeleteRecords up to the log end; Kafka's loader drops it too).
        self.epochs = [e for e in self.epochs if e[1] < self.leo]
        assert stats.corruption is None and stats.bytes_truncated == 0
        if clean:
            assert stats.recovered_segments == 0
        log.high_watermark = self.hw

    @rule()
    def reopen_clean(self):
        recovery_point = self.log.recovery_point
        self.log.close()
        self._reopen(True, recovery_point)

    @rule(from_zero=st.booleans())
    def reopen_after_crash(self, from_zero):
        recovery_point = 0 if from_zero else self.log.recovery_point
        abandon(self.log)
        self._reopen(False, recovery_point)
        assert self.log.recovery_point == self.leo

    # -- invariants -------------------------------------------------------------------
    @invariant()
    def offsets_agree(self):
        log = self.log
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (
            self.lso,
            self.hw,
            self.leo,
        )
        assert self.lso <= self.hw <= self.leo
        assert log.recovery_point <= self.leo

    @invariant()
    def segments_agree(self):
        segments = self.log.segments
        groups = self.segment_groups()
        assert sum(len(g[1]) for g in groups) == len(self.batches)
        for i, (segment, (base, group)) in enumerate(zip(segments, groups, strict=True)):
            assert segment.size == sum(b.size for b in group)
            if i + 1 < len(segments):
                assert group, "only the active segment may be empty"
                assert segment.next_offset == segments[i + 1].base_offset
            if group:
                assert group[0].base == base
                assert segment.next_offset == group[-1].last + 1
                assert segment.max_timestamp == max(b.max_timestamp for b in group)
                if len({b.request for b in group}) > 1:  # one request may exceed it
                    assert segment.size <= self.config.segment_bytes
        assert segments[-1].next_offset == self.leo
        for segment, (_, group) in zip(segments, groups, strict=True):
            # Index entries: (o, p) = "the batch at p ends at o"; (t, o) = "t is the
            # largest timestamp up to offset o".
            ends, position = {}, 0
            for b in group:
                ends[position] = b.last
                position += b.size
            index = segment.offset_index
            assert index.entries <= max(index.max_entries, 1)
            for offset, position in zip(index._offsets, index._positions, strict=True):
                assert ends.get(position) == offset
            time_index = segment.time_index
            for timestamp, offset in zip(time_index._timestamps, time_index._offsets, strict=True):
                upto = [b.max_timestamp for b in group if b.base <= offset]
                assert upto and max(upto) <= timestamp

    @invariant()
    def data_agrees(self):
        data = b"".join(self.log.read_batches(self.lso))
        decoded = list(decode_batches(data))
        visible = [b for b in self.batches if b.last >= self.lso]
        assert [d.header.base_offset for d in decoded] == [b.base for b in visible]
        for d, b in zip(decoded, visible, strict=True):
            assert d.records == b.records
            assert d.header.partition_leader_epoch == b.leader_epoch

    @invariant()
    def epochs_agree(self):
        assert [(e.epoch, e.start_offset) for e in self.log.epoch_cache.entries] == self.epochs

    @invariant()
    def producers_agree(self):
        """Producers with batches at or above the log start offset are known exactly.

        (Batches wholly below it may or may not still be remembered: a snapshot keeps
        them, a rebuild from the log cannot see them.)
        """
        actual = self.log.producer_state.producers
        for pid, (epoch, batches) in self.retained_producers().items():
            entry = actual.get(pid)
            assert entry is not None, pid
            assert entry.epoch == epoch
            got = [
                (b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                for b in entry.batches
                if b.last_offset >= self.lso
            ]
            assert got == [
                (b.base_sequence, b.last_sequence, b.base, b.last, b.max_timestamp) for b in batches
            ]


LogModel.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_log_model = LogModel.TestCase


def test_truncate_below_the_log_start_offset_keeps_start_le_end(tmp_path: Path) -> None:
    """Regression: truncating under a DeleteRecords start offset left start > end."""
    clock = Clock()
    log, _ = open_log(tmp_path / "t-0", LogConfig(retention_ms=-1), clock=clock)
    for _ in range(3):
        log.append_as_leader(encode_batch([Record(i, T0, None, b"x") for i in range(2)]), 0)
    log.high_watermark = 6
    assert log.increment_log_start_offset(3)
    assert log.truncate_to(3)  # the batch 2-3 straddles 3: the log ends at 2
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (2, 2, 2)
    assert log.read(2, 1000).ranges == []
    info = log.append_as_leader(encode_batch([Record(0, T0, None, b"y")]), 0)
    assert info.first_offset == 2
    assert log.read(2, 1000).first_batch_offset == 2
    log.close()

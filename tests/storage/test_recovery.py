"""Crash recovery properties of a partition log.

A workload (several segments, idempotent producers, several leader epochs, some
compressed batches) is written, the files are damaged the way a crash or a bad disk
would, and the log is reopened. Whatever the damage: no exception, and the log is
exactly the longest valid prefix of what was written — data, offsets, indexes,
producer state and leader epochs all agree with that prefix, and the log keeps
working (appends, duplicate detection).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import struct
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from odradek.records.batch import GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD
from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.storage.deferred_files import Submit
from odradek.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

T0 = 1_700_000_000_000
PIDS = (1000, 1001)

SETTINGS = settings(
    max_examples=75,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Written:
    """One appended batch: what the client sent and where it landed."""

    client_bytes: bytes
    records: list[Record]  # with their assigned offsets
    base: int
    last: int
    leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    max_timestamp: int
    disk_bytes: bytes = b""
    segment: int = 0  # index into the segment list at write time
    position: int = 0  # byte position in that segment


def make_config(segment_bytes: int, interval: int) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=interval,
        retention_ms=-1,
        file_delete_delay_ms=0,
    )


def write_workload(
    directory: Path,
    config: LogConfig,
    seed: int,
    count: int,
    clock: Clock,
    background: Submit | None = None,
) -> tuple[Log, list[Written]]:
    rng = random.Random(seed)
    log, _ = open_log(directory, config, clock=clock, background=background)
    _opened.append(log)
    leader_epoch = rng.randint(0, 3)
    producers = {pid: [rng.randint(0, 2), 0] for pid in PIDS}  # epoch, next sequence
    written: list[Written] = []
    for _ in range(count):
        if rng.random() < 0.12:
            leader_epoch += rng.randint(1, 2)
        n = rng.randint(1, 4)
        timestamps = [clock() - rng.randint(0, 5000) for _ in range(n)]
        records = [
            Record(
                i,
                timestamps[i],
                None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 8)),
                rng.randbytes(rng.randint(0, 60)),
            )
            for i in range(n)
        ]
        compression = NO_COMPRESSION
        if rng.random() < 0.2:
            compression = rng.choice([GZIP, SNAPPY, LZ4, ZSTD])
        pid, pepoch, seq = -1, -1, -1
        if rng.random() < 0.5:
            pid = rng.choice(PIDS)
            state = producers[pid]
            if rng.random() < 0.1:
                state[0] += 1
                state[1] = 0
            pepoch, seq = state
            state[1] += n
        client = encode_batch(
            records,
            compression=compression,
            producer_id=pid,
            producer_epoch=pepoch,
            base_sequence=seq,
        )
        info = log.append_as_leader(client, leader_epoch)
        assert not info.duplicate
        written.append(
            Written(
                client,
                [replace(r, offset=r.offset + info.first_offset) for r in records],
                info.first_offset,
                info.last_offset,
                leader_epoch,
                pid,
                pepoch,
                seq,
                max(timestamps),
            )
        )
        clock.now_ms += rng.randint(0, 50)
    # Where each batch landed, and its bytes as stored.
    bases = [s.base_offset for s in log.segments]
    positions: dict[int, int] = {}
    for w, data in zip(written, log.read_batches(0), strict=True):
        w.disk_bytes = data
        w.segment = max(i for i, b in enumerate(bases) if b <= w.base)
        w.position = positions.get(w.segment, 0)
        positions[w.segment] = w.position + len(data)
    return log, written


def abandon(log: Log) -> None:
    """Drop a log like a killed process would: close descriptors, write nothing."""
    segments = log.segments + [s for _, s in log.pending_deletions]
    for segment in segments:
        for fd in (segment.fd, segment.offset_index._fd, segment.time_index._fd):
            if fd >= 0:
                os.close(fd)
        segment.fd = segment.offset_index._fd = segment.time_index._fd = -1
    log.closed = True


def stop(log: Log, closed: bool) -> None:
    if closed:
        log.close()
    else:
        abandon(log)


# -- what the log must look like for a prefix of the workload ------------------------


def expected_epochs(prefix: list[Written]) -> list[tuple[int, int]]:
    entries: list[tuple[int, int]] = []
    for w in prefix:
        if not entries or w.leader_epoch > entries[-1][0]:
            entries.append((w.leader_epoch, w.base))
    return entries


def expected_producers(prefix: list[Written]) -> dict[int, tuple[int, list[tuple]]]:
    state: dict[int, tuple[int, list[tuple]]] = {}
    for w in prefix:
        if w.producer_id < 0:
            continue
        epoch, batches = state.get(w.producer_id, (-1, []))
        if w.producer_epoch != epoch:
            epoch, batches = w.producer_epoch, []
        last_seq = w.base_sequence + (w.last - w.base)
        batches = [*batches, (w.base_sequence, last_seq, w.base, w.last, w.max_timestamp)][-5:]
        state[w.producer_id] = (epoch, batches)
    return state


def actual_producers(log: Log) -> dict[int, tuple[int, list[tuple]]]:
    return {
        pid: (
            entry.epoch,
            [
                (b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                for b in entry.batches
            ],
        )
        for pid, entry in log.producer_state.producers.items()
    }


def first_at_or_after(records: list[Record], timestamp: int) -> tuple[int, int] | None:
    for record in records:
        if record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None


def check_log(log: Log, prefix: list[Written], clock: Clock) -> None:
    """The reopened log equals ``prefix`` in every respect, and still works."""
    end = prefix[-1].last + 1 if prefix else 0
    assert log.log_end_offset == end
    assert log.log_start_offset == 0
    assert log.recovery_point <= end
    segments = log.segments
    for before, after in itertools.pairwise(segments):
        assert before.next_offset == after.base_offset
        assert before.size > 0
    assert b"".join(log.read_batches(0)) == b"".join(w.disk_bytes for w in prefix)

    records = [r for w in prefix for r in w.records]
    # Offset lookups (index + scan) find the batch holding every offset.
    for w in prefix:
        for offset in {w.base, w.last}:
            info = log.read(offset, 1)
            assert len(info.ranges) == 1
            assert info.first_batch_offset == w.base
            r = info.ranges[0]
            assert os.pread(r.fd, r.length, r.position) == w.disk_bytes
    # Timestamp lookups agree with a linear scan.
    timestamps = sorted({r.timestamp for r in records})
    probes = set(timestamps[::3]) | {t + 1 for t in timestamps[::5]} | {T0 - 10**6, T0 + 10**6}
    for timestamp in probes:
        assert log.offset_for_timestamp(timestamp) == first_at_or_after(records, timestamp)
    for segment in segments:
        if segment.size:
            seg_records = [
                r for r in records if segment.base_offset <= r.offset < segment.next_offset
            ]
            assert segment.max_timestamp == max(r.timestamp for r in seg_records)

    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == expected_epochs(prefix)
    assert actual_producers(log) == expected_producers(prefix)

    # Retrying each producer's last batch is recognised as a duplicate.
    for pid in PIDS:
        mine = [w for w in prefix if w.producer_id == pid]
        if mine:
            info = log.append_as_leader(mine[-1].client_bytes, 99)
            assert info.duplicate
            assert (info.first_offset, info.last_offset) == (mine[-1].base, mine[-1].last)
    assert log.log_end_offset == end
    # And the log takes new data at its end.
    info = log.append_as_leader(encode_batch([Record(0, clock(), b"k", b"after recovery")]), 1000)
    assert info.first_offset == end
    assert log.epoch_cache.latest_entry is not None
    assert (log.epoch_cache.latest_entry.epoch, log.epoch_cache.latest_entry.start_offset) == (
        1000,
        end,
    )


def reopen(directory: Path, config: LogConfig, clock: Clock, **kwargs) -> Log:
    log, _ = open_log(directory, config, clock=clock, **kwargs)
    _opened.append(log)
    return log


workloads = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32),
        "count": st.integers(8, 45),
        "segment_bytes": st.integers(300, 1500),
        "interval": st.integers(0, 200),
    }
)


_opened: list[Log] = []  # logs to release if an example fails half-way


class TmpDir:
    """A fresh directory per hypothesis example; releases every log opened in it."""

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix="odradek-recovery-"))
        return self.path / "topic-0"

    def __exit__(self, *exc: object) -> None:
        while _opened:
            log = _opened.pop()
            if not log.closed:
                abandon(log)
        shutil.rmtree(self.path)


# -- (a) a torn tail --------------------------------------------------------------


@SETTINGS
@given(
    workload=workloads,
    closed=st.booleans(),
    cut_fraction=st.floats(0, 1),
    recovery_choice=st.sampled_from(["zero", "middle", "end"]),
)
def test_cut_last_segment(workload, closed: bool, cut_fraction: float, recovery_choice: str):
    clock = Clock()
    config = make_config(workload["segment_bytes"], workload["interval"])
    with TmpDir() as directory:
        log, written = write_workload(directory, config, workload["seed"], workload["count"], clock)
        bases = [s.base_offset for s in log.segments]
        end = log.log_end_offset
        stop(log, closed)
        last = len(bases) - 1
        path = directory / f"{bases[last]:020d}.log"
        size = path.stat().st_size
        cut = int(size * cut_fraction)
        os.truncate(path, cut)
        prefix = [w for w in written if w.segment < last or w.position + len(w.disk_bytes) <= cut]
        recovery_point = {"zero": 0, "middle": bases[len(bases) // 2], "end": end}[recovery_choice]
        log = reopen(directory, config, clock, recovery_point=recovery_point, clean_shutdown=False)
        check_log(log, prefix, clock)
        log.close()
        # A second (clean) reopen sees the same log plus the batch check_log appended.
        log = reopen(directory, config, clock, recovery_point=log.recovery_point)
        assert log.log_end_offset == (prefix[-1].last + 2 if prefix else 1)
        log.close()


# -- (b) a flipped byte anywhere in a batch's protected bytes ------------------------

# baseOffset (0-7) and partitionLeaderEpoch (12-15) are outside the CRC by design (the
# broker rewrites them); every other byte is covered by the length/magic/CRC checks.
UNPROTECTED = set(range(0, 8)) | set(range(12, 16))


@SETTINGS
@given(workload=workloads, closed=st.booleans(), data=st.data())
def test_flipped_byte_truncates_from_that_batch(workload, closed: bool, data):
    clock = Clock()
    config = make_config(workload["segment_bytes"], workload["interval"])
    with TmpDir() as directory:
        log, written = write_workload(directory, config, workload["seed"], workload["count"], clock)
        bases = [s.base_offset for s in log.segments]
        stop(log, closed)
        victim = data.draw(st.integers(0, len(written) - 1), label="batch")
        w = written[victim]
        protected = [i for i in range(len(w.disk_bytes)) if i not in UNPROTECTED]
        byte = data.draw(st.sampled_from(protected), label="byte")
        mask = data.draw(st.integers(1, 255), label="mask")
        path = directory / f"{bases[w.segment]:020d}.log"
        with open(path, "r+b") as handle:
            handle.seek(w.position + byte)
            original = handle.read(1)[0]
            handle.seek(w.position + byte)
            handle.write(bytes([original ^ mask]))
        log = reopen(directory, config, clock, recovery_point=0, clean_shutdown=False)
        check_log(log, written[:victim], clock)
        log.close()


@SETTINGS
@given(workload=workloads, data=st.data())
def test_flipped_offset_or_epoch_field_never_crashes(workload, data):
    """Bytes the CRC cannot protect: reopening still works and keeps a sane log."""
    clock = Clock()
    config = make_config(workload["segment_bytes"], workload["interval"])
    with TmpDir() as directory:
        log, written = write_workload(directory, config, workload["seed"], workload["count"], clock)
        bases = [s.base_offset for s in log.segments]
        abandon(log)
        victim = data.draw(st.integers(0, len(written) - 1), label="batch")
        w = written[victim]
        byte = data.draw(st.sampled_from(sorted(UNPROTECTED)), label="byte")
        mask = data.draw(st.integers(1, 255), label="mask")
        path = directory / f"{bases[w.segment]:020d}.log"
        with open(path, "r+b") as handle:
            handle.seek(w.position + byte)
            original = handle.read(1)[0]
            handle.seek(w.position + byte)
            handle.write(bytes([original ^ mask]))
        log = reopen(directory, config, clock, recovery_point=0, clean_shutdown=False)
        # Everything before the damaged batch is intact; offsets only go up.
        data_bytes = b"".join(log.read_batches(0))
        assert data_bytes.startswith(b"".join(x.disk_bytes for x in written[:victim]))
        previous = -1
        for batch in decode_batches(data_bytes):
            assert batch.header.base_offset > previous
            previous = batch.header.last_offset
        assert log.log_end_offset >= written[victim].base
        segments = log.segments
        for before, after in itertools.pairwise(segments):
            assert before.next_offset <= after.base_offset
        info = log.append_as_leader(encode_batch([Record(0, clock(), None, b"x")]), 1000)
        assert info.first_offset == log.log_end_offset - 1
        log.close()


# -- (c) damaged derived files ---------------------------------------------------------

# The workload of the explicit examples.
_W = {"seed": 7, "count": 40, "segment_bytes": 500, "interval": 30}


INDEX_ENTRY_SIZES = {".index": 8, ".timeindex": 12}


def _damage(path: Path, kind: str, how: str, rng: random.Random, clean: bool) -> None:
    """Damage ``path`` detectably.

    After a crash (``clean`` False) the indexes are rebuilt whatever they hold. After a
    clean shutdown they are trusted once they pass their checks (whole entries, keys
    increasing, inside the log) — as in Kafka, a plausible-looking wrong entry cannot
    be told apart — so there only damage those checks can see is used. The text
    epoch checkpoint is damaged so that it no longer parses (changing one digit into
    another yields a different valid file, which no reader could detect).
    """
    size = path.stat().st_size
    entry = INDEX_ENTRY_SIZES.get(kind)
    if how == "delete":
        path.unlink()
    elif kind == LEADER_EPOCH_CHECKPOINT:
        data = bytearray(path.read_bytes())
        if how == "truncate":
            data = bytearray()  # zero bytes: read as "no entries", like a lost file
        elif how == "garble":
            data[rng.randrange(len(data))] ^= 0x80  # no longer UTF-8
        else:
            data = bytearray(b"\xff" + rng.randbytes(rng.randint(0, 40)))
        path.write_bytes(bytes(data))
    elif how == "truncate":
        if clean and entry:
            if size < entry:
                path.write_bytes(b"\x00" * (entry + 1))
            else:
                os.truncate(path, size - rng.randint(1, entry - 1))
        else:
            os.truncate(path, rng.randint(0, max(0, size - 1)))
    elif how == "garble" and not (clean and entry):
        data = bytearray(path.read_bytes() or b"\x00" * 16)
        for _ in range(max(1, len(data) // 8)):
            data[rng.randrange(len(data))] ^= rng.randint(1, 255)
        path.write_bytes(bytes(data))
    else:  # junk (and garble of a trusted index): random bytes, not whole entries
        length = rng.randint(0, 5) * 24 + rng.randint(1, 7)
        path.write_bytes(rng.randbytes(length))


@SETTINGS
@given(
    workload=workloads,
    closed=st.booleans(),
    kind=st.sampled_from([".index", ".timeindex", ".snapshot", LEADER_EPOCH_CHECKPOINT]),
    how=st.sampled_from(["delete", "truncate", "garble", "junk"]),
    clean_reopen=st.booleans(),
    damage_seed=st.integers(0, 2**32),
)
@example(_W, False, LEADER_EPOCH_CHECKPOINT, "delete", False, 0)
@example(_W, True, LEADER_EPOCH_CHECKPOINT, "truncate", False, 0)
@example(_W, True, LEADER_EPOCH_CHECKPOINT, "garble", True, 0)
@example(_W, True, ".index", "delete", True, 0)
@example(_W, True, ".timeindex", "truncate", True, 0)
@example(_W, True, ".snapshot", "garble", True, 0)
@example(_W, False, ".snapshot", "delete", False, 0)
def test_damaged_indexes_snapshots_and_checkpoints_are_rebuilt(
    workload, closed: bool, kind: str, how: str, clean_reopen: bool, damage_seed: int
):
    clock = Clock()
    config = make_config(workload["segment_bytes"], workload["interval"])
    rng = random.Random(damage_seed)
    # A clean reopen only follows a clean close. A lost epoch checkpoint is rebuilt by
    # crash recovery; a clean start takes its absence as "no epochs" (as Kafka does).
    clean = clean_reopen and closed
    if clean and kind == LEADER_EPOCH_CHECKPOINT and how in ("delete", "truncate"):
        clean = False
    with TmpDir() as directory:
        log, written = write_workload(directory, config, workload["seed"], workload["count"], clock)
        stop(log, closed)
        if kind == LEADER_EPOCH_CHECKPOINT:
            victims = [directory / LEADER_EPOCH_CHECKPOINT]
        else:
            victims = sorted(directory.glob(f"*{kind}"))
            victims = rng.sample(victims, rng.randint(1, len(victims))) if victims else []
        for path in victims:
            if path.stat().st_size or how != "garble":
                _damage(path, kind, how, rng, clean)
        log = reopen(directory, config, clock, recovery_point=0, clean_shutdown=clean)
        check_log(log, written, clock)
        log.close()


# -- clean close and reopen keeps everything ----------------------------------------


@SETTINGS
@given(workload=workloads)
def test_clean_close_and_reopen_keeps_state(workload):
    clock = Clock()
    config = make_config(workload["segment_bytes"], workload["interval"])
    with TmpDir() as directory:
        log, written = write_workload(directory, config, workload["seed"], workload["count"], clock)
        recovery_point = log.recovery_point
        log.close()
        log, stats = open_log(
            directory, config, clock=clock, recovery_point=recovery_point, clean_shutdown=True
        )
        _opened.append(log)
        assert stats.recovered_segments == 0
        check_log(log, written, clock)
        log.close()


def test_retry_after_clean_reopen_is_a_duplicate(tmp_path: Path) -> None:
    clock = Clock()
    config = make_config(10_000, 0)
    log, _ = open_log(tmp_path / "t-0", config, clock=clock)
    batches = [
        encode_batch(
            [Record(0, T0, None, b"a"), Record(1, T0, None, b"b")],
            producer_id=5,
            producer_epoch=2,
            base_sequence=seq,
        )
        for seq in range(0, 14, 2)
    ]
    infos = [log.append_as_leader(b, 3) for b in batches]
    log.close()
    log, _ = open_log(tmp_path / "t-0", config, clock=clock)
    # The last five batches are remembered; older ones are not (and are out of order).
    for batch, info in zip(batches[-5:], infos[-5:], strict=True):
        again = log.append_as_leader(batch, 3)
        assert again.duplicate and again.first_offset == info.first_offset
    from odradek.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError

    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batches[0], 3)
    older = encode_batch(
        [Record(0, T0, None, b"z")], producer_id=5, producer_epoch=1, base_sequence=14
    )
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(older, 3)
    assert log.log_end_offset == 14
    log.close()


# -- a killed process loses nothing it appended ------------------------------------------


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_killed_process_loses_nothing_appended(tmp_path: Path, how: str) -> None:
    directory = tmp_path / "t-0"
    config = make_config(700, 64)
    count = 60
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: append, report, die without closing anything
        try:
            os.close(read_end)
            clock = Clock()
            log, written = write_workload(directory, config, 1234, count, clock)
            os.write(write_end, struct.pack(">q", log.log_end_offset))
        finally:
            if how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(0)
    os.close(write_end)
    reported = os.read(read_end, 8)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert len(reported) == 8, f"child failed (status {status})"
    (end,) = struct.unpack(">q", reported)
    # The parent rebuilds the same workload in memory to know what was written.
    with TmpDir() as shadow:
        shadow_log, written = write_workload(shadow, config, 1234, count, Clock())
        shadow_log.close()
    assert end == written[-1].last + 1
    clock = Clock()
    log, stats = open_log(directory, config, clock=clock, recovery_point=0, clean_shutdown=False)
    assert stats.bytes_truncated == 0 and stats.corruption is None
    check_log(log, written, clock)
    log.close()

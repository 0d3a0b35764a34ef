"""The log cleaner on real logs: latest value per key at its original offset,
tombstones gone after delete.retention.ms, aborted transactions and markers by the
two-pass rules, producer state kept across a clean, compressed batches, the map
bound, and a model check under hypothesis with the boundaries as parameters."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import batch as b
from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.storage.cleaner.clean import CleanJob, clean_log_now
from odradek.storage.cleaner.manager import cleanable_range, log_to_clean
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

from .conftest import FakeClock

NOW = 1_700_000_000_000
DAY = 86_400_000


def new_log(path: Path, clock: FakeClock, **config: object) -> Log:
    settings = {"cleanup_policy": "compact", "segment_bytes": 4096, **config}
    log, _ = open_log(path, LogConfig(**settings), clock=clock)  # type: ignore[arg-type]
    return log


def put(
    log: Log,
    pairs: list[tuple[bytes, bytes | None]],
    codec: int = b.NO_COMPRESSION,
    **producer: object,
) -> None:
    records = [Record(i, log.clock(), k, v) for i, (k, v) in enumerate(pairs)]
    log.append_as_leader(encode_batch(records, compression=codec, **producer), 0)  # type: ignore[arg-type]
    log.high_watermark = log.log_end_offset


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for data in log.read_batches(log.log_start_offset):
        for batch in decode_batches(data):
            if batch.header.is_control:
                continue
            out.extend((r.offset, r.key, r.value) for r in batch.records)
    return out


def latest(pairs: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    found: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in pairs:
        found[key] = (offset, value)
    return found


def test_latest_value_per_key_keeps_its_offset(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path / "t-0", clock)
    written = []
    for round_ in range(40):
        for key in (b"a", b"b", b"c"):
            value = f"{key.decode()}{round_}".encode() * 20
            written.append((log.log_end_offset, key, value))
            put(log, [(key, value)])
    log.roll()
    log.high_watermark = log.log_end_offset
    before = len(log.segments)
    end = clean_log_now(log)
    assert end == log.active_segment.base_offset
    after = contents(log)
    assert {k: (o, v) for o, k, v in after} == latest(written)
    assert len(after) == 3
    # Groups are made from the sizes before a clean (as Kafka does): the next clean
    # merges the small cleaned segments into one.
    assert clean_log_now(log, checkpoint=end) == end
    assert contents(log) == after
    assert len(log.segments) == 2 < before
    # Reopened from disk (clean and unclean), the same records.
    log.close()
    for clean in (True, False):
        reopened, _ = open_log(
            tmp_path / "t-0", LogConfig(cleanup_policy="compact"), clean_shutdown=clean
        )
        reopened.high_watermark = reopened.log_end_offset
        assert contents(reopened) == after
        reopened.close()


def test_active_segment_and_records_above_the_hw_are_never_cleaned(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path / "t-0", clock)
    for round_ in range(30):
        put(log, [(b"k", b"v%d" % round_ + b"x" * 200)])
    log.high_watermark = log.segments[1].base_offset + 1
    _, first_uncleanable, _ = cleanable_range(log, None, NOW)
    assert first_uncleanable == log.segments[1].base_offset
    clean_log_now(log)
    offsets = [o for o, _, _ in contents(log)]
    assert offsets[0] < log.segments[1].base_offset or len(log.segments) >= 2
    assert offsets[-1] == log.log_end_offset - 1  # the active segment untouched


def test_tombstone_kept_for_delete_retention_then_removed(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path / "t-0", clock, delete_retention_ms=DAY)
    put(log, [(b"gone", b"v" * 100)])
    put(log, [(b"kept", b"w" * 100)])
    put(log, [(b"gone", None)])
    for i in range(40):
        put(log, [(b"filler%d" % (i % 4), b"f" * 150)])
    log.roll()
    log.high_watermark = log.log_end_offset
    clean_log_now(log)
    first = {k: (o, v) for o, k, v in contents(log)}
    assert first[b"gone"] == (2, None), "the tombstone stays a while"
    clock.now_ms += DAY // 2
    clean_log_now(log)
    assert b"gone" in {k for _, k, _ in contents(log)}
    clock.now_ms += DAY
    clean_log_now(log)
    keys = {k for _, k, _ in contents(log)}
    assert b"gone" not in keys and b"kept" in keys


def test_keyless_records_already_in_a_log_are_dropped(tmp_path: Path, clock: FakeClock) -> None:
    # Written while the topic was cleanup.policy=delete, then switched to compact.
    log = new_log(tmp_path / "t-0", clock, cleanup_policy="delete")
    put(log, [(None, b"x" * 300), (b"k", b"y")])
    log.update_config(LogConfig(cleanup_policy="compact", segment_bytes=4096))
    log.roll()
    log.high_watermark = log.log_end_offset
    clean_log_now(log)
    assert contents(log) == [(1, b"k", b"y")]


@pytest.mark.parametrize("codec", [b.GZIP, b.SNAPPY, b.LZ4, b.ZSTD])
def test_compressed_batches_are_rewritten_with_their_codec(
    tmp_path: Path, clock: FakeClock, codec: int
) -> None:
    log = new_log(tmp_path / "t-0", clock)
    put(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], codec)
    put(log, [(b"a", b"2")], codec)
    log.roll()
    log.high_watermark = log.log_end_offset
    clean_log_now(log)
    batches = [batch for data in log.read_batches(0) for batch in decode_batches(data)]
    assert [batch.header.compression for batch in batches] == [codec, codec]
    # The first batch keeps its offsets and last offset delta (0..2), minus key a.
    assert (batches[0].header.base_offset, batches[0].header.last_offset_delta) == (0, 2)
    assert [(r.offset, r.key) for r in batches[0].records] == [(1, b"b"), (2, b"c")]


def test_idempotent_producer_state_survives_a_clean(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path / "t-0", clock)
    producer = {"producer_id": 7, "producer_epoch": 0}
    put(log, [(b"k", b"1")], base_sequence=0, **producer)
    put(log, [(b"k", b"2")], base_sequence=1, **producer)
    log.roll()
    log.high_watermark = log.log_end_offset
    put(log, [(b"k", b"3")])  # a non-idempotent write supersedes the producer's
    log.roll()
    log.high_watermark = log.log_end_offset
    clean_log_now(log)
    # The producer's last batch is kept, empty, with its offsets and sequence.
    headers = list(log.iter_headers(0))
    assert [(h.base_offset, h.record_count, h.producer_id) for h in headers] == [
        (1, 0, 7),
        (2, 1, -1),
    ]
    log.close()
    reopened, _ = open_log(
        tmp_path / "t-0", LogConfig(cleanup_policy="compact"), clean_shutdown=False
    )
    # A retry of sequence 1 is still recognised as a duplicate after recovery.
    retry = encode_batch([Record(0, NOW, b"k", b"2")], base_sequence=1, **producer)  # type: ignore[arg-type]
    assert reopened.append_as_leader(retry, 0).duplicate
    reopened.close()


def test_aborted_transactions_go_and_markers_follow_the_two_pass_rules(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path / "t-0", clock, delete_retention_ms=DAY)
    txn = {"producer_id": 9, "producer_epoch": 0, "is_transactional": True}
    put(log, [(b"a", b"aborted")], base_sequence=0, **txn)
    log.append_marker(9, 0, 0, commit=False, leader_epoch=0)
    put(log, [(b"b", b"committed")], base_sequence=1, **txn)
    log.append_marker(9, 0, 0, commit=True, leader_epoch=0)
    for i in range(30):
        put(log, [(b"f%d" % (i % 3), b"x" * 200)])
    log.roll()
    log.high_watermark = log.log_end_offset
    clean_log_now(log)
    controls = [h.base_offset for h in log.iter_headers(0) if h.is_control]
    assert controls == [1, 3], "markers stay until their horizon"
    assert b"a" not in {k for _, k, _ in contents(log)}
    clock.now_ms += 2 * DAY
    clean_log_now(log)
    controls = [h.base_offset for h in log.iter_headers(0) if h.is_control]
    # The abort's transaction has no data left: its marker goes. The commit's
    # record b is still there, so its marker stays.
    assert controls == [3]
    assert (2, b"b", b"committed") in contents(log)
    assert log.last_stable_offset == log.high_watermark
    # The kept COMMIT marker's horizon has passed: no timer asks for another clean.
    todo = log_to_clean(("t", 0), log, log.active_segment.base_offset, clock.now_ms, None)
    job = CleanJob.prepare(
        todo,
        dedupe_entries=1000,
        now_ms=clock.now_ms,
        max_bytes_per_second=float("inf"),
        abort=threading.Event(),
    )
    for group in job.groups(job.build_map()):
        assert job.install(job.clean_group(group))
    job.close()
    assert job.earliest_horizon is None


def test_a_map_that_fills_inside_a_segment_cleans_up_to_there(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path / "t-0", clock, segment_bytes=1 << 20)
    put(log, [(b"k%d" % i, b"old") for i in range(50)])
    put(log, [(b"k%d" % i, b"new") for i in range(50)])
    log.roll()
    log.high_watermark = log.log_end_offset
    # Ten keys fit: the map ends at offset 10, inside the only segment (it maps
    # k0..k9 to their first writes, so this pass removes nothing).
    assert clean_log_now(log, dedupe_entries=10) == 10
    assert [o for o, _, _ in contents(log)] == list(range(100))
    # Later passes go on from there until the whole segment is clean.
    checkpoints = [10]
    while checkpoints[-1] < log.active_segment.base_offset and len(checkpoints) < 20:
        checkpoints.append(clean_log_now(log, checkpoint=checkpoints[-1], dedupe_entries=10))
    assert checkpoints == list(range(10, 101, 10)), "each pass maps the next ten keys"
    assert [(o, v) for o, _, v in contents(log)] == [(o, b"new") for o in range(50, 100)]


def test_a_small_map_cleans_in_several_passes(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path / "t-0", clock, segment_bytes=1024)
    written = []
    for i in range(200):
        key = b"k%d" % (i % 20)
        written.append((log.log_end_offset, key, b"v%d" % i))
        put(log, [(key, b"v%d" % i)])
    log.roll()
    log.high_watermark = log.log_end_offset
    checkpoint = None
    for _ in range(30):
        checkpoint = clean_log_now(log, checkpoint=checkpoint, dedupe_entries=25)
        if checkpoint == log.active_segment.base_offset:
            break
    assert checkpoint == log.active_segment.base_offset
    clean_log_now(log, checkpoint=None)
    assert {k: (o, v) for o, k, v in contents(log)} == latest(written)


def test_dirty_ratio_and_lag_decide_eligibility(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path / "t-0", clock, min_cleanable_dirty_ratio=0.5)
    for _ in range(30):
        put(log, [(b"k", b"v" * 200)])
    log.roll()
    log.high_watermark = log.log_end_offset
    todo = log_to_clean(("t", 0), log, None, clock.now_ms, None)
    assert todo.ratio == 1.0 and todo.eligible
    end = clean_log_now(log)
    todo = log_to_clean(("t", 0), log, end, clock.now_ms, None)
    assert todo.cleanable_bytes == 0 and not todo.eligible
    # min.compaction.lag.ms keeps young segments out of the cleanable range.
    young = new_log(tmp_path / "u-0", clock, min_compaction_lag_ms=DAY)
    for _ in range(30):
        put(young, [(b"k", b"v" * 200)])
    young.roll()
    young.high_watermark = young.log_end_offset
    assert log_to_clean(("u", 0), young, None, clock.now_ms, None).cleanable_bytes == 0
    clock.now_ms += 2 * DAY
    assert log_to_clean(("u", 0), young, None, clock.now_ms, None).cleanable_bytes > 0


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 12), st.one_of(st.none(), st.binary(min_size=0, max_size=120))),
        min_size=1,
        max_size=120,
    ),
    segment_bytes=st.integers(300, 3000),
    index_interval=st.sampled_from([1, 64, 4096]),
    batch=st.integers(1, 5),
)
def test_cleaning_matches_a_model(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[int, bytes | None]],
    segment_bytes: int,
    index_interval: int,
    batch: int,
) -> None:
    clock = FakeClock()
    path = tmp_path_factory.mktemp("model") / "t-0"
    log = new_log(
        path,
        clock,
        segment_bytes=segment_bytes,
        index_interval_bytes=index_interval,
        delete_retention_ms=DAY,
    )
    written = []
    for start in range(0, len(ops), batch):
        chunk = [(b"key%d" % k, v) for k, v in ops[start : start + batch]]
        written.extend((log.log_end_offset + i, k, v) for i, (k, v) in enumerate(chunk))
        put(log, chunk)
    log.roll()
    log.high_watermark = log.log_end_offset
    clean_log_now(log)
    model = latest(written)
    assert {k: (o, v) for o, k, v in contents(log)} == model
    clock.now_ms += 2 * DAY
    clean_log_now(log)
    survivors = {k: (o, v) for k, (o, v) in model.items() if v is not None}
    assert {k: (o, v) for o, k, v in contents(log)} == survivors
    # Every offset still readable through the log's own read path.
    for key, (offset, _) in survivors.items():
        info = log.read(offset, 1 << 20)
        assert info.ranges, key
    log.close()

"""Tests for odradek.storage.epoch_cache (Kafka's LeaderEpochFileCache semantics)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.checkpoint import CheckpointError
from odradek.storage.epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def _cache(tmp_path: Path, *pairs: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / LEADER_EPOCH_CHECKPOINT)
    for epoch, start in pairs:
        assert cache.assign(epoch, start)
    return cache


def _pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


def _file(cache: LeaderEpochCache) -> str:
    return cache.path.read_text()


# -- empty cache and queries --------------------------------------------------------


def test_new_cache_is_empty_and_writes_nothing(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert cache.entries == []
    assert cache.latest_epoch is None
    assert cache.latest_entry is None
    assert cache.earliest_entry is None
    assert cache.epoch_for_offset(0) is None
    assert cache.end_offset_for(0, 100) == UNDEFINED
    assert not cache.path.exists()


def test_queries(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 0), (4, 10), (5, 25))
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(4, 10), EpochEntry(5, 25)]
    assert cache.latest_epoch == 5
    assert cache.latest_entry == EpochEntry(5, 25)
    assert cache.earliest_entry == EpochEntry(1, 0)


def test_entries_is_a_copy(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 0))
    cache.entries.append(EpochEntry(9, 9))
    assert cache.entries == [EpochEntry(1, 0)]


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [(0, None), (4, None), (5, 1), (9, 1), (10, 4), (24, 4), (25, 5), (10**12, 5)],
)
def test_epoch_for_offset(tmp_path: Path, offset: int, epoch: int | None) -> None:
    cache = _cache(tmp_path, (1, 5), (4, 10), (5, 25))
    assert cache.epoch_for_offset(offset) == epoch


# -- end_offset_for (OffsetsForLeaderEpoch) -----------------------------------------


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, UNDEFINED),  # undefined request
        (0, (0, 5)),  # older than everything we know: the requested epoch, first start
        (1, (1, 10)),  # a known epoch: ends where the next starts
        (2, (1, 10)),  # in the gap between 1 and 4: answered by epoch 1
        (3, (1, 10)),
        (4, (4, 25)),
        (5, (5, 100)),  # the latest epoch ends at the log end
        (6, UNDEFINED),  # above everything we know
        (1000, UNDEFINED),
    ],
)
def test_end_offset_for(tmp_path: Path, requested: int, expected: tuple[int, int]) -> None:
    cache = _cache(tmp_path, (1, 5), (4, 10), (5, 25))
    assert cache.end_offset_for(requested, 100) == expected


def test_end_offset_for_single_entry(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (3, 0))
    assert cache.end_offset_for(3, 42) == (3, 42)
    assert cache.end_offset_for(2, 42) == (2, 0)
    assert cache.end_offset_for(4, 42) == UNDEFINED


# -- assign ---------------------------------------------------------------------------


def test_assign_adds_only_newer_epochs(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert cache.assign(2, 0)
    assert not cache.assign(2, 5)  # same epoch, later batch
    assert not cache.assign(1, 7)  # older epoch
    assert cache.assign(3, 10)
    assert _pairs(cache) == [(2, 0), (3, 10)]
    assert _file(cache) == "0\n2\n2 0\n3 10\n"


def test_assign_ignores_negative_epochs(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert not cache.assign(-1, 0)
    assert cache.entries == []
    assert not cache.path.exists()


def test_assign_same_start_offset_replaces(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 0), (2, 10))
    assert cache.assign(3, 10)
    assert _pairs(cache) == [(1, 0), (3, 10)]


def test_assign_below_latest_start_flushes_stale_entries(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 0), (2, 10), (3, 20))
    assert cache.assign(4, 5)
    assert _pairs(cache) == [(1, 0), (4, 5)]
    assert _file(cache) == "0\n2\n1 0\n4 5\n"


def test_assign_negative_offset_is_a_bug(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        _cache(tmp_path).assign(1, -1)


# -- truncation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("end_offset", "expected"),
    [
        (0, []),
        (5, []),
        (6, [(1, 5)]),
        (10, [(1, 5)]),
        (11, [(1, 5), (4, 10)]),
        (25, [(1, 5), (4, 10)]),
        (26, [(1, 5), (4, 10), (5, 25)]),
        (1000, [(1, 5), (4, 10), (5, 25)]),
    ],
)
def test_truncate_from_end(
    tmp_path: Path, end_offset: int, expected: list[tuple[int, int]]
) -> None:
    cache = _cache(tmp_path, (1, 5), (4, 10), (5, 25))
    cache.truncate_from_end(end_offset)
    assert _pairs(cache) == expected
    assert _pairs(LeaderEpochCache(cache.path)) == expected


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (0, [(1, 5), (4, 10), (5, 25)]),
        (5, [(1, 5), (4, 10), (5, 25)]),
        (6, [(1, 6), (4, 10), (5, 25)]),
        (10, [(4, 10), (5, 25)]),
        (24, [(4, 24), (5, 25)]),
        (25, [(5, 25)]),
        (1000, [(5, 1000)]),
    ],
)
def test_truncate_from_start(
    tmp_path: Path, start_offset: int, expected: list[tuple[int, int]]
) -> None:
    cache = _cache(tmp_path, (1, 5), (4, 10), (5, 25))
    cache.truncate_from_start(start_offset)
    assert _pairs(cache) == expected
    assert _pairs(LeaderEpochCache(cache.path)) == expected


def test_truncation_on_empty_cache(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.truncate_from_end(0)
    cache.truncate_from_start(10)
    assert cache.entries == []
    assert not cache.path.exists()


def test_unchanged_truncation_does_not_write(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 5))
    cache.path.write_text("0\n0\n")  # a stand-in: any rewrite would change it back
    cache.truncate_from_end(100)
    cache.truncate_from_start(5)
    assert _file(cache) == "0\n0\n"


def test_clear(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 0), (2, 10))
    cache.clear()
    assert cache.entries == []
    assert _file(cache) == "0\n0\n"
    assert cache.assign(1, 0)
    assert _pairs(cache) == [(1, 0)]


# -- persistence ----------------------------------------------------------------------


def test_reopen_gives_same_entries(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0), (3, 100), (7, 2**40))
    reopened = LeaderEpochCache(cache.path)
    assert reopened.entries == cache.entries
    assert reopened.end_offset_for(3, 5) == cache.end_offset_for(3, 5)


def test_flush_writes_known_bytes(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 0), (4, 100))
    cache.path.unlink()
    cache.flush()
    assert _file(cache) == "0\n2\n1 0\n4 100\n"


def test_reads_file_written_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text("0\n2\n0 0\n2 57\n")
    assert LeaderEpochCache(path).entries == [EpochEntry(0, 0), EpochEntry(2, 57)]


@pytest.mark.parametrize(
    ("text", "line", "word"),
    [
        ("0\n1\n1\n", 3, "fields"),
        ("0\n1\n1 2 3\n", 3, "fields"),
        ("0\n1\nx 0\n", 3, "epoch"),
        ("0\n1\n-1 0\n", 3, "epoch"),
        ("0\n1\n1 -5\n", 3, "start offset"),
        ("0\n1\n2147483648 0\n", 3, "epoch"),
        ("0\n2\n1 0\n1 5\n", 4, "does not follow"),  # epoch repeats
        ("0\n2\n1 5\n2 5\n", 4, "does not follow"),  # start offset repeats
        ("0\n2\n2 0\n1 5\n", 4, "does not follow"),  # epochs out of order
        ("1\n0\n", 1, "version"),
        ("0\n3\n1 0\n", 2, "count"),
    ],
)
def test_malformed_file(tmp_path: Path, text: str, line: int, word: str) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text(text)
    with pytest.raises(CheckpointError) as info:
        LeaderEpochCache(path)
    assert str(path) in str(info.value)
    assert f"line {line}:" in str(info.value)
    assert word in str(info.value)


def test_leftover_tmp_is_ignored(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 0))
    (tmp_path / f"{LEADER_EPOCH_CHECKPOINT}.tmp").write_text("garbage")
    assert LeaderEpochCache(cache.path).entries == [EpochEntry(1, 0)]


# -- model-based test -----------------------------------------------------------------


@dataclass
class Model:
    """The cache's rules restated as plainly as possible, over a list of pairs."""

    pairs: list[tuple[int, int]] = field(default_factory=list)

    def assign(self, epoch: int, start: int) -> bool:
        if epoch < 0 or any(e >= epoch for e, _ in self.pairs):
            return False
        self.pairs = [(e, s) for e, s in self.pairs if s < start] + [(epoch, start)]
        return True

    def truncate_from_end(self, end: int) -> None:
        self.pairs = [(e, s) for e, s in self.pairs if s < end]

    def truncate_from_start(self, start: int) -> None:
        below = [(e, s) for e, s in self.pairs if s <= start]
        above = [(e, s) for e, s in self.pairs if s > start]
        self.pairs = ([(below[-1][0], start)] if below else []) + above

    def end_offset_for(self, requested: int, log_end: int) -> tuple[int, int]:
        if requested == UNDEFINED_EPOCH:
            return UNDEFINED
        if self.pairs and self.pairs[-1][0] == requested:
            return requested, log_end
        higher = [(e, s) for e, s in self.pairs if e > requested]
        floor = [(e, s) for e, s in self.pairs if e <= requested]
        if not higher:
            return UNDEFINED
        if not floor:
            return requested, higher[0][1]
        return floor[-1][0], higher[0][1]

    def epoch_for_offset(self, offset: int) -> int | None:
        containing = [e for e, s in self.pairs if s <= offset]
        return containing[-1] if containing else None


EPOCHS = st.integers(min_value=-2, max_value=30)
SMALL_OFFSETS = st.integers(min_value=0, max_value=60)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), EPOCHS, SMALL_OFFSETS),
        st.tuples(st.just("truncate_from_end"), SMALL_OFFSETS),
        st.tuples(st.just("truncate_from_start"), SMALL_OFFSETS),
        st.tuples(st.just("clear")),
        st.tuples(st.just("reopen")),
    ),
    max_size=40,
)


def _apply(
    cache: LeaderEpochCache, model: Model, operation: tuple[object, ...]
) -> LeaderEpochCache:
    name, *args = operation
    if name == "assign":
        epoch, start = args
        assert isinstance(epoch, int) and isinstance(start, int)
        assert cache.assign(epoch, start) == model.assign(epoch, start)
    elif name == "reopen":
        return LeaderEpochCache(cache.path)
    elif name == "clear":
        cache.clear()
        model.pairs = []
    else:
        (offset,) = args
        assert isinstance(offset, int) and isinstance(name, str)
        getattr(cache, name)(offset)
        getattr(model, name)(offset)
    return cache


def _check_agrees(cache: LeaderEpochCache, model: Model) -> None:
    assert _pairs(cache) == model.pairs
    epochs = [e for e, _ in model.pairs]
    starts = [s for _, s in model.pairs]
    assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
    for requested in range(-1, 33):
        assert cache.end_offset_for(requested, 100) == model.end_offset_for(requested, 100)
    for offset in (0, 1, *starts, *(s - 1 for s in starts), *(s + 1 for s in starts), 99):
        assert cache.epoch_for_offset(offset) == model.epoch_for_offset(offset)


@settings(max_examples=200, deadline=None)
@given(operations=OPERATIONS)
def test_matches_model(operations: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        cache = LeaderEpochCache(Path(directory) / LEADER_EPOCH_CHECKPOINT)
        model = Model()
        for operation in operations:
            cache = _apply(cache, model, operation)
            _check_agrees(cache, model)
        assert _pairs(LeaderEpochCache(cache.path)) == model.pairs

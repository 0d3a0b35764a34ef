"""The replication bench's own arithmetic (bench/replication.py): which latency runs
count as sustained, the percentile it reports, and the raw-read baseline's byte count
with and without evicting the files first. The measurements themselves need three
nodes and minutes; ``bench/replication.py --quick`` runs them."""

from __future__ import annotations

import os
from pathlib import Path

from bench.replication import (
    LATENCY_RATES,
    MB,
    Case,
    LatencyResult,
    cases,
    percentile,
    read_files,
    segment_bytes,
)


def test_percentile_picks_a_measured_value() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) in (50.0, 51.0)
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([5.0, 1.0, 3.0], 1.0) == 5.0


def test_a_rate_is_sustained_only_if_kept_and_without_backlog() -> None:
    target = LATENCY_RATES[0]
    kept = LatencyResult(target, rate=0.97 * target, p99_ms=15.0)
    assert kept.sustained
    assert not LatencyResult(target, rate=0.9 * target, p99_ms=15.0).sustained
    assert not LatencyResult(target, rate=target, p99_ms=5000.0).sustained  # a backlog
    assert not LatencyResult(target, rate=target, p99_ms=1.0, error="failed").sustained
    assert LATENCY_RATES[0] == 20 * MB and list(LATENCY_RATES) == sorted(LATENCY_RATES)[::-1]


def test_the_goal_pair_comes_first_for_every_partition_count() -> None:
    found = cases((1, 8))
    assert found[0] == Case("1", 1, 1) and found[1] == Case("all", 3, 1)
    assert {c.partitions for c in found} == {1, 8}
    assert len(set(found)) == len(found) == 8
    assert Case("all", 3, 8).label == "produce 1 KiB, acks=all, RF=3, 3 nodes, 8p"


def test_raw_reads_count_every_byte_of_the_segment_files(tmp_path: Path) -> None:
    sizes = {"00000000000000000000.log": 5 * 1024 * 1024 + 7, "00000000000000005000.log": 123}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(os.urandom(size))
    (tmp_path / "00000000000000000000.index").write_bytes(b"\0" * 4096)  # not a segment
    assert segment_bytes(tmp_path) == sum(sizes.values())
    files = sorted(tmp_path.glob("*.log"))
    for cold in (False, True):  # cold: fsync + fadvise(DONTNEED) of these files first
        total, seconds = read_files(files, cold)
        assert total == sum(sizes.values()) and seconds > 0

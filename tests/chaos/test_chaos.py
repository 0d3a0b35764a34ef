"""The crash harness in ``make test``: one short seeded run, every fault kind at least once.

A broker at default segment sizes (1 GiB) takes ~1 MB/s per partition from an
idempotent acks=all producer while a two-member group consumes and commits. The
broker is killed (SIGKILL), paused (SIGSTOP/SIGCONT), stopped (SIGTERM) and killed
again while it recovers from a kill, the first fault only after ~6 MiB sit unflushed
in each partition (past recovery's 4 MiB chunk), and killed once more at the end.
Every check of ``checks.py`` must pass. The seed is random unless ``CHAOS_SEED`` is
set, and also picks the producer's codec; a failure prints how to replay it.
``make chaos`` runs the same for many more cycles (``python -m tests.chaos.run``).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.chaos.faults import FaultPlan
from tests.chaos.run import details, table
from tests.chaos.scenario import Config, run

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PLAN = FaultPlan(
    cycles=8,
    first_after_s=6.0,
    gap_s=(2.0, 4.0),
    pause_s=(0.5, 7.0),  # up to past the members' 6 s session timeout
    down_s=(0.0, 1.0),
    every_kind=True,
)


@pytest.mark.slow
def test_acknowledged_records_and_commits_survive_kills_pauses_and_restarts(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    compression = random.Random(seed).choice(CODECS)
    result = run(Config(seed=seed, plan=PLAN, tail_s=2.0, compression=compression), tmp_path)
    summary = table(result)
    print(summary)
    assert result.passed, (
        f"{summary}\n{details(result, 40)}\n"
        f"replay: CHAOS_SEED={seed} python -m pytest tests/chaos/test_chaos.py"
    )
    assert result.report is not None and result.report.verified == result.acked > 0
    assert {o.fault.kind for o in result.outcomes} == {"kill", "pause", "term", "crashloop"}
    assert result.bytes_per_partition > 8 * 2**20  # well past one 4 MiB recovery chunk

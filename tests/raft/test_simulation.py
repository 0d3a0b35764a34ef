"""The seeded KRaft simulation as a test: 120 seeds, half 3 voters, half 5, and 12
seeds with every log a DiskRaftLog of real batches.

Each seed runs a chaotic phase and a calm one, checking the safety invariants after
every step and liveness at the end (see tests/raft/simulation.py). A failure message
carries the replay command. ``make simulate`` runs many more seeds.
"""

from __future__ import annotations

import pytest

from odradek.raft.core import NodeCore
from tests.raft.simulate import voters_for
from tests.raft.simulation import Simulation, SimulationFailure, run_seed, scenario_for

SEEDS = range(120)
DISK_SEEDS = range(1000, 1012)


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation_seed(seed: int) -> None:
    sim = run_seed(seed, voters_for(seed, None))
    assert sim.committed_end > 0
    assert sim.elections >= 1


@pytest.mark.parametrize("seed", DISK_SEEDS)
def test_simulation_seed_on_disk_logs(seed: int) -> None:
    sim = run_seed(seed, voters_for(seed, None), disk=True)
    assert sim.committed_end > 0


def test_simulation_is_deterministic() -> None:
    first = run_seed(7, 3)
    second = run_seed(7, 3)
    assert (first.events, first.committed_end, first.elections, list(first.trace)) == (
        second.events,
        second.committed_end,
        second.elections,
        list(second.trace),
    )


def test_failure_report_says_how_to_replay() -> None:
    sim = Simulation(scenario_for(1234, 5))
    sim.trace.append("   1.000 something happened")
    report = str(sim.fail("an invariant broke"))
    assert "replay: make simulate SEED=1234 VOTERS=5" in report
    assert "python -m tests.raft.simulate --seed 1234 --voters 5" in report
    assert "something happened" in report


def test_simulation_catches_a_broken_vote_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker is only worth something if it fails on a real bug: grant every vote
    regardless of the candidate's log, and committed entries get lost."""
    monkeypatch.setattr(NodeCore, "_log_is_up_to_date", lambda self, epoch, offset: True)
    with pytest.raises(SimulationFailure, match="replay: make simulate"):
        for seed in range(20):
            run_seed(seed, voters_for(seed, None))

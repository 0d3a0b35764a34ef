"""The seeded KRaft simulation as a test: 120 seeds, half 3 voters, half 5.

Each seed runs a chaotic phase and a calm one, checking the safety invariants after
every step and liveness at the end (see tests/raft/simulation.py). A failure message
carries the replay command. ``make simulate`` runs many more seeds.
"""

from __future__ import annotations

import pytest

from tests.raft.simulate import voters_for
from tests.raft.simulation import run_seed

SEEDS = range(120)


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation_seed(seed: int) -> None:
    sim = run_seed(seed, voters_for(seed, None))
    assert sim.committed_end > 0
    assert sim.elections >= 1


def test_simulation_is_deterministic() -> None:
    first = run_seed(7, 3)
    second = run_seed(7, 3)
    assert (first.events, first.committed_end, first.elections, list(first.trace)) == (
        second.events,
        second.committed_end,
        second.elections,
        list(second.trace),
    )

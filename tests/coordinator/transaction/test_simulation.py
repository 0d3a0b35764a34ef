"""The seeded transaction coordinator simulation as a test (see simulation.py): 50
seeds, determinism, and proof that the checker fails on real bugs."""

from __future__ import annotations

from typing import Any

import pytest

from odradek.coordinator.transaction.shard import TransactionShard
from tests.coordinator.transaction.simulation import SimulationFailure, run_seed

SEEDS = range(50)


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation_seed(seed: int) -> None:
    sim = run_seed(seed)
    assert sim.world.markers_written > 0
    assert sim.world.completed > 0


def test_simulation_is_deterministic() -> None:
    assert run_seed(3).world.trace == run_seed(3).world.trace


def test_checker_catches_a_fenced_producer_ending_a_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End any transaction whatever epoch the request carries: zombies commit."""
    original = TransactionShard.end_txn

    def careless(
        self: TransactionShard, txn: str, producer_id: int, epoch: int, commit: bool
    ) -> Any:
        current = self.ids.get(txn)
        return original(
            self, txn, producer_id, current.producer_epoch if current else epoch, commit
        )

    monkeypatch.setattr(TransactionShard, "end_txn", careless)
    with pytest.raises(SimulationFailure, match=r"replay: .* --seed"):
        for seed in SEEDS:
            run_seed(seed)


def test_checker_catches_markers_not_resent_after_a_reload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new coordinator that forgets the transactions it finds in Prepare*."""

    def forgetful(self: TransactionShard) -> None:
        self.serving = True

    monkeypatch.setattr(TransactionShard, "on_loaded", forgetful)
    with pytest.raises(SimulationFailure, match="replay: "):
        for seed in SEEDS:
            run_seed(seed)

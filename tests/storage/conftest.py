from __future__ import annotations

import itertools

import pytest

from odradek.records.codec import Record, encode_batch


class FakeClock:
    """Milliseconds that only move when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


_values = itertools.count()


def make_batch(
    count: int = 2, *, timestamp: int = 1_700_000_000_000, size: int = 20, **kwargs: object
) -> bytes:
    """A client-style batch (base offset 0) of ``count`` records with distinct values."""
    records = [
        Record(i, timestamp + i, f"k{next(_values)}".encode(), b"v" * size) for i in range(count)
    ]
    return encode_batch(records, **kwargs)  # type: ignore[arg-type]

"""read_arrow's binary columns: any mix of null, empty, inline (<= 12 B) and long slices."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.spark.read_arrow import _binary


@st.composite
def slices(draw: st.DrawFn) -> tuple[bytes, list[int], list[int]]:
    raw = draw(st.binary(min_size=1, max_size=300))
    starts, lengths = [], []
    for _ in range(draw(st.integers(0, 30))):
        start = draw(st.integers(0, len(raw) - 1))
        starts.append(start)
        lengths.append(draw(st.sampled_from([-1, 0]) | st.integers(0, len(raw) - start)))
    return raw, starts, lengths


@settings(max_examples=300, deadline=None)
@given(slices())
def test_binary_column_equals_the_slices(case: tuple[bytes, list[int], list[int]]) -> None:
    raw, starts, lengths = case
    column = _binary(
        np.frombuffer(raw, dtype=np.uint8),
        pa.py_buffer(raw),
        np.array(starts, dtype=np.int64),
        np.array(lengths, dtype=np.int64),
    )
    assert column.type == pa.binary()
    want = [None if n < 0 else raw[s : s + n] for s, n in zip(starts, lengths, strict=True)]
    assert column.to_pylist() == want

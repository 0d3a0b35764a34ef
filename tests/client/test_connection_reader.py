"""The connection's response framing, fed bytes directly (no socket): frames split
anywhere, frames bigger than the reused buffer, and a broken size prefix."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from odradek.client._core.connection import SCRATCH_BYTES, ConnectionLost, _ResponseReader


def frames_of(sizes: list[int], seed: int) -> tuple[list[bytes], bytes]:
    rng = random.Random(seed)
    frames = [rng.randbytes(size) for size in sizes]
    wire = b"".join(struct.pack(">i", len(frame)) + frame for frame in frames)
    return frames, wire


def feed(reader: _ResponseReader, wire: bytes, rng: random.Random) -> None:
    """Hand ``wire`` to the reader as the event loop would, in random-sized reads."""
    position = 0
    while position < len(wire):
        buffer = reader.get_buffer(-1)
        assert len(buffer) > 0
        count = min(len(buffer), len(wire) - position, rng.choice([1, 3, 100, 70_000, 1 << 20]))
        buffer[:count] = wire[position : position + count]
        position += count
        reader.buffer_updated(count)


@pytest.mark.parametrize("seed", range(6))
def test_frames_come_out_whole_however_the_bytes_arrive(seed: int) -> None:
    sizes = [0, 4, 10, SCRATCH_BYTES - 4, SCRATCH_BYTES - 3, SCRATCH_BYTES + 1, 3 << 20, 77]
    random.Random(seed).shuffle(sizes)
    frames, wire = frames_of(sizes * 2, seed)
    got: list[bytes] = []
    lost: list[Exception] = []

    async def run() -> None:
        reader = _ResponseReader(lambda frame: got.append(bytes(frame)), lost.append)
        feed(reader, wire, random.Random(seed))

    asyncio.run(run())
    assert not lost
    assert got == frames


def test_big_frames_are_handed_over_read_only() -> None:
    frames, wire = frames_of([SCRATCH_BYTES * 2], 1)
    got: list[bytes | memoryview] = []

    async def run() -> None:
        reader = _ResponseReader(got.append, lambda error: None)
        feed(reader, wire, random.Random(1))

    asyncio.run(run())
    [frame] = got
    assert isinstance(frame, memoryview) and frame.readonly and frame == frames[0]


@pytest.mark.parametrize("size", [-1, (1 << 30) + 1])
def test_a_size_out_of_range_loses_the_connection_once(size: int) -> None:
    lost: list[Exception] = []

    async def run() -> None:
        reader = _ResponseReader(lambda frame: None, lost.append)
        feed(reader, struct.pack(">i", size) + b"\x00" * 8, random.Random(0))
        reader.connection_lost(None)

    asyncio.run(run())
    assert len(lost) == 1 and isinstance(lost[0], ConnectionLost)
    assert "out of range" in str(lost[0])

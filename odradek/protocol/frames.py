"""Kafka's size-prefixed framing, sans-IO: bytes in, whole request frames out.

How this works and why: every request is an int32 size followed by that many bytes.
``FrameBuffer.feed`` accepts whatever the socket returned; ``next_frame`` hands out
complete frames one at a time. The size is checked as soon as its 4 bytes arrive, so
a hostile 2 GiB prefix is refused before a single byte of it is buffered.
"""

from __future__ import annotations

import struct
from typing import Final

SIZE_PREFIX_BYTES: Final = 4
_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The peer broke the framing (negative or oversized size): close the connection."""


class FrameBuffer:
    def __init__(self, max_frame_bytes: int) -> None:
        assert max_frame_bytes > 0
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0  # consumed prefix, compacted lazily

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._start

    def next_frame(self) -> bytes | None:
        """The next complete frame (without its size prefix), or None if incomplete."""
        available = len(self._buffer) - self._start
        if available < SIZE_PREFIX_BYTES:
            self._compact()
            return None
        (size,) = _SIZE.unpack_from(self._buffer, self._start)
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameError(
                f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}"
            )
        if available < SIZE_PREFIX_BYTES + size:
            self._compact()
            return None
        begin = self._start + SIZE_PREFIX_BYTES
        frame = bytes(self._buffer[begin : begin + size])
        self._start = begin + size
        return frame

    def _compact(self) -> None:
        if self._start:
            del self._buffer[: self._start]
            self._start = 0


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload

"""DescribeTransactions v0 responses, read by hand for ``odradek transactions describe``.

How this works and why: a coordinator answers a transactional id with no transaction
under way (state Empty, or an error entry) with a start time of -1, as Kafka does, and
kio refuses to turn a negative int64 time into a datetime — the whole response would be
undecodable. So the tool asks for the raw frame and reads this one small, fixed schema
itself: a flexible response header (correlation id, tag section), the throttle time,
then a compact array of states — error code, transactional id, state, timeout, start
time, producer id and epoch, and a compact array of topics, each with a compact array
of partition ids — every struct ending with a tag section. Any inconsistency is a
``ResponseFormatError``, reported by the tool in one line.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from odradek.protocol.bounds import LengthError, read_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
MAX_COUNT: Final = 1 << 20  # no sane response holds more entries in one array


class ResponseFormatError(ValueError):
    """The bytes are not a DescribeTransactions v0 response."""


@dataclass(frozen=True, slots=True)
class TransactionStateEntry:
    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def fixed(self, fmt: struct.Struct) -> int:
        if self.position + fmt.size > len(self.data):
            raise ResponseFormatError("the response ends early")
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(value)

    def uvarint(self) -> int:
        try:
            value, self.position = read_uvarint(
                self.data, self.position, len(self.data), "the response"
            )
        except LengthError as error:
            raise ResponseFormatError(str(error)) from None
        return value

    def count(self) -> int:
        """A compact array's length (null read as empty)."""
        count = self.uvarint() - 1
        if count > MAX_COUNT or count > len(self.data):
            raise ResponseFormatError(f"an array of {count} entries")
        return max(count, 0)

    def string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            return ""
        end = self.position + length
        if end > len(self.data):
            raise ResponseFormatError("a string runs past the response")
        try:
            text = self.data[self.position : end].decode()
        except UnicodeDecodeError:
            raise ResponseFormatError("a string is not UTF-8") from None
        self.position = end
        return text

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag
            length = self.uvarint()
            if self.position + length > len(self.data):
                raise ResponseFormatError("a tagged field runs past the response")
            self.position += length


def decode_response(frame: bytes | bytearray | memoryview) -> list[TransactionStateEntry]:
    """The states of a whole response frame (correlation id first, no size prefix)."""
    reader = _Reader(bytes(frame))
    reader.fixed(_I32)  # correlation id, already matched by the connection
    reader.skip_tags()  # the flexible response header's tag section
    reader.fixed(_I32)  # throttle time
    states = []
    for _ in range(reader.count()):
        error_code = reader.fixed(_I16)
        transactional_id, state = reader.string(), reader.string()
        timeout_ms, start_ms = reader.fixed(_I32), reader.fixed(_I64)
        producer_id, producer_epoch = reader.fixed(_I64), reader.fixed(_I16)
        partitions = []
        for _ in range(reader.count()):
            topic = reader.string()
            partitions += [(topic, reader.fixed(_I32)) for _ in range(reader.count())]
            reader.skip_tags()
        reader.skip_tags()
        states.append(
            TransactionStateEntry(
                error_code,
                transactional_id,
                state,
                timeout_ms,
                start_ms,
                producer_id,
                producer_epoch,
                tuple(partitions),
            )
        )
    reader.skip_tags()
    if reader.position != len(reader.data):
        raise ResponseFormatError(f"{len(reader.data) - reader.position} bytes after the response")
    return states

"""What a chaos run saw, recorded compactly enough for runs of millions of records.

The workload threads write here; the checkers (``checks.py``) read it and nothing else,
so every check can be tested with small hand-made histories built from plain dicts,
lists and sets. The record-keeping types below are those containers' compact
equivalents: ``AckTable`` is a ``Mapping[seq, (partition, offset)]`` over two arrays
(9 bytes a record instead of ~200 in a dict of tuples), ``OffsetSet`` a bitmap.

A record is identified by its *seq*: the producer's running number, written as the
record key (decimal) and hashed into the value (``expected_value``), so a record read
back can be checked for both identity and content.
"""

from __future__ import annotations

import random
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

# Value sizes vary with the seq (deterministically, so the checker can recompute
# them) so that batches, and where they straddle recovery chunk ends, vary too.
VALUE_SIZE_SPREAD = 0.5


def value_size(seq: int, mean_bytes: int) -> int:
    spread = int(mean_bytes * VALUE_SIZE_SPREAD)
    return max(16, mean_bytes - spread + (seq * 7919) % (2 * spread + 1))


def expected_value(seq: int, mean_bytes: int) -> bytes:
    """The value the producer sent for ``seq``: its number, then seeded random bytes for
    half its size (so codecs compress about 2:1, as real payloads do, and logs stay
    large under compression), then the number repeated."""
    size = value_size(seq, mean_bytes)
    unit = b"%012d|" % seq
    noise = random.Random(seq).randbytes(size // 2)
    return (unit + noise + unit * (size // (2 * len(unit)) + 1))[:size]


def encode_key(seq: int) -> bytes:
    return b"%d" % seq


def decode_key(key: bytes | None) -> int | None:
    if key is None or not key.isdigit():
        return None
    return int(key)


class AckTable(Mapping[int, tuple[int, int]]):
    """seq -> (partition, offset) for every record the producer was told was delivered.

    ``sent(seq, partition)`` must be called with consecutive seqs from 0; ``acked``
    fills in the offset. Written by one thread (the producer's, whose poll() runs the
    delivery callbacks); read after it stopped.
    """

    def __init__(self) -> None:
        self._partition = array("b")
        self._offset = array("q")
        self._acked = 0

    def sent(self, seq: int, partition: int) -> None:
        assert seq == len(self._offset), (seq, len(self._offset))
        self._partition.append(partition)
        self._offset.append(-1)

    def acked(self, seq: int, partition: int, offset: int) -> None:
        assert self._partition[seq] == partition, (seq, partition)
        assert offset >= 0
        if self._offset[seq] < 0:
            self._acked += 1
        self._offset[seq] = offset

    @property
    def sent_count(self) -> int:
        return len(self._offset)

    def __getitem__(self, seq: int) -> tuple[int, int]:
        if not 0 <= seq < len(self._offset) or self._offset[seq] < 0:
            raise KeyError(seq)
        return self._partition[seq], self._offset[seq]

    def __iter__(self) -> Iterator[int]:
        offsets = self._offset
        return (seq for seq in range(len(offsets)) if offsets[seq] >= 0)

    def __len__(self) -> int:
        return self._acked


class OffsetSet:
    """A growable bitmap of offsets (the offsets a consumer group was handed)."""

    def __init__(self) -> None:
        self._bits = bytearray()
        self._lock = threading.Lock()

    def add(self, offset: int) -> None:
        byte = offset >> 3
        with self._lock:
            if byte >= len(self._bits):
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            self._bits[byte] |= 1 << (offset & 7)

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int) or offset < 0:
            return False
        byte = offset >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (offset & 7)))


class ReadLog:
    """What a consumer group was handed: (partition, offset) -> seq, from any member.

    A second read of an offset (a rebalance, a restart from the committed offset) that
    finds another seq there is kept in ``conflicts`` as (partition, offset, first seq,
    later seq): one offset held two records in two reads. Members add from their own
    threads.
    """

    def __init__(self) -> None:
        self.seqs: dict[int, dict[int, int]] = {}
        self.conflicts: list[tuple[int, int, int, int]] = []
        self._lock = threading.Lock()

    def add(self, partition: int, offset: int, seq: int) -> None:
        with self._lock:
            seen = self.seqs.setdefault(partition, {})
            first = seen.setdefault(offset, seq)
            if first != seq:
                self.conflicts.append((partition, offset, first, seq))

    def __len__(self) -> int:
        return sum(len(seen) for seen in self.seqs.values())


# A seq the log reader could not attribute: no key, a key that is not a number, or a
# value that is not the one sent with that key (corruption).
SEQ_UNREADABLE = -1


@dataclass
class PartitionLog:
    """One partition as read back at the end: every record from log start to the HW."""

    log_start: int
    high_watermark: int
    offsets: Sequence[int] = field(default_factory=lambda: array("q"))
    seqs: Sequence[int] = field(default_factory=lambda: array("q"))


@dataclass(frozen=True)
class Sample:
    """An offset an observer read at a moment (committed offset or high watermark)."""

    at_s: float
    partition: int
    offset: int


@dataclass
class History:
    """Everything the checkers look at.

    - ``acked``: seq -> (partition, offset) the producer's delivery report gave;
    - ``log``: the partitions as read back after the run (and a last crash);
    - ``committed``: the group's committed offsets as one observer polled them, in
      time order (one sequential observer, so its samples are totally ordered);
    - ``commit_acks``: (partition, offset) of every commit a member was told succeeded;
    - ``final_committed``: the group's committed offsets at the end;
    - ``high_watermarks``: high watermarks as the observer polled them;
    - ``consumed``: per partition, the offsets the group's members were handed.
    """

    partitions: int
    acked: Mapping[int, tuple[int, int]]
    log: Mapping[int, PartitionLog]
    committed: Sequence[Sample] = ()
    commit_acks: Sequence[tuple[int, int]] = ()
    final_committed: Mapping[int, int] = field(default_factory=dict)
    high_watermarks: Sequence[Sample] = ()
    consumed: Mapping[int, OffsetSet | set[int]] = field(default_factory=dict)

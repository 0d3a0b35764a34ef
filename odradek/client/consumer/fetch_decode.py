"""Decoding fetched record batches for the consumer, and handing them out in slices.

How this works and why: a Fetch response's records are whole v2 batches, except
that the broker may cut the last one at the size limit — that partial tail is
ignored (the next fetch starts at it). Control batches are skipped; under
read_committed, batches of aborted transactions (from the response's aborted list)
are dropped until their producer's abort marker. Offsets may have gaps (compaction).

This is the consumer's per-record hot path, so a partition's fetched records stay
*columns* (``FetchedRecords``: parallel lists of offsets, timestamps, keys, values,
...) filled by ``decode_record_columns`` in one pass per batch, and record objects
are only built when ``take`` hands a slice out — by ``map``/``zip``/``tuple.__new__``
in C, directly as the type the face wants (``ConsumerRecord`` for the asyncio face,
``Message`` for the blocking one; both are tuples with the same layout). The varint
walk is then the only per-record Python code. Building a frozen dataclass per record
at decode time cost several times more than the walk, and a full buffer of tracked
objects surviving young collections made the garbage collector run full passes.

Compressed batches are decompressed within a budget per fetched partition
(``ExpansionBudget``): a hostile or broken broker's 64 KiB zstd batch can stand for
gigabytes, and the consumer would otherwise allocate all of it. The records of one
partition's fetched data may expand to ``FETCH_EXPANSION`` (64) times its size, and
always to ``FETCH_EXPANSION_FLOOR`` (64 MiB) — the bound the broker itself puts on a
batch it recompresses at the default max.message.bytes. Each record of a compressed
batch is also charged ``RECORD_COST`` bytes, for the Python objects it becomes, so
64 MiB of 7-byte records cannot turn into gigabytes of objects. Past the budget
the fetch fails with ``KafkaError`` MESSAGE_TOO_LARGE naming the partition and batch
(non-retriable: ``poll`` raises it), never unbounded memory.
"""

from __future__ import annotations

from itertools import repeat
from typing import Final, NamedTuple, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core.errors import KafkaError
from odradek.records.batch import (
    COMPRESSION_NAMES,
    CONTROL_MASK,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_batch,
    parse_header,
)
from odradek.records.codec import (
    ABORT_MARKER,
    decode_control_record,
    decode_record_columns,
    iter_records,
    records_section,
)
from odradek.records.compression import ExpansionLimitError
from odradek.records.errors import RecordTooLargeError

FETCH_EXPANSION: Final = 64
FETCH_EXPANSION_FLOOR: Final = 64 << 20
RECORD_COST: Final = 64  # bytes charged per record of a compressed batch (its objects)


class FetchExpansionError(ExpansionLimitError):
    """Fetched records that expand past the consumer's ``ExpansionBudget``."""

    def __init__(self, message: str, limit: int) -> None:
        RecordTooLargeError.__init__(self, message)
        self.limit = limit


class ExpansionBudget:
    """How many more bytes the compressed batches of one fetched partition may
    decompress to (each record also charged ``RECORD_COST``)."""

    __slots__ = ("fetched", "left", "total", "where")

    def __init__(
        self,
        where: str,
        fetched: int,
        ratio: int = FETCH_EXPANSION,
        floor: int = FETCH_EXPANSION_FLOOR,
    ) -> None:
        self.where = where
        self.fetched = fetched
        self.total = self.left = max(ratio * fetched, floor)

    def limit(self, count: int, codec: int, base_offset: int) -> int:
        """The most the records section of a compressed batch of ``count`` records
        may decompress to."""
        left = self.left - max(count, 0) * RECORD_COST
        if left < 0:
            raise self.exceeded(codec, base_offset, f"its {count} records")
        return left

    def spend(self, count: int, size: int) -> None:
        self.left -= size + max(count, 0) * RECORD_COST

    def exceeded(self, codec: int, base_offset: int, what: str) -> FetchExpansionError:
        return FetchExpansionError(
            f"{self.where}: {COMPRESSION_NAMES.get(codec, codec)} batch at offset "
            f"{base_offset}: {what} exceed the {self.total} bytes the {self.fetched} "
            f"fetched bytes may decompress to (records x {RECORD_COST} bytes included); "
            "a broken or hostile broker, or records compressed far better than real data is",
            self.total,
        )

    def decode(self, buf: bytes, header: BatchHeader) -> tuple[bytes, int, int]:
        """The batch's records section, decompressed within the budget."""
        count, codec, base = header.record_count, header.compression, header.base_offset
        try:
            section = records_section(buf, header, self.limit(count, codec, base))
        except FetchExpansionError:
            raise
        except ExpansionLimitError:
            raise self.exceeded(codec, base, "its records") from None
        self.spend(count, section[2] - section[1])
        return section


Headers = tuple[tuple[str, bytes | None], ...]


class ConsumerRecord(NamedTuple):
    """One fetched record (aiokafka's shape); timestamp_type 0 = Create, 1 = LogAppend."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()  # (key, value) pairs
    leader_epoch: int = -1

    @property
    def serialized_key_size(self) -> int:
        return -1 if self.key is None else len(self.key)

    @property
    def serialized_value_size(self) -> int:
        return -1 if self.value is None else len(self.value)


R = TypeVar("R", bound=tuple)
_new_tuple = tuple.__new__


class FetchedRecords:
    """The records of one partition from one fetch, decoded into columns.

    ``take(n, kind)`` builds the next ``n`` records as ``kind`` (a tuple type laid out
    like ``ConsumerRecord``); ``position`` is then the offset after the last one
    handed out. ``next_offset`` is where the next fetch starts once all are taken
    (after the last whole batch, which may end in records compaction removed or
    control records).
    """

    __slots__ = (
        "_cursor",
        "_epochs",
        "_headers",
        "_keys",
        "_offsets",
        "_timestamp_types",
        "_timestamps",
        "_values",
        "next_offset",
        "partition",
        "position",
        "topic",
    )

    def __init__(self, topic: str, partition: int, fetch_offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.position = fetch_offset
        self.next_offset = fetch_offset
        self._cursor = 0
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._timestamp_types: list[int] = []
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._headers: list[Headers] = []
        self._epochs: list[int] = []

    def __len__(self) -> int:
        """Records not handed out yet."""
        return len(self._offsets) - self._cursor

    def take(self, count: int, kind: type[R]) -> list[R]:
        """The next ``count`` (or fewer) records, in offset order, as ``kind``."""
        start = self._cursor
        stop = min(start + count, len(self._offsets))
        if stop <= start:
            return []
        self._cursor = stop
        self.position = self._offsets[stop - 1] + 1
        rows = zip(
            repeat(self.topic),
            repeat(self.partition),
            self._offsets[start:stop],
            self._timestamps[start:stop],
            self._timestamp_types[start:stop],
            self._keys[start:stop],
            self._values[start:stop],
            self._headers[start:stop],
            self._epochs[start:stop],
        )
        return list(map(_new_tuple, repeat(kind), rows))

    def _add_batch(
        self, buf: bytes, header: BatchHeader, fetch_offset: int, budget: ExpansionBudget
    ) -> None:
        section = budget.decode(buf, header) if header.compression else None
        offsets, timestamps, keys, values, headers = decode_record_columns(
            buf, header, section=section
        )
        skip = 0
        while skip < len(offsets) and offsets[skip] < fetch_offset:  # fetched mid-batch
            skip += 1
        if skip:
            del offsets[:skip], timestamps[:skip], keys[:skip], values[:skip], headers[:skip]
        count = len(offsets)
        self._offsets += offsets
        self._timestamps += timestamps
        self._timestamp_types += [1 if header.attributes & TIMESTAMP_TYPE_MASK else 0] * count
        self._keys += keys
        self._values += values
        self._headers += headers
        self._epochs += [header.partition_leader_epoch] * count


def decode_fetch(
    topic: str,
    partition: int,
    data: bytes,
    fetch_offset: int,
    aborted: list[tuple[int, int]] | None,
    verify_crc: bool = False,
    expansion: int = FETCH_EXPANSION,
    expansion_floor: int = FETCH_EXPANSION_FLOOR,
) -> FetchedRecords:
    """The records at or after ``fetch_offset`` of one partition's fetched ``data``.

    ``aborted`` (read_committed only) lists (producer id, first offset) of aborted
    transactions; their records are skipped until the producer's abort marker.
    Compressed records expanding past ``ExpansionBudget``: KafkaError MESSAGE_TOO_LARGE.
    """
    try:
        return _decode_fetch(
            topic, partition, data, fetch_offset, aborted, verify_crc, expansion, expansion_floor
        )
    except ExpansionLimitError as error:
        raise KafkaError(ErrorCode.message_too_large, str(error)) from None


def _decode_fetch(
    topic: str,
    partition: int,
    data: bytes,
    fetch_offset: int,
    aborted: list[tuple[int, int]] | None,
    verify_crc: bool,
    expansion: int,
    expansion_floor: int,
) -> FetchedRecords:
    # bytes, not a memoryview: the uncompressed records are then sliced straight out
    # of the response instead of from a per-batch copy.
    buf = data if isinstance(data, bytes) else bytes(data)
    fetched = FetchedRecords(topic, partition, fetch_offset)
    budget = ExpansionBudget(f"{topic}-{partition}", len(buf), expansion, expansion_floor)
    position = 0
    next_offset = fetch_offset
    pending = sorted(aborted or (), key=lambda a: a[1])
    active: set[int] = set()
    while position + LOG_OVERHEAD <= len(buf):
        length = int.from_bytes(buf[position + 8 : position + 12], "big", signed=True)
        if length <= 0 or position + LOG_OVERHEAD + length > len(buf):
            break  # the broker cut the last batch at the size limit
        header = check_batch(buf, position) if verify_crc else parse_header(buf, position)
        position += LOG_OVERHEAD + length
        last = header.base_offset + header.last_offset_delta
        if last < fetch_offset:
            continue
        next_offset = max(next_offset, last + 1)
        if aborted is not None:
            while pending and pending[0][1] <= last:
                active.add(pending.pop(0)[0])
        if header.attributes & CONTROL_MASK:
            if aborted is not None:
                limit = None
                if header.compression:
                    count, codec = header.record_count, header.compression
                    limit = budget.limit(count, codec, header.base_offset)
                for record in iter_records(buf, header, limit):
                    if decode_control_record(record)[1] == ABORT_MARKER:
                        active.discard(header.producer_id)
            continue
        if (
            aborted is not None
            and header.attributes & TRANSACTIONAL_MASK
            and header.producer_id in active
        ):
            continue
        fetched._add_batch(buf, header, fetch_offset, budget)
    fetched.next_offset = next_offset
    return fetched


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes,
    fetch_offset: int,
    aborted: list[tuple[int, int]] | None,
    verify_crc: bool = False,
) -> tuple[list[ConsumerRecord], int]:
    """``decode_fetch`` as a list of every record, and the offset to fetch next."""
    fetched = decode_fetch(topic, partition, data, fetch_offset, aborted, verify_crc)
    return fetched.take(len(fetched), ConsumerRecord), fetched.next_offset

"""Batch read: ``spark.read.format("odradek")`` — plan offset ranges, read them on executors.

How this works and why: ``BatchReader`` is built in a driver-side Python worker from the
options (checked at once, so bad options fail at planning), takes the filters Spark
pushes down (``spark.sql.python.filterPushdown.enabled``), and ``partitions()`` asks the
cluster for the subscribed partitions and their start and end offsets, then cuts the
ranges into tasks. Each ``RangePartition`` is self-contained and picklable;
``read`` runs on an executor and yields Arrow batches (``read_fetch.read_range``).

Filter pushdown: ``partition`` (=, IN, <, <=, >, >=) prunes partitions; ``offset``
comparisons and = narrow the ranges exactly, IN narrows them to [min, max] and is
left for Spark to finish; ``timestamp`` comparisons and = are applied exactly on the
executors, and a lower bound also moves each range's start to the first offset at or
after it (ListOffsets by timestamp: every earlier record has an earlier timestamp).
Anything else (NOT, string filters, other columns) is left to Spark.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from odradek.spark.options import OptionError
from odradek.spark.read_options import ReadConfig, parse_read_options
from odradek.spark.read_plan import KafkaMetadata, OffsetRange, range_spec, split_ranges
from odradek.spark.read_spec import RangeSpec, TimestampBounds

if TYPE_CHECKING:
    import pyarrow as pa

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class RangePartition(InputPartition):
    """One Spark task: one offset range of one Kafka partition."""

    def __init__(self, spec: RangeSpec) -> None:
        super().__init__(spec)
        self.spec = spec


@dataclass
class _Bounds:
    """Half-open bounds [low, high) on an integer column; None = unbounded."""

    low: int | None = None
    high: int | None = None
    values: frozenset[int] | None = None  # from = / IN on partition

    def narrow(self, low: int | None = None, high: int | None = None) -> None:
        if low is not None:
            self.low = low if self.low is None else max(self.low, low)
        if high is not None:
            self.high = high if self.high is None else min(self.high, high)

    def admits(self, value: int) -> bool:
        return (
            (self.low is None or value >= self.low)
            and (self.high is None or value < self.high)
            and (self.values is None or value in self.values)
        )


def _timestamp_us(value: Any) -> int | None:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return (value - _EPOCH) // datetime.timedelta(microseconds=1)
    return None


class BatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.config: ReadConfig = parse_read_options(options, streaming=False)
        self.partition_bounds = _Bounds()
        self.offset_bounds = _Bounds()
        self.timestamps = TimestampBounds()

    # -- filter pushdown -------------------------------------------------------------
    @property
    def pushFilters(self) -> Any:
        """Spark calls this only with ``spark.sql.python.filterPushdown.enabled``; when the
        conf is off, PySpark 4.2 refuses a reader whose ``pushFilters`` is not the base
        method (DATA_SOURCE_PUSHDOWN_DISABLED), which would make every read of ours fail
        under Spark's default settings. So the method is offered through a callable that
        presents the base method as its ``__func__``: with pushdown off the check passes
        and Spark evaluates every filter itself; with it on, Spark calls ``push_filters``.
        Results are the same either way; only the pruning differs."""
        return _PushFilters(self)

    def push_filters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if not self._push(f):
                yield f

    def _push(self, f: Filter) -> bool:
        """Apply ``f``; True when it is applied exactly (Spark need not check it)."""
        attribute: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
        if len(attribute) != 1:
            return False
        column = attribute[0]
        if column == "partition":
            return self._push_integer(f, self.partition_bounds, in_is_exact=True)
        if column == "offset":
            return self._push_integer(f, self.offset_bounds, in_is_exact=False)
        if column == "timestamp":
            return self._push_timestamp(f)
        return False

    @staticmethod
    def _push_integer(f: Filter, bounds: _Bounds, *, in_is_exact: bool) -> bool:
        if isinstance(f, In):
            values = [v for v in f.value if isinstance(v, int) and not isinstance(v, bool)]
            if len(values) != len(f.value) or not values:
                return False
            if in_is_exact:  # partitions: a set
                wanted = frozenset(values)
                bounds.values = wanted if bounds.values is None else bounds.values & wanted
                return True
            bounds.narrow(min(values), max(values) + 1)  # offsets: only the span
            return False
        value = getattr(f, "value", None)
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if isinstance(f, EqualTo):
            bounds.narrow(value, value + 1)
        elif isinstance(f, GreaterThan):
            bounds.narrow(low=value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            bounds.narrow(low=value)
        elif isinstance(f, LessThan):
            bounds.narrow(high=value)
        elif isinstance(f, LessThanOrEqual):
            bounds.narrow(high=value + 1)
        else:
            return False
        return True

    def _push_timestamp(self, f: Filter) -> bool:
        micros = _timestamp_us(getattr(f, "value", None))
        if micros is None:
            return False
        t = self.timestamps
        if isinstance(f, EqualTo):
            t = _tighten_low(t, micros, True)
            t = _tighten_high(t, micros, True)
        elif isinstance(f, GreaterThan):
            t = _tighten_low(t, micros, False)
        elif isinstance(f, GreaterThanOrEqual):
            t = _tighten_low(t, micros, True)
        elif isinstance(f, LessThan):
            t = _tighten_high(t, micros, False)
        elif isinstance(f, LessThanOrEqual):
            t = _tighten_high(t, micros, True)
        else:
            return False
        self.timestamps = t
        return True

    # -- planning --------------------------------------------------------------------
    def partitions(self) -> list[InputPartition]:
        config = self.config
        metadata = KafkaMetadata(config)
        try:
            tps = [
                tp
                for tp in metadata.topic_partitions(config.subscription)
                if self.partition_bounds.admits(tp[1])
            ]
            start = metadata.resolve(config.starting, tps, starting=True)
            end = metadata.resolve(config.ending, tps, starting=False)
            latest = metadata.latest(tps)
            if self.timestamps.low_us is not None:
                low_ms = self.timestamps.low_us // 1000  # records carry milliseconds
                first = metadata.first_at_or_after(tps, low_ms)
            else:
                first = {}
        finally:
            metadata.close()
        ranges = []
        for tp in tps:
            s, e = start[tp], end[tp]
            if e > latest[tp]:
                raise OptionError(
                    f"option 'endingOffsets': offset {e} for {tp[0]}-{tp[1]} is beyond the "
                    f"partition's end ({latest[tp]})"
                )
            if s > e:
                raise OptionError(
                    f"option 'startingOffsets': the start offset {s} for {tp[0]}-{tp[1]} is "
                    f"after its end offset {e}"
                )
            bounds = self.offset_bounds
            s = max(s, bounds.low if bounds.low is not None else s, first.get(tp, s))
            e = min(e, bounds.high if bounds.high is not None else e)
            ranges.append(OffsetRange(tp[0], tp[1], s, max(s, e)))
        pieces = split_ranges(ranges, config.min_partitions, config.max_records_per_partition)
        return [RangePartition(self._spec(r)) for r in pieces]

    def _spec(self, r: OffsetRange) -> RangeSpec:
        return range_spec(self.config, r, self.timestamps)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            # Imported here: planning (on the driver) needs none of the reader.
            from odradek.spark.read_fetch import read_range

            yield from read_range(partition.spec)


class _PushFilters:
    """``reader.pushFilters`` as seen by Spark (see ``BatchReader.pushFilters``)."""

    def __init__(self, reader: BatchReader) -> None:
        self.__func__ = DataSourceReader.pushFilters
        self._reader = reader

    def __call__(self, filters: list[Filter]) -> Iterable[Filter]:
        return self._reader.push_filters(filters)


def _tighten_low(t: TimestampBounds, micros: int, inclusive: bool) -> TimestampBounds:
    if t.low_us is None or micros > t.low_us or (micros == t.low_us and not inclusive):
        return replace(t, low_us=micros, low_inclusive=inclusive)
    return t


def _tighten_high(t: TimestampBounds, micros: int, inclusive: bool) -> TimestampBounds:
    if t.high_us is None or micros < t.high_us or (micros == t.high_us and not inclusive):
        return replace(t, high_us=micros, high_inclusive=inclusive)
    return t

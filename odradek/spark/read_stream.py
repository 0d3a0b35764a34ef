"""Streaming read: ``spark.readStream.format("odradek")`` on Spark's micro-batch engine.

How this works and why: Spark keeps one ``StreamReader`` in a long-lived driver-side
Python worker and calls it once per trigger: ``latestOffset(start, limit)`` says where
the next micro-batch ends, ``partitions(start, end)`` cuts [start, end) into tasks,
``commit(end)`` reports that a batch is done. Offsets are the JSON Spark's Kafka
source checkpoints, ``{"topic": {"0": 123}}`` (next offset to read per partition),
so a restarted query resumes from its checkpoint exactly.

- The first batch starts at ``initialOffset`` (``startingOffsets``, default latest, or
  by timestamp); partitions and topics that appear later start at their earliest offset.
- ``maxOffsetsPerTrigger`` is the default read limit (``ReadMaxRows``), shared between
  partitions in proportion to their backlog; ``minOffsetsPerTrigger`` holds a trigger
  back until that many offsets are waiting or ``maxTriggerDelay`` has passed since the
  last batch (Spark's Python API has no composite limit, so this is done here).
- ``Trigger.AvailableNow``: ``prepareForTriggerAvailableNow`` records the latest offsets
  once; later ``latestOffset`` calls never go past them (rate limits still apply,
  ``minOffsetsPerTrigger`` does not), so the query ends.
- ``commitOffsetsToGroup``: each committed end is also committed to that consumer group
  (standalone commit), so ``odradek groups describe`` shows the pipeline's lag. A failed
  group commit is logged, not fatal — the checkpoint remains the source of truth.

The reader is pickled to executors along with ``read``; it holds only the parsed
options until the driver first needs the cluster (``_metadata`` is created lazily and
never pickled in use).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from odradek.spark.read_batch import RangePartition
from odradek.spark.read_options import (
    TP,
    ReadConfig,
    offsets_from_json,
    offsets_to_json,
    parse_read_options,
)
from odradek.spark.read_plan import KafkaMetadata, OffsetRange, range_spec, rate_limit, split_ranges
from odradek.spark.read_spec import RangeSpec, data_loss

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger("odradek.spark")


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.config: ReadConfig = parse_read_options(options, streaming=True)
        self._metadata: KafkaMetadata | None = None
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow's end
        self._last_batch_s = time.monotonic()
        self._latest: dict[TP, int] = {}
        self._committed: dict[TP, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None
        return state

    @property
    def metadata(self) -> KafkaMetadata:
        if self._metadata is None:
            self._metadata = KafkaMetadata(self.config)
        return self._metadata

    # -- offsets ---------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        tps = self.metadata.topic_partitions(self.config.subscription)
        return offsets_to_json(self.metadata.resolve(self.config.starting, tps, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.config.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.metadata.topic_partitions(self.config.subscription)
        self._target = self.metadata.latest(tps)

    def _current_latest(self, start: Mapping[TP, int]) -> dict[TP, int]:
        if self._target is not None:
            # Partitions found after AvailableNow began are left for a later query.
            return dict(self._target)
        tps = self.metadata.topic_partitions(self.config.subscription)
        return self.metadata.latest(tps)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start or {})
        # Spark asks for the next end only once the batch ending at ``start`` is done, and
        # calls commit(end) only when the next batch begins (never after the last batch
        # of Trigger.AvailableNow), so the group commit happens here too.
        self._commit_to_group(begin)
        latest = self._current_latest(begin)
        self._latest = latest
        new = [tp for tp in latest if tp not in begin]
        base = {tp: begin[tp] for tp in latest if tp in begin}
        base.update(self.metadata.earliest(new))
        # A partition whose end fell below the checkpoint (topic re-created) is reported
        # by partitions(); it is not read past its new end here.
        latest_ahead = {tp: max(latest[tp], base[tp]) for tp in latest}
        if isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            if self._holds_back(base, latest_ahead):
                return offsets_to_json(begin)
            if isinstance(limit, ReadMaxRows):
                end = rate_limit(base, latest_ahead, limit.max_rows)
                end = {tp: latest[tp] if latest[tp] < base[tp] else e for tp, e in end.items()}
            else:
                end = latest
        result = offsets_to_json(end)
        if result != offsets_to_json(begin):
            self._last_batch_s = time.monotonic()
        return result

    def _holds_back(self, base: Mapping[TP, int], latest: Mapping[TP, int]) -> bool:
        """minOffsetsPerTrigger: wait for more data unless maxTriggerDelay has passed."""
        wanted = self.config.min_offsets_per_trigger
        if wanted is None or self._target is not None:
            return False
        waiting = sum(latest[tp] - base[tp] for tp in latest)
        if waiting >= wanted:
            return False
        waited_ms = (time.monotonic() - self._last_batch_s) * 1000
        return waited_ms < self.config.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest) if self._latest else None

    # -- planning and reading ------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = offsets_from_json(start or {})
        stop = offsets_from_json(end or {})
        spec = self._spec(OffsetRange("", 0, 0, 0))
        new = [tp for tp in stop if tp not in begin]
        first = self.metadata.earliest(new) if new else {}
        for tp, offset in sorted(first.items()):
            if offset != 0:
                data_loss(
                    _named(spec, tp),
                    f"the partition appeared after the query started and now begins at "
                    f"offset {offset}, not 0: offsets 0 to {offset - 1} were never read",
                )
        gone = sorted(tp for tp in begin if tp not in stop)
        if gone:
            names = ", ".join(f"{t}-{p}" for t, p in gone)
            data_loss(_named(spec, gone[0]), f"partitions {names} are gone")
        ranges = []
        for tp, until in stop.items():
            since = begin.get(tp, first.get(tp, 0))
            if until < since:
                data_loss(
                    _named(spec, tp),
                    f"its end offset went back from {since} to {until} (was the topic re-created?)",
                )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], since, until))
        pieces = split_ranges(
            ranges, self.config.min_partitions, self.config.max_records_per_partition
        )
        return [RangePartition(self._spec(r)) for r in pieces]

    def _spec(self, r: OffsetRange) -> RangeSpec:
        return range_spec(self.config, r)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            # Imported here: planning (on the driver) needs none of the reader.
            from odradek.spark.read_fetch import read_range

            yield from read_range(partition.spec)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_to_group(offsets_from_json(end or {}))

    def _commit_to_group(self, offsets: dict[TP, int]) -> None:
        group = self.config.commit_group
        if group is None or not offsets or offsets == self._committed:
            return
        try:
            self.metadata.commit(group, offsets)
            self._committed = offsets
        except Exception as error:
            logger.warning("odradek: committing offsets to group %r failed: %s", group, error)

    def stop(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stands in for a ``StreamReader`` that could not be made, and raises its error from
    the first call Spark makes.

    PySpark's streaming source runner creates the reader inside ``try: ... finally:
    reader.stop()``, so an exception from the constructor is replaced by an
    ``UnboundLocalError`` about ``reader`` and the real message (a bad option) is lost.
    """

    def __init__(self, error: Exception) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        raise self.error

    def stop(self) -> None:
        pass


def _named(spec: RangeSpec, tp: TP) -> RangeSpec:
    return RangeSpec(tp[0], tp[1], 0, 0, spec.client, fail_on_data_loss=spec.fail_on_data_loss)

"""Driver side of reading: which partitions, which offsets, how many Spark tasks.

How this works and why: planning runs in Spark's driver-side Python workers, once per
batch query and once per micro-batch. ``KafkaMetadata`` asks the cluster (through
odradek's ``AdminClient``) for the subscribed partitions and their offsets;
``resolve`` turns an ``OffsetLimit`` (earliest, latest, JSON offsets, timestamps) into
numbers per partition; ``split_ranges`` cuts the ranges into Spark tasks
(``maxRecordsPerPartition``, ``minPartitions``); ``rate_limit`` shares a
``maxOffsetsPerTrigger`` budget between partitions in proportion to their backlog.
The pure functions here are tested without Spark or a broker.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from odradek.client import (
    AdminClient,
    ConsumerGroupTopicPartitions,
    KafkaException,
    OffsetSpec,
    TopicPartition,
)
from odradek.spark.options import OptionError
from odradek.spark.read_options import (
    EARLIEST,
    LATEST,
    TP,
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetLimit,
    ReadConfig,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    Subscription,
)
from odradek.spark.read_spec import RangeSpec, TimestampBounds

logger = logging.getLogger("odradek.spark")

METADATA_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


# -- pure planning -------------------------------------------------------------------


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Non-empty ranges cut into tasks: at most ``max_records`` offsets each, then the
    largest halved until there are ``min_partitions`` (or nothing is left to halve)."""
    pieces = [r for r in ranges if r.size > 0]
    if max_records is not None:
        pieces = [part for r in pieces for part in _split_even(r, -(-r.size // max_records))]
    if min_partitions is not None and len(pieces) < min_partitions:
        heap = [(-r.size, r) for r in pieces]
        heapq.heapify(heap)
        while heap and len(heap) < min_partitions:
            size, largest = heap[0]
            if -size < 2:
                break
            heapq.heappop(heap)
            for half in _split_even(largest, 2):
                heapq.heappush(heap, (-half.size, half))
        pieces = [r for _, r in heap]
    return sorted(pieces)


def _split_even(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    out = []
    for i in range(parts):
        start = r.start + r.size * i // parts
        end = r.start + r.size * (i + 1) // parts
        out.append(OffsetRange(r.topic, r.partition, start, end))
    return out


def rate_limit(start: Mapping[TP, int], latest: Mapping[TP, int], max_rows: int) -> dict[TP, int]:
    """End offsets reading at most ``max_rows`` offsets in total past ``start``, shared in
    proportion to each partition's backlog (largest remainders get the leftover rows)."""
    available = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(available.values())
    if total <= max_rows:
        return dict(latest)
    quota = {tp: max_rows * a // total for tp, a in available.items()}
    leftover = max_rows - sum(quota.values())
    by_remainder = sorted(available, key=lambda tp: (-(max_rows * available[tp] % total), tp))
    for tp in by_remainder:
        if leftover == 0:
            break
        if quota[tp] < available[tp]:
            quota[tp] += 1
            leftover -= 1
    return {tp: start[tp] + quota[tp] for tp in latest}


def check_covers(option: str, given: Iterable[TP], partitions: Iterable[TP]) -> None:
    """Per-partition JSON must name exactly the subscribed partitions (as Spark asks)."""
    given_set, wanted = set(given), set(partitions)
    missing = sorted(wanted - given_set)
    extra = sorted(given_set - wanted)
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not subscribed " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise OptionError(
            f"option '{option}' must give every subscribed partition ({'; '.join(parts)}); "
            "use -2 for earliest and -1 for latest"
        )


# -- the cluster ---------------------------------------------------------------------


class KafkaMetadata:
    """Partitions and offsets from the cluster, for planning (driver side)."""

    def __init__(self, config: ReadConfig) -> None:
        self.config = config
        self.isolation = config.isolation_level
        try:
            self.admin = AdminClient(config.admin_config())
        except Exception as error:
            raise OptionError(f"option 'kafka.bootstrap.servers': {error}") from None

    def close(self) -> None:
        self.admin.close()

    def _failed(self, what: str, error: BaseException) -> RuntimeError:
        servers = self.config.client.get("bootstrap.servers")
        return RuntimeError(f"odradek: {what} failed (kafka.bootstrap.servers={servers}): {error}")

    def topic_partitions(self, subscription: Subscription) -> list[TP]:
        try:
            topics = self.admin.list_topics(timeout=METADATA_TIMEOUT_S).topics
        except (KafkaException, TimeoutError, OSError) as error:
            raise self._failed("reading cluster metadata", error) from None
        found: list[TP] = []
        if isinstance(subscription, Subscribe):
            # As Spark's source (its admin client describes the subscribed topics), a
            # missing topic fails the query instead of reading nothing.
            missing = [name for name in subscription.topics if name not in topics]
            if missing:
                raise OptionError(
                    f"option 'subscribe': topic {', '.join(map(repr, missing))} does not "
                    f"exist (create it first, or use 'subscribePattern' to pick up topics "
                    f"as they appear)"
                )
            for name in subscription.topics:
                found.extend((name, p) for p in topics[name].partitions)
        elif isinstance(subscription, SubscribePattern):
            for name, topic in topics.items():
                if not name.startswith("__") and subscription.matches(name):
                    found.extend((name, p) for p in topic.partitions)
        else:
            assert isinstance(subscription, Assign)
            for name, partition in subscription.partitions:
                if name not in topics:
                    raise OptionError(f"option 'assign': topic {name!r} does not exist")
                if partition not in topics[name].partitions:
                    raise OptionError(
                        f"option 'assign': partition {partition} of topic {name!r} does not "
                        f"exist (it has {len(topics[name].partitions)} partitions)"
                    )
                found.append((name, partition))
        return sorted(found)

    def list_offsets(self, specs: Mapping[TP, int]) -> dict[TP, int]:
        """ListOffsets: spec -2 earliest, -1 latest, else a timestamp (-1 = no match)."""
        if not specs:
            return {}
        request = {TopicPartition(t, p): OffsetSpec(s) for (t, p), s in specs.items()}
        try:
            futures = self.admin.list_offsets(request, isolation_level=self.isolation)
            return {
                (tp.topic, tp.partition): future.result(METADATA_TIMEOUT_S).offset
                for tp, future in futures.items()
            }
        except (KafkaException, TimeoutError, OSError) as error:
            raise self._failed("listing offsets", error) from None

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self.list_offsets(dict.fromkeys(tps, EARLIEST))

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self.list_offsets(dict.fromkeys(tps, LATEST))

    def resolve(self, limit: OffsetLimit, tps: Sequence[TP], *, starting: bool) -> dict[TP, int]:
        """Offsets per partition for ``limit`` (see ``read_options``)."""
        if isinstance(limit, Earliest):
            return self.earliest(tps)
        if isinstance(limit, Latest):
            return self.latest(tps)
        if isinstance(limit, SpecificOffsets):
            check_covers(limit.option, limit.offsets, tps)
            wanted = {tp: limit.offsets[tp] for tp in tps}
            listed = self.list_offsets({tp: o for tp, o in wanted.items() if o < 0})
            return {tp: listed.get(tp, o) if o < 0 else o for tp, o in wanted.items()}
        if isinstance(limit, SpecificTimestamps):
            check_covers(limit.option, limit.timestamps, tps)
            stamps = {tp: limit.timestamps[tp] for tp in tps}
        else:
            assert isinstance(limit, GlobalTimestamp)
            stamps = dict.fromkeys(tps, limit.timestamp_ms)
        found = self.list_offsets(stamps)
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched:
            if starting and not self.config.timestamp_strategy_latest:
                t, p = unmatched[0]
                raise OptionError(
                    f"option '{limit.option}': no record in {t}-{p} has a timestamp at or "
                    f"after {stamps[(t, p)]}; set 'startingOffsetsByTimestampStrategy' to "
                    "'latest' to start such partitions at their end"
                )
            found.update(self.latest(unmatched))
        return found

    def first_at_or_after(self, tps: Iterable[TP], timestamp_ms: int) -> dict[TP, int]:
        """The first offset with a timestamp >= ``timestamp_ms`` (latest if none)."""
        found = self.list_offsets(dict.fromkeys(tps, timestamp_ms))
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        found.update(self.latest(unmatched))
        return found

    def commit(self, group: str, offsets: Mapping[TP, int]) -> None:
        """Commit ``offsets`` (the next offsets to read) to consumer group ``group``."""
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        futures: Any = self.admin.alter_consumer_group_offsets([request])
        futures[group].result(METADATA_TIMEOUT_S)


def range_spec(
    config: ReadConfig, r: OffsetRange, timestamps: TimestampBounds | None = None
) -> RangeSpec:
    """What an executor needs to read ``r``: everything from the query's options."""
    return RangeSpec(
        topic=r.topic,
        partition=r.partition,
        start=r.start,
        end=r.end,
        client=dict(config.client),
        include_headers=config.include_headers,
        fail_on_data_loss=config.fail_on_data_loss,
        timestamps=timestamps if timestamps is not None else TimestampBounds(),
    )

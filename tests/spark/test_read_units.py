"""Unit tests of the read side without a SparkSession or a broker: options, offsets JSON,
range splitting, rate limits, the Arrow decoder (gaps, control batches, aborted
transactions, codecs, corrupt bytes) and the stream reader's trigger logic."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from odradek.records.codec import Header, Record, encode_batch, encode_end_txn_marker
from odradek.records.errors import CorruptRecordError
from odradek.spark.options import OptionError, client_config, get, parse_duration_ms
from odradek.spark.read_arrow import ArrowDecoder, TimestampBounds, scan
from odradek.spark.read_options import (
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    offsets_from_json,
    offsets_to_json,
    parse_read_options,
)
from odradek.spark.read_plan import OffsetRange, check_covers, rate_limit, split_ranges
from odradek.spark.read_stream import StreamReader

BOOT = {"kafka.bootstrap.servers": "localhost:9092"}


def read_opts(**extra: str) -> dict[str, str]:
    return {**BOOT, "subscribe": "t", **extra}


# -- options -------------------------------------------------------------------------


def test_lookup_is_case_insensitive() -> None:
    options = {"startingoffsets": "earliest", "KAFKA.BOOTSTRAP.SERVERS": "h:1"}
    assert get(options, "startingOffsets") == "earliest"
    assert client_config(options, for_producer=False)["bootstrap.servers"] == "h:1"
    config = parse_read_options(
        {"kafka.bootstrap.servers": "h:1", "SUBSCRIBEPATTERN": "t.*", "MAXOFFSETSPERTRIGGER": "5"},
        streaming=True,
    )
    assert config.subscription == SubscribePattern("t.*")
    assert config.max_offsets_per_trigger == 5


def test_defaults_batch_and_streaming() -> None:
    batch = parse_read_options(read_opts(), streaming=False)
    assert (batch.starting, batch.ending) == (Earliest(), Latest())
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_read_options(read_opts(), streaming=True)
    assert stream.starting == Latest()
    assert stream.max_trigger_delay_ms == 15 * 60 * 1000


@pytest.mark.parametrize(
    ("options", "streaming", "names"),
    [
        ({**BOOT, "subscribe": "a", "assign": '{"a":[0]}'}, False, ["'assign'", "'subscribe'"]),
        ({**BOOT, "subscribe": "a", "subscribePattern": "a.*"}, True, ["'subscribePattern'"]),
        (BOOT, False, ["'subscribe'"]),
        (read_opts(startingOffsets="latest"), False, ["'startingOffsets'", "latest"]),
        (read_opts(startingOffsets='{"t":{"0":-1}}'), False, ["'startingOffsets'", "t-0"]),
        (read_opts(endingOffsets="earliest"), False, ["'endingOffsets'"]),
        (read_opts(endingOffsets='{"t":{"0":-2}}'), False, ["'endingOffsets'", "t-0"]),
        (read_opts(endingOffsets="latest"), True, ["'endingOffsets'", "streaming"]),
        (read_opts(endingTimestamp="5"), True, ["'endingTimestamp'"]),
        (read_opts(startingOffsets="soon"), False, ["'startingOffsets'"]),
        (read_opts(startingOffsets='{"t":{"x":1}}'), False, ["'startingOffsets'", "'x'"]),
        (read_opts(startingOffsets='{"t":[1]}'), False, ["'startingOffsets'"]),
        (read_opts(startingOffsets="{bad json"), False, ["'startingOffsets'", "JSON"]),
        (read_opts(startingTimestamp="yesterday"), False, ["'startingTimestamp'"]),
        (read_opts(startingOffsetsByTimestamp='{"t":{"0":-5}}'), False, ["ByTimestamp'"]),
        (read_opts(startingOffsetsByTimestampStrategy="maybe"), False, ["Strategy'"]),
        (read_opts(minPartitions="0"), False, ["'minPartitions'"]),
        (read_opts(maxRecordsPerPartition="x"), False, ["'maxRecordsPerPartition'"]),
        (read_opts(maxOffsetsPerTrigger="-3"), True, ["'maxOffsetsPerTrigger'"]),
        (read_opts(maxTriggerDelay="5 fortnights"), True, ["'maxTriggerDelay'"]),
        (read_opts(failOnDataLoss="maybe"), False, ["'failOnDataLoss'"]),
        (
            read_opts(**{"kafka.auto.offset.reset": "earliest"}),
            False,
            ["'kafka.auto.offset.reset'"],
        ),
        (read_opts(**{"kafka.enable.auto.commit": "true"}), True, ["'kafka.enable.auto.commit'"]),
        (read_opts(**{"kafka.value.deserializer": "x"}), True, ["'kafka.value.deserializer'"]),
        (read_opts(**{"kafka.no.such.thing": "1"}), False, ["'kafka.no.such.thing'"]),
        (read_opts(**{"kafka.fetch.max.bytes": "lots"}), False, ["'kafka.fetch.max.bytes'"]),
        ({"subscribe": "t"}, False, ["'kafka.bootstrap.servers'"]),
        ({**BOOT, "assign": '{"t":"0"}'}, False, ["'assign'"]),
        ({**BOOT, "subscribePattern": "(unclosed"}, False, ["'subscribePattern'"]),
        ({**BOOT, "subscribe": " , "}, False, ["'subscribe'"]),
    ],
)
def test_bad_options_name_the_option(
    options: dict[str, str], streaming: bool, names: list[str]
) -> None:
    with pytest.raises(OptionError) as raised:
        parse_read_options(options, streaming=streaming)
    message = str(raised.value)
    assert "\n" not in message
    for name in names:
        assert name in message


def test_precedence_of_starting_options() -> None:
    config = parse_read_options(
        read_opts(
            startingOffsets="earliest",
            startingOffsetsByTimestamp='{"t":{"0":5}}',
            startingTimestamp="7",
        ),
        streaming=False,
    )
    assert config.starting == GlobalTimestamp(7, "startingTimestamp")
    config = parse_read_options(
        read_opts(startingOffsets='{"t":{"0":3,"1":-2}}', endingOffsets='{"t":{"0":9,"1":-1}}'),
        streaming=False,
    )
    assert config.starting == SpecificOffsets({("t", 0): 3, ("t", 1): -2}, "startingOffsets")
    assert isinstance(config.ending, SpecificOffsets)


def test_assign_and_passthrough() -> None:
    config = parse_read_options(
        {
            **BOOT,
            "assign": '{"b":[1,0],"a":[2]}',
            "kafka.isolation.level": "read_committed",
            "kafka.group.id": "ignored-as-in-spark",
            "commitOffsetsToGroup": "lag-view",
        },
        streaming=True,
    )
    assert config.subscription == Assign((("a", 2), ("b", 0), ("b", 1)))
    assert config.isolation_level == 1
    assert "group.id" not in config.client
    assert config.commit_group == "lag-view"
    assert config.admin_config() == {
        "bootstrap.servers": "localhost:9092",
        "client.id": "odradek-spark",
    }
    assert (
        Subscribe(("x",))
        == parse_read_options({**BOOT, "subscribe": "x"}, streaming=True).subscription
    )


def test_pattern_matches_whole_names() -> None:
    pattern = SubscribePattern("clicks-.*")
    assert pattern.matches("clicks-eu") and not pattern.matches("old-clicks-eu")


def test_durations() -> None:
    assert parse_duration_ms("d", "15m") == 900_000
    assert parse_duration_ms("d", "30 seconds") == 30_000
    assert parse_duration_ms("d", "250") == 250
    assert parse_duration_ms("d", "1h") == 3_600_000


def test_offsets_json_round_trip_in_spark_shape() -> None:
    offsets = {("b", 10): 5, ("a", 2): 7, ("a", 0): 1}
    as_json = offsets_to_json(offsets)
    assert list(as_json) == ["a", "b"] and list(as_json["a"]) == ["0", "2"]
    assert as_json == {"a": {"0": 1, "2": 7}, "b": {"10": 5}}
    assert offsets_from_json(as_json) == offsets
    assert offsets_from_json('{"a":{"0":1,"2":7},"b":{"10":5}}') == offsets
    with pytest.raises(OptionError, match="'offsets'"):
        offsets_from_json({"a": {"0": 1.5}})


# -- planning ------------------------------------------------------------------------


def test_split_ranges_min_partitions_exact() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 50, 60), OffsetRange("t", 2, 5, 5)]
    pieces = split_ranges(ranges, min_partitions=5)
    assert len(pieces) == 5
    covered = sorted((r.partition, o) for r in pieces for o in range(r.start, r.end))
    assert covered == [(0, o) for o in range(100)] + [(1, o) for o in range(50, 60)]
    assert max(r.size for r in pieces) <= 25


def test_split_ranges_max_records_then_min_partitions() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 10)], max_records=3)
    assert [(r.start, r.end) for r in pieces] == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert len(split_ranges([OffsetRange("t", 0, 0, 10)], min_partitions=6, max_records=5)) == 6
    # Not more tasks than offsets, and empty ranges make no task.
    assert len(split_ranges([OffsetRange("t", 0, 0, 3)], min_partitions=10)) == 3
    assert split_ranges([OffsetRange("t", 0, 4, 4)], min_partitions=3) == []


def test_rate_limit_is_proportional_and_exact() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    latest = {("t", 0): 900, ("t", 1): 200, ("t", 2): 7}
    end = rate_limit(start, latest, 100)
    taken = {tp: end[tp] - start[tp] for tp in start}
    assert sum(taken.values()) == 100
    assert taken == {("t", 0): 90, ("t", 1): 10, ("t", 2): 0}
    assert rate_limit(start, latest, 10_000) == latest
    # Tiny budgets still move: leftovers go to the largest remainders.
    small = rate_limit({("a", 0): 0, ("a", 1): 0}, {("a", 0): 3, ("a", 1): 3}, 1)
    assert sum(small.values()) == 1


def test_json_offsets_must_cover_the_subscription() -> None:
    check_covers("startingOffsets", [("t", 0), ("t", 1)], [("t", 0), ("t", 1)])
    with pytest.raises(OptionError, match=r"'startingOffsets'.*missing t-1"):
        check_covers("startingOffsets", [("t", 0)], [("t", 0), ("t", 1)])
    with pytest.raises(OptionError, match="not subscribed u-0"):
        check_covers("startingOffsets", [("t", 0), ("u", 0)], [("t", 0)])


# -- the Arrow decoder -----------------------------------------------------------------


def batch(base: int, count: int, *, ts: int = 1_000, **kwargs: Any) -> bytes:
    records = [
        Record(
            base + i,
            ts + i,
            None if i % 4 == 3 else b"k%d" % (base + i),
            b"value-%d-" % (base + i) + b"x" * (i % 20),
            (Header("h", b"%d" % i),) if i % 2 else (),
        )
        for i in range(count)
    ]
    return bytes(encode_batch(records, base_offset=base, **kwargs))


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return bytes(
        encode_batch(
            [encode_end_txn_marker(commit, 0, offset=offset, timestamp=5)],
            base_offset=offset,
            producer_id=producer_id,
            producer_epoch=0,
            is_control=True,
            is_transactional=True,
        )
    )


def decode(data: bytes, start: int, end: int, **kwargs: Any) -> tuple[list[dict[str, Any]], int]:
    aborted = kwargs.pop("aborted", None)
    found = scan(data, start, aborted, verify_crc=True)
    out = ArrowDecoder("t", 0, True, **kwargs).decode(data, found, start, end)
    return ([] if out is None else out.to_pylist()), found.next_offset


def test_gaps_and_control_batches_never_stall() -> None:
    # offsets 0-4, gap 5-9 (compacted away), 10-14, a commit marker at 15, 16-19
    log = batch(0, 5) + batch(10, 5) + marker(15, 7, True) + batch(16, 4)
    rows, next_offset = decode(log, 0, 20)
    assert [r["offset"] for r in rows] == [*range(5), *range(10, 15), *range(16, 20)]
    assert next_offset == 20
    # A range that ends inside a gap or on the marker still completes.
    rows, next_offset = decode(log, 3, 12)
    assert [r["offset"] for r in rows] == [3, 4, 10, 11]
    rows, next_offset = decode(marker(15, 7, True), 15, 16)
    assert rows == [] and next_offset == 16
    first = rows_of = decode(log, 0, 20)[0][0]
    assert first["key"] == b"k0" and first["value"] == b"value-0-" and first["headers"] == []
    assert rows_of is first


def test_read_committed_drops_aborted_transactions() -> None:
    kept = batch(0, 3, producer_id=9, producer_epoch=0, is_transactional=True)
    dropped = batch(3, 3, producer_id=8, producer_epoch=0, is_transactional=True)
    log = kept + dropped + marker(6, 8, False) + marker(7, 9, True) + batch(8, 2)
    rows, next_offset = decode(log, 0, 10, aborted=[(8, 3)])
    assert [r["offset"] for r in rows] == [0, 1, 2, 8, 9]
    assert next_offset == 10
    rows, _ = decode(log, 0, 10)  # read_uncommitted sees everything but the markers
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4, 5, 8, 9]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_codecs_and_columns(codec: int) -> None:
    log = batch(100, 40, ts=1_700_000_000_000, compression=codec) + batch(140, 3, timestamp_type=1)
    rows, next_offset = decode(log, 100, 143)
    assert next_offset == 143 and len(rows) == 43
    row = rows[5]
    assert row["offset"] == 105 and row["partition"] == 0 and row["topic"] == "t"
    assert row["key"] == b"k105" and row["value"] == b"value-105-xxxxx"
    assert row["headers"] == [{"key": "h", "value": b"5"}]
    assert rows[3]["key"] is None
    expected = datetime.datetime(2023, 11, 14, 22, 13, 20, 5000, tzinfo=datetime.UTC)
    assert row["timestamp"] == expected and row["timestampType"] == 0
    assert rows[-1]["timestampType"] == 1


def test_timestamp_bounds_filter_exactly() -> None:
    log = batch(0, 10, ts=1_000)  # timestamps 1000..1009 ms
    bounds = TimestampBounds(low_us=1_003_000, low_inclusive=False, high_us=1_006_000)
    rows, _ = decode(log, 0, 10, timestamps=bounds)
    assert [r["offset"] for r in rows] == [4, 5, 6]


def test_truncated_tail_is_left_for_the_next_fetch() -> None:
    log = batch(0, 5) + batch(5, 5)
    rows, next_offset = decode(log[:-10], 0, 10)
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4] and next_offset == 5


def test_corrupt_records_raise_naming_the_partition() -> None:
    bad = bytearray(batch(0, 3))
    bad[61] = 0x7F  # the first record's length now points past the batch
    with pytest.raises(CorruptRecordError, match=r"t-0: .*CRC"):
        scan(bytes(bad), 0, None, verify_crc=True, where="t-0")
    found = scan(bytes(bad), 0, None)  # without CRC checks the record decoder catches it
    with pytest.raises(CorruptRecordError, match="t-0"):
        ArrowDecoder("t", 0, False).decode(bytes(bad), found, 0, 3)
    bad = bytearray(batch(0, 3))
    bad[61 + 1] = 0x7F  # the first record's attributes: fine; its timestamp: garbage
    bad[61 + 2] = 0xFF
    with pytest.raises(CorruptRecordError, match="t-0"):
        ArrowDecoder("t", 0, False).decode(bytes(bad), scan(bytes(bad), 0, None), 0, 3)


# -- the stream reader's trigger logic (no Spark, a fake cluster) ------------------------


class FakeCluster:
    def __init__(self, latest: dict[tuple[str, int], int]) -> None:
        self.latest_offsets = latest
        self.earliest_offsets: dict[tuple[str, int], int] = {}
        self.commits: list[tuple[str, dict[tuple[str, int], int]]] = []

    def topic_partitions(self, subscription: Any) -> list[tuple[str, int]]:
        return sorted(self.latest_offsets)

    def latest(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.latest_offsets[tp] for tp in tps}

    def earliest(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.earliest_offsets.get(tp, 0) for tp in tps}

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        self.commits.append((group, dict(offsets)))

    def close(self) -> None:
        pass


def stream_reader(cluster: FakeCluster, **extra: str) -> StreamReader:
    reader = StreamReader(read_opts(**extra), None)  # type: ignore[arg-type]
    reader._metadata = cluster  # type: ignore[assignment]
    return reader


def test_stream_limits_and_new_partitions() -> None:
    cluster = FakeCluster({("t", 0): 100, ("t", 1): 300})
    reader = stream_reader(cluster, maxOffsetsPerTrigger="40", commitOffsetsToGroup="g")
    assert reader.getDefaultReadLimit() == ReadMaxRows(40)
    start = {"t": {"0": 0, "1": 0}}
    end = reader.latestOffset(start, ReadMaxRows(40))
    assert end == {"t": {"0": 10, "1": 30}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 300}}
    assert cluster.commits == [("g", {("t", 0): 0, ("t", 1): 0})]
    # A new partition starts at its earliest offset (and counts against the limit).
    cluster.latest_offsets[("t", 2)] = 50
    end = reader.latestOffset({"t": {"0": 100, "1": 300}}, ReadMaxRows(40))
    assert end == {"t": {"0": 100, "1": 300, "2": 40}}
    parts = reader.partitions({"t": {"0": 100, "1": 300}}, end)
    assert [(p.spec.partition, p.spec.start, p.spec.end) for p in parts] == [(2, 0, 40)]  # type: ignore[attr-defined]


def test_new_partition_not_starting_at_zero_is_data_loss() -> None:
    cluster = FakeCluster({("t", 0): 10, ("t", 1): 10})
    cluster.earliest_offsets[("t", 1)] = 4
    strict = stream_reader(cluster)
    with pytest.raises(RuntimeError, match=r"t-1: .*offsets 0 to 3"):
        strict.partitions({"t": {"0": 0}}, {"t": {"0": 10, "1": 10}})
    lenient = stream_reader(cluster, failOnDataLoss="false")
    parts = lenient.partitions({"t": {"0": 0}}, {"t": {"0": 10, "1": 10}})
    assert sorted((p.spec.partition, p.spec.start) for p in parts) == [(0, 0), (1, 4)]  # type: ignore[attr-defined]


def test_min_offsets_wait_for_data_or_max_delay() -> None:
    cluster = FakeCluster({("t", 0): 5})
    reader = stream_reader(cluster, minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    start = {"t": {"0": 0}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 5}}  # no limit: Once
    assert reader.latestOffset(start, ReadMaxRows(1000)) == start  # held back
    cluster.latest_offsets[("t", 0)] = 12
    assert reader.latestOffset(start, ReadMaxRows(1000)) == {"t": {"0": 12}}
    reader._last_batch_s = time.monotonic() - 2 * 3600  # the delay has passed
    cluster.latest_offsets[("t", 0)] = 14
    assert reader.latestOffset({"t": {"0": 12}}, ReadMaxRows(1000)) == {"t": {"0": 14}}


def test_available_now_stops_at_the_target() -> None:
    cluster = FakeCluster({("t", 0): 50})
    reader = stream_reader(cluster, maxOffsetsPerTrigger="30", minOffsetsPerTrigger="1000")
    reader.prepareForTriggerAvailableNow()
    cluster.latest_offsets[("t", 0)] = 500  # arrives after the trigger began
    cluster.latest_offsets[("u", 0)] = 9
    first = reader.latestOffset({"t": {"0": 0}}, ReadMaxRows(30))
    assert first == {"t": {"0": 30}}
    second = reader.latestOffset(first, ReadMaxRows(30))
    assert second == {"t": {"0": 50}}
    assert reader.latestOffset(second, ReadMaxRows(30)) == second  # done: the query ends

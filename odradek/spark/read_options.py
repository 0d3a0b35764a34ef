"""The read options of Spark's Kafka source, parsed and checked at planning time.

How this works and why: ``parse_read_options`` turns the user's string options into
one frozen ``ReadConfig`` (subscription, where to start and stop, limits, client
config) or raises ``OptionError`` naming the option, with the same rules Spark's
Kafka source applies: exactly one of ``subscribe``/``subscribePattern``/``assign``;
``latest`` (or -1) cannot start a batch query and ``earliest`` (or -2) cannot end one;
ending options are batch-only; ``startingTimestamp`` wins over
``startingOffsetsByTimestamp``, which wins over ``startingOffsets`` (likewise for the
ending options). Offsets JSON has Spark's shape ``{"topic": {"0": 123}}`` with -2 for
earliest and -1 for latest.

No pyspark or pyarrow here: these are plain values shared by the batch and streaming
readers and tested without Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from odradek.client._core.config import PROPERTIES, ClientConfig, ConfigError
from odradek.spark import options as opts
from odradek.spark.options import OptionError

EARLIEST: Final = -2
LATEST: Final = -1

TP: TypeAlias = tuple[str, int]

# Connector defaults that differ from the plain consumer's: bigger fetches (one Spark
# task reads one partition range, so fewer round trips matter more than memory).
DEFAULT_PARTITION_FETCH_BYTES: Final = 4 * 1024 * 1024
DEFAULT_MAX_TRIGGER_DELAY: Final = "15m"


# -- subscriptions -------------------------------------------------------------------


@dataclass(frozen=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    pattern: str

    def matches(self, topic: str) -> bool:
        # Java's Pattern.matcher(topic).matches(): the whole name must match.
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    partitions: tuple[TP, ...]


Subscription: TypeAlias = Subscribe | SubscribePattern | Assign


# -- where to start or stop ----------------------------------------------------------


@dataclass(frozen=True)
class Earliest:
    pass


@dataclass(frozen=True)
class Latest:
    pass


@dataclass(frozen=True)
class SpecificOffsets:
    """Per-partition offsets; -2 = earliest, -1 = latest. ``option`` names the source."""

    offsets: Mapping[TP, int]
    option: str


@dataclass(frozen=True)
class GlobalTimestamp:
    timestamp_ms: int
    option: str


@dataclass(frozen=True)
class SpecificTimestamps:
    timestamps: Mapping[TP, int]
    option: str


OffsetLimit: TypeAlias = Earliest | Latest | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


@dataclass(frozen=True)
class ReadConfig:
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit  # batch only; Latest for streams
    client: Mapping[str, str]  # validated consumer config (kafka.* without the prefix)
    streaming: bool
    timestamp_strategy_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    commit_group: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def isolation_level(self) -> int:
        return 1 if self.client.get("isolation.level") == "read_committed" else 0

    def admin_config(self) -> dict[str, str]:
        """The subset of the client config an AdminClient accepts."""
        admin_keys = {p.name for p in PROPERTIES if "admin" in p.roles}
        return {k: v for k, v in self.client.items() if k in admin_keys}


# -- JSON ----------------------------------------------------------------------------

_EXAMPLE: Final = '{"topic":{"0":23}}'


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Spark's checkpoint shape, topics then partitions in order: {"t": {"0": 12}}."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(value: Any, option: str = "offsets") -> dict[TP, int]:
    """Parse {"t": {"0": 12}} (a dict or its JSON text) into {("t", 0): 12}."""
    data = _load_json(value, option) if isinstance(value, str) else value
    if not isinstance(data, dict):
        raise OptionError(f"option '{option}' must be a JSON object like {_EXAMPLE}")
    out: dict[TP, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise OptionError(
                f"option '{option}': topic {topic!r} must map partitions to numbers, "
                f'like {{"{topic}":{{"0":23}}}}'
            )
        for partition, number in partitions.items():
            out[(str(topic), _partition_number(option, topic, partition))] = _integer(
                option, f"{topic}-{partition}", number
            )
    return out


def _load_json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(f"option '{option}' is not valid JSON: {error.msg}") from None


def _partition_number(option: str, topic: str, raw: Any) -> int:
    try:
        number = int(raw)
    except (TypeError, ValueError):
        raise OptionError(
            f"option '{option}': partition {raw!r} of topic {topic!r} is not a number"
        ) from None
    if number < 0:
        raise OptionError(f"option '{option}': partition {number} of topic {topic!r} is negative")
    return number


def _integer(option: str, where: str, raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise OptionError(f"option '{option}': {where} must be an integer, not {raw!r}")
    return raw


# -- parsing -------------------------------------------------------------------------

_SUBSCRIPTIONS: Final = ("assign", "subscribe", "subscribePattern")
_ENDING: Final = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in _SUBSCRIPTIONS if opts.has(options, name)]
    if len(given) != 1:
        listed = ", ".join(f"'{n}'" for n in _SUBSCRIPTIONS)
        if not given:
            raise OptionError(f"one of the options {listed} must be specified")
        both = " and ".join(f"'{n}'" for n in given)
        raise OptionError(f"options {both} were both given; specify only one of {listed}")
    name = given[0]
    raw = str(opts.get(options, name)).strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' must name at least one topic")
        return Subscribe(topics)
    if name == "subscribePattern":
        if not raw:
            raise OptionError("option 'subscribePattern' must not be empty")
        try:
            re.compile(raw)
        except re.error as error:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {error}") from None
        return SubscribePattern(raw)
    data = _load_json(raw, "assign")
    if not isinstance(data, dict) or not data:
        raise OptionError('option \'assign\' must be JSON like {"topicA":[0,1],"topicB":[2,4]}')
    partitions: list[TP] = []
    for topic, numbers in data.items():
        if not isinstance(numbers, list) or not numbers:
            raise OptionError(
                f"option 'assign': topic {topic!r} must have a non-empty list of partitions"
            )
        for number in numbers:
            if isinstance(number, bool) or not isinstance(number, int):
                raise OptionError(
                    f"option 'assign': partition {number!r} of topic {topic!r} is not a number"
                )
            partitions.append((str(topic), _partition_number("assign", topic, number)))
    return Assign(tuple(sorted(set(partitions))))


def _offset_limit(
    options: Mapping[str, str],
    *,
    offsets_option: str,
    by_timestamp_option: str,
    timestamp_option: str,
    default: OffsetLimit,
) -> OffsetLimit:
    """The winner among ``timestamp`` > ``by_timestamp`` > ``offsets`` options."""
    raw = opts.get(options, timestamp_option)
    if raw is not None:
        try:
            timestamp = int(str(raw).strip())
        except ValueError:
            raise OptionError(
                f"option '{timestamp_option}' must be a timestamp in milliseconds, got {raw!r}"
            ) from None
        if timestamp < 0:
            raise OptionError(f"option '{timestamp_option}' must not be negative, got {timestamp}")
        return GlobalTimestamp(timestamp, timestamp_option)
    raw = opts.get(options, by_timestamp_option)
    if raw is not None:
        timestamps = offsets_from_json(str(raw), by_timestamp_option)
        for tp, value in timestamps.items():
            if value < 0:
                raise OptionError(
                    f"option '{by_timestamp_option}': the timestamp for {tp[0]}-{tp[1]} "
                    f"must not be negative, got {value}"
                )
        return SpecificTimestamps(timestamps, by_timestamp_option)
    raw = opts.get(options, offsets_option)
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() == "earliest":
        return Earliest()
    if text.lower() == "latest":
        return Latest()
    if not text.startswith("{"):
        raise OptionError(
            f"option '{offsets_option}' must be 'earliest', 'latest' or per-partition JSON "
            f'like {{"topic":{{"0":23}}}}, got {text!r}'
        )
    offsets = offsets_from_json(text, offsets_option)
    for tp, value in offsets.items():
        if value < EARLIEST:
            raise OptionError(
                f"option '{offsets_option}': offset {value} for {tp[0]}-{tp[1]} is not valid "
                "(use -2 for earliest, -1 for latest)"
            )
    return SpecificOffsets(offsets, offsets_option)


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadConfig:
    """Every read option checked; raises OptionError naming the first bad one."""
    subscription = parse_subscription(options)
    client = consumer_config(options)
    starting = _offset_limit(
        options,
        offsets_option="startingOffsets",
        by_timestamp_option="startingOffsetsByTimestamp",
        timestamp_option="startingTimestamp",
        default=Latest() if streaming else Earliest(),
    )
    if streaming:
        for name in _ENDING:
            if opts.has(options, name):
                raise OptionError(f"option '{name}' is not valid for streaming queries")
        ending: OffsetLimit = Latest()
    else:
        ending = _offset_limit(
            options,
            offsets_option="endingOffsets",
            by_timestamp_option="endingOffsetsByTimestamp",
            timestamp_option="endingTimestamp",
            default=Latest(),
        )
        if isinstance(starting, Latest):
            raise OptionError("option 'startingOffsets' cannot be 'latest' for batch queries")
        if isinstance(starting, SpecificOffsets):
            for tp, value in starting.offsets.items():
                if value == LATEST:
                    raise OptionError(
                        f"option 'startingOffsets': latest (-1) for {tp[0]}-{tp[1]} is not "
                        "allowed for batch queries"
                    )
        if isinstance(ending, Earliest):
            raise OptionError("option 'endingOffsets' cannot be 'earliest' for batch queries")
        if isinstance(ending, SpecificOffsets):
            for tp, value in ending.offsets.items():
                if value == EARLIEST:
                    raise OptionError(
                        f"option 'endingOffsets': earliest (-2) for {tp[0]}-{tp[1]} is not "
                        "allowed for batch queries"
                    )
    strategy = str(opts.get(options, "startingOffsetsByTimestampStrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {strategy!r}"
        )
    delay_raw = str(opts.get(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY))
    group = opts.get(options, "commitOffsetsToGroup")
    if group is not None and not str(group).strip():
        raise OptionError("option 'commitOffsetsToGroup' must be a consumer group id")
    return ReadConfig(
        subscription=subscription,
        starting=starting,
        ending=ending,
        client=client,
        streaming=streaming,
        timestamp_strategy_latest=strategy == "latest",
        fail_on_data_loss=opts.get_bool(options, "failOnDataLoss", True),
        include_headers=opts.get_bool(options, "includeHeaders", False),
        min_partitions=opts.get_int(options, "minPartitions", minimum=1),
        max_records_per_partition=opts.get_int(options, "maxRecordsPerPartition", minimum=1),
        max_offsets_per_trigger=opts.get_int(options, "maxOffsetsPerTrigger", minimum=1),
        min_offsets_per_trigger=opts.get_int(options, "minOffsetsPerTrigger", minimum=1),
        max_trigger_delay_ms=opts.parse_duration_ms("maxTriggerDelay", delay_raw),
        commit_group=str(group).strip() if group is not None else None,
    )


def consumer_config(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options as a checked consumer config (errors name the ``kafka.`` option)."""
    config = opts.client_config(options, for_producer=False)
    config.setdefault("max.partition.fetch.bytes", str(DEFAULT_PARTITION_FETCH_BYTES))
    config.setdefault("client.id", "odradek-spark")
    try:
        ClientConfig(config, "consumer")
    except ConfigError as error:
        detail = str(error).split(": ", 1)[-1]
        raise OptionError(f"option 'kafka.{error.key}': {detail}") from None
    return config

"""``odradek get-offsets``: Kafka's ``kafka-get-offsets.sh`` (GetOffsetShell).

How this works and why: the partitions are chosen from the cluster's metadata (every
topic, ``--topic`` as a regular expression that must match the whole name, narrowed by
``--partitions``, or Kafka's ``--topic-partitions`` patterns), then one ListOffsets per
leader through the client's ``AdminClient`` asks for the offset at ``--time``. The
output is Kafka's, one ``topic:partition:offset`` line per partition sorted by topic
and partition, so scripts written for the Kafka tool read it unchanged. As in Kafka, a
partition without an offset for the time (a timestamp after the last record) prints
nothing, a partition that fails is reported on stderr and skipped, and filters that
match no partition are a one-line error with exit status 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import click

from odradek.cli.common import (
    REQUEST_TIMEOUT_S,
    CliError,
    admin_client,
    bootstrap_option,
    describe_failure,
)
from odradek.client._core.types import KafkaException, TopicPartition
from odradek.client.admin.types import OffsetSpec

# --time's words and the ListOffsets timestamps they stand for (KIP-734 max-timestamp,
# KIP-1005 earliest-local and latest-tiered).
TIME_WORDS: dict[str, int] = {
    "latest": -1,
    "earliest": -2,
    "max-timestamp": -3,
    "earliest-local": -4,
    "latest-tiered": -5,
}
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
NO_MATCH = "Could not match any topic-partitions with the specified filters"  # Kafka's words


def parse_time(text: str) -> int:
    """``--time``: a word of ``TIME_WORDS``, its number, or a timestamp in ms (>= 0)."""
    word = text.strip().lower()
    if word in TIME_WORDS:
        return TIME_WORDS[word]
    try:
        value = int(word)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a timestamp in ms or one of {', '.join(TIME_WORDS)}",
            param_hint="--time",
        ) from None
    if value < min(TIME_WORDS.values()):
        raise click.BadParameter(f"{value} is not a timestamp", param_hint="--time")
    return value


@dataclass(frozen=True)
class PartitionFilter:
    """One ``--topic-partitions`` item: a topic regex and a partition range (inclusive
    low, exclusive high, as Kafka's ``0-3`` means 0, 1 and 2)."""

    topic: re.Pattern[str]
    low: int = 0
    high: int | None = None

    def matches(self, topic: str, partition: int) -> bool:
        in_range = partition >= self.low and (self.high is None or partition < self.high)
        return self.topic.fullmatch(topic) is not None and in_range


def _regex(text: str, option: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as error:
        raise click.BadParameter(
            f"{text!r} is not a regular expression: {error}", param_hint=option
        ) from None


def parse_topic_partitions(text: str) -> list[PartitionFilter]:
    """Kafka's ``topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3`` (topics are regexes)."""
    filters = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        topic, sep, spec = item.rpartition(":") if ":" in item else (item, "", "")
        pattern = _regex(topic or ".*", "--topic-partitions")
        if not sep:
            filters.append(PartitionFilter(pattern))
            continue
        match = re.fullmatch(r"(\d*)(-?)(\d*)", spec)
        if match is None or not (match[1] or match[3]) or (match[3] and not match[2]):
            raise click.BadParameter(
                f"{item!r} is not TOPIC, TOPIC:N, TOPIC:LOW-HIGH, TOPIC:LOW- or TOPIC:-HIGH",
                param_hint="--topic-partitions",
            )
        low = int(match[1]) if match[1] else 0
        if not match[2]:
            filters.append(PartitionFilter(pattern, low, low + 1))
        else:
            filters.append(PartitionFilter(pattern, low, int(match[3]) if match[3] else None))
    return filters


def parse_partition_ids(text: str) -> set[int]:
    try:
        ids = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a comma-separated list of partition ids", param_hint="--partitions"
        ) from None
    if not ids or min(ids) < 0:
        raise click.BadParameter(f"{text!r} names no partition", param_hint="--partitions")
    return ids


def select_partitions(
    metadata: dict[str, list[int]], filters: list[PartitionFilter], exclude_internal: bool
) -> list[tuple[str, int]]:
    """The (topic, partition)s some filter matches, sorted as Kafka prints them."""
    return sorted(
        (topic, partition)
        for topic, partitions in metadata.items()
        if not (exclude_internal and topic in INTERNAL_TOPICS)
        for partition in partitions
        if any(f.matches(topic, partition) for f in filters)
    )


@click.command("get-offsets")
@click.option("--topic", "topic_regex", help="topic name or regular expression (default: all)")
@click.option("--partitions", "partition_ids", help="comma-separated partition ids")
@click.option(
    "--topic-partitions",
    help="Kafka's filter list: topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3",
)
@click.option(
    "--time",
    "time_text",
    default="latest",
    show_default=True,
    help="-1/latest, -2/earliest, -3/max-timestamp, -4/earliest-local, -5/latest-tiered, "
    "or a timestamp in ms (the first offset at or after it)",
)
@click.option("--exclude-internal-topics", is_flag=True, help="skip __consumer_offsets, ...")
@bootstrap_option
def get_offsets(
    topic_regex: str | None,
    partition_ids: str | None,
    topic_partitions: str | None,
    time_text: str,
    exclude_internal_topics: bool,
    bootstrap: str,
) -> None:
    """Print each partition's offset at --time as TOPIC:PARTITION:OFFSET lines."""
    timestamp = parse_time(time_text)
    if topic_partitions is not None and (topic_regex is not None or partition_ids is not None):
        raise click.UsageError("--topic-partitions excludes --topic and --partitions")
    if topic_partitions is not None:
        filters = parse_topic_partitions(topic_partitions)
    else:
        pattern = _regex(topic_regex if topic_regex is not None else ".*", "--topic")
        ids = parse_partition_ids(partition_ids) if partition_ids is not None else None
        filters = [PartitionFilter(pattern, p, p + 1) for p in sorted(ids)] if ids else []
        filters = filters or [PartitionFilter(pattern)]
    with admin_client(bootstrap) as admin:
        cluster = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        metadata = {
            name: sorted(topic.partitions)
            for name, topic in cluster.topics.items()
            if not topic.error
        }
        chosen = select_partitions(metadata, filters, exclude_internal_topics)
        if not chosen:
            raise CliError(NO_MATCH)
        spec = OffsetSpec(timestamp)
        wanted = {TopicPartition(t, p): spec for t, p in chosen}
        futures = admin.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
        for topic, partition in chosen:
            try:
                answer = futures[TopicPartition(topic, partition)].result(REQUEST_TIMEOUT_S + 5)
            except KafkaException as error:
                click.echo(
                    f"Skip getting offsets for topic-partition {topic}:{partition} "
                    f"due to error: {describe_failure(error)}",
                    err=True,
                )
                continue
            if answer.offset >= 0:  # -1: no record at or after the timestamp
                click.echo(f"{topic}:{partition}:{answer.offset}")

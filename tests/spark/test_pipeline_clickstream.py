"""examples/clickstream end to end: generator → broker → Spark job → page-counts + Parquet.

Three minutes of click events (event time) go to ``clicks``, then one click ten minutes
later, which moves the watermark past the first three windows. The job runs with
Trigger.AvailableNow; the per-(window, page) counts it writes to the topic and to
Parquet must equal the counts computed here from the same events.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.support.broker import BrokerProcess  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream"
MINUTE_MS = 60_000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a minute boundary
CLICKS = 600
STEP_MS = 300  # 600 clicks x 300 ms: three one-minute windows of 200 clicks
QUERY_TIMEOUT_S = 180


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"clickstream_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def minute_key(ts: str | datetime.datetime) -> str:
    if isinstance(ts, str):
        ts = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=datetime.UTC)
    return ts.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M")


def consume_json(bootstrap: str, topic: str, expected: int) -> list[dict[str, Any]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-clickstream",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in metadata.partitions
            ]
        )
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while len(records) < expected and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                record = json.loads(message.value())
                assert message.key() == record["page"].encode()
                records.append(record)
        return records
    finally:
        consumer.close()


def test_clickstream_job_counts_views_per_page_and_minute(
    spark: Any,
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    generator = load("generator")
    job = load("job")
    clicks = create_topic(topic_name("clicks"), partitions=2)
    counts_topic = create_topic(topic_name("page-counts"), partitions=1)

    events = list(generator.click_events(CLICKS, start_ms=START_MS, step_ms=STEP_MS, seed=3))
    late = {"user": "user-000", "page": "/flush", "ts": generator.iso_ms(START_MS + 10 * MINUTE_MS)}
    assert generator.produce(broker.bootstrap, clicks, iter([*events, late]), progress=False) == 601
    expected = Counter((minute_key(e["ts"]), e["page"]) for e in events)
    assert len({minute for minute, _ in expected}) == 3

    counts = job.page_counts(spark, broker.bootstrap, topic=clicks)
    queries = job.start_queries(
        counts, broker.bootstrap, output=tmp_path, counts_topic=counts_topic, available_now=True
    )
    for query in queries:
        assert query.awaitTermination(QUERY_TIMEOUT_S), f"{query.name} did not finish"
        assert query.exception() is None

    rows = spark.read.parquet(str(tmp_path / "parquet")).collect()
    from_parquet = Counter()
    for row in rows:
        assert row.window_end - row.window_start == datetime.timedelta(minutes=1)
        from_parquet[(minute_key(row.window_start), row.page)] += row.views
    assert from_parquet == expected

    records = consume_json(broker.bootstrap, counts_topic, len(expected))
    from_topic = Counter()
    for record in records:
        from_topic[(minute_key(record["window_start"]), record["page"])] += record["views"]
    assert from_topic == expected

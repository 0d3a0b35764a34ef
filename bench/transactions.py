"""Transactions benchmark: what exactly-once costs on odradek (seeds/000 性能讨论).

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/transactions.py
[--quick]``. ``--quick`` takes about half a minute, the full run a few minutes.

What is measured, side by side in one run against one ``odradek serve`` (127.0.0.1:0,
data in a fresh ``var/bench-txn-*`` directory, deleted at the end), with
confluent-kafka (librdkafka) as the client, 1 KiB values, one topic of 4 partitions:

- Produce throughput (records/s, MB/s): an idempotent producer (acks=all), then a
  transactional producer committing every 100 records and every 10,000 records. The
  ratio transactional / idempotent is printed; the goal for 10,000-record
  transactions is >= 0.8x (Kafka's own figure: the marker and coordinator round trips
  are amortised over the transaction).
- Commit latency: ``commit_transaction()`` wall time of 100-record transactions, p50
  and p99 (EndTxn to the coordinator, which makes PrepareCommit durable, answers, then
  writes the markers; librdkafka's commit also flushes what is queued).
- Consume throughput: the same data read from the start with read_committed and with
  read_uncommitted, each twice, alternating, the faster of each kept (the committed
  transactions' records; the ratio's goal >= 0.9x: read_committed stops at the LSO and
  skips aborted data, nothing more).

Other processes share the 2 cores and skew all of this: the load average is printed
at the start and end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import REPO, OdradekBroker, finish, load_average, show_load, warn_if_busy

VALUE = b"x" * 1024
PARTITIONS = 4
GOAL_PRODUCE = 0.8
GOAL_CONSUME = 0.9


def produce(
    bootstrap: str, topic: str, records: int, txn_size: int | None
) -> tuple[float, list[float]]:
    """Seconds to produce ``records``; the commit latencies (s) when transactional."""
    from confluent_kafka import Producer

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 200_000,
    }
    if txn_size is not None:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    commits: list[float] = []
    # Connections, metadata and the producer id before the clock starts, for every mode
    # alike (init_transactions does it for the transactional ones; one record flushed
    # does it for the idempotent one, and is not counted).
    if txn_size is not None:
        producer.init_transactions(30)
    else:
        producer.produce(topic, VALUE)
        producer.flush(30)
    started = time.perf_counter()
    sent = 0
    while sent < records:
        if txn_size is not None:
            producer.begin_transaction()
        chunk = min(txn_size or records, records - sent)
        for _ in range(chunk):
            while True:
                try:
                    producer.produce(topic, VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += chunk
        if txn_size is not None:
            begun = time.perf_counter()
            producer.commit_transaction(60)
            commits.append(time.perf_counter() - begun)
    left = producer.flush(60)
    elapsed = time.perf_counter() - started
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return elapsed, commits


def consume(bootstrap: str, topic: str, isolation: str, expected: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    started = time.perf_counter()
    deadline = started + 120
    while seen < expected and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < expected:
        raise RuntimeError(f"{isolation}: read {seen} of {expected}")
    return elapsed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a goal is missed")
    args = parser.parse_args(argv)
    records = 20_000 if args.quick else 100_000
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    started = time.perf_counter()
    (REPO / "var").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-txn-", dir=REPO / "var"))
    errors: list[str] = []
    misses = 0
    broker = None
    try:
        broker = OdradekBroker(workdir)
        mb = records * len(VALUE) / 1e6
        rows = []
        idempotent_topic = f"idem-{uuid.uuid4().hex[:6]}"
        broker.create_topic(idempotent_topic, PARTITIONS)
        base, _ = produce(broker.bootstrap, idempotent_topic, records, None)
        rows.append(("idempotent", base, None))
        small_commits: list[float] = []
        txn_topic = ""
        for size in (100, 10_000):
            topic = f"txn{size}-{uuid.uuid4().hex[:6]}"
            broker.create_topic(topic, PARTITIONS)
            elapsed, commits = produce(broker.bootstrap, topic, records, size)
            rows.append((f"transactional, {size:,} per txn", elapsed, elapsed))
            if size == 100:
                small_commits = commits
            txn_topic = topic
        print(f"produce {records:,} x 1 KiB records, {PARTITIONS} partitions, acks=all:")
        for name, elapsed, _ in rows:
            ratio = base / elapsed
            print(
                f"  {name:<32} {records / elapsed:>10,.0f} rec/s {mb / elapsed:>7.1f} MB/s"
                f"  {ratio:.2f}x idempotent"
            )
        big_ratio = base / rows[-1][1]
        if big_ratio < GOAL_PRODUCE:
            misses += 1
            print(f"  goal missed: 10,000-record transactions {big_ratio:.2f}x < {GOAL_PRODUCE}x")
        if small_commits:
            ordered = sorted(small_commits)
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            print(
                f"commit_transaction() of 100-record transactions: p50 "
                f"{statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms "
                f"({len(ordered)} commits)"
            )
        # Each read twice, alternating, the best of each kept: the first read of the
        # topic pays for connections and a cold cache whichever isolation it uses.
        times: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
        for isolation in ("read_uncommitted", "read_committed") * 2:
            times[isolation].append(consume(broker.bootstrap, txn_topic, isolation, records))
        uncommitted, committed = min(times["read_uncommitted"]), min(times["read_committed"])
        ratio = uncommitted / committed
        print(
            f"consume {records:,} records of 10,000-record transactions: read_uncommitted "
            f"{records / uncommitted:,.0f} rec/s, read_committed {records / committed:,.0f} "
            f"rec/s ({ratio:.2f}x)"
        )
        if ratio < GOAL_CONSUME:
            misses += 1
            print(f"  goal missed: read_committed {ratio:.2f}x < {GOAL_CONSUME}x")
    except Exception as error:  # a bench reports what failed, then cleans up
        errors.append(f"{type(error).__name__}: {error}")
        if broker is not None:
            errors.append(broker.log())
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return finish("transactions", started, errors, misses, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The exactly-once sink end to end on real Spark, and the source under read_committed.

- A batch read with ``kafka.isolation.level=read_committed`` of a topic written by
  odradek's transactional Producer (committed and aborted transactions) sees exactly the
  committed records; read_uncommitted sees all of them and no control records.
- A checkpointed streaming query (tests/spark/eos_query.py, its own process) from an
  odradek topic to an odradek topic with ``deliveryGuarantee=exactly-once`` is killed
  with SIGKILL - the driver, its JVM and Python workers, each by pid - at a point chosen
  by the sink's test hook (``ODRADEK_SPARK_EOS_TEST_PAUSE``, which makes the sink write a
  flag file and sleep there), then restarted from its checkpoint and run to the end:

  * run 1 stops at ``open``: a task of micro-batch 1 has produced and flushed records in
    a transaction it has not committed. More input is written while it is down.
  * run 2 replays batch 1 (its new attempt fences the killed one, whose transaction is
    aborted) and stops at ``committed`` of batch 2: every task committed (records and
    batch marker), Spark's commit log not yet written. read_uncommitted now holds the
    killed attempt's records beside their committed copies (aborted duplicates): the
    first kill did land inside an open transaction.
  * run 3 (no hook) runs batch 2 again, with the same input rows: every task finds its
    marker and writes nothing - not even an aborted transaction - then runs to the end.
    read_committed holds every committed source record exactly once.

  Three Spark start-ups (about 35 s each on 2 cores) are most of the module's time. The
  sink is read back with confluent-kafka (librdkafka), not odradek's consumer.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")


from odradek.client import Producer
from odradek.spark.write_exactly_once import TEST_PAUSE_ENV
from tests.spark.test_write_exactly_once import read_values
from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CLIENT_TIMEOUT_S = 30.0


def write_transactions(
    bootstrap: str, topic: str, partitions: int, committed: int, first: int = 0
) -> list[bytes]:
    """``committed`` records in committed transactions of 100, each followed by an
    aborted transaction of 30; returns the committed values."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{first}", "linger.ms": 5}
    )
    kept: list[bytes] = []
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        for start in range(first, first + committed, 100):
            producer.begin_transaction()
            for i in range(start, min(start + 100, first + committed)):
                value = b"rec-%d" % i
                producer.produce(topic, value, b"k%d" % i, i % partitions)
                kept.append(value)
            producer.commit_transaction(CLIENT_TIMEOUT_S)
            producer.begin_transaction()
            for i in range(30):
                producer.produce(topic, b"aborted-%d-%d" % (start, i), None, i % partitions)
            producer.flush(CLIENT_TIMEOUT_S)  # in the log before the abort
            producer.abort_transaction(CLIENT_TIMEOUT_S)
    finally:
        producer.close(CLIENT_TIMEOUT_S)
    return kept


def test_batch_read_committed_sees_only_committed_transactions(
    spark: Any,
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
) -> None:
    topic = create_topic(topic_name("txn"), partitions=3)
    kept = write_transactions(broker.bootstrap, topic, 3, 500)

    def load(isolation: str) -> list[bytes]:
        frame = (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("kafka.isolation.level", isolation)
            .option("maxRecordsPerPartition", "90")  # ranges start and end among markers
            .load()
        )
        return [bytes(r.value) for r in frame.select("value").collect()]

    assert sorted(load("read_committed")) == sorted(kept)
    everything = load("read_uncommitted")
    assert len(everything) == 500 + 5 * 30  # data records only: markers never show
    assert sorted(v for v in everything if v.startswith(b"rec-")) == sorted(kept)


def _session_pids(session: int) -> list[int]:
    """Live processes of the session our child leads (the child, its JVM, workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _kill_tree(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child and every process of its session, each by pid."""
    deadline = time.monotonic() + 20
    while True:
        pids = _session_pids(child.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if child.poll() is None:
            child.wait(10)
        if not pids:
            return
        assert time.monotonic() < deadline, f"processes survive SIGKILL: {pids}"
        time.sleep(0.2)


class QueryRunner:
    """Starts tests/spark/eos_query.py in a new session, so every process it spawns can
    be found (and stopped by pid) afterwards."""

    def __init__(self, bootstrap: str, source: str, sink: str, work: Path) -> None:
        self.args = [bootstrap, source, sink, str(work / "checkpoint"), str(work)]
        self.log = work / "query.log"
        self.work = work

    def start(self, mode: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "tests.spark.eos_query", *self.args, mode],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                env=env,
            )
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if line != b"ready":
            _kill_tree(child)
            raise AssertionError(f"query did not start ({line!r}); log:\n{self.tail()}")
        return child

    def kill_at(self, point: str, batch: int) -> dict[str, Any]:
        """Run until the sink pauses at ``point`` of micro-batch ``batch``; SIGKILL every
        process of the query there. What the sink had done (its flag file)."""
        flag = self.work / f"paused-{point}-{batch}.json"
        env = {**os.environ, TEST_PAUSE_ENV: f"{point}:{batch}:{flag}"}
        child = self.start("forever", env)
        try:
            deadline = time.monotonic() + 180
            while not flag.exists():
                assert child.poll() is None, f"query ended before {point}:\n{self.tail()}"
                assert time.monotonic() < deadline, f"no pause at {point}:\n{self.tail()}"
                time.sleep(0.1)
        finally:
            _kill_tree(child)  # the whole "cluster": driver, JVM, executors' workers
        return dict(json.loads(flag.read_text()))

    def drain(self) -> list[int]:
        """Restart without the hook; run availableNow to the end; each batch's input rows."""
        env = {k: v for k, v in os.environ.items() if k != TEST_PAUSE_ENV}
        child = self.start("drain", env)
        try:
            out, _ = child.communicate(timeout=300)
        finally:
            _kill_tree(child)
        lines = out.decode().split()
        assert child.returncode == 0, f"{out.decode()}\n{self.tail()}"
        return [int(n) for word, n in itertools.pairwise(lines) if word == "rows"]

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def _committed_batches(work: Path) -> list[int]:
    commits = work / "checkpoint" / "commits"
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def test_streaming_exactly_once_survives_sigkill(
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source = create_topic(topic_name("src"), partitions=3)
    sink = create_topic(topic_name("sink"), partitions=2)
    expected = write_transactions(broker.bootstrap, source, 3, 600)
    runner = QueryRunner(broker.bootstrap, source, sink, tmp_path)

    # Run 1, killed inside an open transaction of batch 1 (its records flushed).
    opened = runner.kill_at("open", batch=1)
    assert opened["records"] > 0 and opened["unflushed"] == 0, opened
    assert _committed_batches(tmp_path) == [0]  # batch 1 never reached Spark's commit log
    # More input while the query is down.
    expected += write_transactions(broker.bootstrap, source, 3, 300, first=600)

    # Run 2 replays batch 1 (fencing the killed attempt, whose transaction is aborted) and
    # is killed in batch 2 after every task committed, before Spark's commit log.
    committed = runner.kill_at("committed", batch=2)
    assert committed["records"] > 0, committed
    assert _committed_batches(tmp_path) == [0, 1]
    seen = read_values(broker.bootstrap, sink, 2, "read_committed")
    seen_all = read_values(broker.bootstrap, sink, 2, "read_uncommitted")
    assert len(seen) == len(set(seen)) and set(seen) <= set(expected)
    assert len(seen) >= committed["records"]  # batch 2's commits had landed
    # The kill in run 1 landed mid-transaction: its records are in the log, aborted -
    # duplicates that only read_uncommitted shows.
    aborted = len(seen_all) - len(seen)
    assert aborted >= opened["records"], (aborted, opened)
    assert set(seen_all) == set(seen)

    # Run 3 (no hook) replays batch 2: every task finds its marker and writes nothing.
    sizes = runner.drain()
    assert sizes and sizes[0] == committed["records"], sizes  # batch 2 ran again
    final = read_values(broker.bootstrap, sink, 2, "read_committed")
    final_all = read_values(broker.bootstrap, sink, 2, "read_uncommitted")
    assert len(final) == len(set(final)), "duplicates under read_committed"
    assert sorted(final) == sorted(expected), (
        f"{len(final)} committed vs {len(expected)} expected; batch sizes {sizes}; "
        f"{len(final_all)} records incl. aborted attempts"
    )
    # The replay did not even open a transaction: no new aborted records.
    assert len(final_all) - len(final) == aborted, (len(final_all), len(final), aborted)
    print(
        f"killed with {opened['records']} records in an open transaction ({aborted} aborted "
        f"records in the sink), and after batch 2's commit of {committed['records']} records; "
        f"run 3's batches {sizes}"
    )

"""The exactly-once sink end to end on real Spark, and the source under read_committed.

- A batch read with ``kafka.isolation.level=read_committed`` of a topic written by
  odradek's transactional Producer (committed and aborted transactions) sees exactly the
  committed records; read_uncommitted sees all of them and no control records.
- A checkpointed streaming query (tests/spark/eos_query.py, its own process) from an
  odradek topic to an odradek topic with ``deliveryGuarantee=exactly-once`` is killed
  with SIGKILL mid-run several times - the driver, its JVM and Python workers, each by
  pid - and restarted from its checkpoint; the sink read with read_committed holds every
  committed source record exactly once. Then the last entry of Spark's commit log is
  deleted (the state a crash leaves between the sink's commit and Spark's commit log)
  and the query restarted: the batch runs again and writes nothing.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import contextlib
import itertools

from odradek.client import Producer
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

    def start(self, mode: str) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "tests.spark.eos_query", *self.args, mode],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if line != b"ready":
            _kill_tree(child)
            raise AssertionError(f"query did not start ({line!r}); log:\n{self.tail()}")
        return child

    def drain(self) -> list[int]:
        """Run availableNow to the end; the input rows of each batch."""
        child = self.start("drain")
        try:
            out, _ = child.communicate(timeout=300)
        finally:
            _kill_tree(child)
        lines = out.decode().split()
        assert child.returncode == 0, f"{out.decode()}\n{self.tail()}"
        return [int(n) for word, n in itertools.pairwise(lines) if word == "rows"]

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def test_streaming_exactly_once_survives_sigkill(
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source = create_topic(topic_name("src"), partitions=3)
    sink = create_topic(topic_name("sink"), partitions=2)
    expected = write_transactions(broker.bootstrap, source, 3, 1500)
    runner = QueryRunner(broker.bootstrap, source, sink, tmp_path)
    rng = random.Random(13)

    commits = tmp_path / "checkpoint" / "commits"

    def batches_done() -> int:
        return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0

    for run in range(3):
        done = batches_done()
        child = runner.start("forever")
        try:
            # Kill at a random moment once the query is past its first batch of this run.
            deadline = time.monotonic() + 120
            while batches_done() <= done and time.monotonic() < deadline:
                assert child.poll() is None, f"query ended early (run {run}):\n{runner.tail()}"
                time.sleep(0.1)
            assert batches_done() > done, f"no batch in 120 s (run {run}):\n{runner.tail()}"
            time.sleep(rng.uniform(0.2, 1.5))
        finally:
            _kill_tree(child)  # the whole "cluster": driver, JVM, executors' workers
        if run == 1:  # more input while the query is down
            expected += write_transactions(broker.bootstrap, source, 3, 300, first=1500)

    sizes = runner.drain()
    committed = read_values(broker.bootstrap, sink, 2, "read_committed")
    everything = read_values(broker.bootstrap, sink, 2, "read_uncommitted")
    assert len(committed) == len(set(committed)), "duplicates under read_committed"
    assert sorted(committed) == sorted(expected), (
        f"{len(committed)} committed vs {len(expected)} expected; batch sizes {sizes}; "
        f"{len(everything)} records incl. aborted attempts"
    )
    print(
        f"sink: {len(committed)} committed records, {len(everything) - len(committed)} "
        f"records of aborted (killed or fenced) attempts; last run's batches {sizes}"
    )

    # Forget that the last batch committed, as a crash right after the sink's commit
    # and before Spark's commit log would: the batch runs again, every task finds its
    # marker and writes nothing.
    last = max((p for p in commits.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last.unlink()
    crc = last.with_name(f".{last.name}.crc")
    if crc.exists():
        crc.unlink()
    replayed = runner.drain()
    assert replayed and replayed[0] > 0, replayed  # the batch ran again
    again = read_values(broker.bootstrap, sink, 2, "read_committed")
    assert sorted(again) == sorted(expected)

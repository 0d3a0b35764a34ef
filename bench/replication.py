"""Replication benchmark: partition replication on three local KRaft nodes, against the
goals of issue 12.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/replication.py
[--quick] [--kills 20] [--terms 10] [--catchup-mb 1000] [--parts ...]``.

Every node is a real ``odradek serve`` process from a Kafka-style properties file
(``tests/support/kraft.py``: combined broker+controller nodes, default configs, so
``broker.session.timeout.ms`` is Kafka's 9 s, except ``auto.leader.rebalance.enable``
false: a leadership moved back by the rebalance timer would land in the middle of a
measured round; and ``log.retention.check.interval.ms`` 1 s, as bench/broker.py gives
its node). What is measured, and how:

- Throughput: the load generator of ``bench/broker.py`` (a separate process, the
  confluent-kafka client: 1 KiB random records as fast as it can, ``linger.ms`` 5,
  ``batch.size`` 1 MB; acks=1 without idempotence, acks=all with it) against one
  zero-config node with a topic of replication factor 1 and acks=1, then against the
  three nodes with a topic of replication factor 3, ``min.insync.replicas`` 2 and
  acks=all: an untimed warm-up, then the timed part up to the final flush. Topics keep
  16 MiB per partition as in ``bench/broker.py`` (this VM charges ~10x for page-cache
  pages it has not touched before). 1 and 8 partitions; the best of ``--rounds`` runs.
  Goal: acks=all RF=3 at least 0.5x acks=1 RF=1 (Kafka loses about a third). Two more
  rows split the difference: acks=all (idempotent) on the single node, and acks=1 to
  RF=3 (the followers fetch, nobody waits for them). CPU in cores: the single node's
  over the timed part, or all three nodes' over the whole run on the cluster; the load
  generator's; the whole machine's (2 cores: the rest is other processes).
- End-to-end latency: ``bench/broker.py``'s latency pair (a consumer process polling,
  a producer process sending 1 KiB records stamped with CLOCK_MONOTONIC at a paced
  rate, acks=all, ``linger.ms`` 1) on an RF=3 topic of one partition. 20 MB/s first;
  a rate is *sustained* when the producer kept 95% of it and the consumer's p99 stayed
  under a second (a backlog grows otherwise); if 20 MB/s is not, lower rates are
  tried and the table says which rate the p99 belongs to. Goal: p99 <= 20 ms.
- Leader failover: an RF=3 topic of one partition; an in-process idempotent acks=all
  producer (bootstrap: all three nodes) has delivered one record, then the
  partition's leader gets the signal and a record is produced at once, then one record
  at a time (each after the previous ack) until the old leader's process has exited,
  and one more; the round's number is the longest wait, from the signal or a record's
  produce to its delivery report (librdkafka retries and refreshes metadata on its
  own). With kill -9 that is the first record's; with SIGTERM the old leader may still
  ack a record or two during its controlled shutdown, so the first ack would say
  nothing about the move. The signalled node is restarted and the round waits until it is
  back in the partition's ISR (Metadata's isr). ``--kills`` rounds (goal p99 <=
  ``broker.session.timeout.ms`` + 2 s: a dead leader is only noticed when its session
  expires), then ``--terms`` rounds with SIGTERM (controlled shutdown moves the
  leadership first; goal <= 2 s). Which kill rounds hit a leader that was also the
  active controller is chance; ``--controller-kills`` adds rounds that always do (a
  3-partition topic with one preferred leader per node, a preferred election to
  restore the spread when needed, the producer on the partition the active controller
  leads): the KRaft election then comes before the dead broker can be fenced.
- Follower catch-up: an RF=3 topic of one partition led by node 1; node 3 is stopped
  (SIGTERM), ``--catchup-mb`` MB of 1 KiB records are produced (acks=all,
  ``min.insync.replicas`` 2), node 3 is started again, and the time from the first
  fetched bytes in its segment files (polled every 5 ms from exec: the fetcher starts
  before the ready line) until they are as long as the leader's gives the catch-up
  rate; the files' names and sizes are then checked equal to the leader's.
  Beside it, the raw read rate of the leader's same segment files (4 MiB reads): warm
  (the files as the follower found them: written moments before, in the page cache)
  and cold (each file fsynced and evicted with ``posix_fadvise(DONTNEED)`` first, which
  drops only those files' pages, not the machine's cache).

The table prints each goal beside the measurement; ``--strict`` exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker as load
from bench._support import finish, load_average, show_load, warn_if_busy
from odradek.metadata.broker_heartbeats import DEFAULT_SESSION_TIMEOUT_MS
from tests.support.kraft import Quorum, odradek

KIB = 1024
MB = 1_000_000
THROUGHPUT_GOAL = 0.5  # acks=all RF=3 / acks=1 RF=1, at least
LATENCY_RATES = (20 * MB, 10 * MB, 5 * MB, 2 * MB)
LATENCY_P99_GOAL_MS = 20.0
SUSTAINED_SHARE = 0.95  # of the target rate the producer must keep
BACKLOG_P99_MS = 1000.0  # a p99 above this: the consumer fell behind, not sustained
KILL_GOAL_S = DEFAULT_SESSION_TIMEOUT_MS / 1000 + 2.0
TERM_GOAL_S = 2.0
ROUND_TIMEOUT_S = 90.0
POLL_S = 0.05
READ_BUFFER = 4 * 1024 * 1024
PROPERTIES = {
    "auto.leader.rebalance.enable": "false",
    # The throughput topics' 16 MiB retention applied every second, as on the single node.
    "log.retention.check.interval.ms": str(load.RETENTION_CHECK_MS),
}
SERVE_ARGS = ["--log-level", "WARNING"]  # --node-log-level replaces the level
REPLICATED = {"min.insync.replicas": "2"}


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def verdict(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


# -- the cluster --------------------------------------------------------------------------


class Cluster:
    """Three combined KRaft nodes and an admin client on all of them."""

    def __init__(self, workdir: Path) -> None:
        self.quorum = Quorum(workdir, properties=PROPERTIES, serve_args=SERVE_ARGS).start()
        from confluent_kafka.admin import AdminClient

        self.admin: Any = AdminClient({"bootstrap.servers": self.quorum.bootstrap})

    @property
    def bootstrap(self) -> str:
        return self.quorum.bootstrap

    def pid(self, node_id: int) -> int:
        return self.quorum.nodes[node_id].pid

    def create_topic(
        self,
        topic: str,
        partitions: int,
        config: dict[str, str] | None = None,
        assignment: list[list[int]] | None = None,
    ) -> None:
        from confluent_kafka.admin import NewTopic

        if assignment is not None:
            new = NewTopic(
                topic, partitions, -1, replica_assignment=assignment, config=config or {}
            )
        else:
            new = NewTopic(topic, partitions, 3, config=config or {})
        self.admin.create_topics([new], operation_timeout=30)[topic].result(60)
        self.wait_isr(topic, range(partitions), 3)

    def delete_topic(self, topic: str) -> None:
        self.admin.delete_topics([topic], operation_timeout=30)[topic].result(60)

    def partition(self, topic: str, index: int = 0) -> tuple[int, list[int]]:
        """(leader, isr) of one partition as Metadata answers (leader -1: none)."""
        metadata = self.admin.list_topics(topic, timeout=10)
        state = metadata.topics[topic].partitions.get(index)
        if state is None:
            return -1, []
        return int(state.leader), [int(n) for n in state.isrs]

    def wait_isr(self, topic: str, partitions: range, size: int) -> None:
        """Until every partition has a leader and ``size`` replicas in its ISR."""
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while True:
            try:
                states = [self.partition(topic, p) for p in partitions]
            except Exception:  # a node restarting: ask again
                states = []
            if states and all(leader >= 0 and len(isr) >= size for leader, isr in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: ISR not {size} within {ROUND_TIMEOUT_S} s: {states}")
            time.sleep(POLL_S)

    def close(self) -> None:
        self.admin = None
        self.quorum.close()


# -- throughput ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One produce workload: acks, and the replication factor (RF=1: the single node)."""

    acks: str
    replication: int
    partitions: int

    @property
    def label(self) -> str:
        nodes = "1 node" if self.replication == 1 else "3 nodes"
        return (
            f"produce 1 KiB, acks={self.acks}, RF={self.replication}, {nodes}, {self.partitions}p"
        )


# The goal's pair first; acks=all on one node and acks=1 on three split the cost of
# waiting for the followers from that of idempotence and of the followers' fetching.
def cases(partition_counts: Sequence[int]) -> list[Case]:
    return [
        Case(acks, replication, p)
        for p in partition_counts
        for acks, replication in (("1", 1), ("all", 3), ("all", 1), ("1", 3))
    ]


def produce_spec(
    topic: str, partitions: int, acks: str, seconds: float, warmup: float
) -> dict[str, Any]:
    return {
        "kind": "produce",
        "topic": topic,
        "partitions": partitions,
        "size": KIB,
        "acks": acks,
        "seconds": seconds,
        "warmup_s": warmup,
    }


def run_of(topic: str, spec: dict[str, Any], timeout: float) -> load.Run:
    try:
        result = load.run_worker(spec, timeout)
    except RuntimeError as error:
        return load.Run(topic=topic, error=str(error).splitlines()[0][:200])
    return load.Run(
        topic=topic,
        records=result["records"],
        bytes=result["bytes"],
        seconds=result["seconds"],
        client_cpu=result["cpu_s"] / result["seconds"],
        broker_cpu=result["broker_cpu"],
        machine_busy=result["machine"],
    )


def throughput_runs(
    base: Path, partition_counts: Sequence[int], seconds: float, warmup: float, rounds: int
) -> dict[Case, load.Run | None]:
    """The best of ``rounds`` runs of every case: the single node's first, then the
    cluster's (one process set at a time on the 2 cores)."""
    runs: dict[Case, list[load.Run]] = {case: [] for case in cases(partition_counts)}
    timeout = warmup + seconds + 120
    check = ("--override", f"log.retention.check.interval.ms={load.RETENTION_CHECK_MS}")
    (base / "single").mkdir()
    node = load.OdradekBroker(base / "single", check)
    try:
        for round_number in range(rounds):
            for case in (c for c in runs if c.replication == 1):
                topic = f"single-acks{case.acks}-{case.partitions}p-r{round_number}"
                progress(f"{case.label}, round {round_number + 1}")
                node.create_topic(topic, case.partitions, load.RETENTION_CONFIG)
                spec = {
                    **produce_spec(topic, case.partitions, case.acks, seconds, warmup),
                    "bootstrap": node.bootstrap,
                    "broker_pid": node.pid,
                }
                runs[case].append(run_of(topic, spec, timeout))
    finally:
        node.stop()
    cluster = Cluster(base / "throughput")
    try:
        for round_number in range(rounds):
            for case in (c for c in runs if c.replication == 3):
                topic = f"replicated-acks{case.acks}-{case.partitions}p-r{round_number}"
                progress(f"{case.label}, round {round_number + 1}")
                cluster.create_topic(
                    topic, case.partitions, {**load.RETENTION_CONFIG, **REPLICATED}
                )
                leader, _ = cluster.partition(topic)
                spec = {
                    **produce_spec(topic, case.partitions, case.acks, seconds, warmup),
                    "bootstrap": cluster.bootstrap,
                    "broker_pid": cluster.pid(leader),  # partition 0's leader
                }
                pids = [cluster.pid(n) for n in cluster.quorum.node_ids]
                cpu_before = sum(load.process_cpu_s(pid) for pid in pids)
                began = time.perf_counter()
                run = run_of(topic, spec, timeout)
                # All three nodes' CPU over the whole run (warm-up included).
                elapsed = time.perf_counter() - began
                run.broker_cpu = (sum(load.process_cpu_s(p) for p in pids) - cpu_before) / elapsed
                runs[case].append(run)
                cluster.delete_topic(topic)
    finally:
        cluster.close()
    return {case: load.best(found) for case, found in runs.items()}


def profile_run(base: Path, seconds: float, warmup: float) -> list[str]:
    """py-spy on all three nodes during an acks=all RF=3 produce run (one partition
    led by node 1): where each spends its time."""
    binary = load.py_spy()
    if binary is None:
        return ["(py-spy not installed: `make bench-tools`)"]
    cluster = Cluster(base / "profile")
    lines: list[str] = []
    try:
        topic = "profiled"
        cluster.create_topic(topic, 1, {**load.RETENTION_CONFIG, **REPLICATED}, [[1, 2, 3]])
        spec = {
            **produce_spec(topic, 1, "all", seconds, warmup),
            "bootstrap": cluster.bootstrap,
            "broker_pid": cluster.pid(1),
        }
        worker = load.start_worker(spec)
        time.sleep(warmup)
        with contextlib.ExitStack() as stack:
            infos = {
                n: stack.enter_context(
                    load.profiling(binary, cluster.pid(n), base / f"profile-{n}.txt")
                )
                for n in cluster.quorum.node_ids
            }
            result = load.finish_worker(worker, warmup + seconds + 120)
        lines.append(
            f"acks=all RF=3 1p while profiled: {result['bytes'] / result['seconds'] / MB:.1f} MB/s"
        )
        for node_id, info in infos.items():
            role = "leader" if node_id == 1 else "follower"
            lines += ["", f"node {node_id} ({role}):"]
            output = base / f"profile-{node_id}.txt"
            if info.get("error") or not output.exists():
                lines.append("(py-spy failed)")
                continue
            lines += load.profile_summary(output, info["seconds"], 12)
    finally:
        cluster.close()
    return lines


# -- end-to-end latency ----------------------------------------------------------------------


@dataclass
class LatencyResult:
    target: int
    rate: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    measured: int = 0
    error: str | None = None

    @property
    def sustained(self) -> bool:
        return (
            self.error is None
            and self.rate >= SUSTAINED_SHARE * self.target
            and self.p99_ms <= BACKLOG_P99_MS
        )


def latency_once(
    cluster: Cluster, topic: str, rate: int, warmup: float, seconds: float
) -> LatencyResult:
    timeout = warmup + seconds + 60
    base = {"bootstrap": cluster.bootstrap, "topic": topic, "timeout_s": timeout}
    consumer = load.start_worker({**base, "kind": "latency-consumer"})
    producer = None
    try:
        line = load.read_line(consumer, "latency consumer", lambda: "")
        if line != "ready":
            raise RuntimeError(f"latency consumer said {line!r}")
        producer = load.start_worker(
            {
                **base,
                "kind": "latency-producer",
                "size": KIB,
                "rate": rate,
                "warmup_s": warmup,
                "seconds": seconds,
                "acks": "all",
                "linger_ms": 1,
            }
        )
        sent = load.finish_worker(producer, timeout)
        got = load.finish_worker(consumer, timeout)
    except RuntimeError as error:
        for process in (producer, consumer):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        return LatencyResult(rate, error=str(error).splitlines()[0][:200])
    return LatencyResult(
        rate,
        rate=sent["rate"],
        p50_ms=got["p50_ms"],
        p99_ms=got["p99_ms"],
        max_ms=got["max_ms"],
        measured=got["measured"],
    )


def latency_runs(base: Path, warmup: float, seconds: float) -> list[LatencyResult]:
    """20 MB/s, then lower rates until one is sustained."""
    results = []
    cluster = Cluster(base / "latency")
    try:
        for index, rate in enumerate(LATENCY_RATES):
            topic = f"latency-{index}"
            cluster.create_topic(topic, 1, REPLICATED)
            progress(f"end-to-end latency at {rate / MB:g} MB/s, RF=3")
            results.append(latency_once(cluster, topic, rate, warmup, seconds))
            cluster.delete_topic(topic)
            if results[-1].sustained:
                break
    finally:
        cluster.close()
    return results


# -- failover --------------------------------------------------------------------------------


class AcksAllProducer:
    """An idempotent acks=all confluent-kafka producer timing single records."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": int(ROUND_TIMEOUT_S * 1000),
            }
        )

    def deliver(self, began: float, partition: int = 0) -> float:
        """Produce one record to ``partition``; seconds from ``began`` to its ack."""
        outcome: list[Any] = []

        def report(error: Any, _message: Any) -> None:
            outcome.append(error)

        self.producer.produce(self.topic, b"x" * 100, partition=partition, on_delivery=report)
        while not outcome:
            self.producer.poll(0.005)
        if outcome[0] is not None:
            raise RuntimeError(f"produce after the failover: {outcome[0]}")
        return time.monotonic() - began

    def close(self) -> None:
        self.producer.flush(10)


def new_leader_seen(
    cluster: Cluster, topic: str, old: int, began: float, stop: threading.Event, partition: int = 0
) -> list[float]:
    """Start polling Metadata (every POLL_S) for a leader other than ``old``; the list
    gets the seconds from ``began`` when one is first named."""
    seen: list[float] = []

    def watch() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                leader, _ = cluster.partition(topic, partition)
                if leader not in (old, -1):
                    seen.append(time.monotonic() - began)
                    return
            stop.wait(POLL_S)

    threading.Thread(target=watch, daemon=True).start()
    return seen


def failover_round(
    cluster: Cluster, producer: AcksAllProducer, hard: bool, partition: int = 0, partitions: int = 1
) -> tuple[float, float | None, int, bool]:
    """(longest wait for an ack from the signal on, seconds until Metadata named the new
    leader, the signalled node, whether it was also the active controller); the node is
    back in the ISR after.

    From the signal, records are produced one at a time (each after the previous one's
    ack) until the old leader's process has exited, and one more after that: a record
    sent into the failover waits for all of it (with kill -9, the first one, sent at
    the signal), while the old leader may still ack a record or two during a controlled
    shutdown — so the round's number is the longest single wait, not the first ack.
    """
    topic = producer.topic
    cluster.wait_isr(topic, range(partitions), 3)
    leader, _ = cluster.partition(topic, partition)
    producer.deliver(time.monotonic(), partition)  # connected to the current leader
    process = cluster.quorum.nodes[leader].process
    assert process is not None
    quorum_leader = cluster.quorum.leader()
    was_controller = quorum_leader is not None and quorum_leader[0] == leader
    stop = threading.Event()
    began = time.monotonic()
    process.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
    seen = new_leader_seen(cluster, topic, leader, began, stop, partition)
    try:
        worst = producer.deliver(began, partition)
        deadline = began + ROUND_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            worst = max(worst, producer.deliver(time.monotonic(), partition))
        status = process.wait(60)
        worst = max(worst, producer.deliver(time.monotonic(), partition))
        if not seen:
            stop.wait(1.0)  # the watcher's last poll
    finally:
        stop.set()
    if not hard and status != 0:
        raise RuntimeError(f"node {leader} exited {status} on SIGTERM")
    cluster.quorum.start_node(leader)
    cluster.wait_isr(topic, range(partitions), 3)
    return worst, (seen[0] if seen else None), leader, was_controller


def controller_led_partition(cluster: Cluster, topic: str, partitions: int) -> int:
    """A partition of ``topic`` led by the active controller; a preferred election
    first restores the spread (one leader per node) when none is."""
    for attempt in range(2):
        current = cluster.quorum.leader()
        controller = current[0] if current is not None else -1
        for index in range(partitions):
            if cluster.partition(topic, index)[0] == controller:
                return index
        if attempt == 0:
            done = odradek(
                "leader-election",
                "--bootstrap-server",
                cluster.bootstrap,
                "--election-type",
                "PREFERRED",
                "--all-topic-partitions",
            )
            if done.returncode != 0:
                raise RuntimeError(f"preferred election: {done.stderr.strip()}")
            cluster.wait_isr(topic, range(partitions), 3)
    raise RuntimeError(f"{topic}: no partition led by the active controller")


def colocated_runs(base: Path, kills: int, verbose: bool) -> list[tuple[float, float | None]]:
    """kill -9 rounds where the partition's leader is also the active controller (the
    KRaft election comes before the fence): a 3-partition topic with one preferred
    leader per node, the producer on the partition the controller leads."""
    cluster = Cluster(base / "failover-colocated")
    producer = None
    try:
        topic = "colocated"
        spread = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
        cluster.create_topic(topic, 3, REPLICATED, assignment=spread)
        producer = AcksAllProducer(cluster.bootstrap, topic)
        results = []
        for index in range(kills):
            partition = controller_led_partition(cluster, topic, 3)
            worst, seen, node, was_controller = failover_round(
                cluster, producer, True, partition, 3
            )
            if not was_controller:  # the controller moved between the check and the kill
                raise RuntimeError(f"node {node} was not the active controller at the kill")
            results.append((worst, seen))
            if verbose:
                named = "-" if seen is None else f"{seen:.2f} s"
                progress(
                    f"kill -9 {index + 1}/{kills} of node {node} (active controller, leader of "
                    f"{topic}-{partition}): longest wait {worst:.2f} s, new leader named "
                    f"after {named}"
                )
        return results
    finally:
        if producer is not None:
            producer.close()
        cluster.close()


def failover_runs(
    base: Path, kills: int, terms: int, verbose: bool
) -> dict[bool, list[tuple[float, float | None, bool]]]:
    """hard (kill -9) / not (SIGTERM) -> (longest ack wait, new leader named, the node was
    the active controller too) per round."""
    cluster = Cluster(base / "failover")
    producer = None
    try:
        topic = "failover"
        cluster.create_topic(topic, 1, REPLICATED)
        producer = AcksAllProducer(cluster.bootstrap, topic)
        results: dict[bool, list[tuple[float, float | None, bool]]] = {True: [], False: []}
        for hard, rounds in ((True, kills), (False, terms)):
            for index in range(rounds):
                worst, seen, node, was_controller = failover_round(cluster, producer, hard)
                results[hard].append((worst, seen, was_controller))
                if verbose:
                    how = "kill -9" if hard else "SIGTERM"
                    named = "-" if seen is None else f"{seen:.2f} s"
                    progress(
                        f"{how} {index + 1}/{rounds} of node {node}"
                        f"{' (the active controller)' if was_controller else ''}: longest wait "
                        f"{worst:.2f} s, new leader named after {named}"
                    )
        return results
    finally:
        if producer is not None:
            producer.close()
        cluster.close()


# -- follower catch-up -----------------------------------------------------------------------


def segment_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def fill(bootstrap: str, topic: str, total: int) -> float:
    """Produce ``total`` bytes of 1 KiB records, acks=all; seconds taken."""
    from confluent_kafka import Producer

    failures: list[str] = []
    producer = Producer(load.producer_config({"bootstrap": bootstrap, "acks": "all"}, failures))
    value = os.urandom(KIB)
    began = time.monotonic()
    for _ in range(total // KIB):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(120) or failures:
        raise RuntimeError(f"fill: {len(failures)} failed deliveries, first {failures[:1]}")
    return time.monotonic() - began


def read_files(files: Sequence[Path], cold: bool) -> tuple[int, float]:
    """(bytes, seconds) of reading ``files`` whole with READ_BUFFER reads; ``cold``
    evicts each file's pages first (fsync, then POSIX_FADV_DONTNEED: these files only)."""
    buffer = bytearray(READ_BUFFER)
    total = 0
    if cold:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    began = time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as file:
            while count := file.readinto(buffer):
                total += count
    return total, time.perf_counter() - began


def read_rate(files: Sequence[Path], cold: bool) -> float:
    total, seconds = read_files(files, cold)
    return total / seconds


@dataclass
class CatchUp:
    behind: int  # bytes of segment files the follower lacked
    fill_s: float
    first_s: float  # exec to the first fetched bytes in its segment files
    catchup_s: float  # first fetched bytes to segment files as long as the leader's
    isr_s: float  # exec to back in the ISR
    warm_read: float
    cold_read: float

    @property
    def rate(self) -> float:
        return self.behind / self.catchup_s


def catchup_run(base: Path, megabytes: int) -> CatchUp:
    cluster = Cluster(base / "catchup")
    try:
        topic = "catchup"
        # No retention by size or time in the way: the follower must copy it all.
        cluster.create_topic(topic, 1, {**REPLICATED, "retention.ms": "-1"}, [[1, 2, 3]])
        follower = 3
        cluster.quorum.stop(follower)
        progress(f"fill {megabytes} MB with node {follower} stopped")
        fill_s = fill(cluster.bootstrap, topic, megabytes * MB)
        leader_dir = cluster.quorum.data_dir(1) / f"{topic}-0"
        follower_dir = cluster.quorum.data_dir(follower) / f"{topic}-0"
        target = segment_bytes(leader_dir)
        before = segment_bytes(follower_dir)
        progress(f"restart node {follower}, {(target - before) / MB:,.0f} MB behind")
        # Launched, not started: its fetcher may copy much before the ready line.
        launched = time.monotonic()
        cluster.quorum.launch_node(follower)
        deadline = launched + max(ROUND_TIMEOUT_S, megabytes / 5)
        first = None  # when the first fetched bytes landed
        while (size := segment_bytes(follower_dir)) < target:
            now = time.monotonic()
            if first is None and size > before:
                first = now
            if now > deadline:
                raise RuntimeError(f"node {follower} did not catch up: {size} of {target}")
            time.sleep(0.005)
        done = time.monotonic()
        cluster.quorum.nodes[follower].wait_ready()
        cluster.wait_isr(topic, range(1), 3)
        isr_s = time.monotonic() - launched
        first = done if first is None else first
        files = sorted(leader_dir.glob("*.log"))
        theirs = sorted(follower_dir.glob("*.log"))
        if [p.name for p in files] != [p.name for p in theirs] or any(
            a.stat().st_size != b.stat().st_size for a, b in zip(files, theirs, strict=True)
        ):
            raise RuntimeError("the follower's segment files differ from the leader's")
        warm = read_rate(files, cold=False)
        cold = read_rate(files, cold=True)
        return CatchUp(target - before, fill_s, first - launched, done - first, isr_s, warm, cold)
    finally:
        cluster.close()


# -- report ----------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs, 3 kills, 200 MB")
    parser.add_argument("--seconds", type=float, help="timed seconds per produce run (5; quick 2)")
    parser.add_argument("--rounds", type=int, help="produce runs per workload (2; quick 1)")
    parser.add_argument("--latency-seconds", type=float, help="measured seconds (10; quick 3)")
    parser.add_argument("--kills", type=int, help="kill -9 rounds (20; quick 3)")
    parser.add_argument("--terms", type=int, help="SIGTERM rounds (10; quick 3)")
    parser.add_argument(
        "--controller-kills",
        type=int,
        default=0,
        help="kill -9 rounds of a leader that is also the active controller (0)",
    )
    parser.add_argument(
        "--catchup-mb", type=int, help="MB the follower is behind (1000; quick 200)"
    )
    parser.add_argument(
        "--parts",
        default="throughput,latency,failover,catchup",
        help="which parts to run (comma-separated: throughput, latency, failover, catchup; "
        "profile: py-spy on the three nodes during an acks=all RF=3 run, not by default)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--verbose", action="store_true", help="print every failover round")
    parser.add_argument("--keep", action="store_true", help="keep the nodes' dirs and logs")
    parser.add_argument(
        "--node-log-level",
        default="WARNING",
        help="the nodes' --log-level (WARNING; INFO logs elections and fences, with --keep)",
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config line for every cluster node (repeatable), e.g. replica.fetch.backoff.ms=100",
    )
    args = parser.parse_args(argv)
    SERVE_ARGS[1] = args.node_log_level
    for line in args.property:
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            parser.error(f"--property {line!r}: not KEY=VALUE")
        PROPERTIES[key.strip()] = value.strip()
    quick = args.quick
    seconds = args.seconds or (2.0 if quick else 5.0)
    warmup = 1.0 if quick else 2.0
    rounds = args.rounds or (1 if quick else 2)
    latency_seconds = args.latency_seconds or (3.0 if quick else 10.0)
    kills = args.kills if args.kills is not None else 3 if quick else 20
    terms = args.terms if args.terms is not None else 3 if quick else 10
    catchup_mb = args.catchup_mb or (200 if quick else 1000)
    started = time.perf_counter()
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    errors: list[str] = []
    lines: list[str] = []
    notes: list[str] = []
    misses = 0

    def measured(what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as error:  # one failed part still prints the others
            errors.append(f"{what}: {type(error).__name__}: {error}")

    def add(name: str, goal: str, value: str, verdict_text: str = "") -> None:
        lines.append(f"| {name} | {goal} | {value} | {verdict_text} |")

    with tempfile.TemporaryDirectory(prefix="odradek-replication-bench-") as tmp:
        base = (
            Path(tempfile.mkdtemp(prefix="odradek-replication-bench-")) if args.keep else Path(tmp)
        )
        if args.keep:
            print(f"nodes' dirs and logs under {base}", flush=True)

        def throughput() -> None:
            nonlocal misses
            partition_counts = (1, 8)
            best = throughput_runs(base, partition_counts, seconds, warmup, rounds)
            for case, run in best.items():
                if run is None or run.error:
                    add(case.label, "", f"failed: {run.error if run else 'no run'}")
                    continue
                add(
                    case.label,
                    "",
                    f"{run.mb_s:,.1f} MB/s, {run.records_s:,.0f} records/s (CPU: "
                    f"{'brokers' if case.replication > 1 else 'broker'} "
                    f"{run.broker_cpu:.2f}, client {run.client_cpu:.2f}, "
                    f"machine {run.machine_busy:.2f} cores)",
                )
            for p in partition_counts:
                single, replicated = best[Case("1", 1, p)], best[Case("all", 3, p)]
                if single is None or replicated is None or single.error or replicated.error:
                    continue
                ratio = replicated.mb_s / single.mb_s
                ok = ratio >= THROUGHPUT_GOAL
                misses += not ok
                add(
                    f"  acks=all RF=3 / acks=1 RF=1, {p}p",
                    f">= {THROUGHPUT_GOAL}x",
                    f"{ratio:.2f}x",
                    verdict(ok),
                )

        def latency() -> None:
            nonlocal misses
            for result in latency_runs(base, warmup, latency_seconds):
                label = f"end-to-end latency, RF=3, acks=all, at {result.target / MB:g} MB/s"
                if result.error:
                    add(label, "", f"failed: {result.error}")
                    continue
                value = (
                    f"p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
                    f"max {result.max_ms:.1f} ms ({result.rate / MB:.1f} MB/s sent, "
                    f"{result.measured:,} records)"
                )
                if not result.sustained:
                    add(label, f"p99 <= {LATENCY_P99_GOAL_MS:g} ms", value, "not sustained")
                    continue
                ok = result.p99_ms <= LATENCY_P99_GOAL_MS and result.target == LATENCY_RATES[0]
                misses += not ok
                here = verdict(result.p99_ms <= LATENCY_P99_GOAL_MS)
                text = (
                    verdict(ok)
                    if result.target == LATENCY_RATES[0]
                    else f"**MISSED** (20 MB/s not sustained; at this rate {here})"
                )
                add(label, f"p99 <= {LATENCY_P99_GOAL_MS:g} ms", value, text)

        def failover() -> None:
            nonlocal misses
            results = failover_runs(base, kills, terms, args.verbose)
            if args.controller_kills:
                hit = colocated_runs(base, args.controller_kills, args.verbose)
                c_waits = [w for w, _ in hit]
                c_named = [n for _, n in hit if n is not None]
                if c_named:
                    add(
                        "failover, kill -9 of a leader that is the active controller: "
                        "Metadata names a new leader",
                        "",
                        f"p50 {percentile(c_named, 0.5):.2f} s, max {max(c_named):.2f} s "
                        f"({len(c_named)} of {len(hit)} rounds)",
                    )
                ok = percentile(c_waits, 0.99) <= KILL_GOAL_S
                misses += not ok
                add(
                    "failover, kill -9 of a leader that is the active controller: longest "
                    f"acks=all wait ({len(hit)} rounds)",
                    f"p99 <= {KILL_GOAL_S:g} s",
                    f"p50 {percentile(c_waits, 0.5):.2f} s, p99 {percentile(c_waits, 0.99):.2f} s, "
                    f"max {max(c_waits):.2f} s",
                    verdict(ok),
                )
            for hard, goal_s, how in (
                (True, KILL_GOAL_S, "kill -9"),
                (False, TERM_GOAL_S, "SIGTERM"),
            ):
                rounds = results[hard]
                if not rounds:
                    continue
                waits = [w for w, _, _ in rounds]
                named = [n for _, n, _ in rounds if n is not None]
                colocated = [w for w, _, c in rounds if c]
                if named:
                    add(
                        f"failover, {how} of the leader: Metadata names a new leader",
                        "",
                        f"p50 {percentile(named, 0.5):.2f} s, p99 {percentile(named, 0.99):.2f} s,"
                        f" max {max(named):.2f} s ({len(named)} of {len(rounds)} rounds)",
                    )
                worst = percentile(waits, 0.99) if hard else max(waits)
                ok = worst <= goal_s
                misses += not ok
                add(
                    f"failover, {how} of the leader: longest acks=all wait ({len(rounds)} rounds)",
                    f"{'p99' if hard else 'max'} <= {goal_s:g} s",
                    f"p50 {percentile(waits, 0.5):.2f} s, p99 {percentile(waits, 0.99):.2f} s, "
                    f"max {max(waits):.2f} s",
                    verdict(ok),
                )
                if colocated:
                    add(
                        f"  of those, the leader was also the active controller "
                        f"({len(colocated)} rounds)",
                        "",
                        f"p50 {percentile(colocated, 0.5):.2f} s, max {max(colocated):.2f} s",
                    )

        def catchup() -> None:
            result = catchup_run(base, catchup_mb)
            add(
                f"follower catch-up, {result.behind / MB:,.0f} MB behind",
                "",
                f"{result.rate / MB:,.1f} MB/s ({result.catchup_s:.2f} s from its first "
                f"fetched bytes, {result.first_s:.2f} s after exec; in the ISR "
                f"{result.isr_s:.2f} s after exec)",
            )
            add(
                "raw read of the same segment files, warm cache",
                "",
                f"{result.warm_read / MB:,.0f} MB/s "
                f"(catch-up {result.rate / result.warm_read:.3f}x)",
            )
            add(
                "raw read of the same segment files, evicted (fadvise)",
                "",
                f"{result.cold_read / MB:,.0f} MB/s "
                f"(catch-up {result.rate / result.cold_read:.3f}x)",
            )
            notes.append(
                f"catch-up fill: {result.behind / MB:,.0f} MB acks=all to 2 replicas in "
                f"{result.fill_s:.1f} s ({result.behind / MB / result.fill_s:.1f} MB/s)"
            )

        def profile() -> None:
            notes.extend(["", *profile_run(base, max(seconds, 5.0), warmup)])

        parts = set(args.parts.split(","))
        for name, step in (
            ("throughput", throughput),
            ("latency", latency),
            ("failover", failover),
            ("catchup", catchup),
            ("profile", profile),
        ):
            if name in parts:
                measured(name, step)
    print("| measurement | goal | result | verdict |", flush=True)
    print("|---|---|---|---|", flush=True)
    for line in lines:
        print(line, flush=True)
    for note in notes:
        print(note, flush=True)
    if misses:
        print(f"{misses} goal(s) missed", flush=True)
    return finish("replication", started, errors, misses, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

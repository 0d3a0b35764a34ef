"""One chaos run: a broker, a producer and a consumer group, a fault schedule, the checks.

``run(config, workdir)``:
1. starts the cluster (default segment sizes: nothing but fast group formation is
   overridden) and creates the topic;
2. starts the producer, two group members and the observer;
3. applies the seeded faults at their moments;
4. stops producing and waits for every delivery report, then kills the broker once
   more and restarts it, so what is verified is what a crash left;
5. waits until the group has committed up to every high watermark, stops the clients,
   reads the topic back, and runs every check of ``checks.py`` on the history.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos import faults
from tests.chaos.checks import Report, check_history
from tests.chaos.cluster import Cluster
from tests.chaos.faults import Fault, FaultPlan, Outcome
from tests.chaos.history import History, OffsetSet
from tests.chaos.workload import (
    GroupMember,
    Observer,
    ProducerRunner,
    create_topic,
    read_log,
    watermarks,
)

TOPIC = "chaos"
GROUP = "chaos-group"
MEMBERS = 2
# __consumer_offsets in 4 KiB segments and a cleaner that looks every 200 ms: the
# group's commits roll segments and get compacted (a .cleaned/.swap swap) while the
# broker is being killed, so the committed offsets the checks read have gone through
# the cleaner and its crash recovery.
BROKER_ARGS = (
    "--override",
    "group.initial.rebalance.delay.ms=0",
    "--override",
    "offsets.topic.segment.bytes=4096",
    "--override",
    "log.cleaner.backoff.ms=200",
)


@dataclass(frozen=True)
class Config:
    seed: int
    plan: FaultPlan
    partitions: int = 3
    rate_per_s: int = 3000
    value_bytes: int = 1000
    compression: str = "none"  # the producer's compression.type
    group_protocol: str = "classic"  # or "consumer" (KIP-848)
    tail_s: float = 3.0  # producing after the last fault, before the final crash
    drain_timeout_s: float = 180.0


@dataclass
class Result:
    config: Config
    workdir: Path
    outcomes: list[Outcome] = field(default_factory=list)
    report: Report | None = None
    acked: int = 0
    sent: int = 0
    unflushed: int = 0
    client_errors: Counter[str] = field(default_factory=Counter)
    producer_fatal: str = ""
    runner_crashes: list[str] = field(default_factory=list)
    broker_tracebacks: int = 0
    drained: bool = False
    bytes_per_partition: int = 0
    duration_s: float = 0.0
    error: str = ""

    @property
    def passed(self) -> bool:
        return (
            not self.error
            and self.report is not None
            and self.report.ok
            and not self.producer_fatal
            and self.unflushed == 0
            and self.drained
            and self.broker_tracebacks == 0
            and not self.runner_crashes
            and all(not outcome.error for outcome in self.outcomes)
        )


def _drain(observer: Observer, high: dict[int, int], timeout_s: float) -> bool:
    """Wait until the group's committed offsets reach ``high`` on every partition."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        latest = observer.latest_committed()
        if all(latest.get(p, -1) >= offset for p, offset in high.items()):
            return True
        time.sleep(0.5)
    return False


def run(config: Config, workdir: Path, progress: Callable[[str], None] | None = None) -> Result:
    """One run; ``progress`` (if given) gets a line per fault as it is applied."""
    result = Result(config, workdir)
    began = time.monotonic()
    cluster = Cluster.single(workdir, BROKER_ARGS)
    schedule = faults.schedule(config.seed, config.plan, len(cluster.nodes))
    producer: ProducerRunner | None = None
    members: list[GroupMember] = []
    observer: Observer | None = None
    consumed = {p: OffsetSet() for p in range(config.partitions)}
    commit_acks: list[tuple[int, int]] = []
    try:
        cluster.start()
        create_topic(cluster.bootstrap, TOPIC, config.partitions)
        producer = ProducerRunner(
            cluster.bootstrap,
            TOPIC,
            config.partitions,
            config.rate_per_s,
            config.value_bytes,
            {"compression.type": config.compression},
        )
        members = [
            GroupMember(
                f"member-{i}",
                cluster.bootstrap,
                TOPIC,
                GROUP,
                consumed,
                commit_acks,
                config.group_protocol,
            )
            for i in range(MEMBERS)
        ]
        observer = Observer(cluster.bootstrap, TOPIC, GROUP, config.partitions)
        workload_began = time.monotonic()
        for thread in (producer, *members, observer):
            thread.start()
        for cycle, fault in enumerate(schedule, 1):
            _sleep_until(workload_began + fault.at_s)
            outcome = faults.apply(fault, cluster, time.monotonic() - workload_began)
            result.outcomes.append(outcome)
            if progress is not None:
                progress(_progress_line(cycle, len(schedule), outcome, len(producer.acked)))
        time.sleep(config.tail_s)
        producer.stop(config.drain_timeout_s)
        result.unflushed = producer.unflushed
        final = Fault(time.monotonic() - workload_began, "kill", 0, 0.0)
        result.outcomes.append(faults.apply(final, cluster, final.at_s))
        marks = watermarks(cluster.bootstrap, TOPIC, config.partitions)
        high = {partition: offset for partition, (_, offset) in marks.items()}
        result.drained = _drain(observer, high, config.drain_timeout_s)
        for member in members:
            member.stop(30)
        observer.stop(30)
        observer.sample()
        log = read_log(
            cluster.bootstrap, TOPIC, config.partitions, config.value_bytes, config.drain_timeout_s
        )
        history = History(
            partitions=config.partitions,
            acked=producer.acked,
            log=log,
            committed=observer.committed,
            commit_acks=commit_acks,
            final_committed=observer.latest_committed(),
            high_watermarks=observer.high_watermarks,
            consumed=consumed,
        )
        result.report = check_history(history)
    except Exception as exc:  # a node that did not come back, a client that gave up
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for member in members:
            member.stopping.set()
        if producer is not None:
            producer.stopping.set()
            producer.abandon.set()
        if observer is not None:
            observer.stopping.set()
        for runner in (producer, *members, observer):
            if runner is not None and runner.ident is not None:
                runner.join(30)
        cluster.close()
        if observer is not None:
            observer.close()
        if producer is not None:
            result.acked = len(producer.acked)
            result.sent = producer.acked.sent_count
            result.producer_fatal = producer.fatal
            result.client_errors.update(producer.errors)
        for member in members:
            result.client_errors.update(member.errors)
        if observer is not None:
            result.client_errors.update(observer.errors)
        result.runner_crashes = [
            runner.crash for runner in (producer, *members, observer) if runner and runner.crash
        ]
        result.broker_tracebacks = sum(node.log().count("Traceback") for node in cluster.nodes)
        result.bytes_per_partition = _largest_log_bytes(workdir)
        result.duration_s = time.monotonic() - began
    return result


def _progress_line(cycle: int, cycles: int, outcome: Outcome, acked: int) -> str:
    fault = outcome.fault
    line = (
        f"[{cycle:>{len(str(cycles))}}/{cycles}] {outcome.started_s:7.1f}s {fault.kind:<5} "
        f"node {fault.node} for {fault.hold_s:.2f}s"
    )
    if fault.kind == "crashloop":
        line += " into a restart" + (" (before ready)" if outcome.interrupted else "")
    if fault.kind != "pause":
        line += f", ready after {outcome.recovery_s:.2f}s"
    if outcome.error:
        line += f", {outcome.error}"
    return f"{line}; {acked:,} acked"


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _largest_log_bytes(workdir: Path) -> int:
    """Bytes of the largest partition of the topic (all its segments)."""
    sizes = [
        sum(path.stat().st_size for path in directory.glob("*.log"))
        for directory in workdir.glob(f"*/{TOPIC}-*")
    ]
    return max(sizes, default=0)
